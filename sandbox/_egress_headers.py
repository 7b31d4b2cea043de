"""What the egress proxy's two HTTP relays share (absolute-form requests in :mod:`sandbox._egress`, requests inside a
terminated tunnel in :mod:`sandbox._egress_tls`): the bound on a request head and the headers never forwarded."""

from __future__ import annotations

__all__ = ["HOP_BY_HOP", "MAX_HEAD_BYTES"]

#: The largest request head either relay reads (h11's ``max_incomplete_event_size``).
MAX_HEAD_BYTES = 16 * 1024
#: Headers of one hop, never relayed upstream (lower case): the connection's own, the proxy's, and ``Host``, which
#: the relay sets from the checked URL.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
    }
)
