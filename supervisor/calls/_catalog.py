"""The resources, resource templates and prompts the supervisor serves: every toolbox's own (toolboxes/_catalog.py)
under names that say whose they are, and reading one through its worker.

Public names:

- a resource is ``agents-supervise://<agent>/<toolbox>/<its own URI>``, each part percent-encoded (``/`` and the
  characters URIs leave alone kept in the toolbox's own URI, so a skill's ``pdf/SKILL.md`` stays readable:
  ``agents-supervise://coder/skills/pdf/SKILL.md``; an MCP server's ``note://a`` becomes ``.../note%3A//a``);
- a resource template is the same prefix before the toolbox's own template (its ``{variables}`` kept);
- a prompt keeps its toolbox's name (MCP toolboxes name them ``mcp_<server>_<prompt>``, as their tools); of two
  prompts of one agent with the same name, the first (in load order) is served.

A read or a prompt runs in the toolbox's worker as a call (its wall time, cancellation and restart waits apply);
what comes back is checked again here (:func:`toolboxes._catalog.read_problem`, ``prompt_problem``) and the
contents' URIs are given the public prefix. Sessions bound to an agent see and read only that agent's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

from toolboxes import prompt_problem, read_problem

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from supervisor.traces import TraceRecorder
    from toolboxes import ToolResult

__all__ = [
    "SCHEME",
    "CatalogEntry",
    "CatalogError",
    "get_prompt",
    "list_entries",
    "parse_uri",
    "public_uri",
    "read_resource",
    "signature",
    "traced_read",
]

SCHEME = "agents-supervise"
_KEEP = "/-._~!$&'()*+,;=:@"  # what may stay unencoded in a path


class CatalogError(Exception):
    """A read or prompt that cannot be answered: unknown, not this session's, or the toolbox failed."""


@dataclass(frozen=True)
class CatalogEntry:
    """One served entry: its public form (MCP's spelling), and whose it is."""

    public: dict[str, Any]
    runner: Any
    own: str  # the toolbox's own URI, template or prompt name


def _prefix(agent: str, toolbox: str) -> str:
    return f"{SCHEME}://{quote(agent, safe='')}/{quote(toolbox, safe='')}/"


def public_uri(agent: str, toolbox: str, uri: str) -> str:
    """The URI a toolbox's resource ``uri`` is served under."""
    return _prefix(agent, toolbox) + quote(uri, safe=_KEEP.replace(":", ""))


def parse_uri(uri: str) -> tuple[str, str, str] | None:
    """``(agent, toolbox, the toolbox's own URI)`` of a public URI, or ``None`` when it is not one of ours."""
    head = f"{SCHEME}://"
    if not uri.startswith(head):
        return None
    parts = uri[len(head) :].split("/", 2)
    if len(parts) != 3 or not parts[0] or not parts[1] or not parts[2]:
        return None
    return unquote(parts[0]), unquote(parts[1]), unquote(parts[2])


def _runners_of(runners: Iterable[Any], agent: str | None) -> list[Any]:
    return [r for r in runners if agent is None or r.spec.agent == agent]


def list_entries(runners: Iterable[Any], kind: str, agent: str | None) -> list[CatalogEntry]:
    """The served ``resources``, ``resource_templates`` or ``prompts`` of ``agent``'s toolboxes (``None``: all)."""
    out: list[CatalogEntry] = []
    prompt_names: set[tuple[str, str]] = set()
    for runner in _runners_of(runners, agent):
        for entry in runner.catalog(kind):
            if kind == "resources":
                out.append(
                    CatalogEntry(
                        {**entry, "uri": public_uri(runner.spec.agent, runner.name, entry["uri"])}, runner, entry["uri"]
                    )
                )
            elif kind == "resource_templates":
                template = _prefix(runner.spec.agent, runner.name) + quote(
                    entry["uriTemplate"], safe=_KEEP.replace(":", "") + "{}"
                )
                out.append(CatalogEntry({**entry, "uriTemplate": template}, runner, entry["uriTemplate"]))
            else:
                key = (runner.spec.agent, entry["name"])
                if key in prompt_names:
                    continue
                prompt_names.add(key)
                out.append(CatalogEntry(dict(entry), runner, entry["name"]))
    return out


