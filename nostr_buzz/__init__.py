"""nostr-buzz: verified Nostr events in, deterministic and auditable agent turns out.

The names below are the stable public API (see the README).  Each is loaded on first use, so
``import nostr_buzz`` stays cheap (the command line starts in tens of milliseconds) while every
name stays importable with ``from nostr_buzz import …``.  The pure core (events, routing, queue,
compiler, ledger, usage accounting, NIP-44 and NIP-AM) imports no network code; the edges
(relays, the ACP agent, the outbox, diagnostics) are separate modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nostr_buzz._lazy import lazy_getattr as _lazy_getattr

if TYPE_CHECKING:
    from nostr_buzz.agent import (
        AgentFunction,
        AgentModuleError,
        AgentReply,
        AgentTool,
        AgentTurn,
        InProcessAgent,
    )
    from nostr_buzz.bot import BuzzPlugin, PluginConfig
    from nostr_buzz.config import BuzzConfig, ConfigSources
    from nostr_buzz.core.compiler import (
        CompiledSteer,
        CompiledTurn,
        compile_steer,
        compile_turn,
    )
    from nostr_buzz.core.context import History, channel_info_of, turn_context
    from nostr_buzz.core.gate import Admit, Command, Decision, Gate, Refuse, decide
    from nostr_buzz.core.ledger import TurnLedger
    from nostr_buzz.core.queue import Batch, DeadLetter, DispatchQueue, PushResult, QueuedEvent
    from nostr_buzz.core.reply import build_reply, reply_template
    from nostr_buzz.core.turn_input import (
        NO_RETRIEVAL,
        ChannelInfo,
        ContextMessage,
        ProfileInfo,
        Retrieval,
        Standing,
        ThreadCheckpointInput,
        TurnContext,
        TurnEvent,
        TurnInput,
    )
    from nostr_buzz.core.usage import UsageRecord, UsageTracker
    from nostr_buzz.errors import (
        AgentError,
        BuzzError,
        ConfigError,
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
    from nostr_buzz.interop import event_from_nostr_sdk
    from nostr_buzz.io.agent_driver import AgentDriver
    from nostr_buzz.io.context import fetch_history, fetch_turn_context
    from nostr_buzz.io.diagnostics import DiagnosticRecord, DiagnosticsFeed
    from nostr_buzz.io.fetch import FetchResult, fetch_event, fetch_event_result
    from nostr_buzz.io.metrics_reader import read_metrics
    from nostr_buzz.io.nip46 import Nip46Signer, client_key_in
    from nostr_buzz.io.outbox import Outbox
    from nostr_buzz.io.pool import PoolQueryResult, PublishResult, RelayPool
    from nostr_buzz.io.publisher import MetricPublisher, PublishReport
    from nostr_buzz.io.relay import QueryResult, RelayClient, Verdict
    from nostr_buzz.io.sdk_signer import SdkSigner
    from nostr_buzz.keys import PublicKey, SecretKey
    from nostr_buzz.local_signer import LocalSigner
    from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers
    from nostr_buzz.nips.nip01 import Filter
    from nostr_buzz.nips.nip10 import ThreadRef, reply_tags
    from nostr_buzz.nips.nip_am import (
        METRIC_KIND,
        MetricPayload,
        PricingIdentity,
        TokenCounts,
        build_metric_event,
        build_metric_event_async,
        created_at_of,
        open_metric_event,
    )
    from nostr_buzz.profile import Profile
    from nostr_buzz.reports.metrics_report import MetricsReport, build_report
    from nostr_buzz.signer import EventTemplate, Signer, SignerError
    from nostr_buzz.text.escape import escape_attribute, escape_text
    from nostr_buzz.timestamps import metric_timestamp

#: Where each public name lives.  Nothing is imported until a name is asked for.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "AgentFunction",
            "AgentModuleError",
            "AgentReply",
            "AgentTool",
            "AgentTurn",
            "InProcessAgent",
        ),
        "nostr_buzz.agent",
    ),
    **dict.fromkeys(("BuzzPlugin", "PluginConfig"), "nostr_buzz.bot"),
    **dict.fromkeys(("BuzzConfig", "ConfigSources"), "nostr_buzz.config"),
    **dict.fromkeys(
        ("CompiledSteer", "CompiledTurn", "compile_steer", "compile_turn"),
        "nostr_buzz.core.compiler",
    ),
    **dict.fromkeys(("History", "channel_info_of", "turn_context"), "nostr_buzz.core.context"),
    **dict.fromkeys(("escape_attribute", "escape_text"), "nostr_buzz.text.escape"),
    **dict.fromkeys(
        ("Admit", "Command", "Decision", "Gate", "Refuse", "decide"), "nostr_buzz.core.gate"
    ),
    "TurnLedger": "nostr_buzz.core.ledger",
    **dict.fromkeys(("Layer", "Manifest", "manifest_from_layers"), "nostr_buzz.manifest"),
    **dict.fromkeys(("MetricsReport", "build_report"), "nostr_buzz.reports.metrics_report"),
    **dict.fromkeys(
        ("Batch", "DeadLetter", "DispatchQueue", "PushResult", "QueuedEvent"),
        "nostr_buzz.core.queue",
    ),
    **dict.fromkeys(("build_reply", "reply_template"), "nostr_buzz.core.reply"),
    **dict.fromkeys(
        (
            "NO_RETRIEVAL",
            "ChannelInfo",
            "ContextMessage",
            "ProfileInfo",
            "Retrieval",
            "Standing",
            "ThreadCheckpointInput",
            "TurnContext",
            "TurnEvent",
            "TurnInput",
        ),
        "nostr_buzz.core.turn_input",
    ),
    **dict.fromkeys(("UsageRecord", "UsageTracker"), "nostr_buzz.core.usage"),
    **dict.fromkeys(
        (
            "AgentError",
            "BuzzError",
            "ConfigError",
            "InvalidEvent",
            "InvalidKey",
            "ManifestError",
            "MetricError",
            "Nip19Error",
            "Nip44Error",
            "OutboxError",
            "QueueError",
            "RelayError",
            "TurnInputError",
        ),
        "nostr_buzz.errors",
    ),
    **dict.fromkeys(("Event", "sign_event"), "nostr_buzz.event"),
    "event_from_nostr_sdk": "nostr_buzz.interop",
    "AgentDriver": "nostr_buzz.io.agent_driver",
    **dict.fromkeys(("fetch_history", "fetch_turn_context"), "nostr_buzz.io.context"),
    **dict.fromkeys(("DiagnosticRecord", "DiagnosticsFeed"), "nostr_buzz.io.diagnostics"),
    **dict.fromkeys(("FetchResult", "fetch_event", "fetch_event_result"), "nostr_buzz.io.fetch"),
    "read_metrics": "nostr_buzz.io.metrics_reader",
    "Outbox": "nostr_buzz.io.outbox",
    **dict.fromkeys(("PoolQueryResult", "PublishResult", "RelayPool"), "nostr_buzz.io.pool"),
    **dict.fromkeys(("Nip46Signer", "client_key_in"), "nostr_buzz.io.nip46"),
    **dict.fromkeys(("MetricPublisher", "PublishReport"), "nostr_buzz.io.publisher"),
    **dict.fromkeys(("QueryResult", "RelayClient", "Verdict"), "nostr_buzz.io.relay"),
    "Filter": "nostr_buzz.nips.nip01",
    **dict.fromkeys(("PublicKey", "SecretKey"), "nostr_buzz.keys"),
    **dict.fromkeys(("ThreadRef", "reply_tags"), "nostr_buzz.nips.nip10"),
    **dict.fromkeys(
        (
            "METRIC_KIND",
            "MetricPayload",
            "PricingIdentity",
            "TokenCounts",
            "build_metric_event",
            "build_metric_event_async",
            "created_at_of",
            "open_metric_event",
        ),
        "nostr_buzz.nips.nip_am",
    ),
    "Profile": "nostr_buzz.profile",
    "SdkSigner": "nostr_buzz.io.sdk_signer",
    **dict.fromkeys(("EventTemplate", "Signer", "SignerError"), "nostr_buzz.signer"),
    "LocalSigner": "nostr_buzz.local_signer",
    "metric_timestamp": "nostr_buzz.timestamps",
}

__all__ = [
    "METRIC_KIND",
    "NO_RETRIEVAL",
    "Admit",
    "AgentDriver",
    "AgentError",
    "AgentFunction",
    "AgentModuleError",
    "AgentReply",
    "AgentTool",
    "AgentTurn",
    "Batch",
    "BuzzConfig",
    "BuzzError",
    "BuzzPlugin",
    "ChannelInfo",
    "Command",
    "CompiledSteer",
    "CompiledTurn",
    "ConfigError",
    "ConfigSources",
    "ContextMessage",
    "DeadLetter",
    "Decision",
    "DiagnosticRecord",
    "DiagnosticsFeed",
    "DispatchQueue",
    "Event",
    "EventTemplate",
    "FetchResult",
    "Filter",
    "Gate",
    "History",
    "InProcessAgent",
    "InvalidEvent",
    "InvalidKey",
    "Layer",
    "LocalSigner",
    "Manifest",
    "ManifestError",
    "MetricError",
    "MetricPayload",
    "MetricPublisher",
    "MetricsReport",
    "Nip19Error",
    "Nip44Error",
    "Nip46Signer",
    "Outbox",
    "OutboxError",
    "PluginConfig",
    "PoolQueryResult",
    "PricingIdentity",
    "Profile",
    "ProfileInfo",
    "PublicKey",
    "PublishReport",
    "PublishResult",
    "PushResult",
    "QueryResult",
    "QueueError",
    "QueuedEvent",
    "Refuse",
    "RelayClient",
    "RelayError",
    "RelayPool",
    "Retrieval",
    "SdkSigner",
    "SecretKey",
    "Signer",
    "SignerError",
    "Standing",
    "ThreadCheckpointInput",
    "ThreadRef",
    "TokenCounts",
    "TurnContext",
    "TurnEvent",
    "TurnInput",
    "TurnInputError",
    "TurnLedger",
    "UsageRecord",
    "UsageTracker",
    "Verdict",
    "build_metric_event",
    "build_metric_event_async",
    "build_reply",
    "build_report",
    "channel_info_of",
    "client_key_in",
    "compile_steer",
    "compile_turn",
    "created_at_of",
    "decide",
    "escape_attribute",
    "escape_text",
    "event_from_nostr_sdk",
    "fetch_event",
    "fetch_event_result",
    "fetch_history",
    "fetch_turn_context",
    "manifest_from_layers",
    "metric_timestamp",
    "open_metric_event",
    "read_metrics",
    "reply_tags",
    "reply_template",
    "sign_event",
    "turn_context",
]


__getattr__ = _lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
