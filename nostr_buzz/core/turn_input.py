"""The compiler's input (docs/turn-input.md).

:class:`TurnInput` is built either by the I/O layer from already verified :class:`Event` objects
(the Python constructors below) or from a turn-input file with :meth:`TurnInput.from_json`.
Reading a file is cheap-first: the whole file is decoded into typed wire structs and checked for
shape (every event's structure, the channel id, every rule of docs/turn-input.md) before any
event id, public key or signature is verified, so :class:`InvalidEvent` is raised only for a file
that is otherwise valid.  Every other problem raises :class:`TurnInputError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

import msgspec

from nostr_buzz.errors import InvalidEvent, TurnInputError
from nostr_buzz.event import Event, WireEvent, check_structure, not_an_event
from nostr_buzz.nips import nip10
from nostr_buzz.text.unicode import LINE_BREAKS, ascii_lower, is_utf8_encodable, utf8_document

_HEX = frozenset("0123456789abcdefABCDEF")
_LOWER_HEX = frozenset("0123456789abcdef")
_LINE_BREAK = re.compile("[" + LINE_BREAKS + "]")
CancelReason = Literal["interrupt", "steer"]
ContextKind = Literal["thread", "dm"]

DEFAULT_PROMPT_TAG = "@mention"


# ---------------------------------------------------------------------------------------------
# The in-memory input (what the compiler reads)


class TurnEvent(msgspec.Struct, frozen=True):
    """One batch event with the prompt tag it arrived under."""

    event: Event
    prompt_tag: str = DEFAULT_PROMPT_TAG

    def __post_init__(self) -> None:
        # A dict or another library's event is never read as if it were verified.
        if not isinstance(self.event, Event):
            raise TurnInputError(f"TurnEvent event: {not_an_event(self.event)}")
        if not isinstance(self.prompt_tag, str):
            raise TurnInputError(
                f"TurnEvent prompt_tag: expected a str, got {type(self.prompt_tag).__name__}"
            )


class ChannelInfo(msgspec.Struct, frozen=True):
    """Channel metadata; ``id`` None means "the newest event's channel" (docs/turn-input.md)."""

    name: str
    id: str | None = None
    type: str = "stream"
    description: str | None = None


class ContextMessage(msgspec.Struct, frozen=True):
    """One already-resolved thread or DM history message."""

    pubkey: str
    content: str
    event_id: str = ""
    timestamp: str = "unknown"


class TurnContext(msgspec.Struct, frozen=True):
    """Thread or DM history; ``total`` None means the number of messages."""

    kind: ContextKind
    messages: tuple[ContextMessage, ...] = ()
    total: int | None = None
    truncated: bool = False

    @property
    def total_count(self) -> int:
        return len(self.messages) if self.total is None else self.total


class ProfileInfo(msgspec.Struct, frozen=True):
    """What the compiler knows of a person: the label shown (a kind 0 profile's name), and
    whether the key is an agent's (a NIP-24 ``bot`` profile or the bot's own list)."""

    label: str | None = None
    is_agent: bool = False


#: The ``{channel}`` and ``{event}`` placeholders of a :class:`Retrieval` template.
CHANNEL_PLACEHOLDER = "{channel}"
EVENT_PLACEHOLDER = "{event}"


class Retrieval(msgspec.Struct, frozen=True):
    """How the envelope tells the model to fetch history it was not given: the ``History: …;
    retrieve: …`` line of docs/envelope.md.  ``thread`` is the command or tool call for the
    rest of a thread, ``channel`` the one for a channel's or a conversation's recent messages;
    ``{channel}`` becomes the turn's channel id and ``{event}`` the newest event's id.  None
    (the default of each) leaves the hint out: the line then says only what the history is.
    :data:`BUZZ_RETRIEVAL` names buzz's own commands (the compiler's default),
    :data:`NO_RETRIEVAL` none, :meth:`tool` a bot's own tool."""

    thread: str | None = None
    channel: str | None = None

    @classmethod
    def tool(cls, name: str) -> Retrieval:
        """The hint naming a bot's own tool ``name``, called with the channel (and the event,
        in a thread): ``name(channel=…, event=…)``."""
        return cls(
            thread=f"{name}(channel={CHANNEL_PLACEHOLDER}, event={EVENT_PLACEHOLDER})",
            channel=f"{name}(channel={CHANNEL_PLACEHOLDER})",
        )

    def command(self, channel_id: str, event_id: str | None) -> str | None:
        """The hint for a thread (``event_id``: the newest event's) or a channel (None).
        buzz's own commands read channels only: for a direct channel (``dm-…``, which the CLI
        refuses) they give no hint."""
        template = self.thread if event_id is not None else self.channel
        if template is None:
            return None
        if template.startswith(BUZZ_COMMAND) and channel_id.startswith(nip10.DIRECT_CHANNEL_PREFIX):
            return None
        rendered = template.replace(CHANNEL_PLACEHOLDER, channel_id)
        return rendered.replace(EVENT_PLACEHOLDER, event_id or "")


