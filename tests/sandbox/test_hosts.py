"""Host normalisation, AllowedHosts matching and address classes (pure, no network)."""

from __future__ import annotations

import ipaddress
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox import AllowedHosts, HostError, HostRule, IPAddress, embedded_ipv4, normalize_host
from sandbox._addresses import address_verdict
from sandbox._host_names import parse_ipv4_number, split_host_port

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


# --- normalisation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("EXAMPLE.com.", "example.com"),
        ("  example.com ", "example.com"),
        ("Bücher.example", "xn--bcher-kva.example"),
        ("BÜCHER.example.", "xn--bcher-kva.example"),
        ("example\u3002com", "example.com"),  # ideographic full stop maps to '.'
        ("_dmarc.example.com", "_dmarc.example.com"),
        ("localhost", "localhost"),
    ],
)
def test_names_normalise_to_one_lower_case_ascii_form(text: str, expected: str) -> None:
    assert normalize_host(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1", V4("127.0.0.1")),
        ("2130706433", V4("127.0.0.1")),
        ("0x7f.1", V4("127.0.0.1")),
        ("0X7F.1", V4("127.0.0.1")),
        ("017700000001", V4("127.0.0.1")),
        ("127.1", V4("127.0.0.1")),
        ("127.0.1", V4("127.0.0.1")),
        ("0177.0.0.01", V4("127.0.0.1")),
        ("0xa9.0xfe.0xa9.0xfe", V4("169.254.169.254")),
        ("2852039166", V4("169.254.169.254")),
        ("169.254.43518", V4("169.254.169.254")),
        ("127.0.0.1.", V4("127.0.0.1")),
        ("\uff11\uff12\uff17.0.0.1", V4("127.0.0.1")),  # full-width digits are digits after UTS 46 mapping
        ("[::1]", V6("::1")),
        ("::1", V6("::1")),
        ("[::FFFF:169.254.169.254]", V6("::ffff:a9fe:a9fe")),
        ("[64:ff9b::a9fe:a9fe]", V6("64:ff9b::a9fe:a9fe")),
    ],
)
def test_numeric_spellings_are_ip_addresses_never_names(text: str, expected: object) -> None:
    assert normalize_host(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        ".",
        "example..com",
        "-example.com",
        "example-.com",
        "exa mple.com",
        "exa/mple.com",
        "[fe80::1%eth0]",
        "fe80::1%25eth0",
        "example.com%00",
        "[127.0.0.1]",
        "[::1",
        "::1]",
        "1.2.3.4.5",
        "256.1.1.1",
        "1.2.3.256",
        "1.16777216",
        "4294967296",
        "08.0.0.1",
        "example.123",
        "1..2",
        "a" * 64 + ".com",
        ".".join(["a" * 60] * 5),
        "a\x00b.com",
        "x:y",
    ],
)
def test_malformed_hosts_are_refused_with_a_reason(text: str) -> None:
    with pytest.raises(HostError) as info:
        normalize_host(text)
    assert str(info.value)


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_32_bit_number_is_the_same_address(n: int) -> None:
    assert normalize_host(str(n)) == V4(n)
    assert normalize_host(hex(n)) == V4(n)
    assert normalize_host("0" + oct(n)[2:]) == V4(n)
    assert normalize_host(str(V4(n))) == V4(n)


@given(st.text(alphabet="0123456789x.", min_size=1, max_size=20))
def test_numeric_parsing_agrees_with_the_c_library(text: str) -> None:
    """Whatever glibc's inet_aton takes for an address, we take for the same address; nothing numeric is a
    name."""
    try:
        expected = V4(socket.inet_aton(text))
    except OSError:
        expected = None
    try:
        got = parse_ipv4_number(text)
    except HostError:
        got = None
    if expected is not None:
        assert got == expected
    elif got is not None:  # we may be stricter than glibc, never laxer
        pytest.fail(f"{text!r} parsed as {got} but inet_aton refuses it")


@given(st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9](\.[a-z][a-z0-9]{0,8}){1,3}", fullmatch=True))
def test_case_and_trailing_dot_never_change_a_name(name: str) -> None:
    assert normalize_host(name.upper()) == normalize_host(name + ".") == normalize_host(name) == name


