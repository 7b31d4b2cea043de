"""The bash toolbox (seed "Bash tools"): scripts that answer ``describe`` and ``run``, as tools
``bash_<slug>``.

The describe/run machinery (:class:`ScriptRunner`, :func:`parse_describe`, :func:`input_schema`) is shared with the
skills toolbox, whose ``scripts/*`` follow the same protocol (DECISIONS.md "Toolbox kinds share through common
modules"). The process reaper, bounded runs and folder watching are no bash matters: they live in
``toolboxes/_reaper.py``, ``_bounded_run.py`` and ``_watch.py``.
"""

from ._argv import ArgumentError, Invocation, build_invocation, render_value
from ._discover import list_scripts
from ._errors import BashError, ConfigError, DescribeError
from ._runner import MEDIA_DIR, ScriptRunner
from ._settings import DEFAULT_ENV, BashSettings
from ._spec import (
    DescribeProblem,
    ScriptArg,
    ScriptSpec,
    bash_tool_name,
    describe_problems,
    input_schema,
    parse_describe,
)
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
    "DescribeProblem",
    "Invocation",
    "ScriptArg",
    "ScriptRunner",
    "ScriptSpec",
    "bash_tool_name",
    "build_invocation",
    "describe_problems",
    "input_schema",
    "list_scripts",
    "open_toolbox",
    "parse_describe",
    "render_value",
]
