"""Telemetry of turns, as values: where turns are exported (:class:`Telemetry`), what a sink is
told of each turn (:class:`TurnBegan`, :class:`SteerSeen`, :class:`PermissionSeen`,
:class:`RetrievalSeen`, :class:`TurnEnded`) and what a sink is (:class:`TurnSink`).  No I/O:
the bot makes the records (:mod:`nostr_buzz.bot.telemetry`), the OpenTelemetry sink exports
them (:mod:`nostr_buzz.io.otel`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol
from urllib.parse import urlsplit

from nostr_buzz.errors import ConfigError

if TYPE_CHECKING:  # a name for annotations only: the metric codec loads with the bot's turns
    from nostr_buzz.nips.nip_am import TokenCounts

__all__ = [
    "PermissionSeen",
    "RetrievalSeen",
    "SteerSeen",
    "Telemetry",
    "TurnBegan",
    "TurnEnded",
    "TurnSink",
    "check_otlp_endpoint",
    "check_telemetry_headers",
]

#: An HTTP header's name (RFC 9110 token).
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def check_otlp_endpoint(url: str, where: str) -> str:
    """An OTLP/HTTP base URL: ``http://`` or ``https://`` with a host, no credentials in it
    (they go in the headers, which are never shown) and no query or fragment."""
    if not isinstance(url, str):
        raise ConfigError(f"{where}: expected a URL string, got {type(url).__name__}")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: expected an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{where}: no credentials in the URL; give them in telemetry.headers")
    if parts.query or parts.fragment:
        raise ConfigError(f"{where}: the base URL takes no query or fragment")
    return url.strip().rstrip("/")


def check_telemetry_headers(headers: Mapping[str, str], where: str) -> None:
    """Header names that are HTTP tokens, values that are text on one line; an error names the
    header, never its value (a credential)."""
    if not isinstance(headers, Mapping):
        raise ConfigError(f"{where}: expected a table of NAME = VALUE")
    for name, value in headers.items():
        if not isinstance(name, str) or _HEADER_NAME.fullmatch(name) is None:
            raise ConfigError(f"{where}: {str(name)[:40]!r} is not a header name")
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            raise ConfigError(f"{where}: {name}: the value must be text on one line")


@dataclass(frozen=True, kw_only=True)
class Telemetry:
    """Where and how turns are exported (``[telemetry]``; ``PluginConfig(telemetry=…)``).

    ``endpoint`` is the OTLP/HTTP base URL (``/v1/traces`` and ``/v1/metrics`` are appended);
    ``headers`` go with every export and are credentials: never shown.  ``export_content``
    adds the words of public turns; ``metrics`` False exports spans only (Langfuse)."""

    endpoint: str
    headers: Mapping[str, str] = field(default_factory=dict)
    service_name: str = "nostr-buzz"
    agent_name: str | None = None
    provider: str | None = None
    export_content: bool = False
    metrics: bool = True
    timeout: float = 10.0

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "endpoint", check_otlp_endpoint(self.endpoint, "PluginConfig telemetry.endpoint")
        )
        check_telemetry_headers(self.headers, "PluginConfig telemetry.headers")
        object.__setattr__(self, "headers", dict(self.headers))
        for name in ("service_name", "agent_name", "provider"):
            value = getattr(self, name)
            if not (value is None and name != "service_name") and not (
                isinstance(value, str) and value.strip()
            ):
                raise ConfigError(f"PluginConfig telemetry.{name}: expected a non-empty string")
        for name in ("export_content", "metrics"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"PluginConfig telemetry.{name}: expected true or false")
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise ConfigError("PluginConfig telemetry.timeout: expected seconds (a number)")
        if not 0 < timeout <= 120:
            raise ConfigError("PluginConfig telemetry.timeout: expected 0 < seconds ≤ 120")

    def __repr__(self) -> str:  # header values are credentials
        headers = "{" + ", ".join(f"{name!r}: <hidden>" for name in self.headers) + "}"
        return f"Telemetry(endpoint={self.endpoint!r}, headers={headers}, …)"

    @property
    def secrets(self) -> list[str]:
        """What no diagnostic may repeat: the header values."""
        return [value for value in self.headers.values() if value]


# -- what a sink is told ---------------------------------------------------------------------


@dataclass(frozen=True)
class TurnBegan:
    """A turn left the queue (``at``: Unix seconds)."""

    turn_id: str
    conversation: str  # the queue channel; a private one's keyed hash
    private: bool
    at: float
    #: The triggering events' ids and, when content is exported, their text (public only).
    event_ids: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class SteerSeen:
    """A steer delivered into a running turn and the agent's answer (``outcome``)."""

    outcome: str
    at: float
    event_id: str | None = None  # None in a private conversation
    text: str | None = None  # only when content is exported, public only


@dataclass(frozen=True)
class PermissionSeen:
    """A permission request of the agent and its decision."""

    approved: bool
    reason: str
    at: float
    tool_kind: str | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class RetrievalSeen:
    """One retrieval of the agent's Nostr tools: an event or a channel's state handed over
    (``outcome`` ``found``; one record a layer of the turn's ledger), or a call that handed
    nothing over (``outcome``: its typed error, ``not_found``, ``private``, …)."""

    tool: str
    outcome: str
    at: float
    layer: str | None = None  # retrieved_event or retrieved_channel, when handed over
    source: str | None = None  # relay_event, private_conversation or channel_state
    #: The event id handed over or asked for, or the channel state's ``sha256:`` hash (the
    #: layer's version in the turn's manifest); None in a private conversation.
    ref: str | None = None


@dataclass(frozen=True)
class TurnEnded:
    """How a turn ended: its metric's payload when it has one (every turn that reached the
    agent), else what failed (``error_type``) or that it was cancelled before its prompt."""

    turn_id: str
    conversation: str
    private: bool
    at: float
    started_at: float
    outcome: str
    error_type: str | None = None
    stop_reason: str | None = None
    session_id: str | None = None
    model: str | None = None
    usage: TokenCounts | None = None
    manifest_hash: str | None = None
    metric_event_id: str | None = None
    reply: str | None = None  # only when content is exported, public only


class TurnSink(Protocol):
    """What receives a turn's telemetry (the OpenTelemetry exporter, or a test's): called on
    the event loop, so it must not block; it may raise (the call is then dropped)."""

    def on_turn_started(self, turn: TurnBegan) -> None: ...
    def on_steer(self, turn_id: str, steer: SteerSeen) -> None: ...
    def on_permission(self, turn_id: str, permission: PermissionSeen) -> None: ...
    def on_retrieval(self, turn_id: str, retrieval: RetrievalSeen) -> None: ...
    def on_turn_finished(self, turn: TurnEnded) -> None: ...
    async def aclose(self) -> None: ...
