"""Attempts to send a metric: the wire side of :class:`~nostr_buzz.io.publisher.MetricPublisher`.

One attempt sends the event to the relays that do not have it yet (on a retry, those whose own
backoff is over), skipping the relays paused for ``rate-limited:`` (io/rate_limits.py).  Its
receipt comes once ``min_ok`` relays took it and the pool's grace period has passed; the
slower relays are followed in the background and their verdicts recorded when they come, so
that every relay the metric is meant for gets it.  An event is on the wire in one attempt at a
time.  Network trouble is never raised: it is data in the receipt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from nostr_buzz.core.delivery_state import due_relays, waiting
from nostr_buzz.event import Event

from .metric_settlement import PublishReport, Settlement, refusals
from .pool import PublishResult, PublishRun, RelayPool
from .rate_limits import RateLimits
from .relay import Verdict

__all__ = ["MetricSender", "PoolFactory", "PublishingPool"]

#: Past its own timeout an attempt gets this much longer before it is abandoned (the pool
#: already bounds each relay; this is the backstop that keeps the turn unblocked).
_GRACE: Final = 2.0


class PublishingPool(Protocol):
    """What the publisher needs from a relay pool (``RelayPool`` has it)."""

    async def publish(
        self, event: Event, *, min_ok: int = 1, timeout: float | None = None
    ) -> PublishResult: ...


PoolFactory = Callable[[], PublishingPool]


class MetricSender:
    """The attempts of one publisher: which events are on the wire (:attr:`in_flight`), the
    sends still waiting for slower relays, and the relays paused for ``rate-limited:``.

    ``pool_for(urls)``: the pool an attempt to ``urls`` uses (no ``urls``: the relays of the
    event are not known, a factory's pool).  ``timeout``: per attempt.  ``report``: told
    every receipt, the later ones of the slower relays too.
    """

    def __init__(
        self,
        settlement: Settlement,
        pool_for: Callable[[Sequence[str]], PublishingPool],
        timeout: float,
        report: Callable[[PublishReport], None],
    ) -> None:
        self._settlement = settlement
        self._pool_for = pool_for
        self.timeout = timeout
        self._report = report
        #: Events on the wire now (an attempt or its background follow-up).
        self.in_flight: set[str] = set()
        #: Sends still waiting for the slower relays after the attempt reported
        #: (:meth:`_follow`); kept so that they are not collected mid-way.
        self._tails: set[asyncio.Task[None]] = set()
        self._limits = RateLimits()

    async def attempt(
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
        if event.id in self.in_flight:
            # Another attempt is on the wire; it will record the outcome.
            return PublishReport(event, stored, False, error="already being sent")
        self.in_flight.add(event.id)
        settlement = self._settlement
        followed = False
        try:
            before = settlement.entry(event.id) if stored else None
            targets = settlement.targets(before, relays)
            records = before.relay_records if before is not None else ()
            now = settlement.clock()
            to = (due_relays(targets, records, now) if retry else []) or waiting(targets, records)
            if targets and not to:  # every relay has it already (a crash before the removal)
                report = settlement.settle(event, stored, {}, None, before)
            else:
                earlier = len(before.accepted_by) if before is not None else 0
                verdicts, send_problem, run = await self._send(
                    event, tuple(to), max(1, settlement.min_ok - earlier)
                )
                problem = problem or send_problem
                resume = self._limits.resume_at(verdicts)
                report = settlement.settle(event, stored, verdicts, problem, before, resume)
                if run is not None and run.pending:
                    self._follow(event, stored, run)
                    followed = True
        finally:
            if not followed:
                self.in_flight.discard(event.id)
        self._report(report)
        return report

    def _follow(self, event: Event, stored: bool, run: PublishRun) -> None:
        """Wait in the background for the relays still working on ``event`` (each bounded by
        the timeout), record and report their verdicts; the event stays in flight (no retry
        overlaps) until then."""

        async def rest() -> None:
            try:
                verdicts = await run.rest()
                settlement = self._settlement
                self._limits.note(verdicts.values(), settlement.clock())
                before = settlement.entry(event.id) if stored else None
                resume = self._limits.resume_at(verdicts)
                problem = refusals(verdicts)
                report = settlement.settle(event, stored, verdicts, problem, before, resume)
                self._report(report)
            finally:
                await run.cancel()
                self.in_flight.discard(event.id)

        task = asyncio.create_task(rest(), name=f"publish-rest {event.id[:12]}")
        self._tails.add(task)
        task.add_done_callback(self._tails.discard)

    async def _send(
        self, event: Event, relays: tuple[str, ...], min_ok: int
    ) -> tuple[dict[str, Verdict], str | None, PublishRun | None]:
        """This attempt's verdicts once ``min_ok`` relays took the event (or all answered),
        what went wrong, and the sends still working (a :class:`RelayPool`'s only)."""
        now = self._settlement.clock()
        targets = relays or self._settlement.urls
        waiting_out = self._limits.held_back(event.id, targets, now)
        sendable = tuple(u for u in targets if u not in waiting_out)
        if waiting_out and not sendable:
            return waiting_out, refusals(waiting_out), None
        run: PublishRun | None = None
        try:
            async with asyncio.timeout(self.timeout + _GRACE):
                pool = self._pool_for(sendable)
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
        self._limits.note(verdicts.values(), now)
        verdicts = {**verdicts, **waiting_out}
        return verdicts, refusals(verdicts), run

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
