"""A relay URL's host as the WebSocket client resolves it (nips/relay_address.py), checked
against the readers themselves: this machine's resolver (``getaddrinfo`` with numeric hosts
only, no lookup), ``socket.inet_aton``, Python's IDNA codec (``encodings.idna``, what the
client uses), the ``idna`` package (UTS #46) and ``ipaddress``."""

from __future__ import annotations

import ipaddress
import socket

import idna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.errors import RelayError
from nostr_buzz.nips.relay_address import (
    LOCAL_NETWORKS,
    embedded_ipv4,
    ip_literal,
    is_local_host,
    is_local_ip,
    is_local_url,
    resolver_host,
)

#: Each ASCII character's compatibility forms that NFKC (IDNA's nameprep) maps back to it.
FULL_WIDTH = {chr(c): chr(c - 0x21 + 0xFF01) for c in range(0x21, 0x7F)}
CIRCLED = {
    **{chr(0x61 + i): chr(0x24D0 + i) for i in range(26)},  # ⓐ … ⓩ
    **{chr(0x41 + i): chr(0x24B6 + i) for i in range(26)},  # Ⓐ … Ⓩ
    **{str(i): chr(0x2460 + i - 1) for i in range(1, 10)},  # ① … ⑨
}
BOLD = {chr(0x61 + i): chr(0x1D41A + i) for i in range(26)}  # 𝐚 … 𝐳
DOTS = (".", "\uff0e", "\u3002", "\uff61")  # the label separators IDNA reads as dots


def numeric(host: str) -> ipaddress.IPv4Address | None:
    """What this machine's resolver reads ``host`` as, without a lookup (IPv4 only)."""
    try:
        infos = socket.getaddrinfo(
            host, None, socket.AF_INET, socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
        )
    except (OSError, UnicodeError):
        return None
    return ipaddress.IPv4Address(infos[0][4][0])


@st.composite
def inet_aton_spellings(draw: st.DrawFn) -> tuple[ipaddress.IPv4Address, str]:
    """An IPv4 address and one of its ``inet_aton`` spellings: one to four parts, each
    decimal, octal or hex (any case, leading zeros)."""
    address = ipaddress.IPv4Address(draw(st.integers(0, 2**32 - 1)))
    count = draw(st.integers(1, 4))
    octets = address.packed
    values = [*octets[: count - 1], int.from_bytes(octets[count - 1 :], "big")]
    parts = []
    for value in values:
        base = draw(st.sampled_from(("dec", "oct", "hex")))
        if base == "dec":
            parts.append(str(value))
        elif base == "oct":
            parts.append("0" * draw(st.integers(1, 3)) + format(value, "o"))
        else:
            digits = "0" * draw(st.integers(0, 2)) + format(value, "x")
            prefix = draw(st.sampled_from(("0x", "0X")))
            parts.append(prefix + (digits.upper() if draw(st.booleans()) else digits))
    return address, ".".join(parts)


def disguised(text: str, draw: st.DrawFn) -> str:
    """``text`` with each character in a compatibility form at random, and its dots too."""
    out = []
    for char in text:
        forms = [char, char.upper()]
        forms += [table[char] for table in (FULL_WIDTH, CIRCLED, BOLD) if char in table]
        out.append(draw(st.sampled_from(DOTS)) if char == "." else draw(st.sampled_from(forms)))
    return "".join(out)


@settings(max_examples=400, deadline=None)
@given(inet_aton_spellings())
def test_every_inet_aton_spelling_is_the_address_the_resolver_reads(
    spelled: tuple[ipaddress.IPv4Address, str],
) -> None:
    address, spelling = spelled
    assert ipaddress.IPv4Address(socket.inet_aton(spelling)) == address
    assert numeric(spelling) == address
    assert ip_literal(resolver_host(spelling)) == address
    assert is_local_host(spelling) == is_local_ip(address)


@settings(max_examples=300, deadline=None)
@given(st.data(), inet_aton_spellings())
def test_a_full_width_or_circled_spelling_reaches_the_resolver_as_the_address(
    data: st.DataObject, spelled: tuple[ipaddress.IPv4Address, str]
) -> None:
    address, spelling = spelled
    shown = disguised(spelling.lower(), data.draw)
    assert ip_literal(resolver_host(shown)) == address
    assert numeric(shown) == address  # the socket module's own IDNA step, then the resolver


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=24))
def test_the_resolver_and_the_normaliser_read_any_numeric_text_alike(text: str) -> None:
    """Over any text of digits, hex letters, x and dots: the resolver finds an address
    exactly when the normaliser does, and the same one."""
    theirs = numeric(text)
    try:
        ours = ip_literal(resolver_host(text)) if not text.endswith(".") else None
    except RelayError:
        ours = None
    assert ours == theirs


