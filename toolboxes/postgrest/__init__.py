"""The PostgREST toolbox (SPEC.md section 4, postgrest): tables, views and functions from PostgREST's description."""

from ._query import build_request
from ._toolbox import PostgrestToolbox, open_toolbox
from ._tools import FILTER_FORM, FILTER_PATTERN, METHODS, TableTool, build_tools

__all__ = [
    "FILTER_FORM",
    "FILTER_PATTERN",
    "METHODS",
    "PostgrestToolbox",
    "TableTool",
    "build_request",
    "build_tools",
    "open_toolbox",
]