def signature(runners: Iterable[Any], kind: str, agent: str | None) -> str:
    """A value that changes when the served list of ``kind`` changes (for ``list_changed``)."""
    return repr([e.public for e in list_entries(runners, kind, agent)])


def _find_runner(runners: Iterable[Any], agent: str, toolbox: str) -> Any:
    for r in runners:
        if r.spec.agent == agent and r.name == toolbox:
            return r
    return None


def _failed(result: ToolResult, what: str) -> CatalogError:
    return CatalogError(f"{what} failed: {(result.data or result.summary or 'no reason given')[:2000]}")


async def read_resource(runners: list[Any], uri: str, agent: str | None, ctx: dict[str, Any]) -> dict[str, Any]:
    """MCP's ``resources/read`` result for a public ``uri``; raises :class:`CatalogError` saying why not."""
    parsed = parse_uri(uri)
    if parsed is None:
        raise CatalogError(
            f"unknown resource {uri[:200]!r}: resources of this server are {SCHEME}://... URIs from resources/list"
        )
    owner, toolbox, own = parsed
    runner = _find_runner(_runners_of(runners, agent), owner, toolbox)
    if runner is None:
        raise CatalogError(f"unknown resource {uri[:200]!r}: no toolbox {toolbox!r} of agent {owner!r} here")
    listed = any(e["uri"] == own for e in runner.catalog("resources"))
    if not listed and not runner.catalog("resource_templates"):
        raise CatalogError(f"unknown resource {uri[:200]!r}: toolbox {toolbox!r} does not list it")
    result = await runner.call(own, {}, ctx, op="read_resource")
    if result.status != "passed":
        raise _failed(result, f"reading {uri[:200]}")
    problem = read_problem(result.structured)
    if problem:
        raise CatalogError(f"toolbox {toolbox!r} answered the read of {uri[:200]!r} wrongly: {problem}")
    contents = [{**c, "uri": public_uri(owner, toolbox, c["uri"])} for c in result.structured["contents"]]
    return {"contents": contents}


async def get_prompt(
    runners: list[Any], name: str, args: dict[str, str], agent: str | None, ctx: dict[str, Any]
) -> dict[str, Any]:
    """MCP's ``prompts/get`` result; raises :class:`CatalogError` saying why not."""
    entry = next((e for e in list_entries(runners, "prompts", agent) if e.own == name), None)
    if entry is None:
        raise CatalogError(f"unknown prompt {name[:200]!r}; prompts/list names the prompts served here")
    result = await entry.runner.call(name, args, ctx, op="get_prompt")
    if result.status != "passed":
        raise _failed(result, f"prompt {name[:200]}")
    problem = prompt_problem(result.structured)
    if problem:
        raise CatalogError(f"toolbox {entry.runner.name!r} answered prompt {name[:200]!r} wrongly: {problem}")
    return dict(result.structured)


async def traced_read(
    trace: TraceRecorder,
    event: str,
    fields: dict[str, Any],
    read: Awaitable[dict[str, Any]],
    passed: Callable[[dict[str, Any]], dict[str, Any]] = lambda _result: {},
) -> dict[str, Any]:
    """Await ``read`` (a :func:`read_resource` or :func:`get_prompt`) and trace it as ``event`` with ``fields``:
    ``status`` passed (with what ``passed`` makes of the result) or error (with the :class:`CatalogError`'s
    message; the error is raised on)."""
    try:
        result = await read
    except CatalogError as exc:
        trace.record(event, **fields, status="error", message=str(exc)[:500])
        raise
    trace.record(event, **fields, status="passed", **passed(result))
    return result
