"""The one timestamp form of metrics and diagnostics (pure: the caller passes the moment)."""

from __future__ import annotations

from datetime import UTC, datetime

from nostr_buzz.errors import MetricError

__all__ = ["metric_timestamp", "rfc3339_ms"]


def metric_timestamp(moment: datetime | float) -> str:
    """``moment`` as a NIP-AM payload ``timestamp``: RFC 3339 UTC with milliseconds and ``Z``
    (``2026-12-02T14:05:09.123Z``; finer digits are cut, not rounded), which
    ``datetime.isoformat()`` is not.

    ``moment`` is an aware ``datetime`` (any time zone) or Unix seconds.  A naive ``datetime``
    names no instant and raises :class:`~nostr_buzz.errors.MetricError`, as does anything else.
    """
    if isinstance(moment, datetime):
        if moment.utcoffset() is None:
            raise MetricError(
                "timestamp: a naive datetime names no instant; give an aware one "
                "(datetime.now(UTC))"
            )
        utc = moment.astimezone(UTC)
    elif type(moment) in (int, float):
        try:
            utc = datetime.fromtimestamp(moment, UTC)
        except (OverflowError, OSError, ValueError):
            raise MetricError(f"timestamp: {moment!r} seconds is out of range") from None
    else:
        raise MetricError(
            f"timestamp: expected a datetime or Unix seconds, not {type(moment).__name__}"
        )
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:"
        f"{utc.second:02d}.{utc.microsecond // 1000:03d}Z"
    )


#: The same form for diagnostics' timestamps.
rfc3339_ms = metric_timestamp
