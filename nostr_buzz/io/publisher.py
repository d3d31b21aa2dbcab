"""Publishing NIP-AM metrics without ever losing one (docs/metrics.md, "Publishing: never lose a
metric").

:class:`MetricPublisher` builds and signs the metric once, commits it to the durable
:class:`~nostr_buzz.io.outbox.Outbox` *before* the first send, then sends it to every write
relay.  The entry is removed once at least ``min_ok`` relays (over all attempts) answered
``OK true`` or ``duplicate:``; otherwise it stays, and :meth:`MetricPublisher.flush` or the
:meth:`MetricPublisher.run` loop re-sends it with backoff — also from a new process on the same
outbox file.  Re-sending is idempotent: the signed event and its id never change.  NIP-42
(``auth-required:``) is answered by the relay client with the agent's key or signer when the
publisher has one.  An entry still waiting ``give_up_after`` seconds after it was stored (7 days by
default) is removed by the next flush and reported once as given up
(``PublishReport.given_up``); it is never sent again.

A relay that refuses with ``rate-limited:`` is backed off: nothing is sent to it for
:data:`RATE_LIMIT_PAUSE` seconds (doubling with each refusal in a row, up to the outbox's backoff
cap), and an entry that only such relays could take is retried once the pause ends, not at
once (even an entry a reconnect made due sends nothing to a relay still paused).

The agent's key is a secret key (then the publisher signs and authenticates), a
:class:`~nostr_buzz.signer.Signer` (it signs, encrypts and answers NIP-42), or only the
public key (events signed elsewhere go in through
:meth:`MetricPublisher.submit`).

A metric is never lost silently: :meth:`MetricPublisher.publish` raises :class:`MetricError`
for a payload that cannot be published and otherwise returns a :class:`PublishReport`, the
receipt (stored in the outbox; delivered, and to which relays).  Network trouble never raises
and never blocks the turn past its own timeout: it is data in the receipt, passed to
``on_report`` too.

The publisher is the entry point; the parts it composes each own one concern: the attempts on
the wire (io/metric_sending.py), the outbox's record of which relays have the metric and the
receipt (io/metric_settlement.py), and the relays paused for ``rate-limited:``
(io/rate_limits.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from nostr_buzz.core.backoff import Rng
from nostr_buzz.errors import InvalidKey, MetricError, OutboxError, RelayError
from nostr_buzz.event import Event, not_an_event
from nostr_buzz.keys import PublicKey, SecretKey, as_public_key, as_secret_key
from nostr_buzz.nips.nip_am import KIND, MetricPayload, build_metric_event, build_metric_event_async
from nostr_buzz.signer import Signer

from .metric_sending import MetricSender, PoolFactory, PublishingPool
from .metric_settlement import PublishReport, Settlement
from .outbox import GIVE_UP_AFTER, Outbox
from .pool import RelayPool
from .rate_limits import RATE_LIMIT_PAUSE

__all__ = [
    "RATE_LIMIT_PAUSE",
    "MetricPublisher",
    "PoolFactory",
    "PublishReport",
    "PublishingPool",
]

log = logging.getLogger(__name__)

#: Shortest pause of the retry loop between two flushes (seconds).
_MIN_WAIT: Final = 0.5
#: Due entries re-sent at the same time by one flush.
_FLUSH_CONCURRENCY: Final = 8


def _agent_key(
    agent: SecretKey | Signer | PublicKey | str,
) -> tuple[SecretKey | None, Signer | None, PublicKey]:
    """(secret, signer, public key) of the ``agent`` argument; :class:`InvalidKey` otherwise."""
    if isinstance(agent, SecretKey):
        return agent, None, agent.public_key
    if isinstance(agent, PublicKey):
        return None, None, agent
    if isinstance(agent, str):
        if agent.strip().lower().startswith("npub1"):
            return None, None, as_public_key(agent, "the agent's public key")
        secret = as_secret_key(agent, "the agent's secret key")
        return secret, None, secret.public_key
    if isinstance(agent, Signer):
        return None, agent, agent.public_key
    raise InvalidKey(
        "the agent's key must be a SecretKey, a Signer, a PublicKey, 64 hex characters, nsec1… "
        f"or npub1…, not {type(agent).__name__}"
    )


class MetricPublisher:
    """Publishes NIP-AM metrics for one agent to one owner.

    ``agent``: the agent's :class:`SecretKey` (or its 64-hex / ``nsec1…`` text), a
    :class:`~nostr_buzz.signer.Signer`, or only its :class:`PublicKey` (or ``npub1…``: a
    64-hex string is read as a secret key) for a publisher that only submits events signed
    elsewhere.  ``relays``: the write relay URLs (a :class:`RelayPool` is made per attempt, with
    the agent's secret key or signer for NIP-42 when the publisher has one, unless ``pool`` is
    given), or a factory
    returning a pool-like object.  ``outbox``: an :class:`Outbox` or the path of its SQLite file
    (then the publisher owns and closes it).  ``min_ok``: relays that must have the event before
    it leaves the outbox.  ``timeout``: per attempt (connect plus
    ``OK`` per relay).  ``clock`` and ``rng`` pin time and backoff jitter for tests.
    ``on_report``: called with every :class:`PublishReport` (its exceptions are swallowed).
    ``give_up_after``: seconds after which an entry no relay took is given up (None: never).
    ``pool``: a :class:`RelayPool` whose kept connections (and signer, which answers NIP-42)
    every attempt uses (:meth:`RelayPool.using`), instead of a pool made per attempt; the
    write relays are trusted on it (:meth:`RelayPool.trust`), the other relays an event is
    routed to (people's read relays) only as far as the pool trusts them.
    Bad keys (:class:`InvalidKey`), URLs or ``min_ok`` raise here, at set-up, never during a
    turn.
    """

    def __init__(
        self,
        agent: SecretKey | Signer | PublicKey | str,
        owner_public: PublicKey | str,
        outbox: Outbox | str | Path,
        relays: Sequence[str] | PoolFactory,
        *,
        min_ok: int = 1,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
        rng: Rng | None = None,
        on_report: Callable[[PublishReport], None] | None = None,
        give_up_after: float | None = GIVE_UP_AFTER,
        pool: RelayPool | None = None,
    ) -> None:
        self._agent_secret, self._signer, self.agent_public = _agent_key(agent)
        self._shared = pool
        self.owner_public = as_public_key(owner_public, "the owner's public key")
        if min_ok < 1:
            raise RelayError("min_ok must be at least 1")
        self.min_ok = min_ok
        self.timeout = float(timeout)
        self._clock = clock
        self._rng: Rng = rng if rng is not None else random.Random()
        self._on_report = on_report
        if give_up_after is not None and give_up_after <= 0:
            raise RelayError("give_up_after must be a positive number of seconds")
        self.give_up_after = give_up_after
        self._owns_outbox = not isinstance(outbox, Outbox)
        self.outbox = outbox if isinstance(outbox, Outbox) else Outbox(outbox, rng=self._rng)
        if callable(relays):
            self._pool_factory: PoolFactory = relays
        else:
            urls = [relays] if isinstance(relays, str) else list(relays)
            checked = self._pool(urls).urls  # checks URLs
            if not checked:
                raise RelayError("a metric publisher needs at least one write relay")
            if min_ok > len(checked):
                raise RelayError(
                    f"min_ok is {min_ok} but only {len(checked)} write relay(s) are configured"
                )
            if self._shared is not None:  # its own write relays: answered NIP-42 on the pool
                self._shared.trust(checked)
            self._pool_factory = lambda: self._pool(checked)
        self._urls: tuple[str, ...] = () if callable(relays) else tuple(checked)
        self._settlement = Settlement(
            self.outbox, self._urls, min_ok, give_up_after, clock, self._rng
        )
        self._sender = MetricSender(self._settlement, self._pool_for, self.timeout, self._report)

    def _pool(self, urls: Sequence[str]) -> RelayPool:
        """A pool of ``urls`` that answers NIP-42 with the agent's key or signer, if any: on
        the connections ``pool`` keeps, when the publisher was given one."""
        if self._shared is not None:
            return self._shared.using(urls)
        return RelayPool(urls, secret=self._agent_secret, signer=self._signer, timeout=self.timeout)

    def _pool_for(self, urls: Sequence[str]) -> PublishingPool:
        """The pool of one attempt: of ``urls``, or the factory's when they are not known."""
        return self._pool(urls) if urls else self._pool_factory()

    def close(self) -> None:
        """Close the outbox if this publisher opened it."""
        if self._owns_outbox:
            self.outbox.close()

    # -- the turn's side ------------------------------------------------------------------

    async def publish(self, payload: MetricPayload) -> PublishReport:
        """Build, store, then send one metric; returns the receipt: ``event`` the signed metric,
        ``stored`` in the outbox (retried until a relay takes it), ``delivered`` and
        ``accepted_by`` which relays have it.

        Raises :class:`MetricError` when the payload cannot be published (over the size cap,
        or not a :class:`MetricPayload`) or this publisher has only the agent's public key, and
        :class:`~nostr_buzz.signer.SignerError` when its signer fails: nothing is stored then,
        and the caller knows it.
        """
        if self._agent_secret is not None:
            event = build_metric_event(self._agent_secret, self.owner_public, payload)
        elif self._signer is not None:
            event = await build_metric_event_async(self._signer, self.owner_public, payload)
        else:
            raise MetricError(
                "this publisher has only the agent's public key: give it the secret key or a "
                "Signer to publish, or sign the metric elsewhere and submit() the event"
            )
        return await self.submit(event)

    async def submit(self, event: Event) -> PublishReport:
        """Store an already signed metric event in the outbox (committed), then make one
        attempt; the receipt says what happened.  An event that is not a kind-44200 metric
        signed by this publisher's agent raises :class:`MetricError`, nothing stored."""
        if not isinstance(event, Event):
            raise MetricError(f"submit: {not_an_event(event)}")
        if event.kind != KIND or event.pubkey != self.agent_public.hex:
            raise MetricError(
                f"submit takes kind-{KIND} metrics signed by the agent "
                f"{self.agent_public.hex[:16]}…; got kind {event.kind} by {event.pubkey[:16]}…"
            )
        return await self.send_stored(event, self.store(event))

    def store(self, event: Event) -> str | None:
        """Commit a signed event to the outbox now, synchronously; None, or what went wrong.

        A caller that sends in the background stores first, so that a crash before the
        background task runs cannot lose the metric.
        """
        try:
            self.outbox.add(event, now=self._clock())
        except OutboxError as exc:
            return str(exc)
        return None

    async def send_stored(
        self, event: Event, store_problem: str | None, relays: Sequence[str] = ()
    ) -> PublishReport:
        """One attempt to send an event that :meth:`store` has handled (``store_problem`` is
        what it returned: sending anyway beats dropping the metric, and the report then says
        it is not durable).  ``relays``: where this event goes, if not the publisher's."""
        stored = store_problem is None
        return await self._sender.attempt(event, stored, store_problem, tuple(relays))

    # -- retries --------------------------------------------------------------------------

    def pending_count(self) -> int:
        """Metrics waiting in the outbox (-1 when the outbox cannot be read)."""
        try:
            return self.outbox.pending_count()
        except OutboxError:
            return -1

    async def flush(self, now: float | None = None) -> list[PublishReport]:
        """Give up what waited too long, then re-send every entry that is due at ``now``
        (default: the clock); one attempt each.  The given-up entries' reports come first."""
        now = self._clock() if now is None else now
        try:
            given_up = self._settlement.give_up(now, self._sender.in_flight, self._report)
            due = self.outbox.due(now)
        except OutboxError as exc:
            report = PublishReport(None, False, False, error=str(exc))
            self._report(report)
            return [report]
        due = [entry for entry in due if entry.id not in self._sender.in_flight]
        gate = asyncio.Semaphore(_FLUSH_CONCURRENCY)

        async def one(event: Event, relays: tuple[str, ...]) -> PublishReport:
            async with gate:
                return await self._sender.attempt(event, True, None, relays, retry=True)

        sent = await asyncio.gather(*(one(entry.event, entry.relays) for entry in due))
        return [*given_up, *sent]

    async def run(self, stop: asyncio.Event, *, idle: float = 30.0) -> None:
        """Re-send due entries until ``stop`` is set: at start (entries left by an earlier
        process), whenever one falls due, and at least every ``idle`` seconds.  Never raises."""
        while not stop.is_set():
            await self.flush()
            try:
                next_due = self.outbox.next_due()
            except OutboxError:
                next_due = None
            # The floor keeps an entry that is due but cannot be sent right now (on the wire
            # already, or damaged) from turning this into a busy loop.
            wait = idle
            if next_due is not None:
                wait = min(idle, max(_MIN_WAIT, next_due - self._clock()))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await stop.wait()

    async def drain(self) -> None:
        """Wait until every send still working on a slower relay has answered and been
        recorded (each is bounded by the timeout)."""
        await self._sender.drain()

    async def abandon(self) -> None:
        """Stop waiting for the slower relays (at shutdown): what they have not answered stays
        in the outbox, owed to them, for the next flush or process."""
        await self._sender.abandon()

    def _report(self, report: PublishReport) -> None:
        if report.delivered:
            log.debug("metric %s delivered", report.event_id)
        else:
            log.warning("metric %s not delivered yet: %s", report.event_id, report.error)
        if self._on_report is not None:
            # A diagnostics sink must not turn into a failure of the agent's turn.
            with contextlib.suppress(Exception):
                self._on_report(report)
