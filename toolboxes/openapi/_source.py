"""Where a spec comes from: a file (read inside the worker, under its Landlock rules) or an http(s) URL (fetched by
the worker through the egress proxy, so the policy's AllowedHosts decide). Shared by the OpenAPI and PostgREST
toolboxes."""

from __future__ import annotations

from typing import Any

from .._http import DEFAULT_TIMEOUT_S, FetchError, fetch_bytes
from ._refs import MAX_DOCUMENT_BYTES, Resolver, SpecError, parse_document

__all__ = ["load_spec"]


def load_spec(
    spec_url: str, *, headers: dict[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Resolver:
    """Read and parse the spec at ``spec_url`` and return its :class:`Resolver`. Raises :class:`SpecError` with a
    message fit for a load error (unreachable, refused by the proxy, unreadable, not JSON/YAML)."""
    if spec_url.startswith(("http://", "https://")):
        try:
            data = fetch_bytes(spec_url, timeout_s=timeout_s, max_bytes=MAX_DOCUMENT_BYTES, headers=headers)
        except FetchError as exc:
            raise SpecError(f"cannot fetch the spec: {exc}") from exc
    else:
        try:
            with open(spec_url, "rb") as f:
                data = f.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            raise SpecError(f"cannot read the spec {spec_url}: {exc.strerror or exc}") from exc
        if len(data) > MAX_DOCUMENT_BYTES:
            raise SpecError(f"the spec {spec_url} is larger than {MAX_DOCUMENT_BYTES} bytes")
    doc: Any = parse_document(data, spec_url)
    if not isinstance(doc, dict):
        raise SpecError(f"{spec_url}: the spec is not a JSON/YAML object")
    return Resolver(doc, spec_url)
