"""The supervisor's CA for the TLS-terminating mode: leaves for exactly one host, cached, renewed before expiry."""

from __future__ import annotations

import datetime
import ssl
from typing import TYPE_CHECKING

import pytest
from cryptography import x509

from sandbox import SupervisorCA, _tls_ca

if TYPE_CHECKING:
    from pathlib import Path


def test_leaves_name_exactly_their_host_and_verify_against_the_ca_only(tmp_path: Path) -> None:
    ca = SupervisorCA.generate()
    for host, kind in (("api.example.test", x509.DNSName), ("203.0.113.7", x509.IPAddress)):
        leaf = ca.leaf(host)
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(v) for v in san.get_values_for_type(kind)] == [host]
        leaf.verify_directly_issued_by(ca.cert)
    other = SupervisorCA.generate()
    with pytest.raises(ValueError, match="does not match"):  # another CA did not issue it
        ca.leaf("x.test").verify_directly_issued_by(other.cert)
    # the server context a client trusting the CA accepts for that name
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    server = ca.server_context("api.example.test")
    assert ca.server_context("api.example.test") is server  # cached
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    cli = client.wrap_bio(c_in, c_out, server_hostname="api.example.test")
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side, out, into in ((cli, c_out, s_in), (srv, s_out, c_in)):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
            into.write(out.read())
    cli.do_handshake()
    assert cli.getpeercert()["subject"][-1][0] == ("commonName", "api.example.test")


def test_a_cached_leaf_is_renewed_before_it_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    ca = SupervisorCA.generate()
    first = ca.server_context("api.example.test")
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=23)
    monkeypatch.setattr(_tls_ca, "_now", lambda: later)
    assert ca.server_context("api.example.test") is not first
