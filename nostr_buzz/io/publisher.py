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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from nostr_buzz.core.backoff import Rng
from nostr_buzz.core.delivery_state import complete, due_relays, waiting
from nostr_buzz.errors import InvalidKey, MetricError, OutboxError, RelayError
from nostr_buzz.event import Event, not_an_event
from nostr_buzz.keys import PublicKey, SecretKey, as_public_key, as_secret_key
from nostr_buzz.nips.nip_am import KIND, MetricPayload, build_metric_event, build_metric_event_async
from nostr_buzz.signer import Signer

from .outbox import BACKOFF_CAP, GIVE_UP_AFTER, Outbox, OutboxEntry
from .pool import PublishResult, PublishRun, RelayPool
from .relay import Verdict

__all__ = [
    "RATE_LIMIT_PAUSE",
    "MetricPublisher",
    "PoolFactory",
    "PublishReport",
    "PublishingPool",
]

log = logging.getLogger(__name__)

#: Past its own timeout an attempt gets this much longer before it is abandoned (the pool
#: already bounds each relay; this is the backstop that keeps the turn unblocked).
_GRACE: Final = 2.0
#: Shortest pause of the retry loop between two flushes (seconds).
_MIN_WAIT: Final = 0.5
#: Due entries re-sent at the same time by one flush.
_FLUSH_CONCURRENCY: Final = 8
#: Seconds nothing is sent to a relay after its first ``rate-limited:`` refusal in a row.
RATE_LIMIT_PAUSE: Final = 30.0
#: Relays whose pause is remembered (the oldest forgotten first).
_MAX_PAUSED: Final = 1_000


class PublishingPool(Protocol):
    """What the publisher needs from a relay pool (``RelayPool`` has it)."""

    async def publish(
        self, event: Event, *, min_ok: int = 1, timeout: float | None = None
    ) -> PublishResult: ...


PoolFactory = Callable[[], PublishingPool]


@dataclass(frozen=True)
class PublishReport:
    """The outcome of one attempt to publish one metric.

    The receipt :meth:`MetricPublisher.publish` and :meth:`MetricPublisher.submit` return.
    ``event``: the signed metric (None only in a report of :meth:`MetricPublisher.flush` that
    could not read the outbox).
    ``stored``: the event is in the durable outbox (False only when the outbox failed).
    ``delivered``: at least ``min_ok`` relays have it; it has left the outbox.
    ``verdicts``: this attempt's answer per relay.  ``attempts``: attempts so far, this one
    included.  ``next_attempt``: when it will be retried (clock seconds), None when delivered
    or not stored.  ``error``: what went wrong, for diagnostics (never contains secrets).
    ``given_up``: it waited longer than the publisher's ``give_up_after`` and has been removed
    from the outbox (``delivered`` says whether ``min_ok`` relays had it); it is never sent
    again.  ``complete``: every relay it is meant for has it; it has left the outbox.
    ``earlier``: it was delivered by an earlier attempt, and this one was for the relays that
    did not have it yet (their verdicts alone).  ``waiting``: the relays it is meant for that
    do not have it yet (stored events only).
    """

    event: Event | None
    stored: bool
    delivered: bool
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    attempts: int = 0
    next_attempt: float | None = None
    error: str | None = None
    given_up: bool = False
    complete: bool = False
    earlier: bool = False
    waiting: tuple[str, ...] = ()

    @property
    def event_id(self) -> str | None:
        return None if self.event is None else self.event.id

    @property
    def accepted_by(self) -> list[str]:
        """The relays that took the event in this attempt (``OK true`` or ``duplicate:``)."""
        return [url for url, verdict in self.verdicts.items() if verdict.ok]