def test_split_host_port_handles_brackets_defaults_and_bad_ports() -> None:
    assert split_host_port("Example.com:443") == ("example.com", 443)
    assert split_host_port("[::1]:8080") == (V6("::1"), 8080)
    assert split_host_port("example.com", default_port=80) == ("example.com", 80)
    assert split_host_port("0x7f.1:80") == (V4("127.0.0.1"), 80)
    for bad in [
        "example.com",
        "example.com:0",
        "example.com:65536",
        "example.com:http",
        "::1:80",
        "user@example.com:80",
        "[::1]80",
        "example.com:+80",
        "example.com:٣",
    ]:
        with pytest.raises(HostError):
            split_host_port(bad)


# --- rules
# -----------------------------------------------------------------------------------------------------


def test_rules_parse_every_entry_form() -> None:
    assert HostRule.parse("Example.com") == HostRule("exact", "example.com", None, "Example.com")
    assert HostRule.parse("*.Example.com:443").kind == "suffix"
    assert HostRule.parse("*.Example.com:443").ports == (443, 443)
    assert HostRule.parse("10.0.0.5:5432") == HostRule("ip", V4("10.0.0.5"), (5432, 5432), "10.0.0.5:5432")
    assert HostRule.parse("::1").value == V6("::1")
    assert HostRule.parse("[::1]:80").ports == (80, 80)
    assert HostRule.parse("[2001:db8::1]:443") == HostRule("ip", V6("2001:db8::1"), (443, 443), "[2001:db8::1]:443")
    assert HostRule.parse("api.example.com:8000-8100").ports == (8000, 8100)
    assert HostRule.parse("*.example.org:443-443").ports == (443, 443)
    assert HostRule.parse("2001:db8::1").ports is None  # a bare IPv6 address has no port: any port
    for bad in [
        "",
        "*",
        "*.",
        "a.*.com",
        "*example.com",
        "*.*.com",
        "*.1.2.3.4",
        "example.com:0",
        "[::1",
        "example.com:",
        "example.com:8100-8000",
        "example.com:1-",
        "example.com:-5",
        "example.com:1-2-3",
        "example.com:65536",
        "example.com:http",
        "[::1]443",
        "[::1]:",
        "*.[::1]:443",
        "user@example.com",
        "http://example.com",
        "example.com/path",
        "2001:db8::1:443x",
    ]:
        with pytest.raises(HostError):
            HostRule.parse(bad)


def test_port_errors_name_the_entry_and_what_to_write() -> None:
    with pytest.raises(HostError, match=r"'example.com:'.*port is missing"):
        HostRule.parse("example.com:")
    with pytest.raises(HostError, match=r"8100-8000.*empty"):
        HostRule.parse("example.com:8100-8000")
    with pytest.raises(HostError, match=r"outside 1-65535"):
        HostRule.parse("example.com:0-80")


def test_ports_and_port_ranges_match_only_their_ports() -> None:
    rules = AllowedHosts.parse(["api.example.com:443", "*.example.org:8000-8100", "[2001:db8::1]:443", "any.example"])
    assert rules.match("api.example.com", 443) is not None
    assert rules.match("api.example.com", 8443) is None
    assert rules.match("api.example.com", 80) is None
    assert rules.match("a.example.org", 8000) is not None and rules.match("a.example.org", 8100) is not None
    assert rules.match("a.example.org", 7999) is None and rules.match("a.example.org", 8101) is None
    assert rules.match(V6("2001:db8::1"), 443) is not None and rules.match(V6("2001:db8::1"), 80) is None
    assert rules.match("any.example", 1) is not None and rules.match("any.example", 65535) is not None
    # the DNS stub asks with no port: a name allowed on some port resolves
    assert rules.match("api.example.com", None) is not None
    assert "not allowed on port 8443" in rules.refusal("api.example.com", 8443)


def test_exact_suffix_ip_and_port_matching() -> None:
    rules = AllowedHosts.parse(["api.example.com", "*.cdn.example", "files.example:8443", "203.0.113.7"])
    assert rules.match("api.example.com", 443)
    assert rules.match(normalize_host("API.Example.COM."), 80)
    assert not rules.match("x.api.example.com", 443)
    assert not rules.match("example.com", 443)
    assert rules.match("a.cdn.example", 443)
    assert rules.match("a.b.cdn.example", 443)
    assert not rules.match("cdn.example", 443)  # *.suffix is strict subdomains only
    assert not rules.match("evilcdn.example", 443)
    assert rules.match("files.example", 8443)
    assert not rules.match("files.example", 443)
    assert rules.match("files.example", None)  # DNS: any port
    assert rules.match(V4("203.0.113.7"), 80)
    assert rules.match(normalize_host("3405803783"), 80)  # 203.0.113.7 as a number
    assert not rules.match(V4("203.0.113.8"), 80)
    assert not rules.match("203.0.113.7.example", 80)


