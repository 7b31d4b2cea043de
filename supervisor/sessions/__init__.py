"""Sessions: their owners and ids, the session store, per-session tool views, introspection."""

from ._bounded import remember
from ._errors import SessionStoreUnavailable
from ._ids import LOCAL_TENANT, Owner, client_id, ids_from_meta, new_id, root_session_id
from ._introspection import answer_host_request, introspection_problem
from ._store import SessionStore
from ._tool_views import SessionToolViews

__all__ = [
    "LOCAL_TENANT",
    "Owner",
    "SessionStore",
    "SessionStoreUnavailable",
    "SessionToolViews",
    "answer_host_request",
    "client_id",
    "ids_from_meta",
    "introspection_problem",
    "new_id",
    "remember",
    "root_session_id",
]
