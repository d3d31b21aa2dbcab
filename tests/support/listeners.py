"""A TCP listener that counts the connections it accepts: the outside view of whether a process
reached an address (a relay list's entry, a hint), whatever the process says about it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass


@dataclass
class Listener:
    host: str
    port: int
    connections: int = 0


@asynccontextmanager
async def counting_listener(host: str = "127.0.0.1") -> AsyncIterator[Listener]:
    """A listener on ``host`` (a free port) that counts each connection and closes it."""
    listener = Listener(host, 0)

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        listener.connections += 1
        writer.transport.abort()

    server = await asyncio.start_server(accept, host, 0)
    listener.port = server.sockets[0].getsockname()[1]
    try:
        yield listener
    finally:
        server.close()
        await server.wait_closed()
