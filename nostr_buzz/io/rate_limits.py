"""The relays that refused a metric with ``rate-limited:``, and how long nothing is sent to them
(docs/metrics.md, "Publishing: never lose a metric").

A relay that refuses with ``rate-limited:`` is paused: nothing is sent to it for
:data:`RATE_LIMIT_PAUSE` seconds, doubling with each refusal in a row up to the outbox's backoff
cap, and an acceptance forgives it.  :class:`RateLimits` is that memory for one
:class:`~nostr_buzz.io.publisher.MetricPublisher`; the outbox entry that only paused relays
could take is retried once the first pause ends (:meth:`RateLimits.resume_at`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .outbox import BACKOFF_CAP
from .relay import Verdict

__all__ = ["RATE_LIMIT_PAUSE", "RateLimits"]

#: Seconds nothing is sent to a relay after its first ``rate-limited:`` refusal in a row.
RATE_LIMIT_PAUSE: Final = 30.0
#: Relays whose pause is remembered (the oldest forgotten first).
_MAX_PAUSED: Final = 1_000
#: The verdict of a relay skipped while it is paused (as if it had refused again).
_PREFIX: Final = "rate-limited:"


class RateLimits:
    """The paused relays of one publisher: each relay → (end of its pause, ``rate-limited:``
    refusals in a row), at most :data:`_MAX_PAUSED` of them."""

    def __init__(self) -> None:
        self._paused: dict[str, tuple[float, int]] = {}

    def held_back(self, event_id: str, relays: Iterable[str], now: float) -> dict[str, Verdict]:
        """The verdicts of those of ``relays`` still paused at ``now``: nothing is sent to
        them, and the attempt reports them as refusing."""
        return {
            url: Verdict(url, event_id, False, False, _PREFIX, f"{_PREFIX} backing off")
            for url in relays
            if self._paused.get(url, (0.0, 0))[0] > now
        }

    def note(self, verdicts: Iterable[Verdict], now: float) -> None:
        """Pause each relay that answered ``rate-limited:``; one that took the event is
        forgiven."""
        for verdict in verdicts:
            if verdict.ok:
                self._paused.pop(verdict.relay, None)
            elif verdict.prefix == _PREFIX:
                strikes = self._paused.get(verdict.relay, (0.0, 0))[1] + 1
                pause = min(BACKOFF_CAP, RATE_LIMIT_PAUSE * 2 ** min(strikes - 1, 16))
                self._paused.pop(verdict.relay, None)
                self._paused[verdict.relay] = (now + pause, strikes)
                while len(self._paused) > _MAX_PAUSED:
                    self._paused.pop(next(iter(self._paused)))

    def resume_at(self, verdicts: dict[str, Verdict]) -> float | None:
        """When the first relay paused for ``rate-limited:`` may be asked again, when no relay
        took the event and one of them refused so; else None."""
        if any(v.ok for v in verdicts.values()):
            return None
        ends = [self._paused[url][0] for url in verdicts if url in self._paused]
        return min(ends, default=None)
