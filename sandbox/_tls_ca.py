"""The supervisor's own certificate authority for the egress proxy's TLS-terminating mode (trusted side only).

:func:`supervisor_ca` makes one CA per supervisor process (an ECDSA P-256 key that exists only in this process's
memory, a self-signed certificate valid for 398 days, ``pathlen 0``, key usage ``keyCertSign`` only). Its
certificate (:attr:`SupervisorCA.cert_pem`, never the key) is what a worker in terminating mode trusts.
:meth:`SupervisorCA.server_context` mints, on first use for a host, a leaf certificate for exactly that name or
address (valid one day, ``serverAuth``; made again when less than two hours are left), and returns a server
``SSLContext`` holding it; the proxy calls it only for
a host its policy decision allowed. The leaf key is loaded through a ``memfd`` (``ssl`` loads keys from paths only),
so no key is ever written to a file system.

Certificates come from the ``cryptography`` API, TLS from Python's ``ssl``; nothing here is hand-written crypto.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import ssl
import threading
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["SupervisorCA", "supervisor_ca"]

CA_DAYS = 398
LEAF_DAYS = 1
#: a cached leaf is replaced when it has less than this left
LEAF_RENEW = datetime.timedelta(hours=2)
MAX_LEAVES = 1024


def _name(common: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "agents-supervise"),
            x509.NameAttribute(NameOID.COMMON_NAME, common[:64]),
        ]
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass
class SupervisorCA:
    """A CA and the leaf contexts minted from it. Thread-safe; the key is never serialised."""

    key: ec.EllipticCurvePrivateKey = field(repr=False)
    cert: x509.Certificate
    _leaf_key: ec.EllipticCurvePrivateKey = field(
        repr=False, default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    _contexts: dict[str, tuple[ssl.SSLContext, datetime.datetime]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def generate(cls) -> SupervisorCA:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        name = _name("agents-supervise egress CA " + os.urandom(4).hex())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def fingerprint(self) -> str:
        """The first 16 hex digits of the certificate's SHA-256 (names the file workers read)."""
        return hashlib.sha256(self.cert.public_bytes(serialization.Encoding.DER)).hexdigest()[:16]

    def leaf(self, host: str) -> x509.Certificate:
        """A leaf certificate for ``host`` (a normalised name, or an IP address as text)."""
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
        except ValueError:
            san = x509.DNSName(host)
        now = _now()
        return (
            x509.CertificateBuilder()
            .subject_name(_name(host))
            .issuer_name(self.cert.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server context presenting a leaf for ``host`` (made once per host; HTTP/1.1 only over ALPN)."""
        with self._lock:
            cached = self._contexts.get(host)
            if cached is not None and cached[1] - _now() > LEAF_RENEW:
                return cached[0]
        cert = self.leaf(host)
        pem = cert.public_bytes(serialization.Encoding.PEM) + self._leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        fd = os.memfd_create("agents-supervise-leaf", os.MFD_CLOEXEC)
        try:
            os.write(fd, pem)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        with self._lock:
            if len(self._contexts) >= MAX_LEAVES:
                self._contexts.clear()
            self._contexts[host] = (ctx, cert.not_valid_after_utc)
        return ctx


_CA: list[SupervisorCA] = []
_CA_LOCK = threading.Lock()


def supervisor_ca() -> SupervisorCA:
    """This process's CA, made on first use (so: one per supervisor, new at each start)."""
    with _CA_LOCK:
        if not _CA:
            _CA.append(SupervisorCA.generate())
        return _CA[0]
