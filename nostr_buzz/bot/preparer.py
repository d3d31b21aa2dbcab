"""A turn's prompt, made ready: its agent session (opened, continued or new), its context
(the history, the standing context, a new session's thread checkpoint), and the compiled
envelope whose manifest starts the turn's ledger (docs/architecture.md, steps 5 to 7)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from nostr_buzz.core.compaction import standing_redelivered
from nostr_buzz.core.compiler import CompiledTurn, compile_turn, standing_text
from nostr_buzz.core.turn_input import TurnInput
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip59 import PrivateEvent

from .context import ContextResolver
from .running import Turn
from .state import BotStore
from .supervisor import AgentSupervisor
from .thread_checkpoints import ThreadCheckpoints

__all__ = ["TurnPreparer"]


@dataclass(eq=False)
class TurnPreparer:
    """Prepares the bot's turns through its agent supervisor, context resolver and store."""

    store: BotStore
    supervisor: AgentSupervisor
    resolver: ContextResolver
    checkpoints: ThreadCheckpoints
    diagnostics: DiagnosticsFeed

    async def prepare(self, turn: Turn) -> tuple[CompiledTurn, list[str]] | None:
        """Session, context, compile; the compiled turn, or None when cancelled meanwhile."""
        batch = turn.batch
        channel_id = nip10.channel(batch.events[-1].event)  # None: no channel's standing
        receipts = self.store.receipts
        session = await self.supervisor.session_for(batch.channel, channel_id, receipts)
        turn.session = session
        checkpoint = await self.checkpoints.for_session(batch.channel, session, turn.ids)
        turn_input, history_ids = await self.resolver.resolve(batch, session, checkpoint)
        compactions = self.supervisor.driver.compactions(session.start.session_id)
        if standing_redelivered(
            system_prompt_support=turn_input.system_prompt_support,
            standing_context_sent=turn_input.standing_context_sent,
            compactions=compactions,
            compactions_at_delivery=session.standing_compactions,
        ):
            turn_input = msgspec.structs.replace(turn_input, standing_redelivered=True)
        if self._standing_included(turn_input):
            turn.standing_sent_at = compactions
        compiled = compile_turn(turn_input)
        turn.ledger.reset()
        turn.ledger.set_base(compiled.manifest)
        ids = turn.ids.as_kwargs()
        self.diagnostics.turn_started([q.event.id for q in batch.events], **ids)
        if turn.cancel_reason is not None:
            return None
        self.diagnostics.prompt_context_delivery(
            compiled.sections,
            compiled.manifest,
            standing_context_included=self._standing_included(turn_input),
            event_delta_count=len(turn_input.context.messages) if turn_input.context else 0,
            private=any(
                isinstance(q.event, PrivateEvent) for q in [*batch.events, *batch.cancelled_events]
            ),
            **ids,
        )
        return compiled, history_ids

    def _standing_included(self, turn_input: TurnInput) -> bool:
        # Legacy delivery prepends every non-blank standing section to this prompt: the
        # session's first, and the first after the agent compacted them away.
        again = turn_input.standing_redelivered and not turn_input.system_prompt_support
        first = not turn_input.standing_context_sent
        return (first or again) and bool(standing_text(turn_input.standing))
