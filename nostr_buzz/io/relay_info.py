"""A relay's own public key and its limits, from its NIP-11 information document.

Relays that manage groups (NIP-29) sign channel documents with their own key and announce it as
``pubkey`` in the information document served over HTTP(S) at the relay's URL (``Accept:
application/nostr+json``).  The fetch is one bounded GET: at most ``MAX_DOCUMENT`` bytes, within
``timeout`` seconds; anything unexpected (no document, not JSON, no valid key) means "no key".
The key says nothing about anyone else's events: it counts only for the channel metadata
(kind 39000) that same relay served itself (``nips/nip29.py``), never for canvases, huddle
guidelines or core memory, and never for what another relay served.  A ``ws://`` relay's
document travels over plain HTTP, which is no weaker than the relay's own unencrypted events.

The document's ``limitation`` object is read by :func:`relay_limits`: ``max_message_length``
(the longest frame the relay takes: a longer reply is split into parts that fit, docs/bot.md),
``max_content_length``, ``max_subscriptions`` and ``auth_required`` (recorded for the pool).
Values that are not positive integers (or booleans) are ignored.  A relay whose limits leave a
reply's part less room than the part floor (``bot/outputs.py`` ``PART_FLOOR``) is skipped for
that reply rather than sent a flood of tiny parts (:meth:`RelayLimits.room`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterable
from typing import Final
from urllib.parse import urlsplit

import msgspec

from nostr_buzz.errors import InvalidKey
from nostr_buzz.keys import PublicKey

from .addresses import first_to_connect, resolve

__all__ = ["MAX_DOCUMENT", "RelayLimits", "relay_limits", "relay_pubkey", "relay_pubkeys"]

#: The whole response (headers and body) a relay may send; information documents are small.
MAX_DOCUMENT: Final = 64 * 1024


def _request(url: str) -> tuple[str, int, bool, bytes]:
    parts = urlsplit(url)
    secure = parts.scheme == "wss"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    authority = host if parts.port is None else f"{host}:{parts.port}"
    if ":" in host:  # IPv6 literal
        authority = f"[{host}]" if parts.port is None else f"[{host}]:{parts.port}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    head = (
        f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/nostr+json\r\n"
        "User-Agent: nostr-buzz\r\nConnection: close\r\n\r\n"
    )
    return host, port, secure, head.encode("ascii")


def _body(response: bytes) -> bytes | None:
    head, sep, body = response.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.split(b"\r\n")
    status = lines[0].split()
    if len(status) < 2 or status[1] != b"200":
        return None
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])
    }
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        decoded = bytearray()
        while body:
            size_line, _, rest = body.partition(b"\r\n")
            try:
                size = int(size_line.split(b";")[0], 16)
            except ValueError:
                return None
            if size == 0:
                break
            decoded += rest[:size]
            body = rest[size + 2 :]
        return bytes(decoded)
    return body


class RelayLimits(msgspec.Struct, frozen=True):
    """What a relay's NIP-11 ``limitation`` announces (None: not announced)."""

    max_message_length: int | None = None
    max_content_length: int | None = None
    max_subscriptions: int | None = None
    auth_required: bool = False

    def room(self, empty_frame: int) -> int | None:
        """Content bytes one event can carry here: at most ``max_content_length``, and what
        ``max_message_length`` leaves beside the event's ``["EVENT", …]`` frame with no
        content (``empty_frame`` bytes); None when neither is announced."""
        rooms = [self.max_content_length]
        if self.max_message_length is not None:
            rooms.append(self.max_message_length - empty_frame)
        announced = [room for room in rooms if room is not None]
        return min(announced) if announced else None


def limits_of(document: object) -> RelayLimits:
    """The :class:`RelayLimits` of a decoded NIP-11 document (anything else: no limits)."""
    limitation = document.get("limitation") if isinstance(document, dict) else None
    if not isinstance(limitation, dict):
        return RelayLimits()

    def positive(name: str) -> int | None:
        value = limitation.get(name)
        return value if type(value) is int and value > 0 else None

    return RelayLimits(
        max_message_length=positive("max_message_length"),
        max_content_length=positive("max_content_length"),
        max_subscriptions=positive("max_subscriptions"),
        auth_required=limitation.get("auth_required") is True,
    )


async def relay_limits(url: str, *, timeout: float = 3.0, allow_local: bool = True) -> RelayLimits:
    """The limits the relay at ``url`` announces; none when it serves no document (nor when,
    without ``allow_local``, it is on this host or its networks: io/addresses.py)."""
    return limits_of(await _document(url, timeout, allow_local=allow_local))


async def relay_pubkey(url: str, *, timeout: float = 3.0) -> str | None:
    """The hex public key the relay at ``url`` (ws:// or wss://) announces, or None."""
    document = await _document(url, timeout)
    key = document.get("pubkey") if isinstance(document, dict) else None
    if not isinstance(key, str) or len(key) != 64:
        return None
    try:
        return PublicKey.from_str(key).hex
    except InvalidKey:
        return None


async def _document(url: str, timeout: float, *, allow_local: bool = True) -> object:
    """The relay's decoded NIP-11 document, or None (one bounded GET, see the docstring), from
    the first address of the host that answers (io/addresses.py: checked, unless
    ``allow_local``; the name stays the TLS server name and the ``Host``)."""
    try:
        host, port, secure, request = _request(url)
    except ValueError:
        return None
    if not host:
        return None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await _open(host, port, secure, allow_local)
            try:
                writer.write(request)
                await writer.drain()
                response = await reader.read(MAX_DOCUMENT + 1)
                while len(response) <= MAX_DOCUMENT:
                    more = await reader.read(MAX_DOCUMENT + 1 - len(response))
                    if not more:
                        break
                    response += more
            finally:
                writer.close()
    except (OSError, TimeoutError, ValueError):  # a local address refused: a RelayError
        return None
    if len(response) > MAX_DOCUMENT:
        return None
    body = _body(response)
    try:
        return json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None


async def _open(
    host: str, port: int, secure: bool, allow_local: bool
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the first of ``host``'s checked addresses that accepts one."""

    def to(address: str) -> Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        server_hostname = host if secure else None
        return asyncio.open_connection(
            address, port, ssl=secure or None, server_hostname=server_hostname
        )

    return await first_to_connect(await resolve(host, port, allow_local=allow_local), to)


async def relay_pubkeys(urls: Iterable[str], *, timeout: float = 3.0) -> dict[str, str]:
    """Each of ``urls`` that announces a key → that key (hex), asked concurrently; a relay
    without one is absent."""
    asked = list(urls)
    found = await asyncio.gather(*(relay_pubkey(url, timeout=timeout) for url in asked))
    return {url: key for url, key in zip(asked, found, strict=True) if key is not None}
