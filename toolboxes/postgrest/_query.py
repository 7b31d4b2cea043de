"""Tool arguments to a PostgREST request (pure), in PostgREST's query grammar, URL-encoded.

``filters`` -> ``<column>=<op>.<value>`` (a list gives one pair per condition), ``subset`` -> ``limit``, ``offset``,
``select``, ``ranking`` -> ``order``, RPC ``args`` -> ``<arg>=<value>`` (a list repeats the argument, PostgREST's
VARIADIC form). Names and values are percent-encoded (``&``, ``=``, ``#``, ``+``, ``%``, spaces, quotes and every
other reserved character) except PostgREST's separators ``.``, ``,``, ``(``, ``)``, ``*`` and ``:``, which it reads
as grammar either way (it decodes the query before parsing it). Writes ask for ``Prefer: return=representation``, so
the result shows the rows written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._http import HttpRequest, encode_query, json_body, quote_path_value
from ..openapi import scalar_text

if TYPE_CHECKING:
    from ._tools import TableTool

__all__ = ["GRAMMAR_SAFE", "build_request"]

#: Characters of a value left unencoded: PostgREST's own separators.
GRAMMAR_SAFE = ".,()*:"


def build_request(tool: TableTool, args: dict[str, Any], base_url: str) -> HttpRequest:
    """The request for one call of ``tool`` (arguments already validated against its schema)."""
    pairs: list[tuple[str, str]] = []
    for column, value in (args.get("filters") or {}).items():
        for condition in value if isinstance(value, list) else [value]:
            pairs.append((column, str(condition)))
    for name, value in (args.get("args") or {}).items():
        for item in value if isinstance(value, list) else [value]:
            pairs.append((name, scalar_text(item)))
    subset = args.get("subset") or {}
    if "columns" in subset:
        pairs.append(("select", subset["columns"]))
    order = (args.get("ranking") or {}).get("order")
    if order:
        pairs.append(("order", order))
    for key in ("limit", "offset"):
        if key in subset:
            pairs.append((key, str(subset[key])))
    headers = {"Accept": "application/json"}
    content: bytes | None = None
    if "body" in args:
        content = json_body(args["body"])
        headers["Content-Type"] = "application/json"
    if tool.method in ("POST", "PATCH", "DELETE") and not tool.rpc:
        headers["Prefer"] = "return=representation"
    segments = "/".join(quote_path_value(s) for s in tool.path.strip("/").split("/"))
    url = f"{base_url.rstrip('/')}/{segments}"
    if pairs:
        url += "?" + encode_query(pairs, safe=GRAMMAR_SAFE)
    return HttpRequest(tool.method, url, headers, content)
