"""The egress proxy's side toward an upstream: a decided address dialled (each of the decision's addresses in turn,
bounded, never the supervisor's own listener on it) and TLS to it, verified against the system CA store. A failure is
a :class:`~sandbox._egress_headers.Refusal` the client is answered (``502``; ``403`` for the supervisor's own port)."""

from __future__ import annotations

import errno
import functools
import socket
import ssl
from typing import TYPE_CHECKING

import trio

from sandbox._egress_decide import own_host_refusal, shown_host
from sandbox._egress_headers import Refusal

if TYPE_CHECKING:
    from sandbox._egress_decide import Decision
    from sandbox._host_names import Host

__all__ = ["CONNECT_TIMEOUT_S", "default_upstream_tls", "dial", "upstream_tls"]

CONNECT_TIMEOUT_S = 10.0


@functools.cache
def default_upstream_tls() -> ssl.SSLContext:
    """The context the proxy verifies upstream servers with: the system CA store (``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` as OpenSSL reads them, at the first call), host names checked, TLS 1.2 at least. One
    context for the whole process (loading the store takes milliseconds)."""
    ctx = ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def dial(decision: Decision, port: int, record: dict[str, object]) -> trio.SocketStream:
    """A connection to the first of ``decision``'s addresses that answers on ``port`` within
    :data:`CONNECT_TIMEOUT_S` (its address set in ``record``). Raises :class:`Refusal`: 403 when the address is the
    supervisor's own listener, 502 when none could be reached (each address's error named)."""
    errors: list[str] = []
    for ip in decision.addresses:
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        try:
            with trio.move_on_after(CONNECT_TIMEOUT_S) as scope:
                await sock.connect((str(ip), port))
            if scope.cancelled_caught:
                raise OSError(errno.ETIMEDOUT, "connect timed out")
            if refused := own_host_refusal(sock, ip):
                raise Refusal(403, refused)
        except OSError as exc:
            sock.close()
            errors.append(f"{ip}: {exc.strerror or exc}")
            continue
        except BaseException:
            sock.close()
            raise
        record["address"] = str(ip)
        return trio.SocketStream(sock)
    raise Refusal(502, f"cannot connect to {decision.host} port {port}: {'; '.join(errors)}")


async def upstream_tls(raw: trio.abc.Stream, host: Host, context: ssl.SSLContext) -> trio.SSLStream[trio.abc.Stream]:
    """TLS to the upstream over ``raw``, its certificate verified for ``host`` (name or address) with ``context``.
    Raises :class:`Refusal` (502) naming why the handshake failed or that it took too long."""
    stream = trio.SSLStream(raw, context, server_hostname=str(host), https_compatible=True)
    try:
        with trio.fail_after(CONNECT_TIMEOUT_S):
            await stream.do_handshake()
    except trio.TooSlowError:
        raise Refusal(502, f"no TLS handshake with {shown_host(host)} within {CONNECT_TIMEOUT_S:.0f} s") from None
    except (trio.BrokenResourceError, ssl.SSLError) as exc:
        cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
        why = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause)
        raise Refusal(
            502,
            f"TLS with {shown_host(host)} failed ({why}); the proxy verifies upstream "
            "certificates against the system CA store",
        ) from None
    return stream
