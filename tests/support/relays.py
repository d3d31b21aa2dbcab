"""Real relays for tests: nostr-sdk's LocalRelay on 127.0.0.1.

Import from test modules as ``from relays import local_relay, start_relay`` (pytest puts the
tests folder on ``sys.path``).  Facts this module respects (docs/cli.md): ``run()`` needs a running
loop; a Python write policy and the LMDB store need ``uniffi_set_event_loop(loop)``, which is
set on every start because pytest-asyncio gives each test its own loop; the default rate limit
of 60 events per minute is raised so that tests can publish in bulk.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import socket
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal

import nostr_sdk
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

AuthMode = Literal["read", "write", "both"]

_MODES = {
    "read": nostr_sdk.LocalRelayBuilderNip42Mode.READ,
    "write": nostr_sdk.LocalRelayBuilderNip42Mode.WRITE,
    "both": nostr_sdk.LocalRelayBuilderNip42Mode.BOTH,
}


#: Ports free_port hands out: below Linux's ephemeral range (32768-60999), so that no socket
#: bound to port 0 and no outgoing connection takes one between free_port and its use.
_PORTS = range(20_000, 32_768)


def _own_ports() -> range:
    """This process's share of ``_PORTS``: each pytest-xdist worker (``PYTEST_XDIST_WORKER`` =
    ``gw<i>``) gets a slice of its own, so that a port one worker found free, or keeps as one
    where nothing listens, is never handed to another worker's relay."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count < 2:
        return _PORTS
    size = len(_PORTS) // count
    start = _PORTS.start + int(worker[2:]) * size
    return range(start, start + size)


_own = _own_ports()
_next = itertools.count(random.randrange(len(_own)))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago: the next one of this process's
    share (from a random start, never one it handed out recently) that binds."""
    for _ in range(len(_own)):
        port = _own[next(_next) % len(_own)]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise OSError(f"no free port in {_own}")


class AuthorWritePolicy(nostr_sdk.WritePolicy):  # type: ignore[misc]
    """Write policy that stores only events signed by the listed pubkeys (hex)."""

    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed

    async def admit_event(self, event: Any, socket_addr: str) -> Any:
        if event.author().to_hex() in self.allowed:
            return nostr_sdk.WritePolicyResult.ACCEPT()
        return nostr_sdk.WritePolicyResult.REJECT("this key may not write here")


@dataclass
class RunningRelay:
    """A started LocalRelay; ``url`` is its ``ws://127.0.0.1:PORT`` address."""

    relay: Any
    url: str
    port: int
    database: Any = None
    stopped: bool = False

    def stop(self) -> None:
        """Ask the relay to shut down.  LocalRelay's shutdown is asynchronous: its listener
        may accept for a moment after this returns; :meth:`close` waits until it is gone."""
        if not self.stopped:
            self.stopped = True
            self.relay.shutdown()

    async def close(self) -> None:
        """Stop the relay and return once its port refuses connections, so that a relay meant
        to be gone does not answer one more time.  A shutdown asked while the relay is busy
        accepting can be missed: it is asked again until the port is let go."""
        self.stop()
        if _holders.get(self.port) is not self:
            return  # a relay started since holds the port: this one's listener let it go
        deadline = time.monotonic() + 5.0
        while _accepts(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the relay on port {self.port} still accepts after shutdown")
            await asyncio.sleep(0.01)
            self.relay.shutdown()


#: The relay started last on each port (a restart takes its predecessor's); weak, so that a
#: relay the tests let go of is not kept alive here.
_holders: weakref.WeakValueDictionary[int, RunningRelay] = weakref.WeakValueDictionary()


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def start_relay(
    *,
    port: int | None = None,
    auth: AuthMode | None = None,
    db_path: Path | str | None = None,
    database: Any = None,
    notes_per_minute: int = 100_000,
    max_reqs: int = 1_000,
    allowed_authors: set[str] | None = None,
    configure: Callable[[Any], Any] | None = None,
) -> RunningRelay:
    """Start a LocalRelay on 127.0.0.1 (a free port unless ``port`` is given).

    ``db_path``: an LMDB store, so that events survive a stop/start on the same port.
    ``database``: an already open store (``RunningRelay.database`` of a stopped relay): restart
    with it rather than opening the same LMDB path twice in one process, which LMDB forbids.
    ``auth``: NIP-42 mode.  ``allowed_authors``: a write policy admitting only these pubkeys.
    ``configure``: a last hook that receives and returns the builder.
    """
    loop = asyncio.get_running_loop()
    nostr_sdk.uniffi_set_event_loop(loop)
    port = port if port is not None else free_port()
    builder = (
        nostr_sdk.LocalRelayBuilder()
        .addr("127.0.0.1")
        .port(port)
        .rate_limit(nostr_sdk.RateLimit(max_reqs=max_reqs, notes_per_minute=notes_per_minute))
    )
    if database is None and db_path is not None:
        database = await nostr_sdk.NostrLmdb.open(str(db_path))
    if database is not None:
        builder = builder.database(database)
    if auth is not None:
        builder = builder.nip42(nostr_sdk.LocalRelayBuilderNip42(mode=_MODES[auth]))
    if allowed_authors is not None:
        builder = builder.write_policy(AuthorWritePolicy(allowed_authors))
    if configure is not None:
        builder = configure(builder)
    relay = builder.build()
    # A restart on the same port can race the old listener's release: retry a bind that the
    # kernel still reports in use, for a bounded time.
    deadline = loop.time() + 5.0
    while True:
        try:
            await relay.run()
            break
        except Exception as exc:
            if "in use" not in str(exc) or loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)
    running = RunningRelay(relay=relay, url=f"ws://127.0.0.1:{port}", port=port, database=database)
    _holders[port] = running
    return running


