"""One call through the portal: the checks every call passes, the tool registry, attachments, results."""

from ._attachments import AttachmentStore, media_response
from ._budget import BUDGET_KIND, BudgetExhausted, BudgetPolicy, CallTreeBudget, budget_result, trace_exhaustion
from ._catalog import CatalogError, get_prompt, list_entries, read_resource
from ._group_commit import GroupCommit
from ._portal import CallOrigin, Portal, SessionLimits
from ._registry import RegisteredTool, ToolRegistry
from ._tool_output import capped_output, checked_output, output_limit
from ._unloaded import could_serve

__all__ = [
    "BUDGET_KIND",
    "AttachmentStore",
    "BudgetExhausted",
    "BudgetPolicy",
    "CallOrigin",
    "CallTreeBudget",
    "CatalogError",
    "GroupCommit",
    "Portal",
    "RegisteredTool",
    "SessionLimits",
    "ToolRegistry",
    "budget_result",
    "capped_output",
    "checked_output",
    "could_serve",
    "get_prompt",
    "list_entries",
    "media_response",
    "output_limit",
    "read_resource",
    "trace_exhaustion",
]
