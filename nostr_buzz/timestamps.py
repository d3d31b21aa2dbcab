"""The one timestamp form of metrics and diagnostics (pure: the caller passes the moment)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["rfc3339_ms"]


def rfc3339_ms(moment: datetime) -> str:
    """RFC 3339 UTC with milliseconds and ``Z``, as the NIP-AM timestamps."""
    if moment.tzinfo is None:
        raise ValueError("diagnostic timestamps need an aware datetime (UTC)")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
