"""The resources, resource templates and prompts a toolbox offers besides tools (MCP's ``resources`` and
``prompts``), as plain data with bounds, and what reading one answers. Pure.

A toolbox that has any implements the optional methods of :class:`toolboxes._toolbox.Toolbox` (``resources()``,
``resource_templates()``, ``prompts()``, ``read_resource(uri, ctx)``, ``get_prompt(name, args, ctx)``); the worker
announces the lists with its tools (``hello``, ``tools_changed``) and runs reads as calls with an ``op``.

Entries, in MCP's own spelling:

- resource: ``{uri, name, title?, description?, mimeType?, size?}``; ``uri`` is the toolbox's own (the supervisor
  serves it under a namespaced URI);
- resource template: ``{uriTemplate, name, title?, description?, mimeType?}``;
- prompt: ``{name, title?, description?, arguments?: [{name, description?, required?}]}``.

Whatever a worker sends is untrusted: :func:`catalog_problem` says what is wrong with a list (the supervisor kills
a worker that sends one), :func:`clean_entries` keeps the well-formed entries of an untrusted source (an MCP server)
and says what it left out. A read answers a ToolResult whose ``structured`` value is MCP's own result:
``{"contents": [...]}`` (``{uri, mimeType?, text}`` or ``{uri, mimeType?, blob}``) or ``{"description"?,
"messages": [{role, content}]}``; :func:`read_problem` and :func:`prompt_problem` check those.
"""

from __future__ import annotations

from typing import Any

from ._protocol import json_problem

__all__ = [
    "CATALOG_KINDS",
    "MAX_ENTRIES",
    "MAX_READ_CHARS",
    "catalog_problem",
    "clean_entries",
    "prompt_problem",
    "read_problem",
]

#: At most this many entries of each kind per toolbox.
MAX_ENTRIES = 1024
#: Longest URI (or URI template), name/title, description, MIME type.
MAX_URI_CHARS, MAX_NAME_CHARS, MAX_DESCRIPTION_CHARS, MAX_MIME_CHARS = 4096, 256, 8192, 256
#: At most this many arguments per prompt.
MAX_PROMPT_ARGUMENTS = 64
#: Largest text (or base64 blob) one read or prompt answers, all parts together.
MAX_READ_CHARS = 16 * 1024 * 1024
#: At most this many contents per read and messages per prompt.
MAX_PARTS = 256

_STR = {
    "uri": MAX_URI_CHARS,
    "uriTemplate": MAX_URI_CHARS,
    "name": MAX_NAME_CHARS,
    "title": MAX_NAME_CHARS,
    "description": MAX_DESCRIPTION_CHARS,
    "mimeType": MAX_MIME_CHARS,
}
#: kind -> (its key in hello frames, the keys an entry must have, the keys it may have)
CATALOG_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "resources": (("uri", "name"), ("uri", "name", "title", "description", "mimeType", "size")),
    "resource_templates": (("uriTemplate", "name"), ("uriTemplate", "name", "title", "description", "mimeType")),
    "prompts": (("name",), ("name", "title", "description", "arguments")),
}


def _entry_problem(kind: str, entry: Any) -> str | None:
    required, allowed = CATALOG_KINDS[kind]
    if not isinstance(entry, dict):
        return "an entry is not a map"
    for key in required:
        if not isinstance(entry.get(key), str) or not entry[key]:
            return f"an entry lacks a non-empty string {key!r}"
    for key, value in entry.items():
        if key not in allowed:
            return f"an entry has the key {str(key)[:40]!r}, which is not one of {', '.join(allowed)}"
        if key in _STR and not (isinstance(value, str) and len(value) <= _STR[key]):
            return f"{key} must be a string of at most {_STR[key]} characters"
        if key == "size" and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            return "size must be a non-negative integer"
    arguments = entry.get("arguments")
    if arguments is not None:
        if not (isinstance(arguments, list) and len(arguments) <= MAX_PROMPT_ARGUMENTS):
            return f"arguments must be a list of at most {MAX_PROMPT_ARGUMENTS}"
        for arg in arguments:
            if not (
                isinstance(arg, dict)
                and isinstance(arg.get("name"), str)
                and 0 < len(arg["name"]) <= MAX_NAME_CHARS
                and set(arg) <= {"name", "description", "required"}
                and (not isinstance(arg.get("description"), str) or len(arg["description"]) <= MAX_DESCRIPTION_CHARS)
                and isinstance(arg.get("description", ""), str)
                and isinstance(arg.get("required", False), bool)
            ):
                return "each argument must be {name, description?, required?} within the bounds"
    return None


