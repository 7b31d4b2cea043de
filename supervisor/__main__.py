import sys

from supervisor.frontends import main

sys.exit(main())
