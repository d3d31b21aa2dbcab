"""A NIP-AM metric payload as it goes on the wire (camelCase members), and as a MetricPayload."""

from __future__ import annotations

from typing import Any

from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts


def wire(**fields: Any) -> dict[str, Any]:
    """A NIP-AM payload as wire JSON; nullable fields written, overridable."""
    base: dict[str, Any] = {
        "harness": "goose",
        "timestamp": "2026-12-01T10:00:00.000Z",
        "model": "m1",
        "channelId": None,
        "sessionId": None,
        "turnId": None,
        "turnSeq": None,
        "turn": None,
        "cumulative": None,
        "deltaReliable": True,
    }
    base.update(fields)
    return base


def payload(model: str = "m1", **kw: Any) -> MetricPayload:
    return MetricPayload(
        harness="goose",
        timestamp="2026-12-01T10:00:00.000Z",
        model=model,
        turn=TokenCounts(10, 5, 15, 0.001),
        **kw,
    )