#: What every hint naming buzz's own command line starts with.
BUZZ_COMMAND = "buzz messages "
#: buzz's own commands (the default: the reference goldens and hash vectors use it).
BUZZ_RETRIEVAL = Retrieval(
    thread="buzz messages thread --channel {channel} --event {event}",
    channel="buzz messages get --channel {channel}",
)
#: No retrieval hint at all.
NO_RETRIEVAL = Retrieval()
#: The bot's own Nostr tools, served to the session over MCP (docs/bot.md, "The agent's Nostr
#: tools").
MCP_RETRIEVAL = Retrieval(
    thread="the buzz tool fetch_thread(event={event})",
    channel="the buzz tool fetch_messages(channel={channel})",
)


def retrieval_for(configured: Retrieval, *, tools: bool, cli: bool) -> Retrieval:
    """The hint a session's turns carry: the caller's own (anything but buzz's commands) as
    configured; else the bot's tools where the session was offered them (``tools``); else
    buzz's commands where the agent has a shell and the bot's configuration (``cli``: an agent
    process run as the bot's own user); else none."""
    if configured != BUZZ_RETRIEVAL:
        return configured
    if tools:
        return MCP_RETRIEVAL
    return BUZZ_RETRIEVAL if cli else NO_RETRIEVAL


class Standing(msgspec.Struct, frozen=True, rename="camel"):
    """Standing context: the eight optional members of docs/turn-input.md.  The turn-input file
    names the fields in camelCase (``teamInstructions``) and is decoded into this type directly.

    ``persona`` is the configuration's ``[context] persona``; the turn-input file and the
    envelope call it ``system`` (the ``<system>`` section).  ``workspace`` is the agent's
    working directory (``[agent] cwd``), from which the compiler writes ``<workspace>``."""

    base: str | None = None
    persona: str | None = msgspec.field(default=None, name="system")
    team_instructions: str | None = None
    core_memory: str | None = None
    huddle_instructions: str | None = None
    channel_canvas: str | None = None
    workspace: str | None = None
    #: The relays' sections (core memory, canvas, huddle guidelines) could not be confirmed
    #: as the newest: a relay that should have answered did not (their manifest layers'
    #: freshness is ``unconfirmed``).
    unconfirmed: bool = False


class ThreadCheckpointInput(msgspec.Struct, frozen=True, rename="camel"):
    """A thread checkpoint given to a new session (nips/NIP-TC.md): its decrypted ``summary``,
    the id of the signed checkpoint event (``event_id``: the layer's version) and of the
    newest event the summary covers (``covers_through``: the history starts after it)."""

    event_id: str
    covers_through: str
    summary: str


def _is_event_id(value: object) -> bool:
    """64 lowercase hexadecimal characters (an event id as NIP-01 writes it)."""
    return isinstance(value, str) and len(value) == 64 and all(c in _LOWER_HEX for c in value)


def is_public_key_hex(value: str) -> bool:
    """64 hexadecimal characters (either case; compared ASCII-lowercased)."""
    return len(value) == 64 and all(ch in _HEX for ch in value)


def _require_utf8(what: str, values: Iterable[str | None]) -> None:
    for value in values:
        if value is not None and not is_utf8_encodable(value):
            raise TurnInputError(f"{what} is not encodable as UTF-8 (lone surrogate)")


