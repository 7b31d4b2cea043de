"""setuptools' ``build_py`` command, keeping the executable bits of Python files (pyproject.toml's ``cmdclass``).

setuptools copies each ``.py`` file of a package as a module, and distutils' ``build_module`` drops its mode
(``preserve_mode=0``). The shipped examples (``supervisor/shipped/``, found as namespace packages) hold tools written
in Python that a bash toolbox runs as programs: the seed's Python tool template must stay executable in the wheel,
and pip then installs it executable. Only the execute bits of the source are added; nothing else changes. Loaded by
setuptools from this file at build time (it is not part of the installed packages).
"""

from __future__ import annotations

import os

from setuptools.command.build_py import build_py


class BuildPyKeepingModes(build_py):
    """``build_py`` whose modules keep their source's execute bits."""

    def build_module(self, module: str, module_file: str, package: str) -> tuple[str, bool]:
        outfile, copied = super().build_module(module, module_file, package)
        executable = os.stat(module_file).st_mode & 0o111
        if executable and not self.dry_run:
            os.chmod(outfile, os.stat(outfile).st_mode | executable)
        return outfile, copied
