"""What a turn leaves behind, built without I/O: the reply's tags and event, the metric payload.

A reply answers the batch's newest event: ``h`` (its channel), NIP-10 marked ``e`` tags (root,
plus reply when the target is not the root) and ``p`` for the people replied to, never the
agent itself (:func:`nostr_buzz.nips.nip10.reply_tags`, shared with ``buzz messages send``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nostr_buzz.core.manifest import Manifest
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.acp_driver import TurnResult
from nostr_buzz.io.diagnostics import rfc3339_ms
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload

from .config import CHAT_KIND

__all__ = ["TurnIds", "build_reply", "metric_payload", "reply_tags", "reply_text"]


@dataclass(frozen=True)
class TurnIds:
    """The ids a turn's diagnostics and metric carry."""

    channel_id: str
    session_id: str | None
    turn_id: str

    def as_kwargs(self) -> dict[str, str | None]:
        return {
            "channel_id": self.channel_id,
            "session_id": self.session_id,
            "turn_id": self.turn_id,
        }


def reply_tags(target: Event, agent: str, root: Event | None = None) -> list[list[str]]:
    """Tags of the agent's reply to ``target`` (``root``: the thread's root, when known)."""
    channel = nip10.channel(target)
    tags: list[list[str]] = [["h", channel]] if channel is not None else []
    return tags + nip10.reply_tags(target, sender=agent, root=root)


def reply_text(result: TurnResult) -> str | None:
    """What the agent answered, when the turn succeeded with a non-blank answer."""
    if result.outcome != "success":
        return None
    text = result.final_message or result.reply
    return text if text.strip() else None


def build_reply(secret: SecretKey, target: Event, text: str, created_at: int) -> Event:
    """The signed kind 9 reply to ``target``."""
    tags = reply_tags(target, secret.public_key.hex)
    return sign_event(secret, kind=CHAT_KIND, content=text, tags=tags, created_at=created_at)


def metric_payload(
    *,
    harness: str,
    model: str | None,
    ids: TurnIds,
    result: TurnResult,
    triggering: list[Event],
    manifest: Manifest | None,
    started_at: datetime,
) -> MetricPayload | None:
    """The NIP-AM payload of a turn whose usage was observed (None when none was)."""
    usage = result.usage
    if usage is None:
        return None
    ref = nip10.thread_ref(triggering[-1])
    return MetricPayload(
        harness=harness,
        timestamp=rfc3339_ms(result.ended_at),
        model=model,
        channel_id=ids.channel_id,
        session_id=ids.session_id,
        turn_id=ids.turn_id,
        turn_seq=usage.turn_seq,
        turn=usage.turn,
        cumulative=usage.cumulative,
        delta_reliable=usage.delta_reliable,
        stop_reason=result.stop_reason,
        outcome=result.outcome,
        terminal_evidence=result.terminal_evidence,
        triggering_event_ids=tuple(e.id for e in triggering),
        root_event_id=ref.root,
        parent_event_id=ref.parent,
        started_at=rfc3339_ms(started_at),
        adapter_session_id=result.adapter_session_id,
        native_stop_reason=result.native_stop_reason,
        context_manifest=manifest,
    )