def resolve_channel_id(channel: ChannelInfo | None, newest_channel: str | None) -> str:
    """A given channel id must be valid and never falls back (docs/envelope.md)."""
    if channel is not None and channel.id is not None:
        if not nip10.is_valid_channel_id(channel.id):
            raise TurnInputError(
                "channel.id is not a valid channel id (1-128 characters from A-Z a-z 0-9 _ -)"
            )
        return channel.id
    if newest_channel is None:
        raise TurnInputError(
            "no valid channel id: give channel.id or an 'h' tag on the newest event"
        )
    return newest_channel


class TurnInput(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one compile needs; docs/turn-input.md gives the defaults.

    Constructing one checks the rules that do not need a signature check (the events are
    already verified :class:`Event` objects): a non-empty batch, a resolvable valid channel id,
    UTF-8-encodable strings.  ``profiles`` keys are compared ASCII-lowercased by the compiler.
    """

    events: tuple[TurnEvent, ...]
    cancelled_events: tuple[TurnEvent, ...] = ()
    cancel_reason: CancelReason = "steer"
    channel: ChannelInfo | None = None
    context: TurnContext | None = None
    context_had_delivered_events: bool = False
    profiles: Mapping[str, ProfileInfo] = msgspec.field(default_factory=dict)
    standing: Standing = Standing()
    system_prompt_support: bool = False
    standing_context_sent: bool = False
    #: The agent compacted the session since its standing sections went into a prompt: an
    #: agent without a system role gets them again (docs/envelope.md, "Compaction").
    standing_redelivered: bool = False
    #: The owner's public key (hex).  When given, only the owner's messages can carry a slash
    #: command; None (a hand-written turn file) keeps the rule of any single event.
    owner: str | None = None
    #: How the model may fetch the history it was not given (default: buzz's commands).
    retrieval: Retrieval = BUZZ_RETRIEVAL
    #: The thread's checkpoint, for the first turn of a new session (layer 5).
    thread_checkpoint: ThreadCheckpointInput | None = None

    def __post_init__(self) -> None:
        if not self.events:
            raise TurnInputError("events must not be empty")
        if self.owner is not None and not is_public_key_hex(self.owner):
            raise TurnInputError("owner must be a public key: 64 hexadecimal characters")
        for item in (*self.events, *self.cancelled_events):
            if not isinstance(item, TurnEvent) or not isinstance(item.event, Event):
                raise TurnInputError("events must be TurnEvent values holding verified Events")
        if self.cancel_reason not in ("interrupt", "steer"):
            raise TurnInputError("cancel_reason must be 'interrupt' or 'steer'")
        if self.context is not None:
            if self.context.kind not in ("thread", "dm"):
                raise TurnInputError("context.kind must be 'thread' or 'dm'")
            if self.context.total is not None and self.context.total < 0:
                raise TurnInputError("context.total must be an integer >= 0")
            for m in self.context.messages:
                _require_utf8("a context message", (m.pubkey, m.content, m.event_id, m.timestamp))
        _require_utf8(
            "a prompt tag", (e.prompt_tag for e in (*self.events, *self.cancelled_events))
        )
        if self.channel is not None:
            c = self.channel
            _require_utf8("the channel", (c.name, c.id, c.type, c.description))
        for key, profile in self.profiles.items():
            _require_utf8("a profile", (key, profile.label))
        s = self.standing
        _require_utf8(
            "a standing section",
            (
                s.base,
                s.persona,
                s.team_instructions,
                s.core_memory,
                s.huddle_instructions,
                s.channel_canvas,
                s.workspace,
            ),
        )
        if not isinstance(self.retrieval, Retrieval):
            raise TurnInputError("retrieval must be a Retrieval (or left out)")
        hints = (self.retrieval.thread, self.retrieval.channel)
        _require_utf8("the retrieval hint", hints)
        if any(h is not None and _LINE_BREAK.search(h) for h in hints):
            raise TurnInputError("the retrieval hint must be one line (no line breaks)")
        _check_checkpoint(self.thread_checkpoint)
        resolve_channel_id(self.channel, nip10.channel(self.events[-1].event))

    @property
    def channel_id(self) -> str:
        """The turn's channel id (validated at construction)."""
        return resolve_channel_id(self.channel, nip10.channel(self.events[-1].event))

    @classmethod
    def from_json(cls, data: str | bytes | bytearray | memoryview) -> TurnInput:
        """Read a turn-input file's text; see the module docstring for the error contract."""
        try:
            raw = utf8_document(data)
        except UnicodeError as exc:
            where = f" (byte {exc.start})" if isinstance(exc, UnicodeDecodeError) else ""
            raise TurnInputError(f"turn input is not valid UTF-8{where}") from None
        except TypeError:
            raise TurnInputError("turn input must be JSON text (str or bytes)") from None
        if raw.startswith(b"\xef\xbb\xbf"):
            raise TurnInputError("turn input must not start with a byte-order mark")
        try:
            wire = _decode_file(raw)
            profile_keys = _profile_keys_in_file_order(raw)
        except msgspec.DecodeError as exc:
            raise TurnInputError(f"invalid turn input: {exc}") from None
        except RecursionError:
            # msgspec walks ignored members too; absurd nesting must not escape untyped.
            raise TurnInputError("invalid turn input: JSON nested too deeply") from None
        return _from_wire(wire, profile_keys)


def _check_checkpoint(checkpoint: ThreadCheckpointInput | None) -> None:
    if checkpoint is None:
        return
    if not isinstance(checkpoint, ThreadCheckpointInput):
        raise TurnInputError("thread_checkpoint must be a ThreadCheckpointInput (or left out)")
    ids = (("eventId", checkpoint.event_id), ("coversThrough", checkpoint.covers_through))
    for name, value in ids:
        if not _is_event_id(value):
            raise TurnInputError(
                f"threadCheckpoint.{name} must be an event id (64 lowercase hex characters)"
            )
    _require_utf8("the thread checkpoint's summary", (checkpoint.summary,))


# ---------------------------------------------------------------------------------------------
# The file format (camelCase on the wire; null counts as absent for optional members)


class _WireTurnEvent(msgspec.Struct, rename="camel"):
    event: WireEvent
    prompt_tag: str | None = None


class _WireChannel(msgspec.Struct, rename="camel"):
    name: str
    id: str | None = None
    type: str | None = None
    description: str | None = None


class _WireMessage(msgspec.Struct, rename="camel"):
    pubkey: str
    content: str
    event_id: str | None = None
    timestamp: str | None = None


class _WireContext(msgspec.Struct, rename="camel"):
    kind: ContextKind
    messages: list[_WireMessage]
    total: Annotated[int, msgspec.Meta(ge=0)] | None = None
    truncated: bool | None = None


class _WireProfile(msgspec.Struct, rename="camel"):
    label: str | None = None
    is_agent: bool | None = None


class _WireRetrieval(msgspec.Struct):
    thread: str | None = None
    channel: str | None = None


class _WireTurnInput(msgspec.Struct, rename="camel"):
    events: list[_WireTurnEvent]
    cancelled_events: list[_WireTurnEvent] | None = None
    cancel_reason: CancelReason | None = None
    channel: _WireChannel | None = None
    context: _WireContext | None = None
    context_had_delivered_events: bool | None = None
    profiles: dict[str, _WireProfile] | None = None
    standing: Standing | None = None
    system_prompt_support: bool | None = None
    standing_context_sent: bool | None = None
    standing_redelivered: bool | None = None
    owner: str | None = None
    retrieval: _WireRetrieval | None = None
    thread_checkpoint: ThreadCheckpointInput | None = None


_decode_file = msgspec.json.Decoder(_WireTurnInput).decode


class _RawProfiles(msgspec.Struct):
    profiles: msgspec.Raw = msgspec.Raw(b"null")


_decode_raw_profiles = msgspec.json.Decoder(_RawProfiles).decode


def _profile_keys_in_file_order(raw: bytes | bytearray | memoryview) -> list[str]:
    """Every key of ``profiles`` in file order, repeats included.

    A decoded dict keeps a repeated key at its first position, which would let an earlier key
    win an ASCII-case collision ({"ab": X, "AB": Y, "ab": Z} must give Z: the later key in the
    file wins, docs/turn-input.md).  Only called after the typed decode accepted the whole file, so
    the text is valid JSON with no NaN, Infinity or lone surrogate.
    """
    member = _decode_raw_profiles(raw).profiles
    try:
        pairs = json.loads(bytes(member), object_pairs_hook=lambda p: p)
    except ValueError as exc:  # not reachable after the typed decode; stay typed regardless
        raise TurnInputError(f"invalid turn input: profiles: {exc}") from None
    return [] if pairs is None else [k for k, _ in pairs]


def _check_event_shape(where: str, wire: WireEvent) -> None:
    try:
        check_structure(
            wire.id, wire.pubkey, wire.created_at, wire.kind, wire.tags, wire.content, wire.sig
        )
    except InvalidEvent as exc:
        # A malformed event is a shape problem of the file (exit 1), not a failed check (exit 4).
        raise TurnInputError(f"{where}: malformed event: {exc.detail}") from None


def _verify(where: str, wire: WireEvent) -> Event:
    try:
        return Event.from_wire(wire)
    except InvalidEvent as exc:
        raise InvalidEvent(exc.reason, f"{where}: {exc.detail}") from None


def _from_wire(w: _WireTurnInput, profile_keys: list[str]) -> TurnInput:
    # Step 1 (cheap): shape of everything, including the channel id.
    if not w.events:
        raise TurnInputError("events must not be empty")
    cancelled = w.cancelled_events or []
    for i, te in enumerate(w.events):
        _check_event_shape(f"events[{i}]", te.event)
    for i, te in enumerate(cancelled):
        _check_event_shape(f"cancelledEvents[{i}]", te.event)
    channel = _channel(w.channel)
    if w.owner is not None and not is_public_key_hex(w.owner):
        raise TurnInputError("owner must be a public key: 64 hexadecimal characters")
    newest = w.events[-1].event
    resolve_channel_id(channel, nip10.channel_from_tags(newest.kind, newest.tags))
    _check_checkpoint(w.thread_checkpoint)
    context = _context(w.context)
    profiles = _profiles(w.profiles or {}, profile_keys)

    # Step 2 (expensive): ids, public keys and signatures, in file order.
    return TurnInput(
        events=_verified("events", w.events),
        cancelled_events=_verified("cancelledEvents", cancelled),
        cancel_reason=w.cancel_reason if w.cancel_reason is not None else "steer",
        channel=channel,
        context=context,
        context_had_delivered_events=bool(w.context_had_delivered_events),
        profiles=profiles,
        standing=w.standing or Standing(),
        system_prompt_support=bool(w.system_prompt_support),
        standing_context_sent=bool(w.standing_context_sent),
        standing_redelivered=bool(w.standing_redelivered),
        owner=w.owner,
        retrieval=(
            BUZZ_RETRIEVAL
            if w.retrieval is None
            else Retrieval(thread=w.retrieval.thread, channel=w.retrieval.channel)
        ),
        thread_checkpoint=w.thread_checkpoint,
    )


def _channel(wire: _WireChannel | None) -> ChannelInfo | None:
    if wire is None:
        return None
    kind = wire.type if wire.type is not None else "stream"
    return ChannelInfo(name=wire.name, id=wire.id, type=kind, description=wire.description)


def _context(wire: _WireContext | None) -> TurnContext | None:
    if wire is None:
        return None
    messages = tuple(
        ContextMessage(
            pubkey=m.pubkey,
            content=m.content,
            event_id=m.event_id if m.event_id is not None else "",
            timestamp=m.timestamp if m.timestamp is not None else "unknown",
        )
        for m in wire.messages
    )
    return TurnContext(wire.kind, messages, total=wire.total, truncated=bool(wire.truncated))


def _profiles(wire: dict[str, _WireProfile], keys: list[str]) -> dict[str, ProfileInfo]:
    """Keys are lowercased as the file is read; on a collision the later key in the file wins
    (re-inserted, so table order follows the file too).  A repeated exact key holds its last
    value, as everywhere in JSON decoding."""
    profiles: dict[str, ProfileInfo] = {}
    for key in keys:
        p = wire[key]
        lowered = ascii_lower(key)
        profiles.pop(lowered, None)
        profiles[lowered] = ProfileInfo(label=p.label, is_agent=bool(p.is_agent))
    return profiles


def _verified(name: str, events: list[_WireTurnEvent]) -> tuple[TurnEvent, ...]:
    return tuple(
        TurnEvent(_verify(f"{name}[{i}]", te.event), _prompt_tag(te)) for i, te in enumerate(events)
    )


def _prompt_tag(te: _WireTurnEvent) -> str:
    return te.prompt_tag if te.prompt_tag is not None else DEFAULT_PROMPT_TAG
