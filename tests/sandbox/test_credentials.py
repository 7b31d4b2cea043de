"""The pure half of credential injection: which requests a binding matches, and what the proxy sends."""

from __future__ import annotations

import pytest

from sandbox._credentials import (
    Credential,
    CredentialBinding,
    apply_credentials,
    credential_value_problem,
    matching_credentials,
    placeholder,
)
from sandbox._hosts import HostError

API = CredentialBinding(("api.example.test",))


def _cred(
    *bindings: CredentialBinding,
    header: tuple[str, str] | None = ("Authorization", "Bearer {value}"),
    query: str | None = None,
) -> Credential:
    return Credential("github", "VALUE", bindings or (API,), header, query)


@pytest.mark.parametrize(
    ("scheme", "host", "port", "path", "expected"),
    [
        ("https", "api.example.test", 443, "/", True),
        ("https", "API.Example.Test.", 443, "/x", True),  # normalised like AllowedHosts
        ("https", "api.example.test.evil.test", 443, "/", False),  # only starts like it
        ("https", "evil-api.example.test", 443, "/", False),
        ("https", "x.api.example.test", 443, "/", False),  # a subdomain is another host
        ("https", "api.example.test", 8443, "/", False),  # default: the scheme's port only
        ("http", "api.example.test", 80, "/", False),  # default: https only
        ("https", "[2001:db8::1]", 443, "/", False),
    ],
)
def test_exact_binding(scheme: str, host: str, port: int, path: str, expected: bool) -> None:
    assert bool(matching_credentials([_cred()], scheme, host, port, path)) is expected


def test_wildcard_ports_schemes_and_ip_literal() -> None:
    b = CredentialBinding(("*.example.test", "203.0.113.7"), ports=(443, 8443), schemes=("https", "http"))
    assert b.matches("https", "a.example.test", 8443, "/")
    assert b.matches("http", "a.b.example.test", 443, "/")
    assert not b.matches("https", "example.test", 443, "/")  # strict subdomains, as in AllowedHosts
    assert not b.matches("https", "a.example.test", 80, "/")
    c = _cred(b)
    assert matching_credentials([c], "https", "203.0.113.7", 443, "/")
    assert not matching_credentials([c], "https", "203.0.113.8", 443, "/")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1", True),
        ("/v1/", True),
        ("/v1/repos?x=1", True),
        ("/v1?x", True),
        ("/v1x", False),
        ("/v2/v1", False),
        ("/v1/../admin", False),
        ("/v1/%2e%2e/admin", False),
        ("/v1%2fadmin", False),
        ("/v1/./x", False),
        ("/v1\\x", False),
    ],
)
def test_path_prefix_at_segment_boundaries(path: str, expected: bool) -> None:
    b = CredentialBinding(("api.example.test",), path_prefixes=("/v1/",))
    assert b.matches("https", "api.example.test", 443, path) is expected


def test_bad_bindings_are_refused_with_reasons() -> None:
    with pytest.raises(HostError):
        CredentialBinding(("not a host",))
    with pytest.raises(ValueError, match="scheme"):
        CredentialBinding(("a.test",), schemes=("ftp",))
    with pytest.raises(ValueError, match="port"):
        CredentialBinding(("a.test",), ports=(0,))
    with pytest.raises(ValueError, match="start with"):
        CredentialBinding(("a.test",), path_prefixes=("v1",))
    with pytest.raises(ValueError, match="at least one host"):
        CredentialBinding(())


def test_apply_sets_header_swaps_placeholder_and_query() -> None:
    c = Credential("k", "VAL", (API,), ("Authorization", "Bearer {value}"), "api_key")
    headers = [
        (b"authorization", b"Bearer forged"),
        (b"x-a", b"pre " + placeholder("k").encode()),
        (b"x-b", placeholder("o").encode()),
    ]
    out, path = apply_credentials([c], headers, "/x?api_key=forged&b=" + placeholder("k"))
    assert (b"Authorization", b"Bearer VAL") in out and (b"authorization", b"Bearer forged") not in out
    assert (b"x-a", b"pre VAL") in out
    assert (b"x-b", placeholder("o").encode()) in out  # another credential's placeholder stays a placeholder
    assert path == "/x?b=VAL&api_key=VAL"


def test_value_problems_and_repr_never_show_the_value() -> None:
    assert credential_value_problem("ok-value") is None
    for bad in ("", "a\r\nInjected: 1", "tab\there", "é", "x" * 9000):
        problem = credential_value_problem(bad)
        assert problem and (bad == "" or bad not in problem)
    assert "VALUE" not in repr(_cred()) and "VALUE" not in str(_cred().describe())
