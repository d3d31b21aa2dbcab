"""Thread checkpoints in ``buzz run`` (nips/NIP-TC.md; docs/bot.md, "Thread checkpoints").

Under ``[sessions] checkpoint = "compaction"`` (and ``"summary_on_close"``, which adds the
summary turn of :class:`SummaryTurns`):

* **Written**: when the agent compacts a session and sends its summary (ACP's
  ``compaction_update``; claude-agent-acp does, codex-acp does not), that summary becomes the
  checkpoint of the session's key, signed by the agent and encrypted to the owner, stored in the
  outbox with the turn's metric.  It covers the newest event of the session's last completed
  turn: a compaction happens at the start of a prompt, so the summary holds everything before
  it (and when in doubt an earlier event is named: a message delivered twice costs less than
  one lost).  A session that completed no turn yet covers what its own checkpoint covered; with
  neither, nothing is written.
* **Read**: a new session of a key (not one continued from its receipt) starts from the key's
  newest checkpoint, read as state from the read relays and the agent's write relays, and
  trusted only when the agent's own key signed it and it opens as this key's
  (:func:`~nostr_buzz.nips.nip_tc.open_own_checkpoint_event`); anything else a relay serves is
  ignored with ``thread_checkpoint_ignored``.

(``bot/checkpoint.py`` is something else: the queue's state snapshot.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from nostr_buzz.acp.facts import Ended
from nostr_buzz.acp.types import TurnResult
from nostr_buzz.core.compiler import compile_checkpoint_request
from nostr_buzz.core.session_key import channel_of
from nostr_buzz.core.turn_input import ThreadCheckpointInput
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload
from nostr_buzz.nips.nip_tc import (
    CheckpointMethod,
    ThreadCheckpoint,
    build_checkpoint_event_async,
    checkpoint_filter,
    open_own_checkpoint_event,
)
from nostr_buzz.text.unicode import utf8_head
from nostr_buzz.timestamps import metric_timestamp

from .budget import BudgetGate
from .config import PluginConfig
from .delivery import Delivery, Signed
from .outputs import TurnIds, metric_payload
from .state import BotStore
from .supervisor import AgentSupervisor, ChannelSession

__all__ = ["MAX_SUMMARY_BYTES", "SummaryTurns", "ThreadCheckpoints"]

#: UTF-8 bytes of a summary a checkpoint keeps: its payload must stay under NIP-TC's 65,535
#: bytes once JSON-escaped.
MAX_SUMMARY_BYTES: Final = 32_000


def _newest_first(event: Event) -> tuple[int, str]:
    # NIP-01: the greatest created_at, and on a tie the lowest id.
    return (-event.created_at, event.id)


class ThreadCheckpoints:
    """Reads a new session's checkpoint and signs the ones compactions leave."""

    def __init__(
        self,
        config: PluginConfig,
        delivery: Delivery,
        diagnostics: DiagnosticsFeed,
        clock: Callable[[], float],
    ) -> None:
        self.enabled = config.thread_checkpoint != "off"
        self._config = config
        self._owner = config.owner
        self._signer = config.signer
        self._agent = config.signer.public_key.hex
        self._timeout = config.relay_timeout
        #: Where the agent's checkpoints go besides the owner's read relays: asked too.
        self._write_relays = tuple(config.write_relays)
        self._pool: RelayPool = delivery.pool
        self._delivery = delivery
        self._diagnostics = diagnostics
        self._clock = clock

    async def for_session(
        self, key: str, session: ChannelSession, ids: TurnIds
    ) -> ThreadCheckpointInput | None:
        """The checkpoint a session's first prompt carries: only a new session's (one
        continued from its receipt holds its conversation), read once."""
        if not self.enabled or session.turns or session.continued or session.checkpoint_read:
            return None
        session.checkpoint_read = True
        found = await self.read(key, ids)
        if found is not None:
            session.covered = found.covers_through
        return found

    async def read(self, key: str, ids: TurnIds) -> ThreadCheckpointInput | None:
        """The newest valid checkpoint of ``key`` on the relays, or None."""
        flt = checkpoint_filter(self._signer.public_key, self._owner, key)
        try:
            result = await self._pool.query_state(
                flt, write_relays=self._write_relays, timeout=self._timeout
            )
        except BuzzError as exc:
            self._ignored(None, f"the relays could not be read: {type(exc).__name__}", ids)
            return None
        for event in sorted(result.events, key=_newest_first):
            if event.pubkey != self._agent:
                self._ignored(event, "not signed by the agent's key", ids)
                continue
            try:
                opened = await open_own_checkpoint_event(self._signer, self._owner, event, key)
            except BuzzError as exc:
                self._ignored(event, str(exc), ids)
                continue
            payload = {
                "eventId": event.id,
                "coversThrough": opened.covers_through,
                "method": opened.method,
            }
            self._diagnostics.emit("thread_checkpoint_used", **ids.as_kwargs(), payload=payload)
            return ThreadCheckpointInput(event.id, opened.covers_through, opened.summary)
        return None

    def _ignored(self, event: Event | None, why: str, ids: TurnIds) -> None:
        payload = {
            "eventId": event.id if event is not None else None,
            "author": event.pubkey if event is not None else None,
            "reason": why,
        }
        self._diagnostics.emit("thread_checkpoint_ignored", **ids.as_kwargs(), payload=payload)

    async def after_turn(
        self, key: str, session: ChannelSession, result: TurnResult, ids: TurnIds
    ) -> Signed | None:
        """The checkpoint a compaction's summary makes (signed, for the turn's transaction),
        or None: checkpoints off, no summary, or nothing known to be covered."""
        summary = result.compaction_summary
        if not self.enabled or not summary:
            return None
        return await self.sign(key, session, summary, "agent_compaction", ids)

    async def sign(
        self,
        key: str,
        session: ChannelSession,
        summary: str,
        method: CheckpointMethod,
        ids: TurnIds,
    ) -> Signed | None:
        """The checkpoint of ``key`` holding ``summary``, covering the newest event the session
        is known to hold, signed (None, said with ``thread_checkpoint_failed`` when it could
        not be made; None at once for a blank summary or nothing known to be covered)."""
        if not summary.strip() or session.covered is None:
            return None
        try:
            checkpoint = ThreadCheckpoint(
                session_key=key,
                covers_through=session.covered,
                method=method,
                summary=utf8_head(summary, MAX_SUMMARY_BYTES),
                timestamp=metric_timestamp(self._clock()),
                session_id=session.metric_session_id,
            )
            event = await build_checkpoint_event_async(self._signer, self._owner, checkpoint)
            return await self._delivery.signing.to_owner(event, ids)
        except BuzzError as exc:
            # A private conversation's summary may quote it: the error's class only.
            error = type(exc).__name__ if nip10.is_private_channel(key) else str(exc)
            self.failed(ids, {"error": error, "method": method})
            return None

    def failed(self, ids: TurnIds, payload: dict[str, str]) -> None:
        """A checkpoint that could not be made: ``{error, method}``."""
        self._diagnostics.emit("thread_checkpoint_failed", **ids.as_kwargs(), payload=payload)

    def queued(self, signed: Signed, method: CheckpointMethod = "agent_compaction") -> None:
        """Said once the checkpoint is in the outbox (committed with its turn)."""
        ids = signed.ids.as_kwargs() if signed.ids is not None else {}
        for event in signed.events:
            payload = {"eventId": event.id, "method": method}
            self._diagnostics.emit("thread_checkpoint_queued", **ids, payload=payload)

    def summarize_on_close(
        self, supervisor: AgentSupervisor, store: BotStore, budget: BudgetGate
    ) -> None:
        """Under ``summary_on_close``: before the bot closes an idle session to keep
        ``max_live``, the session is asked for its summary (:class:`SummaryTurns`)."""
        if self._config.thread_checkpoint == "summary_on_close":
            turns = SummaryTurns(self, supervisor, store, budget)
            supervisor.before_close = turns.before_close


