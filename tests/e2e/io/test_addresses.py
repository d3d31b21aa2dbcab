"""Where a connection to a relay goes (io/addresses.py): a name is checked on the addresses it
resolves to, and the connection is made to the address checked, the name kept for TLS.

Real listeners and relays on this host; the machine's own host name is a name that resolves
to one of its local addresses.  The one stand-in is the resolver where a name must resolve to
an address no DNS here would give (a rebinding name, a name the certificate does not cover).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.errors import LocalAddressError
from nostr_buzz.io.addresses import resolve
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.io.relay_info import relay_limits
from tests.support.listeners import counting_listener
from tests.support.relays import fronted_relay, local_relay
from tests.support.scripted_relay import scripted_relay, serving
from tests.support.wan import wan


def own_name() -> tuple[str, str]:
    """This machine's host name and the (local) IPv4 address it resolves to."""
    name = socket.gethostname()
    address = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    assert ipaddress.ip_address(address).is_private, (name, address)
    return name, str(address)


def answering(names: dict[str, str]) -> Callable[..., Any]:
    """A resolver that answers each of ``names`` once with its address (a second lookup
    fails, as a rebinding name would answer it otherwise) and leaves the rest to the real
    one; the lookups it answered are counted in ``.asked``."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    asked: list[str] = []

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in names:
            return await real(host, port, *args, **kwargs)
        asked.append(name)
        if asked.count(name) > 1:
            raise socket.gaierror(socket.EAI_NONAME, "asked twice")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (names[name], port))]

    getaddrinfo.asked = asked  # type: ignore[attr-defined]
    return getaddrinfo


async def test_a_name_resolving_to_a_local_address_is_refused_unless_allowed() -> None:
    name, address = own_name()
    with pytest.raises(LocalAddressError, match="resolves to a local address"):
        await resolve(name, 80, allow_local=False)
    assert await resolve(name, 80, allow_local=True) == [address]
    # A literal is read as the resolver reads it, without a lookup.
    assert await resolve("０ｘ７ｆ．１", 80, allow_local=True) == ["127.0.0.1"]
    with pytest.raises(LocalAddressError, match="is a local name"):
        await resolve("ⓛⓞⓒⓐⓛⓗⓞⓢⓣ", 80, allow_local=False)


async def test_a_relay_someone_else_named_is_not_dialled_at_a_local_address() -> None:
    name, address = own_name()
    async with counting_listener(address) as listener:
        url = f"ws://{name}:{listener.port}"
        refused = RelayClient(url, timeout=3.0, allow_local=False)
        problem = await refused.connect()
        await refused.close()
        assert problem is not None and "resolves to a local address" in problem
        assert listener.connections == 0
        # The same relay when it may be local (a configured one): dialled.
        allowed = RelayClient(url, timeout=3.0)
        await allowed.connect()
        await allowed.close()
        assert listener.connections == 1
        # Its NIP-11 document is not fetched from there either.
        await relay_limits(url, timeout=3.0, allow_local=False)
        assert listener.connections == 1


async def test_a_guarded_pool_skips_a_hint_spelt_local_and_refuses_one_resolving_local() -> None:
    name, address = own_name()
    async with (
        scripted_relay(serving([])) as mine,
        counting_listener() as spelt,
        counting_listener(address) as resolved,
    ):
        pool = RelayPool([mine.url], timeout=3.0, guard_local=True)
        hints = [f"ws://１２７.０.０.１:{spelt.port}", f"ws://{name}:{resolved.port}"]
        result = await pool.query({"kinds": [1]}, extra_urls=hints)
        assert set(result.per_relay) == {mine.url, hints[1]}
        assert "resolves to a local address" in (result.per_relay[hints[1]].error or "")
        assert spelt.connections == resolved.connections == 0
        # Trusted (a bot's local_relays), the same relay is asked.
        pool.trust_local([hints[1]])
        await pool.query({"kinds": [1]}, extra_urls=hints[1:])
        assert resolved.connections == 1


async def test_the_connection_goes_to_the_address_checked_never_a_second_lookup() -> None:
    loop = asyncio.get_running_loop()
    resolver = answering({"rebinding.invalid": "127.0.0.1"})
    async with local_relay() as relay:
        port = relay.url.rsplit(":", 1)[1]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(loop, "getaddrinfo", resolver)
            client = RelayClient(f"ws://rebinding.invalid:{port}", timeout=3.0)
            result = await client.query({"kinds": [1]})
            await client.close()
    assert result.error is None and result.finished
    assert resolver.asked == ["rebinding.invalid"]  # type: ignore[attr-defined]


async def test_tls_verifies_the_name_while_the_connection_goes_to_the_address(
    tmp_path: Path,
) -> None:
    loop = asyncio.get_running_loop()
    async with local_relay() as relay, wan(tmp_path, delay=0.0) as net:
        site = await net.relay(relay.url)
        port = site.wss.rsplit(":", 1)[1]
        # The certificate names localhost: dialled at 127.0.0.1, verified as localhost.
        client = RelayClient(f"wss://localhost:{port}", timeout=5.0)
        assert (await client.query({"kinds": [1]})).error is None
        await client.close()
        # A name it does not cover, resolving to the same address: refused by TLS.
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(loop, "getaddrinfo", answering({"other.invalid": "127.0.0.1"}))
            other = RelayClient(f"wss://other.invalid:{port}", timeout=5.0)
            problem = await other.connect()
            await other.close()
        assert problem is not None and "certificate" in problem.lower()


async def test_a_nip11_document_is_read_from_the_checked_address() -> None:
    document = {"limitation": {"max_message_length": 4096}}
    async with local_relay() as relay, fronted_relay(relay.url, document) as front:
        url = front.replace("127.0.0.1", "localhost")
        assert (await relay_limits(url, timeout=3.0)).max_message_length == 4096
        # The same relay named by someone else: its document is not asked for.
        assert (await relay_limits(url, timeout=3.0, allow_local=False)).max_message_length is None
