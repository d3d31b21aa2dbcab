"""What a turn reports of itself (docs/bot.md, "Delivery: every turn is accounted, answered and
durable"): its output — the reply to send (under ``reply_mode = "auto"``) and its NIP-AM metric
payload, checked when made (``metric_invalid`` when it cannot be; the reply still goes), with
``reply_cut`` when the agent said more than a reply keeps — and the diagnostics of its end:
``turn_completed``, and ``turn_failed`` with the agent's error (or what failed before it
answered), secrets removed (a private conversation's: the error's class only, :mod:`.privacy`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from nostr_buzz.acp.types import TurnResult
from nostr_buzz.errors import MetricError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload

from .config import PluginConfig
from .outputs import TurnIds, metric_payload, redact, reply_text
from .privacy import result_error_class
from .running import Output, Turn
from .supervisor import AgentSupervisor, secret_values

__all__ = ["TurnReport"]


class TurnReport:
    """The outputs and end diagnostics of the bot's turns (see the module docstring)."""

    def __init__(
        self, config: PluginConfig, supervisor: AgentSupervisor, diagnostics: DiagnosticsFeed
    ) -> None:
        self.config = config
        self.supervisor = supervisor
        self.diagnostics = diagnostics
        self._secrets = secret_values(config)

    def output(
        self,
        target: Event,
        triggering: list[Event],
        manifest: Manifest | None,
        result: TurnResult,
        ids: TurnIds,
        started_at: datetime,
        permissions: tuple[int, int] = (0, 0),
    ) -> Output:
        """What a turn leaves: the reply to ``target`` and the metric of the ``triggering``
        events (the main turn's, or one the agent started on its own for a steer)."""
        payload: MetricPayload | None = None
        try:
            payload = metric_payload(
                ids=ids,
                result=result,
                # The agent that ran it, and the model it reported (else the configured one).
                harness=self.supervisor.harness,
                model=result.model or self.config.model,
                triggering=triggering,
                manifest=manifest,
                started_at=started_at,
                permissions=permissions,
            )
        except MetricError as exc:  # a payload is checked when made; the reply still goes
            self.diagnostics.emit("metric_invalid", **ids.as_kwargs(), payload={"error": str(exc)})
        if result.reply_dropped_bytes:  # the agent said more than a reply keeps
            cut = {
                "droppedBytes": result.reply_dropped_bytes,
                "maxReplyBytes": self.config.max_reply_bytes,
            }
            self.diagnostics.emit("reply_cut", **ids.as_kwargs(), payload=cut)
        reply = reply_text(result) if self.config.reply_mode == "auto" else None
        return Output(target, reply, payload, ids)

    def completed(self, turn: Turn, result: TurnResult) -> None:
        """The agent answered the turn's prompt (a failed answer is a ``turn_failed`` too)."""
        assert turn.session is not None
        turn.session.turns += 1
        self.diagnostics.turn_completed(result.outcome, result.stop_reason, **turn.ids.as_kwargs())
        if result.outcome == "failed":
            error = result.error or "the agent gave no reason"
            self.failed(turn, error, result, result.error_class)

    def failed(
        self, turn: Turn, error: str, result: TurnResult | None, error_class: str | None = None
    ) -> None:
        """``turn_failed`` with the error, secrets removed (a failure is never silent); for a
        private conversation only the error's class (:mod:`.privacy`)."""
        payload: dict[str, Any] = {"error": redact(error, self._secrets)}
        if nip10.is_private_channel(turn.batch.channel):
            evidence = result.terminal_evidence if result is not None else "error"
            payload["error"] = error_class or result_error_class(error, evidence)
        if result is not None:
            payload["terminalEvidence"] = result.terminal_evidence
        self.diagnostics.emit("turn_failed", **turn.ids.as_kwargs(), payload=payload)