async def restart_relay(relay: RunningRelay, timeout: float = 15.0) -> RunningRelay:
    """``relay`` stopped and started again on the same port (with the same store), once the
    old socket has let the port go: a bounded wait, retried every 50 ms."""
    await relay.close()
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await start_relay(port=relay.port, database=relay.database)
        except Exception:  # nostr-sdk: "Address already in use" until the port is free
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


@asynccontextmanager
async def local_relay(**kwargs: Any) -> AsyncIterator[RunningRelay]:
    """``async with local_relay() as r: ... r.url ...`` — stopped on exit."""
    running = await start_relay(**kwargs)
    try:
        yield running
    finally:
        await running.close()


@asynccontextmanager
async def announcing_relay(upstream: str, key: str) -> AsyncIterator[str]:
    """A relay front that announces ``key`` in its NIP-11 document and forwards WebSocket
    traffic to the real relay at ``upstream``."""
    async with fronted_relay(upstream, {"pubkey": key}) as url:
        yield url


@asynccontextmanager
async def fronted_relay(
    upstream: str, document: dict[str, Any], max_size: int | None = None
) -> AsyncIterator[str]:
    """A relay front that serves ``document`` as its NIP-11 information and forwards WebSocket
    traffic to the real relay at ``upstream``; a client frame over ``max_size`` bytes closes
    the connection (1009, as a relay with that ``max_message_length`` does)."""

    def nip11(connection: ServerConnection, request: Request) -> Response | None:
        if "application/nostr+json" not in request.headers.get("Accept", ""):
            return None
        response = connection.respond(HTTPStatus.OK, json.dumps(document))
        response.headers["Content-Type"] = "application/nostr+json"
        return response

    async with serve(
        _forwarder(upstream), "127.0.0.1", 0, process_request=nip11, max_size=max_size or 2**20
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


def _forwarder(upstream: str, accepted: Callable[[], None] | None = None) -> Any:
    """A WebSocket handler that forwards each connection to the relay at ``upstream`` (telling
    ``accepted`` first)."""

    async def forward(client: ServerConnection) -> None:
        if accepted is not None:
            accepted()
        async with connect(upstream) as relay:

            async def pump(source: Any, sink: Any) -> None:
                async for frame in source:
                    await sink.send(frame)

            tasks = [
                asyncio.create_task(pump(client, relay)),
                asyncio.create_task(pump(relay, client)),
            ]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    return forward


@dataclass
class CountingProxy:
    """A front for a relay that counts the WebSocket connections it accepted."""

    url: str = ""
    accepted: int = 0

    def count(self) -> None:
        self.accepted += 1


@asynccontextmanager
async def counting_proxy(upstream: str) -> AsyncIterator[CountingProxy]:
    """``async with counting_proxy(relay.url) as proxy: ... proxy.url, proxy.accepted ...``"""
    proxy = CountingProxy()
    async with serve(_forwarder(upstream, proxy.count), "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        proxy.url = f"ws://127.0.0.1:{port}"
        yield proxy
        server.close(close_connections=True)
