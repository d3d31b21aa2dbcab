"""What a turn leaves behind, built without I/O: the reply's tags and event, the metric payload.

A reply answers the batch's newest event in the kind of that event, so that the client it came
from shows it:

* kind 9 chat → kind 9: ``h`` (its channel), NIP-10 marked ``e`` tags (root, plus reply when
  the target is not the root) and ``p`` for the people replied to, never the agent itself
  (:func:`nostr_buzz.nips.nip10.reply_tags`, shared with ``buzz messages send``);
* kind 1 note → kind 1 with the same NIP-10 ``e`` and ``p`` tags;
* kind 1111 comment → kind 1111 with the NIP-22 root scope and parent tags;
* kind 14 private message → a kind 14 rumor answering it (``p`` to its author and the room's
  other members, ``e`` to it), which delivery seals and gift-wraps (NIP-17);
* any other kind → kind 9, as chat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from nostr_buzz.core.manifest import Manifest
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.acp_driver import TurnResult
from nostr_buzz.io.diagnostics import rfc3339_ms
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip17, nip22
from nostr_buzz.nips.nip59 import PrivateEvent, Rumor
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts

from .config import CHAT_KIND

_HEX64: Final = re.compile(r"[0-9a-f]{64}")

__all__ = [
    "TurnIds",
    "build_private_reply",
    "build_reply",
    "metric_payload",
    "reply_tags",
    "reply_text",
]


#: The counters of a turn the agent reported no usage for.
_UNKNOWN = TokenCounts(None, None, None, None)


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
    """The signed public reply to ``target``, in its kind (private messages: see
    :func:`build_private_reply`)."""
    if isinstance(target, PrivateEvent):
        raise BuzzError("a private message is answered privately (build_private_reply)")
    if target.kind == nip22.COMMENT_KIND:
        kind, tags = nip22.COMMENT_KIND, nip22.reply_tags(target)
    elif target.kind == nip10.TEXT_NOTE_KIND:
        kind, tags = nip10.TEXT_NOTE_KIND, _note_reply_tags(target, secret.public_key.hex)
    else:
        kind, tags = CHAT_KIND, reply_tags(target, secret.public_key.hex)
    return sign_event(secret, kind=kind, content=text, tags=tags, created_at=created_at)


def _note_reply_tags(target: Event, agent: str) -> list[list[str]]:
    """NIP-10 for a kind 1 reply: the marked ``e`` tags and ``p`` tags, then the note's own
    ``p`` tags too (everyone in the conversation stays notified), never the agent."""
    tags = nip10.reply_tags(target, sender=agent)
    named = {t[1] for t in tags if t[0] == "p"} | {agent}
    for pubkey in nip10.mentions(target):
        if _HEX64.fullmatch(pubkey) and pubkey not in named:
            named.add(pubkey)
            tags.append(["p", pubkey])
    return tags


def build_private_reply(agent: str, target: PrivateEvent, text: str, created_at: int) -> Rumor:
    """The kind 14 rumor answering a private message (not yet sealed nor wrapped)."""
    return nip17.reply(agent, target.rumor(), text, created_at=created_at)


def metric_payload(
    *,
    harness: str,
    model: str | None,
    ids: TurnIds,
    result: TurnResult,
    triggering: list[Event],
    manifest: Manifest | None,
    started_at: datetime,
) -> MetricPayload:
    """The NIP-AM payload of a turn; when the agent reported no usage, every counter of
    ``turn`` is unknown (null) and ``turnSeq`` still follows the session's sequence."""
    usage = result.usage
    ref = nip10.thread_ref(triggering[-1])
    return MetricPayload(
        harness=harness,
        timestamp=rfc3339_ms(result.ended_at),
        model=model,
        channel_id=ids.channel_id,
        session_id=ids.session_id,
        turn_id=ids.turn_id,
        turn_seq=usage.turn_seq if usage is not None else result.turn_seq,
        turn=usage.turn if usage is not None else _UNKNOWN,
        cumulative=usage.cumulative if usage is not None else None,
        delta_reliable=usage.delta_reliable if usage is not None else True,
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
        context_used_tokens=result.context_used,
        context_window_tokens=result.context_size,
    )