def test_ip_literals_only_match_when_listed() -> None:
    rules = AllowedHosts.parse(["localhost", "example.com"])
    assert rules.match(V4("127.0.0.1"), 80) is None
    assert rules.match(V6("::1"), 80) is None
    assert "not listed" in rules.refusal(V4("127.0.0.1"), 80)


def test_empty_allowed_hosts_means_no_network() -> None:
    rules = AllowedHosts.parse([])
    assert rules.empty
    assert rules.match("example.com", 443) is None
    assert "no network" in rules.refusal("example.com", 443)


def test_refusals_explain_ports() -> None:
    rules = AllowedHosts.parse(["example.com:443"])
    assert "other ports" in rules.refusal("example.com", 80)
    assert "port 80" in rules.refusal("example.com", 80)
    assert "not in AllowedHosts" in rules.refusal("other.com", 443)


def test_bad_private_networks_are_refused() -> None:
    with pytest.raises(HostError):
        AllowedHosts.parse([], private_networks=["10.0.0.0/33"])


# --- address classes
# -------------------------------------------------------------------------------------------

PUBLIC = AllowedHosts.parse(["example.com", "localhost", "127.0.0.1", "::1", "10.9.9.9"], loopback=True)
NAME = PUBLIC.match("example.com", 80)
LOCALHOST = PUBLIC.match("localhost", 80)
LITERAL_LOOPBACK = PUBLIC.match(V4("127.0.0.1"), 80)
LITERAL_PRIVATE = PUBLIC.match(V4("10.9.9.9"), 80)


