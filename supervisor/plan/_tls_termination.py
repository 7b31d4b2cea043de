"""The TLS-terminating mode a toolbox opts into (``toolboxes.<name>.tls_termination``): the worker's side of it.

The supervisor's CA (:func:`sandbox._tls_ca.supervisor_ca`, one per supervisor process, its key only in the
supervisor's memory) has its certificate written to ``<state_dir>/tls/ca-<fingerprint>.pem`` (root's folder, 0755;
the file 0644, written through directory fds that never follow a link). A worker in this mode is granted that one
file read-only and finds it through the variables its TLS libraries read: ``SSL_CERT_FILE`` (OpenSSL: Python,
Ruby, most C programs), ``REQUESTS_CA_BUNDLE`` (Python requests), ``NODE_EXTRA_CA_CERTS`` (Node.js),
``CURL_CA_BUNDLE`` (curl), ``GIT_SSL_CAINFO`` (git). The bundle holds only the supervisor's CA: every TLS
connection of that worker goes through its proxy, which verifies the real upstream against the system store.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sandbox import ensure_dir, open_anchor

if TYPE_CHECKING:
    from sandbox import SupervisorCA

__all__ = ["CA_ENV_VARS", "ca_file_path", "termination_env", "write_ca_file"]

CA_ENV_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO")
_TLS_DIR = "tls"


def ca_file_path(state_dir: str, ca: SupervisorCA) -> str:
    """Where the workers read ``ca``'s certificate."""
    return os.path.join(state_dir, _TLS_DIR, f"ca-{ca.fingerprint}.pem")


def termination_env(ca_path: str) -> dict[str, str]:
    """The environment variables that make a worker's TLS clients trust the supervisor's CA (and only it)."""
    return dict.fromkeys(CA_ENV_VARS, ca_path)


def write_ca_file(state_dir: str, ca: SupervisorCA) -> str:
    """Write ``ca``'s certificate (never its key) where :func:`ca_file_path` says; returns the path."""
    path = ca_file_path(state_dir, ca)
    anchor = open_anchor(state_dir)
    try:
        tls = ensure_dir(anchor, _TLS_DIR, mode=0o755, where=os.path.dirname(path))
        try:
            name = os.path.basename(path)
            tmp = f".{name}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=tls)
            try:
                os.fchmod(fd, 0o644)
                os.write(fd, ca.cert_pem)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=tls, dst_dir_fd=tls)
        finally:
            os.close(tls)
    finally:
        os.close(anchor)
    return path
