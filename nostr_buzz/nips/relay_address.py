"""A relay URL's host as the WebSocket client resolves it, and whether it is local.  Pure.

The host of a relay URL is not compared as written: the client turns it into the name or
address the operating system's resolver receives, and that is what a rule about addresses
must read.  The steps, in the client's order (docs/bot.md, "Addresses, not spellings"):

* ``urllib`` reads the host and lowercases it;
* a host with non-ASCII characters is encoded with Python's IDNA codec (the WebSocket client
  does it, and the socket module again): nameprep folds case and applies NFKC, so full-width
  ``１２７.０.０.１``, ``ｌｏｃａｌｈｏｓｔ`` and circled ``ⓛⓞⓒⓐⓛⓗⓞⓢⓣ`` reach the resolver as
  ``127.0.0.1`` and ``localhost``;
* the resolver reads an IPv6 literal, and an IPv4 literal in every form ``inet_aton``
  accepts: one to four parts, each decimal, octal (``0177``) or hex (``0x7f``), the last part
  filling the bytes the others leave (``127.1``, ``2130706433``).

:func:`is_local_host` then says whether the result names this host or its networks:
``localhost`` and the names under it, and the addresses of :data:`LOCAL_NETWORKS`, an IPv6
address that carries an IPv4 one (IPv4-mapped, IPv4-compatible, NAT64, 6to4) judged by both.
A trailing dot is dropped first (a fully qualified name names the same host).  A host that
cannot be encoded at all is local too: nothing can connect to it, and nothing should try.
Any other name is judged again on the addresses it resolves to, when a connection is made
(``io/addresses.py``).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Final
from urllib.parse import urlsplit

from nostr_buzz.errors import RelayError, describe_input

__all__ = [
    "LOCAL_NETWORKS",
    "IpAddress",
    "embedded_ipv4",
    "ip_literal",
    "is_local_host",
    "is_local_ip",
    "is_local_name",
    "is_local_url",
    "resolver_host",
]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Networks a relay named by someone else may not be on: this host, its private networks,
#: the carrier-grade NAT and link-local ones (where cloud metadata services answer),
#: multicast and the reserved rest.
LOCAL_NETWORKS: Final = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network": 0.0.0.0 reaches this host
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT (shared address space)
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
        "::/128",
        "::1/128",
        "64:ff9b:1::/48",  # NAT64 for local use
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # the old site-local
        "ff00::/8",  # multicast
    )
)

_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_COMPATIBLE: Final = ipaddress.ip_network("::/96")
_INET_PART: Final = re.compile(r"0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*")


def resolver_host(host: str) -> str:
    """``host`` (a URL's host, without brackets) as the resolver receives it: IDNA-encoded as
    the client encodes it, lowercase, without a trailing dot.  A host the codec refuses raises
    :class:`~nostr_buzz.errors.RelayError` (the client could not connect to it either)."""
    text = host.lower()
    if not text.isascii():
        try:
            text = text.encode("idna").decode("ascii").lower()
        except UnicodeError:
            shown = describe_input(host, limit=100)
            raise RelayError(f"relay host cannot be encoded: {shown}") from None
    return text.rstrip(".")


def ip_literal(host: str) -> IpAddress | None:
    """The address a resolved host (:func:`resolver_host`) names without a lookup: an IPv6
    literal (a zone after ``%`` kept), or an IPv4 one in any of ``inet_aton``'s forms."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    parts = host.split(".")
    if len(parts) > 4 or not all(_INET_PART.fullmatch(part) for part in parts):
        return None
    values = [int(p[2:], 16) if p[:2] == "0x" else int(p, 8 if p[0] == "0" else 10) for p in parts]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = 0
    for value in head:
        number = number << 8 | value
    return ipaddress.IPv4Address(number << 8 * (4 - len(head)) | last)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches: IPv4-mapped, IPv4-compatible,
    NAT64 (``64:ff9b::/96``) or 6to4; None for any other."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_local_ip(address: IpAddress) -> bool:
    """True for an address of :data:`LOCAL_NETWORKS`, or an IPv6 one that carries such an
    IPv4 address (:func:`embedded_ipv4`)."""
    if isinstance(address, ipaddress.IPv6Address):
        address = ipaddress.IPv6Address(int(address))  # the zone does not change the network
        inner = embedded_ipv4(address)
        if inner is not None and is_local_ip(inner):
            return True
    return any(address.version == n.version and address in n for n in LOCAL_NETWORKS)


def is_local_name(host: str) -> bool:
    """True for ``localhost`` and the names under it (``host`` as :func:`resolver_host`
    gives it): the resolver answers them with a loopback address."""
    return host == "localhost" or host.endswith(".localhost")


def is_local_host(host: str) -> bool:
    """True when ``host`` (a URL's host as written) names this host or its networks once read
    as the resolver reads it, or cannot be read at all (see the module docstring)."""
    try:
        name = resolver_host(host)
    except RelayError:
        return True
    if is_local_name(name):
        return True
    address = ip_literal(name)
    return address is not None and is_local_ip(address)


def is_local_url(url: str) -> bool:
    """:func:`is_local_host` of a relay URL's host; a URL without a readable host is local."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        return True
    return host is None or is_local_host(host)
