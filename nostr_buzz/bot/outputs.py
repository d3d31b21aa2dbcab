"""What a turn leaves behind, built without I/O: the reply's parts, the metric payload.

A reply answers the batch's newest event in the kind of that event
(:mod:`nostr_buzz.core.reply`, public: the same functions a bot of its own uses); a kind 14
private message gets a kind 14 rumor answering it (``p`` to its author, and to the room's
other members only when the owner is in the room — :func:`private_audience` —, ``e`` to it),
which delivery seals and gift-wraps (NIP-17).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import msgspec

from nostr_buzz.acp.types import TurnResult
from nostr_buzz.config import MAX_REPLY_BYTES
from nostr_buzz.event import Event
from nostr_buzz.io.relay_info import RelayLimits
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips import nip10, nip17
from nostr_buzz.nips.nip27 import with_references
from nostr_buzz.nips.nip59 import PrivateEvent, Rumor
from nostr_buzz.nips.nip_am import MAX_TOKENS, MetricPayload, TokenCounts
from nostr_buzz.signer import EventTemplate, template
from nostr_buzz.text.unicode import utf8_size
from nostr_buzz.timestamps import rfc3339_ms

__all__ = [
    "MAX_PARTS",
    "PART_FLOOR",
    "TurnIds",
    "build_private_reply",
    "cut_notice",
    "dead_letter_notice",
    "fitted_parts",
    "frame_size",
    "metric_payload",
    "numbered",
    "private_audience",
    "private_parts",
    "redact",
    "reply_text",
    "split_text",
    "tagged_parts",
    "too_large",
    "too_small",
]
#: What a relay's refusal says when an event is over its size limit (strfry, nostr-rs-relay,
#: nostr-sdk's relay, khatru…): "too large", "too big", "exceeds maximum allowed size", ….
_TOO_LARGE: Final = re.compile(
    r"too (?:large|big|long)|exceeds|size limit|max(?:imum)?[ _]?(?:allowed )?(?:event )?size",
    re.IGNORECASE,
)
_MAX_BYTES: Final = re.compile(r"max\w*[^()\d]*\(?(\d{3,9}) ?bytes", re.IGNORECASE)
#: A send that lost the connection: some relays drop it on a frame over their limit instead
#: of answering ``OK false`` (nostr-sdk's relay past a few MB).
_DROPPED: Final = re.compile(r"connection (?:dropped|lost)|closed by relay", re.IGNORECASE)
#: Bytes of a reply part's content when the relay did not say its limit.
DEFAULT_PART_BYTES: Final = 16_384
#: Fewest content bytes a reply part carries (docs/bot.md, "Relay limits"): a relay whose
#: NIP-11 limits leave less is skipped for the reply, and no split cuts finer, so a reply
#: never has more than :data:`MAX_PARTS` parts.
PART_FLOOR: Final = 4096
#: Most parts of one reply: the largest reply (``[agent] max_reply_bytes`` ≤ 1 MiB, with its
#: notice) cut at the floor, less each part's ``[k/n]`` line.
MAX_PARTS: Final = -(-(MAX_REPLY_BYTES + 256) // (PART_FLOOR - 16))
_SECRET_PATTERNS: Final = re.compile(
    r"nsec1[0-9a-z]{20,}|\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}|\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|\b[0-9a-fA-F]{64}\b",
)


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


def reply_text(result: TurnResult) -> str | None:
    """What the agent answered, when the turn succeeded with a non-blank answer; an answer
    cut at the reply cap ends with a notice of the cut (:func:`cut_notice`)."""
    if result.outcome != "success":
        return None
    text = result.final_message or result.reply
    if not text.strip():
        return None
    if result.reply_dropped_bytes:
        text += cut_notice(utf8_size(result.reply), result.reply_dropped_bytes)
    return text


def cut_notice(kept: int, dropped: int) -> str:
    """The line that ends a reply cut at the cap: where, and how much was left out."""
    return (
        f"\n\n[reply cut at {kept:,} bytes: {dropped:,} more bytes of the agent's answer were "
        "left out]"
    )


def private_audience(
    agent: str, owner: str, answered: Rumor, max_recipients: int
) -> tuple[list[str], str | None]:
    """Who the answer to a private message goes to (besides the agent's own copy), and why
    the room was narrowed to the sender (None when it was not).

    Anyone can name any number of people in a message's ``p`` tags, so the whole room gets the
    answer only when the owner is in it (its sender or a ``p``) and it has at most
    ``max_recipients`` other members than the agent; otherwise only the sender does
    (``owner_not_in_room``, ``room_too_large``).  Without this, one stranger's message could
    make the agent write to hundreds of people who never asked.
    """
    room = [p for p in [answered.pubkey, *nip17.receivers(answered)] if p != agent]
    room = list(dict.fromkeys(room))
    if len(room) <= 1:
        return room, None
    if owner not in room:
        return [answered.pubkey], "owner_not_in_room"
    if len(room) > max_recipients:
        return [answered.pubkey], "room_too_large"
    return room, None


def build_private_reply(
    agent: str,
    target: PrivateEvent,
    text: str,
    created_at: int,
    to: Iterable[str] | None = None,
) -> Rumor:
    """The kind 14 rumor answering a private message (not yet sealed nor wrapped); ``to``:
    the members of the room it goes to (default: all, see :func:`private_audience`)."""
    return nip17.reply(agent, target.rumor(), text, created_at=created_at, to=to)


def private_parts(
    agent: str,
    target: PrivateEvent,
    text: str,
    created_at: int,
    to: Iterable[str] | None = None,
) -> list[Rumor]:
    """The kind 14 rumors answering a private message, in order: one, or ``[k/n]`` parts of
    at most :data:`DEFAULT_PART_BYTES` each, part k dated ``created_at + k - 1`` — a gift wrap
    is about twice its text (two encryptions in base64), and must fit a relay that takes
    64 KiB events."""
    audience = None if to is None else list(to)
    return [
        build_private_reply(agent, target, content, created_at + k, audience)
        for k, content in enumerate(numbered(text, DEFAULT_PART_BYTES))
    ]


def too_large(refusal: str, size: int = 0) -> int | None:
    """When a relay's refusal says the event is too large: the content size to split to (its
    stated limit with room for tags and signature, else a default; never under
    :data:`PART_FLOOR`); otherwise None.  ``size``: the event's content bytes — a lost
    connection while sending more than :data:`DEFAULT_PART_BYTES` counts as too large too, or
    the reply would be sent again on every reconnect, and lost again."""
    if not _TOO_LARGE.search(refusal):
        dropped = size > DEFAULT_PART_BYTES and _DROPPED.search(refusal) is not None
        return DEFAULT_PART_BYTES if dropped else None
    stated = _MAX_BYTES.search(refusal)
    if stated is None:
        return DEFAULT_PART_BYTES
    return max(PART_FLOOR, int(stated.group(1)) * 3 // 4 - 1_024)


def split_text(text: str, max_bytes: int) -> list[str]:
    """``text`` cut into ordered parts of at most ``max_bytes`` UTF-8 bytes each, at a
    paragraph, line or word break when there is one in the second half of a part."""
    max_bytes = max(max_bytes, 16)
    parts: list[str] = []
    rest = text
    while len(rest.encode("utf-8")) > max_bytes:
        cut = len(rest.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore"))
        for sep in ("\n\n", "\n", " "):
            at = rest.rfind(sep, cut // 2, cut)
            if at > 0:
                cut = at + len(sep)
                break
        parts.append(rest[:cut])
        rest = rest[cut:]
    parts.append(rest)
    return [p for p in parts if p] or [""]


def numbered(text: str, max_bytes: int) -> list[str]:
    """The contents of ordered parts carrying ``text``, each at most ``max_bytes`` UTF-8 bytes
    (never less than :data:`PART_FLOOR`): ``text`` itself when it fits, else ``[k/n]`` leads
    each part."""
    max_bytes = max(max_bytes, PART_FLOOR)
    chunks = split_text(text, max_bytes - 16) if len(text.encode("utf-8")) > max_bytes else [text]
    total = len(chunks)
    if total == 1:
        return chunks
    return [f"[{k}/{total}]\n{chunk}" for k, chunk in enumerate(chunks, start=1)]


def tagged_parts(
    kind: int, tags: Sequence[Sequence[str]], text: str, created_at: int, max_bytes: int
) -> list[EventTemplate]:
    """Unsigned events of ``kind`` with ``tags`` carrying ``text`` in order (:func:`numbered`),
    part k dated ``created_at + k - 1`` so that readers keep the order; each part also carries
    the tags its own text references call for (NIP-27: :func:`.nip27.with_references`), so
    that a signer that tags as it signs has nothing to add."""
    return [
        with_references(template(kind=kind, content=content, tags=tags, created_at=created_at + k))
        for k, content in enumerate(numbered(text, max_bytes))
    ]


_encode_frame = msgspec.json.Encoder().encode


def frame_size(unsigned: EventTemplate) -> int:
    """Bytes of the ``["EVENT", …]`` frame that carries ``unsigned`` once signed."""
    event = {
        "id": "0" * 64,
        "pubkey": "0" * 64,
        "created_at": unsigned.created_at,
        "kind": unsigned.kind,
        "tags": unsigned.tags,
        "content": unsigned.content,
        "sig": "0" * 128,
    }
    return len(_encode_frame(["EVENT", event]))


def fitted_parts(
    kind: int,
    tags: Sequence[Sequence[str]],
    text: str,
    created_at: int,
    *,
    max_message: int | None = None,
    max_content: int | None = None,
) -> list[EventTemplate]:
    """:func:`tagged_parts` whose every ``EVENT`` frame is at most ``max_message`` bytes and
    whose content is at most ``max_content`` bytes (NIP-11 ``limitation``): one event when the
    text fits.  The content budget shrinks until every part fits (JSON escaping can make a
    frame longer than its text)."""
    budget = max_content if max_content is not None else 1 << 30
    if max_message is None:
        return tagged_parts(kind, tags, text, created_at, max(PART_FLOOR, budget))
    empty = frame_size(template(kind=kind, content="", tags=tags, created_at=created_at))
    budget = min(budget, max_message - empty)
    while True:
        budget = max(PART_FLOOR, budget)
        parts = tagged_parts(kind, tags, text, created_at, budget)
        worst = max(frame_size(part) for part in parts)
        if worst <= max_message or budget == PART_FLOOR:
            return parts
        budget -= worst - max_message + 16


def too_small(
    limits: Mapping[str, RelayLimits], kind: int, tags: Sequence[Sequence[str]], created_at: int
) -> list[str]:
    """The relays whose NIP-11 limits leave a part of a reply (``kind``, ``tags``) less than
    :data:`PART_FLOOR` content bytes: the reply skips them rather than flood them."""
    empty = frame_size(template(kind=kind, content="", tags=tags, created_at=created_at))
    return [
        url
        for url, limit in limits.items()
        if (room := limit.room(empty)) is not None and room < PART_FLOOR
    ]


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without the given secret values and without anything shaped like a key or
    token (nsec1…, sk-…, Bearer …, 64-hex)."""
    for secret in sorted((s for s in secrets if len(s) >= 6), key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return _SECRET_PATTERNS.sub("[redacted]", text)


def dead_letter_notice(attempts: int) -> str:
    """The short reply a dead-lettered batch gets, so that nobody is left waiting."""
    return (
        f"Sorry, I could not answer this: it failed {attempts} times and I have given up on "
        "it. Please ask again later or tell my owner."
    )


def _occupancy(tokens: int | None) -> int | None:
    """The agent's context occupancy as NIP-AM takes it: an integer from 0 to 2^53, else
    unknown (an agent's out-of-range figure must not cost the turn its metric)."""
    return tokens if type(tokens) is int and 0 <= tokens <= MAX_TOKENS else None


def metric_payload(
    *,
    harness: str,
    model: str | None,
    ids: TurnIds,
    result: TurnResult,
    triggering: list[Event],
    manifest: Manifest | None,
    started_at: datetime,
    permissions: tuple[int, int] = (0, 0),
) -> MetricPayload:
    """The NIP-AM payload of a turn; when the agent reported no usage, every counter of
    ``turn`` is unknown (null) and ``turnSeq`` still follows the session's sequence.
    ``permissions``: the turn's permission requests approved and rejected (both left out when
    it asked none).  ``triggering`` is empty for a turn no event caused (a summary turn)."""
    usage = result.usage
    approved, rejected = permissions if sum(permissions) else (None, None)
    ref = nip10.thread_ref(triggering[-1]) if triggering else nip10.ThreadRef(None, None)
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
        context_used_tokens=_occupancy(result.context_used),
        context_window_tokens=_occupancy(result.context_size),
        permissions_approved=approved,
        permissions_rejected=rejected,
        compactions=result.compactions or None,
    )
