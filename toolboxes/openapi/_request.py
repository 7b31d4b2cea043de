"""Tool arguments to an HTTP request for one :class:`~._operations.Operation` (pure).

Path values are percent-encoded whole (a ``/`` in a value never adds a segment, ``..`` never walks up); query names
and values are percent-encoded, arrays and objects serialised by the parameter's style (OpenAPI 3: ``form``
exploded or not, ``spaceDelimited``, ``pipeDelimited``, ``deepObject``; Swagger 2.0: ``collectionFormat``
``csv``/``ssv``/``tsv``/``pipes``/``multi``). Bodies: JSON for JSON media types, form-encoded or multipart for form
media types, the text as given for any other. The toolbox's ``Headers`` override header arguments, and ``Token``
becomes ``Authorization: Bearer``.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .._http import HttpRequest, json_body, quote_path_value

if TYPE_CHECKING:
    from ._operations import Operation, Param

__all__ = ["build_request", "scalar_text"]

_DELIMITERS = {"csv": ",", "ssv": " ", "tsv": "\t", "pipes": "|", "spaceDelimited": " ", "pipeDelimited": "|"}


def scalar_text(value: Any) -> str:
    """A value as text on the wire: ``true``/``false``, numbers as JSON writes them, ``null`` as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _q(text: str) -> str:
    return quote(text, safe="")


def _query_pieces(p: Param, value: Any) -> list[str]:
    name = _q(p.name)
    if p.json_content:
        return [f"{name}={_q(scalar_text(value if not isinstance(value, str) else json.dumps(value)))}"]
    if isinstance(value, list):
        if p.style == "multi" or (p.style == "form" and p.explode):
            return [f"{name}={_q(scalar_text(v))}" for v in value]
        delimiter = _DELIMITERS.get(p.style, ",")
        return [f"{name}={_q(delimiter).join(_q(scalar_text(v)) for v in value)}"]
    if isinstance(value, dict):
        if p.style == "deepObject":
            return [f"{_q(f'{p.name}[{k}]')}={_q(scalar_text(v))}" for k, v in value.items()]
        if p.style == "form" and p.explode:
            return [f"{_q(str(k))}={_q(scalar_text(v))}" for k, v in value.items()]
        flat = [x for k, v in value.items() for x in (str(k), scalar_text(v))]
        return [f"{name}={','.join(_q(x) for x in flat)}"]
    return [f"{name}={_q(scalar_text(value))}"]


def _simple(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(scalar_text(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k},{scalar_text(v)}" for k, v in value.items())
    return scalar_text(value)


def _form_fields(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, dict):
        return [("value", scalar_text(value))]
    fields: list[tuple[str, str]] = []
    for k, v in value.items():
        for item in v if isinstance(v, list) else [v]:
            fields.append((str(k), scalar_text(item)))
    return fields


def _multipart(fields: list[tuple[str, str]]) -> tuple[bytes, str]:
    boundary = "agents-supervise-" + secrets.token_hex(12)
    out = bytearray()
    for name, text in fields:
        safe_name = name.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{safe_name}"\r\n\r\n'.encode()
        out += text.encode() + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def _body(op: Operation, value: Any) -> tuple[bytes, str]:
    assert op.body is not None
    media = op.body.media_type
    base = media.split(";")[0].strip().lower()
    if base.startswith("application/x-www-form-urlencoded"):
        return "&".join(f"{_q(k)}={_q(v)}" for k, v in _form_fields(value)).encode(), media
    if base.startswith("multipart/form-data"):
        return _multipart(_form_fields(value))
    if base == "application/json" or base.endswith("+json") or base == "*/*":
        return json_body(value), "application/json" if base == "*/*" else media
    return scalar_text(value).encode(), media


def build_request(
    op: Operation, args: dict[str, Any], base_url: str, headers: dict[str, str], token: str | None
) -> HttpRequest:
    """The request for a call of ``op`` with ``args`` (already validated against its schema)."""
    path = op.path
    query: list[str] = []
    out_headers: dict[str, str] = {"Accept": "application/json, */*;q=0.8"}
    cookies: list[str] = []
    for p in op.params:
        if p.prop not in args:
            continue
        value = args[p.prop]
        if p.location == "path":
            path = path.replace("{" + p.name + "}", quote_path_value(_simple(value)))
        elif p.location == "query":
            query += _query_pieces(p, value)
        elif p.location == "header":
            out_headers[p.name] = _simple(value)
        elif p.location == "cookie":
            cookies.append(f"{_q(p.name)}={_q(_simple(value))}")
    if cookies:
        out_headers["Cookie"] = "; ".join(cookies)
    content: bytes | None = None
    if op.body is not None and "body" in args:
        content, media = _body(op, args["body"])
        out_headers["Content-Type"] = media
    fixed = {**headers, **({"Authorization": f"Bearer {token}"} if token else {})}
    lowered = {k.lower() for k in fixed}
    out_headers = {k: v for k, v in out_headers.items() if k.lower() not in lowered} | fixed
    url = base_url.rstrip("/") + (path if path.startswith("/") else "/" + path)
    if query:
        url += "?" + "&".join(query)
    return HttpRequest(op.method, url, out_headers, content)
