"""Kept relay connections: one :class:`RelayClient` per relay, shared by every query, publish
and live subscription of a :class:`~nostr_buzz.io.pool.RelayPool` used as a context manager.

A connection is opened on first use (a relay outside the configured list, a hint or someone
else's relay, too, then without NIP-42), answers AUTH once (the client remembers it for the
connection's life), reconnects when used again after a drop, and is closed once nobody has used
it for ``idle_timeout`` seconds.  At most :data:`MAX_REQS_PER_CONNECTION` queries run on one
connection at a time (relays limit concurrent subscriptions, NIP-11 ``max_subscriptions``);
the rest wait their turn.  Live subscriptions hold no such slot: a bot has a few, for its life.

A relay's health is remembered: one that refused a connection or timed out is backed off
(:mod:`nostr_buzz.core.backoff`), skipped by the pool until its backoff ends, and tried again
then; an answer, or a new connection made meanwhile (a live subscription reconnecting), makes
it healthy again.  Being slower than another relay is no failure: a relay left behind by a
query's grace period (io/pool.py) is skipped the same way by the reads the grace period bounds
(they would not wait for it anyway), never by a publish (:data:`LEFT_BEHIND`), so that each
reply and metric still reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final

from nostr_buzz.core.backoff import backoff_base
from nostr_buzz.nips.relay_url import normalize_relay_url
from nostr_buzz.signer import Signer

from .relay import RelayClient

#: Queries one connection runs at once; more wait (relays commonly allow 10-20 subscriptions,
#: and the bot's live subscription takes one).
MAX_REQS_PER_CONNECTION: Final = 8
#: A connection nobody used for this long (seconds) is closed.
IDLE_TIMEOUT: Final = 60.0
#: Backoff of a failing relay: first skip (seconds) and the longest.
HEALTH_BACKOFF_BASE: Final = 1.0
HEALTH_BACKOFF_CAP: Final = 60.0
#: How a query's problem starts when the relay was only slower than the grace period allows
#: (io/pool.py): skipped by reads for a while, never by deliveries.
LEFT_BEHIND: Final = "left behind"


@dataclass
class _Health:
    failures: int = 0
    until: float = 0.0
    why: str = ""
    #: The client's connection count when it failed: a newer connection means it is back.
    connections: int = 0
    #: Only left behind by reads, never failed: publishes still go to it.
    reads_only: bool = False


@dataclass
class _Connection:
    client: RelayClient
    reqs: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(MAX_REQS_PER_CONNECTION)
    )
    users: int = 0
    last_used: float = 0.0


class RelayConnections:
    """The connection cache and health record behind a pooled :class:`RelayPool`.

    ``on_cut_off(url, why)``: passed to every client (see :class:`RelayClient`).
    ``on_backoff(url, why, seconds)``: told each time a relay starts (or goes on) backing off.
    """

    def __init__(
        self,
        *,
        signer: Signer | None,
        timeout: float,
        idle_timeout: float = IDLE_TIMEOUT,
        on_cut_off: Callable[[str, str], None] | None = None,
        on_backoff: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.signer = signer
        self.timeout = timeout
        self.idle_timeout = float(idle_timeout)
        self.on_cut_off = on_cut_off
        self.on_backoff = on_backoff
        self._conns: dict[tuple[str, bool, bool], _Connection] = {}
        self._health: dict[str, _Health] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    # -- use -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def use(
        self, url: str, *, auth: bool, allow_local: bool = True, req: bool = False
    ) -> AsyncIterator[RelayClient]:
        """The kept client for ``url`` (``auth``: answers NIP-42; ``allow_local``: may be on
        this host or its networks, see :class:`RelayClient`), for the ``async with`` body;
        ``req``: the body runs a query, which waits for one of the connection's slots."""
        if self._closed:  # a late caller (a send at shutdown): a connection of its own
            client = self._new_client(url, auth, allow_local)
            try:
                yield client
            finally:
                await client.close()
            return
        self._start_reaper()
        key = (normalize_relay_url(url), auth, allow_local)
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = _Connection(self._new_client(url, auth, allow_local))
        conn.users += 1
        try:
            if req:
                async with conn.reqs:
                    yield conn.client
            else:
                yield conn.client
        finally:
            conn.users -= 1
            conn.last_used = _now()

    def _new_client(self, url: str, auth: bool, allow_local: bool) -> RelayClient:
        signer = self.signer if auth else None
        return RelayClient(
            url,
            signer=signer,
            timeout=self.timeout,
            auth=auth,
            allow_local=allow_local,
            on_cut_off=self._cut_off,
        )

    def _cut_off(self, url: str, why: str) -> None:
        if self.on_cut_off is not None:
            self.on_cut_off(url, why)

    # -- health ----------------------------------------------------------------------------

    def backing_off(self, url: str, *, delivery: bool = False) -> str | None:
        """Why ``url`` is skipped now (it failed and its backoff has not ended), or ``None``;
        ``delivery``: for a publish, which a relay merely left behind by reads never skips."""
        key = normalize_relay_url(url)
        health = self._health.get(key)
        if health is None or health.failures == 0 or (delivery and health.reads_only):
            return None
        if self._reconnected_since(key, health):
            self._health.pop(key, None)
            return None
        left = health.until - _now()
        if left <= 0:
            return None
        return f"backing off for {left:.1f} s after: {health.why}"

    def _reconnected_since(self, key: str, health: _Health) -> bool:
        return any(
            conn.client.connections > health.connections and conn.client.connected
            for (url, *_), conn in self._conns.items()
            if url == key
        )

    def record(self, url: str, problem: str | None, *, delivery: bool = False) -> None:
        """One operation's outcome for ``url``: ``None`` (it answered) or what went wrong
        (it refused the connection or timed out; or, :data:`LEFT_BEHIND`, a query did not
        wait for it): backed off (for reads only, when it was only left behind).
        ``delivery``: the outcome of a publish, whose answer says nothing of how fast the
        relay serves reads."""
        key = normalize_relay_url(url)
        if problem is None:
            held = self._health.get(key)
            if not (delivery and held is not None and held.reads_only):
                self._health.pop(key, None)
            return
        health = self._health.setdefault(key, _Health())
        slow = problem.startswith(LEFT_BEHIND)
        if slow and not health.reads_only and health.failures and health.until > _now():
            return  # a failure's backoff is running: being slow on top changes nothing
        health.reads_only = slow
        health.failures += 1
        delay = backoff_base(health.failures, base=HEALTH_BACKOFF_BASE, cap=HEALTH_BACKOFF_CAP)
        health.until = _now() + delay
        health.why = problem
        health.connections = max(
            (c.client.connections for (u, *_), c in self._conns.items() if u == key), default=0
        )
        if self.on_backoff is not None:
            self.on_backoff(url, problem, delay)

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def open_urls(self) -> list[str]:
        """The relays with a connection open now."""
        return [c.client.url for c in self._conns.values() if c.client.connected]

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap(), name="relay-connections-reaper")

    async def _reap(self) -> None:
        """Close what nobody used for ``idle_timeout``; ends when nothing is left."""
        while self._conns:
            await asyncio.sleep(max(0.05, self.idle_timeout / 4))
            now = _now()
            idle = [
                key
                for key, conn in self._conns.items()
                if conn.users == 0 and now - conn.last_used >= self.idle_timeout
            ]
            for key in idle:
                conn = self._conns.pop(key)
                await conn.client.close()

    async def close(self) -> None:
        """Close every connection and stop the reaper; safe to call twice."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        conns = list(self._conns.values())
        self._conns.clear()
        await asyncio.gather(*(c.client.close() for c in conns), return_exceptions=True)


def _now() -> float:
    return asyncio.get_running_loop().time()
