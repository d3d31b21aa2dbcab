"""A scriptable misbehaving relay for conformance tests (docs/cli.md: "never trust a relay").

Unlike :mod:`hostile_relay`, whose behaviours are named presets, each test here writes its own
script: ``async def script(relay, conn, msg)`` is called for every frame the client sends
(already JSON-decoded), and ``on_connect(relay, conn)`` right after the handshake.  The relay
records every frame it received (``relay.received``), so tests can check what the client asked
for (the filters of a REQ, whether an AUTH was ever sent).

``async with scripted_relay(script) as relay: ... relay.url ...``
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tests.support.hostile_relay import nip11_responder


class Conn:
    """One client connection, as the script sees it."""

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws

    async def send(self, frame: Any) -> None:
        """Send a text frame: a ``str`` as is, anything else JSON-encoded."""
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def cut_mid_frame(self) -> None:
        """Start a 256-byte text frame, write 8 bytes of it, and drop the TCP connection."""
        self.ws.transport.write(b"\x81\x7e\x01\x00" + b'["EVENT"')
        self.ws.transport.abort()


Script = Callable[["ScriptedRelay", Conn, list[Any]], Awaitable[None]]
OnConnect = Callable[["ScriptedRelay", Conn], Awaitable[None]]


class ScriptedRelay:
    def __init__(self, script: Script, on_connect: OnConnect | None) -> None:
        self.script = script
        self.on_connect = on_connect
        self.url = ""
        self.received: list[Any] = []
        self.connections = 0

    def frames(self, kind: str) -> list[list[Any]]:
        """The frames of one type (``REQ``, ``AUTH``, ``EVENT``, ``CLOSE``) received so far."""
        return [m for m in self.received if isinstance(m, list) and m and m[0] == kind]

    async def handler(self, ws: ServerConnection) -> None:
        self.connections += 1
        conn = Conn(ws)
        try:
            if self.on_connect is not None:
                await self.on_connect(self, conn)
            async for raw in ws:
                msg = json.loads(raw)
                if len(self.received) < 1000:
                    self.received.append(msg)
                await self.script(self, conn, msg)
        except ConnectionClosed:
            pass


async def _ignore(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
    return None


def serving(events: list[Any]) -> Script:
    """A script that answers every REQ with all of ``events`` (dicts, sent as they are), then
    EOSE: an honest relay with those stored, or a hostile one when they are forged or many."""

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            for event in events:
                await conn.send(["EVENT", msg[1], event])
            await conn.send(["EOSE", msg[1]])

    return script


@asynccontextmanager
async def scripted_relay(
    script: Script = _ignore,
    on_connect: OnConnect | None = None,
    *,
    document: dict[str, Any] | None = None,
) -> AsyncIterator[ScriptedRelay]:
    """The relay; ``document``: the NIP-11 information document it serves over HTTP."""
    relay = ScriptedRelay(script, on_connect)
    async with serve(
        relay.handler,
        "127.0.0.1",
        0,
        max_size=None,
        compression=None,
        process_request=nip11_responder(document),
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        relay.url = f"ws://127.0.0.1:{port}"
        yield relay
        server.close(close_connections=True)
