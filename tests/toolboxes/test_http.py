"""The HTTP client every HTTP toolbox (OpenAPI, PostgREST, Lua) uses, as far as it is not the proxy's business."""

from __future__ import annotations

from toolboxes._proxy_http import open_client


def test_every_client_shares_one_tls_context() -> None:
    """A client is made per request; without a shared context each one loaded the CA store into a new SSL context:
    tens of milliseconds of CPU per call and the HTTP workers' memory growing in the soak (issue 19)."""
    clients = [open_client(5), open_client(1), open_client(30)]
    try:
        contexts = {id(c._transport._pool._ssl_context) for c in clients}  # type: ignore[attr-defined]
        assert len(contexts) == 1
        assert clients[0]._transport._pool._ssl_context.verify_mode.name == "CERT_REQUIRED"  # type: ignore[attr-defined]
    finally:
        for c in clients:
            c.close()
