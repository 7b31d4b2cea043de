"""The one JSON-RPC message of a POST, read within its bounds: a body larger than ``max_body_bytes`` is refused
(413) before a byte is read when its length is known, its bytes are held against the tenant's and the server's
body-byte budgets (``_http_load.BodyBytes``: whole before reading, or as a chunked body comes), and it must be JSON of
one object (400 with a JSON-RPC parse error or invalid request otherwise; batches are not part of this transport)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._http_wire import HttpRefused, drop_body, read_body
from ._mcp_wire import INVALID_REQUEST, PARSE_ERROR

if TYPE_CHECKING:
    from ._http_load import BodyBytes
    from ._http_wire import Receive

__all__ = ["read_message"]


async def read_message(headers: dict[str, str], receive: Receive, limit: int, held: BodyBytes) -> dict[str, Any]:
    """The message of the request whose ``headers`` came and whose body ``receive`` gives, at most ``limit`` bytes,
    held by ``held`` (the caller releases it once the request is answered). Raises :class:`HttpRefused`."""
    length = headers.get("content-length", "")
    if length.isdigit():  # known: held (or refused) whole before a byte is read
        if int(length) > limit:
            raise HttpRefused(413, f"the body is larger than {limit} bytes, the limit (frontends.http.max_body_bytes)")
        try:
            held.take(int(length))
        except HttpRefused:
            await drop_body(receive, limit)
            raise
        body = await read_body(receive, limit)
    else:  # chunked: held as it comes
        body = await read_body(receive, limit, held.take)
    try:
        message = json.loads(body)
    except RecursionError:
        raise HttpRefused(400, "parse error: the JSON is nested too deeply", rpc_code=PARSE_ERROR) from None
    except ValueError as exc:
        raise HttpRefused(400, f"parse error: {str(exc)[:200]}", rpc_code=PARSE_ERROR) from None
    del body
    if not isinstance(message, dict):
        raise HttpRefused(
            400, "expected one JSON-RPC object (batches are not part of this transport)", rpc_code=INVALID_REQUEST
        )
    return message
