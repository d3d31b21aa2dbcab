"""Exponential backoff: the one rule behind every retry delay in nostr-buzz.

The dispatch queue (a failed turn), the metric outbox (a refused publish) and the relay
client (a dropped connection) all wait ``base · 2^(attempts−1)`` seconds, capped at ``cap``;
each applies its own jitter on top.  Pure: the caller brings the attempt count and any
random draw.
"""

from __future__ import annotations

__all__ = ["backoff_base"]

#: Past this exponent every sensible base is already at its cap; bounding it keeps a huge
#: restored attempt count from building a huge number.
_MAX_EXPONENT = 64


def backoff_base(attempts: int, *, base: float, cap: float) -> float:
    """Seconds to wait after the ``attempts``-th failure, before jitter: ``base · 2^(attempts−1)``
    capped at ``cap``, and 0 before any failure."""
    if attempts < 1:
        return 0.0
    return min(cap, base * 2.0 ** min(attempts - 1, _MAX_EXPONENT))
