"""What an MCP server lists, read: every page of a list (one pagination for tools, resources, resource templates
and prompts, each bounded in pages and entries), its tools made :class:`~toolboxes._toolbox.ToolSpec` s under their
public names, its catalog cleaned (``toolboxes/_catalog.py``). The server is untrusted: what is malformed is left
out with a load error, never passed on. Only :func:`list_pages` and :func:`list_catalog` talk to the server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._catalog import MAX_ENTRIES, clean_entries
from .._names import tool_name
from .._toolbox import ToolSpec
from ._errors import McpError, ServerRefused

if TYPE_CHECKING:
    from ._connection import Connection

__all__ = [
    "CATALOG_CHANGES",
    "CATALOG_METHODS",
    "MAX_PAGES",
    "MAX_TOOLS",
    "Catalog",
    "clean_catalog",
    "list_catalog",
    "list_pages",
    "server_hints",
    "tool_specs",
]

#: Pagination bounds: a server that keeps sending cursors is cut off with a load error.
MAX_PAGES, MAX_TOOLS = 100, 5000
#: catalog kind -> (the list method, its result key, the server capability that has it)
CATALOG_METHODS = {
    "resources": ("resources/list", "resources", "resources"),
    "resource_templates": ("resources/templates/list", "resourceTemplates", "resources"),
    "prompts": ("prompts/list", "prompts", "prompts"),
}
#: a server's notification -> the catalog kinds to list again
CATALOG_CHANGES = {
    "notifications/resources/list_changed": ("resources", "resource_templates"),
    "notifications/prompts/list_changed": ("prompts",),
}
_HINT_KEYS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")

#: a catalog kind's entries, or why it could not be listed
Catalog = dict[str, list[dict[str, Any]] | str]


class _BadList(ServerRefused):
    """A list answer that is not what MCP says (no list, too many entries or pages, a cursor seen before)."""


def list_pages(
    conn: Connection, method: str, key: str, deadline: float, label: str, max_items: int, too_many: str = ""
) -> list[Any]:
    """Every page of ``method``'s list under ``key`` (``nextCursor`` followed), at most ``max_items`` entries and
    :data:`MAX_PAGES` pages; the entries as the server sent them. Raises :class:`McpError` (a malformed list:
    :class:`ServerRefused` naming what was wrong, ``too_many`` added to the message of one that is too long)."""
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _page in range(MAX_PAGES):
        page = conn.request(method, {"cursor": cursor} if cursor is not None else {}, deadline=deadline)
        got = page.get(key)
        if not isinstance(got, list):
            raise _BadList(f"{label} answered {method} without a list of {key}")
        items += got[: max_items + 1 - len(items)]
        if len(items) > max_items:
            raise _BadList(f"{label} lists more than {max_items} {key}{too_many}")
        cursor = page.get("nextCursor")
        if cursor is None:
            return items
        if not isinstance(cursor, str) or cursor in seen:
            raise _BadList(f"{label} sent a nextCursor that is not a new string in {method} ({cursor!r:.100})")
        seen.add(cursor)
    raise _BadList(f"{label} sent more than {MAX_PAGES} pages of {key}")


def list_catalog(
    conn: Connection, kind: str, deadline: float, label: str, capabilities: dict[str, Any]
) -> list[Any] | str:
    """Every page of the server's list of ``kind`` (empty when it has not the capability), or a note on why it
    could not be listed (the tools still serve)."""
    method, key, capability = CATALOG_METHODS[kind]
    if capability not in capabilities:
        return []
    try:
        return list_pages(conn, method, key, deadline, label, MAX_ENTRIES, "; none of them are served")
    except _BadList as exc:
        return str(exc)
    except McpError as exc:  # the tools still serve; the note says why the list is empty
        return f"{method}: {exc}"


def server_hints(annotations: Any) -> dict[str, Any]:
    """The MCP annotations of a server's tool that are well-formed: the four boolean hints and a title of at most
    200 characters; anything else is left out (a server is untrusted, and the supervisor refuses malformed hints)."""
    if not isinstance(annotations, dict):
        return {}
    out: dict[str, Any] = {k: v for k, v in annotations.items() if k in _HINT_KEYS and isinstance(v, bool)}
    title = annotations.get("title")
    if isinstance(title, str) and len(title) <= 200:
        out["title"] = title
    return out


def tool_specs(
    server: str, label: str, tools: list[dict[str, Any]]
) -> tuple[list[ToolSpec], dict[str, str], list[dict[str, str]]]:
    """The server's tools as specs under their public names (``mcp_<server>_<tool>``), each public name -> the
    server's, and the load errors of what was left out (no name, a name two tools share once made public) or cut
    (an output schema that is not an object schema)."""
    specs: list[ToolSpec] = []
    public: dict[str, str] = {}
    errors: list[dict[str, str]] = []
    for t in tools:
        remote = t.get("name")
        if not isinstance(remote, str) or not remote:
            errors.append({"source": label, "message": f"a tool without a name was left out: {t!r:.200}"})
            continue
        name = tool_name("mcp", server, remote)
        if name in public:
            errors.append(
                {
                    "source": remote,
                    "message": f"left out: its name {name} is the name of tool "
                    f"{public[name]!r} once characters outside [A-Za-z0-9_-] are replaced",
                }
            )
            continue
        schema = t.get("inputSchema")
        if not isinstance(schema, dict):
            schema = {"type": "object"}
        description = t.get("description") or t.get("title") or f"Tool {remote} of {label}."
        public[name] = remote
        output_schema = t.get("outputSchema")
        if output_schema is not None and not (
            isinstance(output_schema, dict) and output_schema.get("type") == "object"
        ):
            errors.append(
                {
                    "source": remote,
                    "message": "its outputSchema was left out: it is not an object schema (type: object)",
                }
            )
            output_schema = None
        specs.append(
            ToolSpec(
                name, str(description), schema, hints=server_hints(t.get("annotations")), output_schema=output_schema
            )
        )
    return specs, public, errors


def clean_catalog(
    server: str, label: str, catalog: Catalog
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, str]], dict[str, str]]:
    """The resources, templates and prompts cleaned (prompts under public names, ``mcp_<server>_<prompt>``), the
    load errors of what was left out or could not be listed, and each public prompt name -> the server's."""
    errors: list[dict[str, str]] = []
    out: dict[str, list[dict[str, Any]]] = {}
    prompt_names: dict[str, str] = {}
    for kind, listed in catalog.items():
        items: list[dict[str, Any]] = []
        if isinstance(listed, str):
            errors.append({"source": label, "message": listed})
        else:
            items = listed
        if kind == "prompts":
            items = [
                {**p, "name": tool_name("mcp", server, p["name"]), "_remote": p["name"]}
                for p in items
                if isinstance(p, dict) and isinstance(p.get("name"), str) and p["name"]
            ]
        remotes = {p["name"]: p.pop("_remote") for p in items if kind == "prompts"}
        cleaned, notes = clean_entries(kind, items)
        errors += [{"source": label, "message": n} for n in notes[:32]]
        out[kind] = cleaned
        if kind == "prompts":
            prompt_names = {p["name"]: remotes[p["name"]] for p in cleaned}
    return out, errors, prompt_names
