"""One exception family for the whole library.

Every error the library raises on bad input derives from :class:`BuzzError` and from
``ValueError``, so callers can catch either.  Messages say what was wrong and never contain
secret material (see ``SECRET_HINT``).
"""

from __future__ import annotations

import re
from typing import Generic, Literal, TypeVar

InvalidEventReason = Literal["malformed", "bad_id", "bad_pubkey", "bad_signature"]
Nip59Reason = Literal[
    "not_a_gift_wrap",
    "not_for_this_key",
    "undecryptable_wrap",
    "malformed_seal",
    "not_a_seal",
    "bad_seal_signature",
    "undecryptable_seal",
    "malformed_rumor",
    "bad_rumor_id",
    "author_mismatch",
]

#: What an error message says in place of an input that looks like a secret key.
SECRET_HINT = "(input looks like a secret key; not shown)"


class BuzzError(ValueError):
    """Base of every nostr-buzz error."""


_R = TypeVar("_R", bound=str)


class ReasonError(BuzzError, Generic[_R]):
    """An error that names the check that failed: ``reason`` (one word of a fixed set, for
    programs) and ``detail`` (for people)."""

    reason: _R

    def __init__(self, reason: _R, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class InvalidEvent(ReasonError[InvalidEventReason]):
    """An event failed strict NIP-01 validation.

    ``reason`` is one of ``malformed``, ``bad_id``, ``bad_pubkey``, ``bad_signature``, checked
    cheap-first in that order.
    """


class InvalidKey(BuzzError):
    """A key string or key bytes could not be used as a Nostr key."""


class Nip19Error(BuzzError):
    """A NIP-19 bech32 entity could not be encoded or decoded."""


class Nip44Error(BuzzError):
    """NIP-44 v2 encryption or decryption failed."""


class Nip59Error(ReasonError[Nip59Reason]):
    """A gift wrap (kind 1059), its seal (kind 13) or the rumor inside could not be opened or
    failed a check.  ``reason`` names the check; the message never holds the rumor's text."""


Nip46Reason = Literal[
    "bad_uri",
    "bad_pubkey",
    "bad_relay",
    "bad_secret",
    "malformed_message",
    "not_a_response",
    "undecryptable",
    "bad_result",
]


class Nip46Error(ReasonError[Nip46Reason]):
    """A NIP-46 connection URI (``bunker://``, ``nostrconnect://``) or a remote-signing message
    is unusable.  ``reason`` names the check; the message never holds the connection secret, a
    request's parameters or a response's result."""


class Nip17Error(BuzzError):
    """A NIP-17 private message (kind 14 rumor) or DM relay list (kind 10050) is unusable."""


class MetricError(BuzzError):
    """A NIP-AM metric event or payload is invalid."""


class ManifestError(BuzzError):
    """A context manifest is malformed or its hash does not match its layers."""


class TurnInputError(BuzzError):
    """A compiler turn input is invalid."""


class QueueError(BuzzError):
    """A dispatch-queue operation got a bad argument or a corrupt snapshot."""


class ConfigError(BuzzError):
    """Configuration (flags, ``BUZZ_*`` environment, ``buzz.toml``) is missing or invalid."""


class OutboxError(BuzzError):
    """The durable metric outbox (SQLite) could not be opened, read or written."""


class StateError(BuzzError):
    """The bot's state database could not be opened, read or written, or is inconsistent."""


class RelayError(BuzzError):
    """A relay URL, filter or relay-protocol argument is unusable (not a network failure)."""


class LocalAddressError(RelayError):
    """A relay that someone else named is on this host or its networks (its host's spelling
    or an address it resolves to), and is not one of the relays configured to be there."""


class AgentError(BuzzError):
    """The ACP agent could not be started, initialized or asked for a session, or was misused
    (no agent running, a second prompt in one session)."""


def looks_secret(text: str) -> bool:
    """True for strings an error message must not repeat: a bech32 secret key, alone or inside
    other text (a key pasted into a URL or a list is still a key)."""
    return "nsec1" in text.lower()


_NSEC_RUN = re.compile(r"nsec1[0-9a-z]*", re.IGNORECASE)
_LONG_HEX = re.compile(r"[0-9a-fA-F]{32,}")


def describe_input(text: str, *, limit: int = 80, hex_may_be_secret: bool = False) -> str:
    """``text`` quoted for an error message (cut at ``limit`` characters), or ``SECRET_HINT``
    in its place when it looks like a secret key.  With ``hex_may_be_secret`` a long run of hex
    digits counts too: where no id or public key is expected, a mistyped raw secret key must
    not be half repeated."""
    if looks_secret(text) or (hex_may_be_secret and _LONG_HEX.search(text)):
        return SECRET_HINT
    return repr(text if len(text) <= limit else text[:limit] + "…")


def redact(text: str) -> str:
    """``text`` with every bech32 secret key in it replaced by ``SECRET_HINT``."""
    return _NSEC_RUN.sub(SECRET_HINT, text)


class StandingError(BuzzError):
    """A standing-context event (channel canvas, core memory, huddle guidelines) could not be
    built or opened."""


class CheckpointError(BuzzError):
    """A thread checkpoint (nips/NIP-TC.md) could not be built, or an event is not a valid one
    of the agent's."""


StateDirReason = Literal["missing", "unsafe", "not_a_bot"]


class StateDirError(ReasonError[StateDirReason], StateError):
    """A directory read as a bot's state directory (``buzz watch``) is not one: ``missing``
    (no such directory, or no bot database in it), ``unsafe`` (a symbolic link, another user's,
    writable by group or others) or ``not_a_bot`` (a database that is not the bot's)."""
