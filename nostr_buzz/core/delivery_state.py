"""Where an outbox entry stands on each relay it is meant for (docs/metrics.md, "Every
relay it is meant for").

An event the bot publishes (a reply, a metric, a private answer's gift wrap) goes to a list
of relays: the write relays, the read relays of the people it is for, an addressee's DM
relays.  The outbox keeps one :class:`RelayRecord` per relay and entry: accepted (the relay
answered ``OK true`` or ``duplicate:``), or waiting with its own attempt count, next attempt
and last error.  A relay is retried on its own backoff; one that accepted is never sent the
event again; the entry is done when every relay it is meant for has it (or ``[outbox]
give_up_after`` passes, decided by the publisher).

Pure: the caller passes ``now`` and the jitter draw ``u``; the SQL lives in
:mod:`nostr_buzz.io.outbox`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from .backoff import backoff_base

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_CAP",
    "RelayRecord",
    "after_answer",
    "backoff_delay",
    "complete",
    "due_relays",
    "next_attempt",
    "waiting",
]

#: First retry after about this many seconds; each failed attempt doubles it …
BACKOFF_BASE: Final = 5.0
#: … up to this cap (15 minutes).
BACKOFF_CAP: Final = 900.0
#: Jitter spreads retries over ±20 % so that many agents do not retry in lockstep.
_JITTER: Final = 0.2


def backoff_delay(attempts: int, u: float) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt (``u`` uniform in [0, 1)).

    ``BACKOFF_BASE · 2^(attempts−1)``, capped at ``BACKOFF_CAP``, times a jitter factor in
    [0.8, 1.2); the result never exceeds the cap.
    """
    base = backoff_base(attempts, base=BACKOFF_BASE, cap=BACKOFF_CAP)
    u = min(max(u, 0.0), 1.0)
    return min(BACKOFF_CAP, base * (1.0 - _JITTER + 2 * _JITTER * u))


@dataclass(frozen=True)
class RelayRecord:
    """One relay's part of one outbox entry.

    ``accepted_at``: when the relay took the event (None: it has not yet).  ``attempts``:
    failed attempts on this relay (an acceptance does not count).  ``next_attempt``: when it
    may be sent again.  ``last_error``: its last refusal, error or timeout.
    """

    relay: str
    accepted_at: float | None = None
    attempts: int = 0
    next_attempt: float = 0.0
    last_error: str | None = None

    @property
    def accepted(self) -> bool:
        return self.accepted_at is not None

    @property
    def state(self) -> str:
        """``accepted``, ``failing`` (it refused, failed or timed out) or ``pending``."""
        if self.accepted:
            return "accepted"
        return "failing" if self.attempts else "pending"


def after_answer(
    record: RelayRecord | None,
    relay: str,
    *,
    ok: bool,
    error: str | None,
    now: float,
    u: float,
    not_before: float | None = None,
) -> RelayRecord:
    """``relay``'s record once it answered one send: accepted (for good: a later failure of a
    re-send changes nothing), or one more failed attempt, retried after :func:`backoff_delay`
    and not before ``not_before`` (a rate-limited relay's pause)."""
    held = record if record is not None else RelayRecord(relay)
    if held.accepted:
        return held
    if ok:
        return replace(held, accepted_at=now, last_error=None)
    attempts = held.attempts + 1
    retry = max(now + backoff_delay(attempts, u), not_before or 0.0)
    return replace(held, attempts=attempts, next_attempt=retry, last_error=error)


def _by_relay(records: Iterable[RelayRecord]) -> Mapping[str, RelayRecord]:
    return {r.relay: r for r in records}


def waiting(targets: Iterable[str], records: Iterable[RelayRecord]) -> list[str]:
    """The relays of ``targets`` that do not have the event yet, in order."""
    held = _by_relay(records)
    return [url for url in dict.fromkeys(targets) if not (url in held and held[url].accepted)]


def due_relays(targets: Iterable[str], records: Iterable[RelayRecord], now: float) -> list[str]:
    """The relays of ``targets`` to send the event to at ``now``: waiting, and their own
    backoff over (a relay never tried is due at once)."""
    held = _by_relay(records)
    return [
        url
        for url in waiting(targets, held.values())
        if url not in held or held[url].next_attempt <= now
    ]


def next_attempt(targets: Iterable[str], records: Iterable[RelayRecord]) -> float | None:
    """When the next relay of ``targets`` falls due (0.0: one was never tried), or None when
    every one has the event."""
    held = _by_relay(records)
    times = [
        held[url].next_attempt if url in held else 0.0 for url in waiting(targets, held.values())
    ]
    return min(times, default=None)


def complete(targets: Iterable[str], records: Iterable[RelayRecord]) -> bool:
    """Every relay of ``targets`` has the event (and there is at least one)."""
    listed = list(targets)
    return bool(listed) and not waiting(listed, records)
