"""A request's ``Host`` header against the names the HTTP service serves (``supervisor/config/_http_address.py``,
pure): normalised (case, a trailing dot, a port, IPv6 brackets), names of other characters refused, IP addresses
always served (a DNS-rebinding page has a name of its own)."""

from __future__ import annotations

import pytest

from supervisor.config import host_is_served
from supervisor.config._http_address import normalise_host_name


def test_a_host_name_is_compared_normalised() -> None:
    assert normalise_host_name(" LocalHost.:8080 ") == "localhost"
    assert normalise_host_name("[::1]:443") == "::1"
    assert normalise_host_name("xn--bcher-kva.example") == "xn--bcher-kva.example"
    assert normalise_host_name("bücher.example") == "bücher.example"  # letters of any script, as str.isalnum


@pytest.mark.parametrize("value", ["", ".", "evil.example/path", "a b", "host\x00", "a@b"])
def test_characters_no_host_name_has_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="invalid host name"):
        normalise_host_name(value)


def test_only_the_served_names_and_ip_addresses_are_served() -> None:
    names = frozenset({"localhost", "mcp.example.org"})
    assert host_is_served(None, names)
    assert host_is_served("MCP.example.org.:8443", names)
    assert host_is_served("127.0.0.1:8080", names) and host_is_served("[2001:db8::1]", names)
    assert not host_is_served("attacker.example", names)
    assert not host_is_served("mcp.example.org/x", names)
