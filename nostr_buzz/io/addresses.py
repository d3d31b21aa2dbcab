"""Where a connection to a relay goes: its host resolved once, each address checked, and the
connection made to a checked address (docs/bot.md, "Addresses, not spellings").

A relay someone else named (in a relay list, a hint) may not be on this host or its networks.
Its host's spelling is read as the client resolves it (:mod:`nostr_buzz.nips.relay_address`);
a name is then resolved here, every address it resolves to is checked, and the caller connects
to one of these addresses itself, keeping the name for TLS (SNI, certificate) and the HTTP
``Host``: a second lookup, which a DNS rebinding could answer with ``127.0.0.1``, never happens.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nostr_buzz.errors import LocalAddressError, describe_input
from nostr_buzz.nips.relay_address import ip_literal, is_local_ip, is_local_name, resolver_host

__all__ = ["first_to_connect", "resolve"]

T = TypeVar("T")


async def resolve(host: str, port: int, *, allow_local: bool) -> list[str]:
    """The addresses of ``host`` (a URL's host as written) to connect to, in the resolver's
    order: an IP literal as the resolver reads it, else the name's addresses.  Unless
    ``allow_local``, a local name or any local address raises
    :class:`~nostr_buzz.errors.LocalAddressError` (one local address among public ones is
    enough: the resolver decides which one a connection would use).  A host that cannot be
    encoded raises :class:`~nostr_buzz.errors.RelayError`; a failed lookup, ``OSError``."""
    name = resolver_host(host)
    shown = describe_input(host, limit=100)
    if not allow_local and is_local_name(name):
        raise LocalAddressError(f"{shown} is a local name")
    literal = ip_literal(name)
    if literal is not None:
        addresses = [str(literal)]
    else:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not allow_local:
        for address in addresses:
            if is_local_ip(ipaddress.ip_address(address)):
                raise LocalAddressError(f"{shown} resolves to a local address ({address})")
    return addresses


async def first_to_connect(addresses: list[str], connect: Callable[[str], Awaitable[T]]) -> T:
    """``connect(address)`` for each of ``addresses`` in order, until one connects; when none
    does, the last failure (``OSError``: refused, unreachable) is raised."""
    failure: OSError = OSError("no address to connect to")
    for address in addresses:
        try:
            return await connect(address)
        except OSError as exc:
            failure = exc
    raise failure
