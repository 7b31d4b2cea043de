"""The bash toolbox (seed "Bash tools"): scripts that answer ``describe`` and ``run``, as tools
``bash_<slug>``.

The describe/run machinery (:class:`ScriptRunner`, :func:`parse_describe`, :func:`input_schema`) is shared with the
skills toolbox, whose ``scripts/*`` follow the same protocol.
"""

from .._watch import Watcher, snapshot_tree
from ._argv import ArgumentError, Invocation, build_invocation, render_value
from ._discover import list_scripts
from ._errors import BashError, ConfigError, DescribeError
from ._process import ProcessOutcome, Reaper, run_bounded
from ._runner import MEDIA_DIR, ScriptRunner
from ._settings import DEFAULT_ENV, BashSettings
from ._spec import ScriptArg, ScriptSpec, bash_tool_name, input_schema, parse_describe
from ._toolbox import BashToolbox, open_toolbox

__all__ = [
    "DEFAULT_ENV",
    "MEDIA_DIR",
    "ArgumentError",
    "BashError",
    "BashSettings",
    "BashToolbox",
    "ConfigError",
    "DescribeError",
    "Invocation",
    "ProcessOutcome",
    "Reaper",
    "ScriptArg",
    "ScriptRunner",
    "ScriptSpec",
    "Watcher",
    "bash_tool_name",
    "build_invocation",
    "input_schema",
    "list_scripts",
    "open_toolbox",
    "parse_describe",
    "render_value",
    "run_bounded",
    "snapshot_tree",
]
