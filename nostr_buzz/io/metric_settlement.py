"""Where a metric stands after each attempt to publish it: the receipt (:class:`PublishReport`)
and the outbox's record of which relays have it (:class:`Settlement`).

An attempt's verdicts are recorded in the outbox entry, relay by relay
(:mod:`nostr_buzz.core.delivery_state`).  The metric counts as delivered once ``min_ok``
relays (over all attempts) answered ``OK true`` or ``duplicate:``, and leaves the outbox once
every relay it is meant for has it; an entry still waiting ``give_up_after`` seconds after it
was stored is removed and reported once as given up.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from nostr_buzz.core.backoff import Rng
from nostr_buzz.core.delivery_state import complete, waiting
from nostr_buzz.errors import OutboxError
from nostr_buzz.event import Event

from .outbox import Outbox, OutboxEntry
from .relay import Verdict

__all__ = ["PublishReport", "Settlement", "refusals"]


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


def refusals(verdicts: dict[str, Verdict]) -> str | None:
    """The relays that did not take the event and why, as one line (None: none refused)."""
    failed = [f"{url}: {v.reason}" for url, v in verdicts.items() if not v.ok]
    return "; ".join(failed) or None


@dataclass
class Settlement:
    """The outbox's side of one publisher: each attempt's verdicts recorded in the entry, and
    the receipt that says where the metric stands (delivered, complete, given up).

    ``urls``: the publisher's write relays, the relays an entry stored without its own is
    meant for (none for a factory's pool: then ``min_ok`` acceptances complete it).
    ``clock`` and ``rng``: the publisher's (time of each attempt, jitter of its backoff).
    """

    outbox: Outbox
    urls: tuple[str, ...]
    min_ok: int
    give_up_after: float | None
    clock: Callable[[], float]
    rng: Rng

    def targets(self, entry: OutboxEntry | None, relays: tuple[str, ...] = ()) -> tuple[str, ...]:
        """Every relay an event is meant for: ``relays``, else the entry's own, else the
        publisher's."""
        if relays:
            return relays
        return (entry.relays if entry is not None else ()) or self.urls

    def entry(self, event_id: str) -> OutboxEntry | None:
        """The stored entry of ``event_id`` (None when there is none or it cannot be read)."""
        try:
            return self.outbox.get(event_id)
        except OutboxError:
            return None

    def settle(
        self,
        event: Event,
        stored: bool,
        verdicts: dict[str, Verdict],
        problem: str | None,
        before: OutboxEntry | None,
        not_before: float | None = None,
    ) -> PublishReport:
        """Record ``verdicts`` in the outbox and say where the event stands: delivered once
        ``min_ok`` relays have it (over all attempts), removed once every relay it is meant
        for has it (``before``: the entry as it was before this attempt; ``not_before``: the
        earliest retry, when relays asked for a pause)."""
        have_now = [url for url, v in verdicts.items() if v.ok]
        if not stored:
            delivered = len(have_now) >= self.min_ok
            return PublishReport(event, False, delivered, verdicts, 1, None, problem)
        earlier = before is not None and len(before.accepted_by) >= self.min_ok
        try:
            entry = self.outbox.record_attempt(
                event.id,
                self.clock(),
                verdicts,
                rng=self.rng,
                error=problem,
                not_before=not_before,
            )
            if entry is None:  # removed meanwhile (another publisher on the same file)
                return PublishReport(event, True, True, verdicts, 1, None, problem, earlier=earlier)
            delivered = len(entry.accepted_by) >= self.min_ok
            targets = self.targets(entry)
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

    def give_up(
        self, now: float, busy: Collection[str], report: Callable[[PublishReport], None]
    ) -> list[PublishReport]:
        """Remove and report the entries stored ``give_up_after`` seconds ago or earlier (but
        those ``busy`` on the wire: their attempt settles them, the next flush gives them up);
        each is given to ``report`` as soon as it has left the outbox."""
        if self.give_up_after is None:
            return []
        reports = []
        for entry in self.outbox.expired(now - self.give_up_after):
            if entry.id in busy or not self.outbox.remove(entry.id):
                continue
            waited = now - entry.added_at
            error = f"given up after {waited:.0f} s and {entry.attempts} attempt(s)"
            missing = waiting(self.targets(entry), entry.relay_records)
            if entry.accepted_by and missing:
                error += f"; never taken by {', '.join(missing)}"
            if entry.last_error:
                error += f"; last error: {entry.last_error}"
            delivered = len(entry.accepted_by) >= self.min_ok
            given_up = PublishReport(
                entry.event,
                False,
                delivered,
                attempts=entry.attempts,
                error=error,
                given_up=True,
                waiting=tuple(missing),
            )
            report(given_up)
            reports.append(given_up)
        return reports
