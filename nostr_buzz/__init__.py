"""nostr-buzz: verified Nostr events in, deterministic and auditable agent turns out.

The names below are the stable public API (see the README).  The pure core (events, routing,
queue, compiler, ledger, usage accounting, NIP-44 and NIP-AM) imports no network code; the relay
client and pool are loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nostr_buzz.core.compiler import CompiledSteer, CompiledTurn, compile_steer, compile_turn
from nostr_buzz.core.escape import escape_attribute, escape_text
from nostr_buzz.core.ledger import TurnLedger
from nostr_buzz.core.manifest import Layer, Manifest, manifest_from_layers
from nostr_buzz.core.metrics_report import MetricsReport, build_report
from nostr_buzz.core.queue import Batch, DeadLetter, DispatchQueue, PushResult, QueuedEvent
from nostr_buzz.core.turn_input import TurnInput
from nostr_buzz.core.usage import UsageRecord, UsageTracker
from nostr_buzz.errors import (
    BuzzError,
    InvalidEvent,
    InvalidKey,
    ManifestError,
    MetricError,
    Nip19Error,
    Nip44Error,
    OutboxError,
    QueueError,
    RelayError,
    TurnInputError,
)
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips.nip_am import MetricPayload, PricingIdentity, TokenCounts
from nostr_buzz.profile import Profile

if TYPE_CHECKING:
    from nostr_buzz.bot import BuzzPlugin, PluginConfig
    from nostr_buzz.io.metrics_reader import read_metrics
    from nostr_buzz.io.outbox import Outbox
    from nostr_buzz.io.pool import RelayPool
    from nostr_buzz.io.publisher import MetricPublisher, PublishReport
    from nostr_buzz.io.relay import RelayClient

# The edges pull in websockets and sqlite3; load them only when someone asks for them.
_LAZY = {
    "BuzzPlugin": "nostr_buzz.bot",
    "PluginConfig": "nostr_buzz.bot",
    "MetricPublisher": "nostr_buzz.io.publisher",
    "Outbox": "nostr_buzz.io.outbox",
    "PublishReport": "nostr_buzz.io.publisher",
    "RelayClient": "nostr_buzz.io.relay",
    "RelayPool": "nostr_buzz.io.pool",
    "read_metrics": "nostr_buzz.io.metrics_reader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nostr_buzz' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)


__all__ = [
    "Batch",
    "BuzzError",
    "BuzzPlugin",
    "CompiledSteer",
    "CompiledTurn",
    "DeadLetter",
    "DispatchQueue",
    "Event",
    "InvalidEvent",
    "InvalidKey",
    "Layer",
    "Manifest",
    "ManifestError",
    "MetricError",
    "MetricPayload",
    "MetricPublisher",
    "MetricsReport",
    "Nip19Error",
    "Nip44Error",
    "Outbox",
    "OutboxError",
    "PluginConfig",
    "PricingIdentity",
    "Profile",
    "PublicKey",
    "PublishReport",
    "PushResult",
    "QueueError",
    "QueuedEvent",
    "RelayClient",
    "RelayError",
    "RelayPool",
    "SecretKey",
    "TokenCounts",
    "TurnInput",
    "TurnInputError",
    "TurnLedger",
    "UsageRecord",
    "UsageTracker",
    "build_report",
    "compile_steer",
    "compile_turn",
    "escape_attribute",
    "escape_text",
    "manifest_from_layers",
    "read_metrics",
    "sign_event",
]