@dataclass(eq=False)
class SummaryTurns:
    """The summary turn before a session closes: a prompt of its own (compiled:
    :func:`~nostr_buzz.core.compiler.compile_checkpoint_request`), metered with its own metric,
    whose answer becomes the key's checkpoint (``summary_turn``).  Only for an agent that
    cannot continue the session (one that can resumes it from its receipt instead) and a
    session that completed a turn; the metric, the checkpoint and their spend are committed in
    one durable transaction.  The configuration, the clock and the delivery are the
    checkpoints' own."""

    checkpoints: ThreadCheckpoints
    supervisor: AgentSupervisor
    store: BotStore
    budget: BudgetGate

    async def before_close(self, key: str, session: ChannelSession) -> None:
        supervisor = self.supervisor
        if session.covered is None or supervisor.continues_sessions:
            return
        if not supervisor.driver.usable(session.start.session_id):
            return
        ids = TurnIds(channel_of(key), session.metric_session_id, uuid.uuid4().hex)
        compiled = compile_checkpoint_request()
        started = datetime.fromtimestamp(self.checkpoints._clock(), UTC)
        result: TurnResult | None = None
        try:
            async for fact in supervisor.driver.turn(session.start.session_id, compiled.sections):
                if isinstance(fact, Ended):
                    result = fact.result
        except BuzzError as exc:  # the session closes all the same; the other turn goes on
            payload = {"error": type(exc).__name__, "method": "summary_turn"}
            self.checkpoints.failed(ids, payload)
            return
        if result is not None:
            await self._commit(key, session, ids, result, compiled.manifest, started)

    async def _commit(
        self,
        key: str,
        session: ChannelSession,
        ids: TurnIds,
        result: TurnResult,
        manifest: Manifest,
        started: datetime,
    ) -> None:
        model = result.model or self.checkpoints._config.model
        harness = self.supervisor.harness
        delivery = self.checkpoints._delivery
        try:
            payload: MetricPayload | None = metric_payload(
                harness=harness,
                model=model,
                ids=ids,
                result=result,
                triggering=[],
                manifest=manifest,
                started_at=started,
            )
        except BuzzError:
            payload = None
        metric = await delivery.signing.sign_metric(payload, ids) if payload else None
        made = None
        if result.outcome == "success":
            summary = result.final_message or result.reply
            made = await self.checkpoints.sign(key, session, summary, "summary_turn", ids)
        with self.store.transaction(durable=True):
            signed = [s for s in (metric, made) if s is not None]
            stored = [e for s in signed for e in delivery.store_signed(s)]
            if metric is not None and payload is not None:
                self.budget.record(metric.events[0].id, payload)
        if made is not None:
            self.checkpoints.queued(made, "summary_turn")
        delivery.send(stored)
