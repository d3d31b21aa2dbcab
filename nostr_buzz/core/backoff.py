"""Exponential backoff: the one rule behind every retry delay in nostr-buzz.

The dispatch queue (a failed turn), the metric outbox (a refused publish), the relay client
(a dropped connection) and the bot's agent supervisor (a failed restart) all wait
``base · 2^(attempts−1)`` seconds, capped at ``cap``; the queue and the outbox add a jitter
drawn from an :class:`Rng`.  Pure: the caller brings the attempt count and the random source.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Rng", "backoff_base"]


class Rng(Protocol):
    """Where jitter comes from: ``random.Random`` and ``secrets.SystemRandom`` fit, and a test
    pins the draws with any object that has this method."""

    def uniform(self, a: float, b: float) -> float: ...


#: Past this exponent every sensible base is already at its cap; bounding it keeps a huge
#: restored attempt count from building a huge number.
_MAX_EXPONENT = 64


def backoff_base(attempts: int, *, base: float, cap: float) -> float:
    """Seconds to wait after the ``attempts``-th failure, before jitter: ``base · 2^(attempts−1)``
    capped at ``cap``, and 0 before any failure."""
    if attempts < 1:
        return 0.0
    return min(cap, base * 2.0 ** min(attempts - 1, _MAX_EXPONENT))