def _refusals(verdicts: dict[str, Verdict]) -> str | None:
    failed = [f"{url}: {v.reason}" for url, v in verdicts.items() if not v.ok]
    return "; ".join(failed) or None


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
        self._in_flight: set[str] = set()
        #: Sends still waiting for the slower relays after the attempt reported
        #: (:meth:`_follow`); kept so that they are not collected mid-way.
        self._tails: set[asyncio.Task[None]] = set()
        #: Relay → (end of its pause, ``rate-limited:`` refusals in a row).
        self._paused: dict[str, tuple[float, int]] = {}

    def _pool(self, urls: Sequence[str]) -> RelayPool:
        """A pool of ``urls`` that answers NIP-42 with the agent's key or signer, if any: on
        the connections ``pool`` keeps, when the publisher was given one."""
        if self._shared is not None:
            return self._shared.using(urls)
        return RelayPool(urls, secret=self._agent_secret, signer=self._signer, timeout=self.timeout)

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
        return await self._attempt(event, store_problem is None, store_problem, tuple(relays))

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
            given_up = self._give_up(now)
            due = self.outbox.due(now)
        except OutboxError as exc:
            report = PublishReport(None, False, False, error=str(exc))
            self._report(report)
            return [report]
        due = [entry for entry in due if entry.id not in self._in_flight]
        gate = asyncio.Semaphore(_FLUSH_CONCURRENCY)

        async def one(event: Event, relays: tuple[str, ...]) -> PublishReport:
            async with gate:
                return await self._attempt(event, True, None, relays, retry=True)

        sent = await asyncio.gather(*(one(entry.event, entry.relays) for entry in due))
        return [*given_up, *sent]

    def _give_up(self, now: float) -> list[PublishReport]:
        """Remove and report the entries stored ``give_up_after`` seconds ago or earlier (but
        one on the wire: its attempt settles it, the next flush gives it up)."""
        if self.give_up_after is None:
            return []
        reports = []
        for entry in self.outbox.expired(now - self.give_up_after):
            if entry.id in self._in_flight or not self.outbox.remove(entry.id):
                continue
            waited = now - entry.added_at
            error = f"given up after {waited:.0f} s and {entry.attempts} attempt(s)"
            missing = waiting(self._targets(entry), entry.relay_records)
            if entry.accepted_by and missing:
                error += f"; never taken by {', '.join(missing)}"
            if entry.last_error:
                error += f"; last error: {entry.last_error}"
            delivered = len(entry.accepted_by) >= self.min_ok
            report = PublishReport(
                entry.event,
                False,
                delivered,
                attempts=entry.attempts,
                error=error,
                given_up=True,
                waiting=tuple(missing),
            )
            self._report(report)
            reports.append(report)
        return reports

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
        while self._tails:
            await asyncio.gather(*self._tails, return_exceptions=True)

    async def abandon(self) -> None:
        """Stop waiting for the slower relays (at shutdown): what they have not answered stays
        in the outbox, owed to them, for the next flush or process."""
        tails = list(self._tails)
        for task in tails:
            task.cancel()
        await asyncio.gather(*tails, return_exceptions=True)

    # -- one attempt ----------------------------------------------------------------------

    def _targets(self, entry: OutboxEntry | None, relays: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Every relay an event is meant for: its own, else the publisher's (none known for a
        factory's pool: then ``min_ok`` acceptances complete it)."""
        if relays:
            return relays
        return (entry.relays if entry is not None else ()) or self._urls

    async def _attempt(
        self,
        event: Event,
        stored: bool,
        problem: str | None,
        relays: tuple[str, ...] = (),
        *,
        retry: bool = False,
    ) -> PublishReport:
        """Send ``event`` to the relays that do not have it yet (``retry``: those whose own
        backoff is over); the report comes at the first acceptance (``min_ok``), and the
        slower relays' verdicts are recorded when they come (:meth:`_follow`)."""
        if event.id in self._in_flight:
            # Another attempt is on the wire; it will record the outcome.
            return PublishReport(event, stored, False, error="already being sent")
        self._in_flight.add(event.id)
        followed = False
        try:
            before = self._entry(event.id) if stored else None
            targets = self._targets(before, relays)
            records = before.relay_records if before is not None else ()
            now = self._clock()
            to = (due_relays(targets, records, now) if retry else []) or waiting(targets, records)
            if targets and not to:  # every relay has it already (a crash before the removal)
                report = self._settle(event, stored, {}, None, before)
            else:
                earlier = len(before.accepted_by) if before is not None else 0
                verdicts, send_problem, run = await self._send(
                    event, tuple(to), max(1, self.min_ok - earlier)
                )
                report = self._settle(event, stored, verdicts, problem or send_problem, before)
                if run is not None and run.pending:
                    self._follow(event, stored, run)
                    followed = True
        finally:
            if not followed:
                self._in_flight.discard(event.id)
        self._report(report)
        return report

    def _entry(self, event_id: str) -> OutboxEntry | None:
        try:
            return self.outbox.get(event_id)
        except OutboxError:
            return None

    def _follow(self, event: Event, stored: bool, run: PublishRun) -> None:
        """Wait in the background for the relays still working on ``event`` (each bounded by
        the timeout), record and report their verdicts; the event stays in flight (no retry
        overlaps) until then."""

        async def rest() -> None:
            try:
                verdicts = await run.rest()
                self._note_rate_limits(verdicts.values(), self._clock())
                before = self._entry(event.id) if stored else None
                report = self._settle(event, stored, verdicts, _refusals(verdicts), before)
                self._report(report)
            finally:
                await run.cancel()
                self._in_flight.discard(event.id)

        task = asyncio.create_task(rest(), name=f"publish-rest {event.id[:12]}")
        self._tails.add(task)
        task.add_done_callback(self._tails.discard)

    async def _send(
        self, event: Event, relays: tuple[str, ...], min_ok: int
    ) -> tuple[dict[str, Verdict], str | None, PublishRun | None]:
        """This attempt's verdicts once ``min_ok`` relays took the event (or all answered),
        what went wrong, and the sends still working (a :class:`RelayPool`'s only)."""
        now = self._clock()
        targets = relays or self._urls
        waiting_out = {
            url: Verdict(url, event.id, False, False, "rate-limited:", "rate-limited: backing off")
            for url in targets
            if self._paused.get(url, (0.0, 0))[0] > now
        }
        sendable = tuple(u for u in targets if u not in waiting_out)
        if waiting_out and not sendable:
            return waiting_out, _refusals(waiting_out), None
        run: PublishRun | None = None
        try:
            async with asyncio.timeout(self.timeout + _GRACE):
                pool = self._pool(sendable) if sendable else self._pool_factory()
                if isinstance(pool, RelayPool):
                    run = pool.start_publish(event, timeout=self.timeout)
                    # The relays that answer within the pool's grace period of the first
                    # acceptance are in this report; the others in a later one (_follow).
                    verdicts = await run.first(min_ok, pool.grace)
                else:
                    result = await pool.publish(event, min_ok=min_ok, timeout=self.timeout)
                    verdicts = result.verdicts
        except TimeoutError:
            if run is not None:
                await run.cancel()
            return {}, f"no answer within {self.timeout + _GRACE:g} s", None
        except Exception as exc:
            # The relay edge reports network trouble as verdicts; anything raised is a bug
            # or a misconfigured factory, still never the turn's problem.
            if run is not None:
                await run.cancel()
            return {}, f"send failed: {type(exc).__name__}: {exc}", None
        except BaseException:  # cancelled (a stop): no send outlives the attempt
            if run is not None:
                await run.cancel()
            raise
        self._note_rate_limits(verdicts.values(), now)
        verdicts = {**verdicts, **waiting_out}
        return verdicts, _refusals(verdicts), run

    def _note_rate_limits(self, verdicts: Iterable[Verdict], now: float) -> None:
        """Pause each relay that answered ``rate-limited:``; one that took the event is
        forgiven."""
        for verdict in verdicts:
            if verdict.ok:
                self._paused.pop(verdict.relay, None)
            elif verdict.prefix == "rate-limited:":
                strikes = self._paused.get(verdict.relay, (0.0, 0))[1] + 1
                pause = min(BACKOFF_CAP, RATE_LIMIT_PAUSE * 2 ** min(strikes - 1, 16))
                self._paused.pop(verdict.relay, None)
                self._paused[verdict.relay] = (now + pause, strikes)
                while len(self._paused) > _MAX_PAUSED:
                    self._paused.pop(next(iter(self._paused)))

    def _resume_at(self, verdicts: dict[str, Verdict]) -> float | None:
        """When the first relay paused for ``rate-limited:`` may be asked again, when no relay
        took the event and one of them refused so; else None."""
        if any(v.ok for v in verdicts.values()):
            return None
        ends = [self._paused[url][0] for url in verdicts if url in self._paused]
        return min(ends, default=None)

    def _settle(
        self,
        event: Event,
        stored: bool,
        verdicts: dict[str, Verdict],
        problem: str | None,
        before: OutboxEntry | None,
    ) -> PublishReport:
        """Record ``verdicts`` in the outbox and say where the event stands: delivered once
        ``min_ok`` relays have it (over all attempts), removed once every relay it is meant
        for has it (``before``: the entry as it was before this attempt)."""
        have_now = [url for url, v in verdicts.items() if v.ok]
        if not stored:
            delivered = len(have_now) >= self.min_ok
            return PublishReport(event, False, delivered, verdicts, 1, None, problem)
        earlier = before is not None and len(before.accepted_by) >= self.min_ok
        try:
            entry = self.outbox.record_attempt(
                event.id,
                self._clock(),
                verdicts,
                rng=self._rng,
                error=problem,
                not_before=self._resume_at(verdicts),
            )
            if entry is None:  # removed meanwhile (another publisher on the same file)
                return PublishReport(event, True, True, verdicts, 1, None, problem, earlier=earlier)
            delivered = len(entry.accepted_by) >= self.min_ok
            targets = self._targets(entry)
            done = complete(targets, entry.relay_records) if targets else delivered
            if done:
                self.outbox.remove(event.id)
                return PublishReport(
                    event,
                    True,
                    True,
                    verdicts,
                    entry.attempts,
                    None,
                    None,
                    complete=True,
                    earlier=earlier,
                )
            return PublishReport(
                event,
                True,
                delivered,
                verdicts,
                entry.attempts,
                entry.next_attempt,
                problem,
                earlier=earlier,
                waiting=tuple(waiting(targets, entry.relay_records)),
            )
        except OutboxError as exc:
            delivered = len(have_now) >= self.min_ok
            return PublishReport(event, True, delivered, verdicts, 1, None, str(exc))

    def _report(self, report: PublishReport) -> None:
        if report.delivered:
            log.debug("metric %s delivered", report.event_id)
        else:
            log.warning("metric %s not delivered yet: %s", report.event_id, report.error)
        if self._on_report is not None:
            # A diagnostics sink must not turn into a failure of the agent's turn.
            with contextlib.suppress(Exception):
                self._on_report(report)
