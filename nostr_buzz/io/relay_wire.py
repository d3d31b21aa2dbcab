"""One relay's WebSocket, one connection at a time: the connection lifecycle of
:class:`~nostr_buzz.io.relay.RelayClient`.

:class:`RelayConnection` owns the socket and its reader task: it dials (the host resolved once
and checked, io/addresses.py), hands every frame it reads to its owner, sends one frame within
a deadline, and hangs up, telling its owner why the connection ended.  What the frames mean is
the inbox's business (io/relay_inbox.py).  Network failures come back as short reasons
(:func:`describe`), never as exceptions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any, Final
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.proxy import get_proxy
from websockets.uri import parse_uri

from .addresses import first_to_connect, resolve

#: Largest frame accepted from a relay; LocalRelay refuses events over 64 KiB, so 1 MiB is ample.
MAX_FRAME_BYTES: Final = 1 << 20
#: Bound on a graceful WebSocket close before the transport is dropped.
CLOSE_TIMEOUT: Final = 0.5

#: What opening a connection may raise (a local address refused: ``LocalAddressError``).
DIAL_ERRORS: Final = (OSError, TimeoutError, ValueError, websockets.exceptions.WebSocketException)


def now() -> float:
    """The event loop's clock, which every deadline of the relay client is on."""
    return asyncio.get_running_loop().time()


class RelayConnection:
    """The WebSocket to one relay, opened on demand and dropped on failure or close.

    ``on_open()`` is told before the reader of a new connection starts (connections are
    counted, per-connection state such as a NIP-42 challenge starts afresh);
    ``on_frame(frame)`` gets every frame read and returns ``None``, or why the relay must be
    cut off (the transport is then aborted); ``on_lost(reason)`` is told whenever a connection
    ends, however it ends.
    ``unresponsive``: a request on this connection went unanswered, so it gets no polite close.
    """

    def __init__(
        self,
        url: str,
        *,
        max_frame_bytes: int,
        allow_local: bool,
        on_open: Callable[[], None],
        on_frame: Callable[[str | bytes], str | None],
        on_lost: Callable[[str], None],
    ) -> None:
        self.url = url
        self._dial = partial(dial, url, max_frame_bytes=max_frame_bytes, allow_local=allow_local)
        self._on_open = on_open
        self._on_frame = on_frame
        self._on_lost = on_lost
        self.unresponsive = False
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._ws is not None

    async def open(self, deadline: float) -> str | None:
        """Connect unless connected, before ``deadline``; ``None``, or why it failed."""
        async with self._lock:
            if self._ws is not None:
                return None
            remaining = deadline - now()
            if remaining <= 0:
                return "timeout"
            try:
                ws = await self._dial(remaining)
            except DIAL_ERRORS as exc:
                return describe(exc)
            self._ws = ws
            self.unresponsive = False
            self._on_open()
            self._reader = asyncio.create_task(self._read(ws), name=f"relay-reader {self.url}")
            return None

    async def send(self, text: str, remaining: float) -> str | None:
        """Send one frame within ``remaining`` seconds; why it failed, or ``None``."""
        return await send_frame(self._ws, text, remaining)

    async def drop(self, reason: str) -> None:
        """Hang up (politely unless ``unresponsive``) and stop the reader; ``on_lost(reason)``."""
        ws, reader = self._ws, self._reader
        self._ws = None
        self._reader = None
        if ws is not None:
            # A relay that already let a request time out gets no polite close handshake:
            # waiting for its answer would push the caller past its timeout.
            await hang_up(ws, polite=not self.unresponsive)
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        self._on_lost(reason)

    async def _read(self, ws: ClientConnection) -> None:
        reason = "connection dropped"
        try:
            async for frame in ws:
                if (cut_off := self._on_frame(frame)) is not None:
                    reason = cut_off  # a kept connection would read it for ever
                    ws.transport.abort()
                    return
        except websockets.exceptions.ConnectionClosed as exc:
            reason = describe(exc)
        except (OSError, websockets.exceptions.WebSocketException) as exc:
            reason = describe(exc)
        else:
            reason = describe_close(ws)
        finally:
            if self._ws is ws:
                self._ws = None
            self._on_lost(reason)


def describe(exc: BaseException) -> str:
    """A short human reason for a connection failure."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, websockets.exceptions.InvalidStatus):
        return f"HTTP status {exc.response.status_code}"
    if isinstance(exc, websockets.exceptions.ConnectionClosed):
        rcvd, sent = exc.rcvd, exc.sent
        if (rcvd is not None and rcvd.code == 1009) or (sent is not None and sent.code == 1009):
            return "frame too large"
        return "closed by relay" if rcvd is not None else "connection dropped"
    text = str(exc) or type(exc).__name__
    return text[:200]


def describe_close(ws: ClientConnection) -> str:
    """Why a connection whose frames ran out ended."""
    try:
        return describe(ws.close_exc)
    except Exception:  # close_exc is only defined once the connection is closed
        return "connection dropped"


async def dial(
    url: str, timeout: float, max_frame_bytes: int, *, allow_local: bool = True
) -> ClientConnection:
    """Open the WebSocket within ``timeout``: frames bounded, a short incoming queue, pings on.

    The host is resolved here, once (io/addresses.py: unless ``allow_local``, a local name or
    address raises :class:`~nostr_buzz.errors.LocalAddressError`), and the connection goes to
    one of the addresses checked, in order; the URL's name stays the TLS server name and the
    ``Host``.  Through a proxy of the environment, the proxy connects by name."""
    ws_uri = parse_uri(url)
    async with asyncio.timeout(timeout):
        addresses = await resolve(
            urlsplit(url).hostname or "", ws_uri.port, allow_local=allow_local
        )
        options: dict[str, Any] = {
            "open_timeout": timeout,
            "max_size": max_frame_bytes,
            "max_queue": 16,
            "close_timeout": CLOSE_TIMEOUT,
            "ping_interval": 20,
            "ping_timeout": 20,
            "compression": None,
        }
        if get_proxy(ws_uri) is not None:
            return await connect(url, **options)
        return await first_to_connect(
            addresses, lambda address: connect(url, host=address, port=ws_uri.port, **options)
        )


async def send_frame(ws: ClientConnection | None, text: str, remaining: float) -> str | None:
    """Send one frame on ``ws`` within ``remaining`` seconds; why it failed, or ``None``."""
    if ws is None:
        return "not connected"
    try:
        async with asyncio.timeout(max(0.0, remaining)):
            await ws.send(text)
    except (TimeoutError, websockets.exceptions.WebSocketException, OSError) as exc:
        return describe(exc)
    return None


async def hang_up(ws: ClientConnection, *, polite: bool) -> None:
    """Close ``ws`` (with the close handshake when ``polite``) and abort its transport."""
    keepalive = ws.keepalive_task  # websockets cancels it on close but never awaits it
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT * 2 if polite else 0):
            await ws.close()
    except (TimeoutError, OSError, websockets.exceptions.WebSocketException):
        pass
    finally:
        ws.transport.abort()
    if keepalive is not None:
        keepalive.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await keepalive
