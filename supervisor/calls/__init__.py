"""One call through the portal: the checks every call passes, the tool registry, attachments, results."""

from ._attachments import AttachmentStore, media_response
from ._budget import BUDGET_KIND, BudgetExhausted, BudgetPolicy, CallTreeBudget, budget_result, trace_exhaustion
from ._call_records import CallRecords
from ._catalog import CatalogError, get_prompt, list_entries, read_resource, traced_read
from ._checks import CallPolicy
from ._frontend_sessions import FrontendSessions
from ._group_commit import GroupCommit
from ._ledger import CallLedger, SessionLimits
from ._origin import CallOrigin, CallRunner, CallWorker
from ._portal import CallServices, Portal, Starter, Watch
from ._registry import RegisteredTool, ToolRegistry
from ._tool_output import capped_output, checked_output, output_limit
from ._unloaded import could_serve

__all__ = [
    "BUDGET_KIND",
    "AttachmentStore",
    "BudgetExhausted",
    "BudgetPolicy",
    "CallLedger",
    "CallOrigin",
    "CallPolicy",
    "CallRecords",
    "CallRunner",
    "CallServices",
    "CallTreeBudget",
    "CallWorker",
    "CatalogError",
    "FrontendSessions",
    "GroupCommit",
    "Portal",
    "RegisteredTool",
    "SessionLimits",
    "Starter",
    "ToolRegistry",
    "Watch",
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
    "traced_read",
]