def catalog_problem(kind: str, entries: Any) -> str | None:
    """What is wrong with a worker's list of ``kind`` (``None``: nothing); absent (``None``) is an empty list."""
    if entries is None:
        return None
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        return f"{kind} must be a list of at most {MAX_ENTRIES} entries"
    key = "uriTemplate" if kind == "resource_templates" else "uri" if kind == "resources" else "name"
    seen: set[str] = set()
    for entry in entries:
        problem = _entry_problem(kind, entry)
        if problem:
            return f"{kind}: {problem}"
        if entry[key] in seen:
            return f"{kind}: {entry[key][:80]!r} is listed twice"
        seen.add(entry[key])
    return None


def clean_entries(kind: str, entries: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The well-formed entries of an untrusted list (unknown keys dropped, then checked; the first of duplicates
    kept, at most :data:`MAX_ENTRIES`), and a note on each one left out."""
    if not isinstance(entries, list):
        return [], [f"{kind}: not a list"]
    _required, allowed = CATALOG_KINDS[kind]
    key = "uriTemplate" if kind == "resource_templates" else "uri" if kind == "resources" else "name"
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        if not isinstance(entry, dict):
            notes.append(f"{kind}: an entry that is not a map was left out")
            continue
        trimmed = {k: v for k, v in entry.items() if k in allowed and v is not None}
        if isinstance(trimmed.get("arguments"), list):
            trimmed["arguments"] = [
                {k: v for k, v in a.items() if k in ("name", "description", "required") and v is not None}
                if isinstance(a, dict)
                else a
                for a in trimmed["arguments"]
            ]
        problem = _entry_problem(kind, trimmed)
        if problem is None and trimmed[key] in seen:
            problem = f"{trimmed[key][:80]!r} is listed twice"
        if problem is None and len(out) >= MAX_ENTRIES:
            problem = f"more than {MAX_ENTRIES} entries"
        if problem:
            notes.append(f"{kind}: left out {str(entry.get(key))[:80]!r}: {problem}")
            continue
        seen.add(trimmed[key])
        out.append(trimmed)
    return out, notes


def _size_problem(value: Any) -> str | None:
    problem, _ = json_problem(value, max_depth=32, max_nodes=100_000)
    return problem


def read_problem(value: Any) -> str | None:
    """What is wrong with a read's answer ``{"contents": [...]}`` (``None``: nothing)."""
    if not isinstance(value, dict) or not isinstance(value.get("contents"), list):
        return "a read must answer {contents: [...]}"
    contents = value["contents"]
    if len(contents) > MAX_PARTS:
        return f"a read answered more than {MAX_PARTS} contents"
    total = 0
    for part in contents:
        if not (
            isinstance(part, dict)
            and isinstance(part.get("uri"), str)
            and len(part["uri"]) <= MAX_URI_CHARS
            and (isinstance(part.get("text"), str) ^ isinstance(part.get("blob"), str))
            and set(part) <= {"uri", "mimeType", "text", "blob"}
            and (
                part.get("mimeType") is None
                or (isinstance(part["mimeType"], str) and len(part["mimeType"]) <= MAX_MIME_CHARS)
            )
        ):
            return "each content must be {uri, mimeType?, text} or {uri, mimeType?, blob}"
        total += len(part.get("text") or part.get("blob") or "")
        if total > MAX_READ_CHARS:
            return f"a read answered more than {MAX_READ_CHARS} characters"
    return None


def prompt_problem(value: Any) -> str | None:
    """What is wrong with a prompt's answer ``{"description"?, "messages": [{role, content}]}``."""
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        return "a prompt must answer {messages: [...]}"
    if not set(value) <= {"description", "messages"} or not isinstance(value.get("description", ""), str):
        return "a prompt answers only description and messages"
    messages = value["messages"]
    if len(messages) > MAX_PARTS:
        return f"a prompt answered more than {MAX_PARTS} messages"
    total = 0
    for m in messages:
        if not (
            isinstance(m, dict)
            and m.get("role") in ("user", "assistant")
            and isinstance(m.get("content"), dict)
            and isinstance(m["content"].get("type"), str)
            and set(m) <= {"role", "content"}
        ):
            return "each message must be {role: user|assistant, content: {type, ...}}"
        content = m["content"]
        total += sum(len(v) for v in content.values() if isinstance(v, str))
        if total > MAX_READ_CHARS:
            return f"a prompt answered more than {MAX_READ_CHARS} characters"
    return _size_problem(value)
