"""Metrics built by hand as a bot builds them — the compiler's manifest for one event, the
payload signed by the agent and encrypted to the owner — so that an audit can be pointed at
events that are missing, forged, by a stranger or of the wrong kind."""

from __future__ import annotations

from nostr_buzz.core.compiler import compile_turn
from nostr_buzz.core.turn_input import ChannelInfo, TurnEvent, TurnInput
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, build_metric_event

CHANNEL = "eng"


def manifest_for(event: Event, channel: str = CHANNEL) -> Manifest:
    """The manifest the compiler gives a turn answering ``event`` alone: its
    ``current_instruction`` layer is versioned by ``event.id``."""
    turn = TurnInput(events=(TurnEvent(event),), channel=ChannelInfo(name=channel, id=channel))
    return compile_turn(turn).manifest


def metric_for(
    agent: SecretKey,
    owner: SecretKey,
    event: Event,
    *,
    channel: str = CHANNEL,
    manifest: Manifest | None = None,
    second: int = 0,
) -> Event:
    """A kind 44200 metric from ``agent`` to ``owner`` for a turn that answered ``event``."""
    payload = MetricPayload(
        harness="goose",
        timestamp=f"2026-12-02T10:00:{second:02d}.000Z",
        model="m1",
        channel_id=channel,
        session_id="s1",
        turn_seq=second + 1,
        turn=TokenCounts(10, 5, 15, 0.001),
        triggering_event_ids=(event.id,),
        context_manifest=manifest or manifest_for(event, channel),
    )
    return build_metric_event(agent, owner.public_key, payload)
