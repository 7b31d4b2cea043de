"""The pure half of credential injection: which requests a binding matches, and what the proxy sends."""

from __future__ import annotations

import pytest

from sandbox import Credential, CredentialBinding, HostError, credential_value_problem, placeholder
from sandbox._credentials import (
    apply_credentials,
    is_forwarding_header,
    matching_credentials,
    path_ambiguity,
    path_refusal,
)

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
        ("/v1/..;/admin", False),  # Tomcat, Spring: '..;' is '..'
        ("/v1/%252e%252e/admin", False),  # decoded twice
        ("/v1/%u002e%u002e/admin", False),  # IIS's %u escapes
        ("/v1/%ef%bc%8e%ef%bc%8e/admin", False),  # fullwidth dots, encoded
        ("/v1/\uff0e\uff0e/admin", False),  # fullwidth dots, raw
        ("/v1/%c0%ae%c0%ae/admin", False),  # overlong UTF-8
        ("/v1/.../admin", False),
        ("/v1/.%20/admin", False),
        ("/v1/x%00", False),
        ("/v1/%2e", False),
        ("/v1/a%2eb", True),  # an encoded dot inside a name is plain
        ("/v1/caf%c3%a9", True),  # UTF-8 that folds to no separator
        ("/v1//x", True),
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


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/v1/..;/admin", "';'"),
        ("/v1/%252e%252e/admin", "twice"),
        ("/v1/%u002e/admin", "two hex digits"),
        ("/v1/%ef%bc%8e%ef%bc%8e/admin", "read as '.'"),
        ("/v1/%e2%80%a5/admin", "read as '..'"),  # TWO DOT LEADER, encoded
        ("/v1\\admin", "backslash"),
        ("/v1/%5c..%5cadmin", "encoded '/', '\\' or ';'"),
        ("/v1/%c0%ae", "not UTF-8"),
        ("/v1/../admin", "dot segment"),
    ],
)
def test_an_ambiguous_path_is_named_and_refused_where_a_prefix_binds(path: str, why: str) -> None:
    problem = path_ambiguity(path)
    assert problem is not None and why in problem, problem
    scoped = _cred(CredentialBinding(("api.example.test",), path_prefixes=("/v1",)))
    refusal = path_refusal([scoped], "https", "api.example.test", 443, path)
    assert refusal is not None and "github" in refusal and why in refusal
    # no prefix at stake: not refused (the request goes out without the credential, or with it where any path
    # is bound)
    assert path_refusal([scoped], "https", "other.example.test", 443, path) is None
    assert path_refusal([scoped], "https", "api.example.test", 8443, path) is None
    assert path_refusal([_cred()], "https", "api.example.test", 443, path) is None
    assert path_ambiguity("/v1/repos/x?q=..;%u0000") is None  # the query is not the path


def test_forwarding_headers_are_dropped_from_a_credentialed_request() -> None:
    names = [
        b"Forwarded",
        b"X-Forwarded-Host",
        b"x-forwarded-for",
        b"X-Forwarded-Proto",
        b"X-Forwarded-Prefix",
        b"X-Original-URL",
        b"X-Rewrite-URL",
        b"X-Real-IP",
        b"True-Client-IP",
        b"X-Host",
        b"Via",
    ]
    assert all(is_forwarding_header(n) for n in names)
    assert not any(is_forwarding_header(n) for n in (b"Accept", b"X-Token", b"Authorization", b"X-Forward"))
    headers = [(n, b"evil.example.test") for n in names] + [(b"accept", b"*/*")]
    out, _ = apply_credentials([_cred()], headers, "/")
    assert out == [(b"accept", b"*/*"), (b"Authorization", b"Bearer VALUE")]