@settings(max_examples=300, deadline=None)
@given(
    st.data(),
    st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12),
        min_size=1,
        max_size=4,
    ),
)
def test_a_name_in_compatibility_forms_reaches_the_resolver_as_the_name(
    data: st.DataObject, labels: list[str]
) -> None:
    name = ".".join(labels)
    shown = disguised(name, data.draw)
    assert resolver_host(shown) == name
    # What the client hands the resolver (Python's codec), and UTS #46 (the idna package).
    assert shown.lower().encode("idna").decode("ascii").lower() == name
    assert idna.encode(shown, uts46=True).decode("ascii") == name


@pytest.mark.parametrize("name", ["localhost", "relay.localhost"])
def test_a_local_name_in_any_form_is_local(name: str) -> None:
    for table in (FULL_WIDTH, CIRCLED, BOLD):
        shown = "".join(table.get(c, c) for c in name)
        assert is_local_host(shown), shown
        assert is_local_host(shown + "．"), shown  # a trailing (full-width) dot


ipv4_addresses = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)


@given(ipv4_addresses)
def test_an_ipv6_address_carrying_an_ipv4_one_is_judged_as_that_address(
    v4: ipaddress.IPv4Address,
) -> None:
    n = int(v4)
    carriers = [
        ipaddress.IPv6Address(f"::ffff:{v4}"),  # IPv4-mapped
        ipaddress.IPv6Address(f"64:ff9b::{v4}"),  # NAT64
        ipaddress.IPv6Address((0x2002 << 112) | (n << 80)),  # 6to4
    ]
    for carrier in carriers:
        assert embedded_ipv4(carrier) == v4
        assert is_local_ip(carrier) == is_local_ip(v4), carrier
        assert is_local_host(str(carrier)) == is_local_ip(v4)


@given(st.one_of(ipv4_addresses, st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)))
def test_what_ipaddress_calls_this_host_or_its_networks_is_local(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    shared = ipaddress.ip_network("100.64.0.0/10")
    site = address.version == 6 and address.is_site_local
    private = address.version == 4 and address.is_private and not _documentation(address)
    unique = address.version == 6 and address in ipaddress.ip_network("fc00::/7")
    if (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or private
        or unique
        or site
        or (address.version == 4 and address in shared)
    ):
        assert is_local_ip(address)
    inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else None
    if address.is_global and not address.is_multicast and not site:
        assert is_local_ip(address) == (inner is not None and is_local_ip(inner))


def _documentation(address: ipaddress.IPv4Address) -> bool:
    """The documentation ranges, which ``ipaddress`` counts as private: public to a resolver."""
    return any(
        address in ipaddress.ip_network(n)
        for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
    )


@pytest.mark.parametrize(
    "url",
    [
        "ws://１２７.０.０.１:7777",
        "ws://１２７．０．０．１",
        "ws://ｌｏｃａｌｈｏｓｔ:7777",
        "ws://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ:7777",
        "ws://LOCALHOST.",
        "ws://2130706433",
        "ws://0177.0.0.1",
        "ws://0x7f.1",
        "ws://127.1",
        "ws://127.0.0.1.",
        "ws://[::ffff:127.0.0.1]",
        "ws://[64:ff9b::7f00:1]",
        "ws://[64:ff9b::a9fe:a9fe]",
        "ws://[2002:a9fe:a9fe::]",
        "ws://[::127.0.0.1]",
        "ws://１６９.２５４.１６９.２５４/latest",
        "ws://2852039166",
        "ws://100.64.0.1",
        "ws://100.127.255.255",
        "ws://１００.６４.０.１",
        "ws://[::ffff:100.64.0.1]",
        "ws://[fe80::1%25eth0]",
        "ws://[fd00::1]",
        "ws://0",
        "ws://255.255.255.255",
        "ws://a..b\u00e9",  # a host the IDNA codec refuses is refused too
    ],
)
def test_spellings_of_local_addresses_are_local(url: str) -> None:
    assert is_local_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "wss://relay.damus.io",
        "wss://ｒｅｌａｙ.example",
        "ws://100.63.255.255",
        "ws://100.128.0.0",
        "ws://8.8.8.8",
        "ws://[::ffff:8.8.8.8]",
        "ws://[64:ff9b::808:808]",
        "ws://[2001:4860:4860::8888]",
        "ws://localhost.example.com",
    ],
)
def test_public_addresses_and_names_are_not_local(url: str) -> None:
    assert not is_local_url(url)


def test_the_networks_cover_what_the_rule_names() -> None:
    for network in ("100.64.0.0/10", "169.254.0.0/16", "fc00::/7", "fe80::/10", "0.0.0.0/8"):
        assert ipaddress.ip_network(network) in LOCAL_NETWORKS
