"""A relay's NIP-11 key, from small HTTP servers on 127.0.0.1 (and a real LocalRelay)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from nostr_buzz.io.relay_info import MAX_DOCUMENT, relay_pubkey, relay_pubkeys
from nostr_buzz.keys import SecretKey
from tests.support.relays import free_port, local_relay

RELAY_KEY = SecretKey.from_str("5e" * 32).public_key.hex


def document(body: bytes, *, status: str = "200 OK", chunked: bool = False) -> bytes:
    if chunked:
        half = len(body) // 2
        chunks = b"".join(
            f"{len(part):x}\r\n".encode() + part + b"\r\n" for part in (body[:half], body[half:])
        )
        return (
            (
                f"HTTP/1.1 {status}\r\nTransfer-Encoding: chunked\r\n"
                "Content-Type: application/nostr+json\r\n\r\n"
            ).encode()
            + chunks
            + b"0\r\n\r\n"
        )
    return (
        f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n"
        "Content-Type: application/nostr+json\r\n\r\n"
    ).encode() + body


@asynccontextmanager
async def http_server(response: bytes | None) -> AsyncIterator[tuple[str, list[bytes]]]:
    """Answers every request with ``response`` (None: reads and never answers)."""
    requests: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readuntil(b"\r\n\r\n"))
        if response is None:
            await reader.read()
        else:
            writer.write(response)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"ws://127.0.0.1:{port}/", requests
    finally:
        server.close()


async def test_announced_key_is_read_with_the_nip11_accept_header() -> None:
    body = json.dumps({"name": "groups", "pubkey": RELAY_KEY.upper()}).encode()
    async with http_server(document(body)) as (url, requests):
        assert await relay_pubkey(url) == RELAY_KEY
    assert b"Accept: application/nostr+json" in requests[0]
    assert requests[0].startswith(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:")


async def test_chunked_document() -> None:
    body = json.dumps({"pubkey": RELAY_KEY}).encode()
    async with http_server(document(body, chunked=True)) as (url, _):
        assert await relay_pubkey(url) == RELAY_KEY


@pytest.mark.parametrize(
    "response",
    [
        document(b'{"name": "no key"}'),
        document(b'{"pubkey": "npub1notallowedhere"}'),
        document(json.dumps({"pubkey": "00" * 32}).encode()),  # not a point on the curve
        document(b"<html>not json</html>"),
        document(json.dumps({"pubkey": RELAY_KEY}).encode(), status="404 Not Found"),
        document(json.dumps({"pubkey": RELAY_KEY, "pad": "x" * MAX_DOCUMENT}).encode()),
        b"garbage",
    ],
    ids=["no-key", "npub", "off-curve", "html", "404", "oversized", "garbage"],
)
async def test_anything_else_means_no_key(response: bytes) -> None:
    async with http_server(response) as (url, _):
        assert await relay_pubkey(url) is None


async def test_silent_and_dead_relays_are_bounded() -> None:
    body = json.dumps({"pubkey": RELAY_KEY}).encode()
    async with http_server(None) as (silent, _), http_server(document(body)) as (announcing, _):
        dead = f"ws://127.0.0.1:{free_port()}"
        asked = relay_pubkeys([silent, announcing, dead], timeout=0.5)
        keys = await asyncio.wait_for(asked, 10)
    assert keys == {announcing: RELAY_KEY}  # each key stays with the relay that announced it


async def test_a_relay_without_a_document_has_no_key() -> None:
    async with local_relay() as relay:
        assert await relay_pubkey(relay.url, timeout=2) is None
