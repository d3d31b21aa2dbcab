"""nostr-buzz: verified Nostr events in, deterministic and auditable agent turns out."""

from nostr_buzz.errors import (
    BuzzError,
    InvalidEvent,
    InvalidKey,
    ManifestError,
    MetricError,
    Nip19Error,
    Nip44Error,
    QueueError,
    TurnInputError,
)
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import PublicKey, SecretKey

__all__ = [
    "BuzzError",
    "Event",
    "InvalidEvent",
    "InvalidKey",
    "ManifestError",
    "MetricError",
    "Nip19Error",
    "Nip44Error",
    "PublicKey",
    "QueueError",
    "SecretKey",
    "TurnInputError",
    "sign_event",
]
