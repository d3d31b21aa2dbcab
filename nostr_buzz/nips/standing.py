"""Standing context carried by signed events: channel canvas, core memory, huddle guidelines.

Three event kinds give an agent context that outlives a single turn (see ``nips/STANDING.md``):

* **channel canvas** — kind 40100 with the channel's ``h`` tag; the content is the canvas text
  and the event id is its revision.  The envelope does not carry the text itself, only which
  revision was current when the session started and how to read it (:func:`canvas_body`).
* **core memory** — kind 30174 (parameterized replaceable) with ``d`` = ``core``, signed by the
  agent, its content NIP-44 v2 encrypted to the agent's own key: a relay stores only ciphertext.
* **huddle guidelines** — kind 48106 with the channel's ``h`` tag; the trimmed content becomes the
  huddle instructions of that channel's sessions.

A canvas or guidelines event is built with the channel's ``h`` tag first and then the ``p``,
``q`` and ``t`` tags its text references call for (NIP-27, as clients tag a text), and is read
whatever other tags it carries: only its first ``h`` tag counts.

Only authors the caller trusts for a channel count for canvases and guidelines (the owner, the
agent, configured keys; never a relay's NIP-11 key): a stranger's event is ignored, never
shown.  "Newest" follows NIP-01 replaceable events: the greatest ``created_at``, and on a tie
the lowest id.

Pure: no clock, sockets or files; the only randomness is the NIP-44 nonce and the BIP-340 aux
bytes, from the OS CSPRNG unless pinned (tests).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from nostr_buzz.errors import InvalidEvent, InvalidKey, Nip44Error, StandingError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip27, nip44
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.signer import EventTemplate, Signer, signed, template
from nostr_buzz.text.escape import escape_text
from nostr_buzz.text.unicode import is_blank, trim

__all__ = [
    "CANVAS_KIND",
    "CORE_MEMORY_D",
    "CORE_MEMORY_KIND",
    "CORE_MEMORY_NUDGE",
    "HUDDLE_GUIDELINES_KIND",
    "QUERY_LIMIT",
    "StandingError",
    "build_canvas_event",
    "build_core_memory_event",
    "build_huddle_guidelines_event",
    "canvas_body",
    "canvas_filter",
    "canvas_template",
    "core_memory_filter",
    "core_memory_section",
    "core_memory_with",
    "huddle_guidelines_filter",
    "huddle_instructions",
    "newest_first",
    "open_core_memory",
    "open_core_memory_with",
    "rfc3339_seconds",
    "select_canvas",
    "select_core_memory",
    "select_huddle_guidelines",
]

CANVAS_KIND: Final = 40100
CORE_MEMORY_KIND: Final = 30174
CORE_MEMORY_D: Final = "core"
HUDDLE_GUIDELINES_KIND: Final = 48106

#: What the agent sees when every relay answered that it has no core memory yet.
CORE_MEMORY_NUDGE: Final = (
    "You have no core memory yet. Core memory is your own private notes, encrypted to your key "
    "and shown to you at the start of every session: who you work with, what you are working "
    'on, what you have learned. Create it with: buzz mem set core "TEXT" (or pipe the text '
    "into: buzz mem set core -). Read it back with: buzz mem get core"
)

#: 10000-01-01T00:00:00Z: the first time RFC 3339 cannot write.
_YEAR_10000: Final = 253_402_300_800
#: Canvases and guidelines considered per query (a relay keeps every revision of a canvas).
QUERY_LIMIT: Final = 50


def _secret(value: SecretKey | str) -> SecretKey:
    if isinstance(value, SecretKey):
        return value
    try:
        return SecretKey.from_str(value)
    except InvalidKey:
        raise StandingError("the secret key must be 64 hex characters or nsec1…") from None


def _channel(channel: str) -> str:
    if not nip10.is_valid_channel_id(channel) or channel.startswith(nip10.DIRECT_CHANNEL_PREFIX):
        raise StandingError(
            "not a channel id (1-128 characters from A-Z a-z 0-9 _ -, not starting with 'dm-')"
        )
    return channel


def _sign(
    secret: SecretKey, kind: int, content: str, tags: list[list[str]], at: int, aux: bytes | None
) -> Event:
    try:
        return sign_event(
            secret, kind=kind, content=content, tags=tags, created_at=at, aux_rand=aux
        )
    except InvalidEvent as exc:
        raise StandingError(f"cannot sign the event: {exc}") from None


# ---------------------------------------------------------------------------------------------
# Building


def _channel_event(
    secret: SecretKey | str, kind: int, channel: str, content: str, at: int, aux: bytes | None
) -> Event:
    unsigned = _channel_template(kind, channel, content, at)
    tags = [list(t) for t in unsigned.tags]
    return _sign(_secret(secret), kind, unsigned.content, tags, at, aux)


def _channel_template(kind: int, channel: str, content: str, at: int) -> EventTemplate:
    """The ``h`` tag first, then the tags the text references call for (NIP-27), as a client
    tags a text: a signer that tags as it signs (NDK's bunker) then signs it as built."""
    if is_blank(content):
        raise StandingError(f"the text of a kind {kind} event must not be blank")
    unsigned = template(kind=kind, content=content, tags=[["h", _channel(channel)]], created_at=at)
    return nip27.with_references(unsigned)


def canvas_template(channel: str, content: str, *, created_at: int) -> EventTemplate:
    """What :func:`build_canvas_event` signs, for a signer to sign: the ``h`` tag, then the
    ``p``, ``q`` and ``t`` tags the text calls for (:func:`.nip27.with_references`)."""
    return _channel_template(CANVAS_KIND, channel, content, created_at)


def build_canvas_event(
    secret: SecretKey | str,
    channel: str,
    content: str,
    *,
    created_at: int,
    aux_rand: bytes | None = None,
) -> Event:
    """A new canvas revision for ``channel`` (kind 40100, its ``h`` tag and the tags its text
    references call for: :func:`canvas_template`)."""
    return _channel_event(secret, CANVAS_KIND, channel, content, created_at, aux_rand)


def build_huddle_guidelines_event(
    secret: SecretKey | str,
    channel: str,
    content: str,
    *,
    created_at: int,
    aux_rand: bytes | None = None,
) -> Event:
    """Huddle guidelines for ``channel`` (kind 48106, its ``h`` tag and the tags its text
    references call for, as a canvas's)."""
    return _channel_event(secret, HUDDLE_GUIDELINES_KIND, channel, content, created_at, aux_rand)


def _self_key(agent: SecretKey) -> bytes:
    return nip44.conversation_key(agent, agent.public_key)


def build_core_memory_event(
    agent_secret: SecretKey | str,
    text: str,
    *,
    created_at: int,
    nonce: bytes | None = None,
    aux_rand: bytes | None = None,
) -> Event:
    """The agent's core memory (kind 30174, ``d`` = ``core``), encrypted to the agent itself."""
    agent = _secret(agent_secret)
    _check_memory_text(text)
    try:
        content = nip44.encrypt(text, _self_key(agent), nonce)
    except Nip44Error as exc:
        raise StandingError(f"cannot encrypt the core memory: {exc}") from None
    return _sign(agent, CORE_MEMORY_KIND, content, [["d", CORE_MEMORY_D]], created_at, aux_rand)


async def core_memory_with(signer: Signer, text: str, *, created_at: int) -> Event:
    """:func:`build_core_memory_event` through a signer (it encrypts to itself and signs)."""
    _check_memory_text(text)
    try:
        content = await signer.nip44_encrypt(signer.public_key, text)
    except Nip44Error as exc:
        raise StandingError(f"cannot encrypt the core memory: {exc}") from None
    tags = [["d", CORE_MEMORY_D]]
    unsigned = template(kind=CORE_MEMORY_KIND, content=content, tags=tags, created_at=created_at)
    return await signed(signer, unsigned)


def _check_memory_text(text: str) -> None:
    if is_blank(text):
        raise StandingError("the core memory text is blank")


def open_core_memory(agent_secret: SecretKey | str, event: Event) -> str:
    """The plaintext of a core-memory event the agent signed; :class:`StandingError` otherwise."""
    agent = _secret(agent_secret)
    _check_core_memory(event, agent.public_key.hex)
    try:
        return nip44.decrypt(event.content, _self_key(agent))
    except Nip44Error as exc:
        raise StandingError(f"cannot decrypt the core memory: {exc}") from None


async def open_core_memory_with(signer: Signer, event: Event) -> str:
    """:func:`open_core_memory` through the agent's signer (one NIP-44 decryption)."""
    _check_core_memory(event, signer.public_key.hex)
    try:
        return await signer.nip44_decrypt(signer.public_key, event.content)
    except Nip44Error as exc:
        raise StandingError(f"cannot decrypt the core memory: {exc}") from None


def _check_core_memory(event: Event, agent: str) -> None:
    if event.kind != CORE_MEMORY_KIND:
        raise StandingError(f"not a core memory event: kind {event.kind}")
    if event.pubkey != agent:
        raise StandingError("the core memory event is not signed by this agent")
    if _d_tag(event) != CORE_MEMORY_D:
        raise StandingError("the core memory event's d tag is not 'core'")


# ---------------------------------------------------------------------------------------------
# Selecting


def _d_tag(event: Event) -> str | None:
    values = event.tag_values("d")
    return values[0] if values else None


def newest_first(events: Iterable[Event]) -> list[Event]:
    """Greatest ``created_at`` first; on a tie the lowest id first (NIP-01)."""
    return sorted(events, key=lambda e: (-e.created_at, e.id))


def rfc3339_seconds(timestamp: int) -> str | None:
    """``2026-08-21T12:00:00Z``; None outside the years 1970-9999 (no four-digit year)."""
    if not 0 <= timestamp < _YEAR_10000:
        return None
    days, rest = divmod(timestamp, 86_400)
    # Civil date from days since 1970-01-01 (proleptic Gregorian, 400-year eras).
    z = days + 719_468
    era, doe = divmod(z, 146_097)
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    hour, rest = divmod(rest, 3600)
    minute, second = divmod(rest, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"


def _channel_document(
    events: Iterable[Event], kind: int, channel: str, trusted: Collection[str]
) -> Event | None:
    for event in newest_first(events):
        if (
            event.kind == kind
            and event.pubkey in trusted
            and nip10.channel(event) == channel
            and not is_blank(event.content)
            and rfc3339_seconds(event.created_at) is not None
        ):
            return event
    return None


def select_canvas(events: Iterable[Event], channel: str, trusted: Collection[str]) -> Event | None:
    """The newest canvas of ``channel`` with non-blank content by a trusted author."""
    return _channel_document(events, CANVAS_KIND, channel, trusted)


def select_huddle_guidelines(
    events: Iterable[Event], channel: str, trusted: Collection[str]
) -> Event | None:
    """The newest non-blank huddle guidelines of ``channel`` by a trusted author."""
    return _channel_document(events, HUDDLE_GUIDELINES_KIND, channel, trusted)


def select_core_memory(events: Iterable[Event], agent_pubkey: str) -> list[Event]:
    """The agent's own core-memory events, newest first (try them in this order)."""
    return [
        e
        for e in newest_first(events)
        if e.kind == CORE_MEMORY_KIND and e.pubkey == agent_pubkey and _d_tag(e) == CORE_MEMORY_D
    ]


# ---------------------------------------------------------------------------------------------
# Rendering and queries


def canvas_body(event: Event, channel: str) -> str:
    """The body of the ``<channel-canvas>`` section: revision, time, how to read it."""
    modified = rfc3339_seconds(event.created_at)
    if modified is None:
        raise StandingError("the canvas time cannot be written as a date")
    return (
        f"Canvas revision (event ID): {event.id}\n"
        f"Last modified: {modified}\n"
        f"Fetch current content with: buzz canvas get --channel {_channel(channel)}"
    )


def _channel_filter(kind: int, channel: str, authors: Collection[str]) -> Filter:
    return Filter(
        authors=tuple(sorted(authors)),
        kinds=(kind,),
        limit=QUERY_LIMIT,
        tags={"h": (_channel(channel),)},
    )


def core_memory_section(text: str) -> str:
    """The ``<core-memory>`` section of a decrypted memory (or the nudge), rendered and
    escaped here, so that no memory text can pass for an already rendered section."""
    return f"<core-memory>\n{escape_text(trim(text))}\n</core-memory>"


def canvas_filter(channel: str, authors: Collection[str]) -> Filter:
    """Canvases of ``channel`` by ``authors`` (hex public keys)."""
    return _channel_filter(CANVAS_KIND, channel, authors)


def huddle_guidelines_filter(channel: str, authors: Collection[str]) -> Filter:
    """Huddle guidelines of ``channel`` by ``authors`` (hex public keys)."""
    return _channel_filter(HUDDLE_GUIDELINES_KIND, channel, authors)


def core_memory_filter(agent_pubkey: str) -> Filter:
    return Filter(authors=(agent_pubkey,), kinds=(CORE_MEMORY_KIND,), tags={"d": (CORE_MEMORY_D,)})


def huddle_instructions(event: Event) -> str:
    """The huddle instructions a guidelines event gives: its trimmed content."""
    return trim(event.content)