@pytest.mark.parametrize(
    ("ip", "word"),
    [
        ("169.254.169.254", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("100::1", "reserved"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("fd00::1", "private"),
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("::1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::169.254.169.254", "metadata"),
        ("64:ff9b::a9fe:a9fe", "metadata"),
        ("64:ff9b::7f00:1", "loopback"),
        ("64:ff9b::a01:203", "private"),
        ("64:ff9b:1::a9fe:a9fe", "metadata"),
        ("64:ff9b:1:a9fe:a9:fe00::", "169.254."),  # a /48 local-use NAT64 prefix
        ("2002:a9fe:a9fe::1", "metadata"),  # 6to4
        ("2001:0:4136:e378:8000:63bf:5601:5601", "metadata"),  # Teredo client 169.254.169.254 (obfuscated)
    ],
)
def test_dangerous_addresses_are_refused_for_a_name_entry(ip: str, word: str) -> None:
    ok, reason = address_verdict(ipaddress.ip_address(ip), PUBLIC, entry=NAME)
    assert not ok
    assert word in reason


@pytest.mark.parametrize(
    "ip",
    [
        "203.0.113.10",
        "93.184.216.34",
        "2001:db8::10",
        "2606:4700::1111",
        "64:ff9b::5db8:d822",
        "::ffff:93.184.216.34",
        "2002:5db8:d822::1",
    ],
)
def test_public_addresses_pass(ip: str) -> None:
    assert address_verdict(ipaddress.ip_address(ip), PUBLIC, entry=NAME) == (True, "")


def test_loopback_only_through_loopback_entries() -> None:
    lo4, lo6 = V4("127.0.0.1"), V6("::1")
    assert address_verdict(lo4, PUBLIC, entry=LOCALHOST)[0]
    assert address_verdict(lo6, PUBLIC, entry=LOCALHOST)[0]
    assert address_verdict(lo4, PUBLIC, entry=LITERAL_LOOPBACK)[0]
    assert not address_verdict(lo4, PUBLIC, entry=NAME)[0]
    assert not address_verdict(lo4, PUBLIC, entry=None)[0]
    # localhost still never reaches metadata or private ranges
    assert not address_verdict(V4("169.254.169.254"), PUBLIC, entry=LOCALHOST)[0]
    assert not address_verdict(V4("10.0.0.1"), PUBLIC, entry=LOCALHOST)[0]


def test_loopback_entries_reach_nothing_unless_the_policy_opens_the_loopback() -> None:
    closed = AllowedHosts.parse(["localhost", "127.0.0.1", "::1"], policy_key="toolboxes.file-agent/lua")
    for entry, ip in (("localhost", "127.0.0.1"), ("localhost", "::1"), ("127.0.0.1", "127.0.0.1"), ("::1", "::1")):
        ok, reason = address_verdict(ipaddress.ip_address(ip), closed, entry=closed.match(normalize_host(entry), 80))
        assert not ok and "toolboxes.file-agent/lua.allow_loopback: true" in reason, reason


def test_private_ranges_open_only_when_the_policy_lists_them() -> None:
    ip = V4("10.9.9.9")
    assert not address_verdict(ip, PUBLIC, entry=NAME)[0]
    ok, reason = address_verdict(ip, PUBLIC, entry=LITERAL_PRIVATE)  # naming the address opens nothing
    assert not ok and "allow_private_ranges: [10.9.9.9/32]" in reason, reason
    opened = AllowedHosts.parse(["db.internal"], private_networks=["10.0.0.0/8"])
    assert address_verdict(ip, opened, entry=opened.match("db.internal", 5432))[0]
    assert address_verdict(V6("::ffff:10.9.9.9"), opened, entry=None)[0]
    assert not address_verdict(V4("192.168.0.1"), opened, entry=None)[0]
    # opening a range never opens link-local or metadata
    wide = AllowedHosts.parse(["x"], private_networks=["0.0.0.0/0"])
    assert not address_verdict(V4("169.254.169.254"), wide, entry=None)[0]


def test_own_addresses_are_refused_even_when_listed() -> None:
    own = frozenset({V4("203.0.113.1"), V4("10.9.9.9")})
    ok, reason = address_verdict(V4("203.0.113.1"), PUBLIC, entry=NAME, own_addresses=own)
    assert not ok
    assert "own host" in reason
    opened = AllowedHosts.parse(["10.9.9.9"], private_networks=["10.9.9.9/32"])
    assert address_verdict(V4("10.9.9.9"), opened, entry=opened.match(V4("10.9.9.9"), 80))[0]
    assert not address_verdict(V4("10.9.9.9"), opened, entry=opened.match(V4("10.9.9.9"), 80), own_addresses=own)[0]
    assert not address_verdict(V6("::ffff:203.0.113.1"), PUBLIC, entry=NAME, own_addresses=own)[0]


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_ipv6_forms_are_judged_by_their_ipv4(n: int) -> None:
    v4 = V4(n)
    expected = address_verdict(v4, PUBLIC, entry=NAME)[0]
    for form in (V6(0xFFFF_0000_0000 | n), V6((0x64FF9B << 96) | n)):
        assert address_verdict(form, PUBLIC, entry=NAME)[0] == expected, form
    if not expected:
        assert not address_verdict(V6((0x2002 << 112) | (n << 80)), PUBLIC, entry=NAME)[0]
        assert not address_verdict(V6((0x64FF9B0001 << 80) | n), PUBLIC, entry=NAME)[0]


def test_embedded_ipv4_lists_each_form() -> None:
    assert embedded_ipv4(V4("1.2.3.4")) == []
    assert embedded_ipv4(V6("2001:db8::1")) == []
    assert embedded_ipv4(V6("::ffff:1.2.3.4")) == [("IPv4-mapped", V4("1.2.3.4"))]
    assert embedded_ipv4(V6("::1.2.3.4")) == [("IPv4-compatible", V4("1.2.3.4"))]
    assert embedded_ipv4(V6("64:ff9b::1.2.3.4")) == [("NAT64", V4("1.2.3.4"))]
    assert ("NAT64", V4("1.2.3.4")) in embedded_ipv4(V6("64:ff9b:1:102:3:400::"))
    assert embedded_ipv4(V6("2002:102:304::")) == [("6to4", V4("1.2.3.4"))]


# --- cloud metadata, checked first
# ---------------------------------------------------------------------------------------------

#: Every metadata address outside the link-local range, with what opens the class it is in.
_METADATA_IN_OPENABLE_RANGES = [
    "168.63.129.16",
    "100.100.100.200",
    "fd00:ec2::254",
    "fd20:ce::254",
    "fd00:c1::a9fe:a9fe",
    "fd00:ec2::23",
    "192.0.0.192",
]


@pytest.mark.parametrize(
    "ip",
    [
        *_METADATA_IN_OPENABLE_RANGES,
        "169.254.169.254",
        "169.254.170.2",
        "fe80::a9fe:a9fe",
        "::ffff:168.63.129.16",
        "64:ff9b::a83f:8110",
        "64:ff9b::6464:64c8",
        "::ffff:100.100.100.200",
        "2002:a83f:8110::1",
        "64:ff9b:1::a83f:8110",
    ],
)
def test_metadata_is_refused_first_whatever_the_policy_opens(ip: str) -> None:
    """Opening every range, listing the literal, or reaching it via localhost: a metadata address never passes."""
    address = ipaddress.ip_address(ip)
    wide = AllowedHosts.parse(["x.example", "localhost"], private_networks=["0.0.0.0/0", "::/0"])
    for entry in (wide.match("x.example", 80), wide.match("localhost", 80), None):
        ok, reason = address_verdict(address, wide, entry=entry)
        assert not ok, (ip, entry)
        assert "cloud metadata address" in reason
        assert "never dialled" in reason


def test_before_this_fix_a_public_metadata_address_passed_by_class() -> None:
    """168.63.129.16 (Azure WireServer) is a plain public address by class: only the metadata list refuses it."""
    ok, reason = address_verdict(V4("168.63.129.16"), PUBLIC, entry=NAME)
    assert not ok and "Azure WireServer" in reason


@pytest.mark.parametrize(
    "entry",
    [
        "168.63.129.16",
        "100.100.100.200:80",
        "[fd00:ec2::254]:80",
        "fd20:ce::254",
        "169.254.169.254",
        "::ffff:169.254.169.254",
        "metadata.google.internal",
        "Metadata.Google.Internal.",
        "metadata",
        "metadata.goog:80",
    ],
)
def test_metadata_cannot_be_an_entry(entry: str) -> None:
    with pytest.raises(HostError, match="cloud metadata"):
        HostRule.parse(entry)


def test_every_metadata_entry_names_its_source() -> None:
    from sandbox._metadata import METADATA_ADDRESSES, METADATA_NAMES

    for what in [*METADATA_ADDRESSES.values(), *METADATA_NAMES.values()]:
        assert "docs" in what or "spec" in what, what


def _carrying_forms(v4: ipaddress.IPv4Address) -> list[IPAddress]:
    n = int(v4)
    return [
        V6((0xFFFF << 32) | n),
        V6(n),
        V6((0x64FF9B << 96) | n),
        V6((0x2002 << 112) | (n << 80)),
        V6((0x64FF9B0001 << 80) | n),
    ]


def test_every_ipv4_metadata_address_is_refused_in_every_form_that_carries_it() -> None:
    from sandbox._metadata import METADATA_ADDRESSES

    wide = AllowedHosts.parse(["x.example"], private_networks=["0.0.0.0/0", "::/0"])
    entry = wide.match("x.example", 80)
    for ip in METADATA_ADDRESSES:
        forms = [ip, *(_carrying_forms(ip) if isinstance(ip, ipaddress.IPv4Address) else [])]
        for form in forms:
            ok, reason = address_verdict(form, wide, entry=entry)
            assert not ok and "cloud metadata address" in reason, (ip, form, reason)


@pytest.mark.parametrize(
    ("ceiling", "entry", "covered"),
    [
        ("*.example.com", "api.example.com", True),
        ("*.example.com", "*.eu.example.com", True),
        ("*.example.com", "*.example.com", True),
        ("*.example.com", "example.com", False),  # *.suffix holds strict subdomains only
        ("*.example.com", "evilexample.com", False),
        ("*.example.com:443", "api.example.com:443", True),
        ("*.example.com:443", "api.example.com", False),  # no port: every port, past :443
        ("*.example.com:443", "api.example.com:80", False),
        ("*.example.com:8000-8100", "api.example.com:8010-8020", True),
        ("*.example.com:8000-8100", "api.example.com:8010-8200", False),
        ("api.example.com", "api.example.com:443", True),
        ("api.example.com", "*.api.example.com", False),
        ("10.1.2.3", "10.1.2.3:5432", True),
        ("10.1.2.3", "10.1.2.4", False),
        ("*.example.com", "10.1.2.3", False),
        ("localhost", "127.0.0.1", False),
    ],
)
def test_a_ceiling_entry_covers_only_what_it_allows(ceiling: str, entry: str, covered: bool) -> None:
    assert HostRule.parse(ceiling).covers(HostRule.parse(entry)) is covered
