"""One ACP session's state machine, without I/O: ``receive(fact, now) → actions``.

The driver feeds every fact of a session (:mod:`.facts`: what it sent, what the agent said,
that time passed) with the monotonic time, performs the actions it gets back, and asks
:meth:`Session.deadline` when time next matters.  Nothing here reads a clock or awaits.

Phases of the session (never ``RETIRED`` → anything):

* ``IDLE`` — no prompt runs; ``PromptSent`` → ``PROMPTING``.
* ``PROMPTING`` — the prompt is unanswered; ``CancelAsked`` → ``CANCELLING`` (answer awaited
  for ``cancel_grace``); the idle or hard timeout → ``ENDED`` (failed, ``timeout``, and a
  ``session/cancel``).
* ``CANCELLING`` — as ``PROMPTING``, but the answer is read as an answer to the cancel, and no
  answer within the grace ends the turn cancelled with ``timeout``.
* ``ENDED`` — the prompt's end is known (``EndPrompt``); :meth:`Session.settle` applies the
  hollow-turn rule and the profile's retirement rules → ``IDLE`` or ``RETIRED``.
* ``RETIRED`` — never prompted again (``Retire`` closes it at the agent when it can).

Beside the prompt, a steer answered ``startedNewTurn`` makes the agent write a turn of its
own: updates that arrive after the prompt's answer while a steer's answer is awaited are held
(``pending``) and replayed where they belong once it is known; once ``active``, what the agent
sends after the prompt's answer is that turn's (``SplitUsage`` ends the prompt's usage there).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import msgspec

from nostr_buzz.core.usage import UsageRecord, UsageTracker
from nostr_buzz.text.unicode import utf8_head, utf8_size

from .facts import (
    AgentFact,
    AgentGone,
    CancelAsked,
    Compaction,
    CompactionChunk,
    Cost,
    CumulativeUsage,
    Fact,
    ModelFailed,
    Occupancy,
    OwnTurnBegan,
    PromptAnswered,
    PromptFailed,
    PromptSent,
    PromptUsage,
    RunId,
    SteerAnswered,
    SteerSent,
    Text,
    Tick,
    ToolCall,
)
from .profiles import AdapterProfile
from .types import Ending, TerminalEvidence, TurnResult
from .wire import MAX_SUMMARY_BYTES, stop_reason

if TYPE_CHECKING:
    from datetime import datetime

__all__ = [
    "HOLLOW_ERROR",
    "Action",
    "Count",
    "EndPrompt",
    "Phase",
    "Report",
    "Retire",
    "SendCancel",
    "Session",
    "SplitUsage",
    "StateError",
    "Timeouts",
    "TurnRecord",
    "count_usage",
]

HOLLOW_ERROR = (
    "the agent ended the turn at once with no text and no usage after a cancel: its session "
    "did not survive the cancel"
)


class StateError(Exception):
    """A fact the session cannot take in its phase (a driver bug or a refused call)."""


class Phase(enum.Enum):
    IDLE = "idle"
    PROMPTING = "prompting"
    CANCELLING = "cancelling"
    ENDED = "ended"
    RETIRED = "retired"


# -- actions -----------------------------------------------------------------------------------


class SendCancel(msgspec.Struct, frozen=True):
    """Send ``session/cancel``."""


class EndPrompt(msgspec.Struct, frozen=True):
    """The prompt's end is known: stop waiting, close its usage, then :meth:`Session.settle`."""

    ending: Ending


class Retire(msgspec.Struct, frozen=True):
    """Never prompt the session again; ``session/close`` it when the agent can."""


class Count(msgspec.Struct, frozen=True):
    """Give a usage fact to the usage tracker (of the turn it was routed to)."""

    fact: Cost | CumulativeUsage | PromptUsage


class Report(msgspec.Struct, frozen=True):
    """A fact of the prompt's turn, for its stream: what the agent said in it, that a steer
    was answered, that the agent's own turn began."""

    fact: Fact


class SplitUsage(msgspec.Struct, frozen=True):
    """What the agent sends belongs to its own turn: begin that turn's usage, first ending the
    prompt's here when it is still open (``close_prompt``; its record is kept for settle)."""

    close_prompt: bool = False


Action = SendCancel | EndPrompt | Retire | Count | Report | SplitUsage


@dataclass(frozen=True)
class Timeouts:
    idle: float = 620.0
    hard: float = 7200.0
    cancel_grace: float = 10.0


# -- one turn's record -------------------------------------------------------------------------


@dataclass
class TurnRecord:
    """What a turn collected: its text (a tool call starts a new paragraph), tool calls,
    occupancy, run id, and when it was last heard from."""

    started: float
    last_activity: float
    hard_deadline: float
    chunks: list[str] = field(default_factory=list)
    final: list[str] = field(default_factory=list)
    message_id: str | None = None
    paragraph_break: bool = False
    tool_calls: int = 0
    context_used: int | None = None
    context_size: int | None = None
    run_id: str | None = None
    heard: bool = False
    #: The agent reported the model call failed: its text is the error.
    model_failed: bool = False
    #: UTF-8 bytes of text the turn keeps (None: no cap); what comes past it is counted in
    #: ``dropped`` and not kept, so that a flood of text cannot grow the bot's memory.
    max_text: int | None = None
    kept: int = 0
    dropped: int = 0
    #: Compactions the agent completed in (or, idle, just before) this turn, and the summary
    #: of the last of them (docs/acp-adapters.md, "Compaction"; counted by the session).
    compactions: int = 0
    summary: CompactionSummary | None = None

    def apply(self, fact: AgentFact, now: float) -> AgentFact:
        """Take ``fact`` in; what of it the turn kept (a ``Text`` past the cap: its kept
        start, possibly empty)."""
        self.last_activity = now
        if isinstance(fact, Text):
            kept = self._text(fact.text, fact.message_id)
            return fact if kept is fact.text else Text(kept, fact.message_id)
        elif isinstance(fact, ToolCall):
            self.tool_calls += 1
            self.paragraph_break = True
        elif isinstance(fact, Occupancy):
            self.context_used, self.context_size = fact.used, fact.size
        elif isinstance(fact, RunId):
            self.run_id = fact.run_id
        elif isinstance(fact, ModelFailed):
            self.model_failed = True
        return fact

    def _text(self, text: str, message_id: str | None) -> str:
        if message_id is not None and message_id != self.message_id:
            self.message_id = message_id
            self.final = []
        if self.paragraph_break and text.strip():
            self.paragraph_break = False
            if "".join(self.chunks).strip():  # (the final message is the end of the chunks)
                brk = self._keep("\n\n")
                self.chunks.append(brk)
                if "".join(self.final).strip():
                    self.final.append(brk)
        text = self._keep(text)
        self.chunks.append(text)
        self.final.append(text)
        return text

    def _keep(self, text: str) -> str:
        """What of ``text`` fits under the cap (counted); the rest is counted as dropped."""
        if self.max_text is None:
            return text
        if self.dropped:  # already cut: nothing more is kept
            self.dropped += utf8_size(text)
            return ""
        size = utf8_size(text)
        if self.kept + size <= self.max_text:
            self.kept += size
            return text
        kept = utf8_head(text, self.max_text - self.kept)
        self.kept += utf8_size(kept)
        self.dropped += size - utf8_size(kept)
        return kept

    @property
    def reply(self) -> str:
        return "".join(self.chunks)

    def result(
        self,
        ending: Ending,
        usage: UsageRecord | None,
        turn_seq: int,
        session_id: str,
        started_at: datetime,
        ended_at: datetime,
    ) -> TurnResult:
        """What the turn leaves: its text, usage and how it ended."""
        summary = (self.summary.text or None) if self.summary is not None else None
        return TurnResult.of(
            ending,
            reply=self.reply,
            final_message="".join(self.final),
            usage=usage,
            session_id=session_id,
            run_id=self.run_id,
            started_at=started_at,
            ended_at=ended_at,
            context_used=self.context_used,
            context_size=self.context_size,
            turn_seq=turn_seq,
            reply_dropped_bytes=self.dropped,
            compactions=self.compactions,
            compaction_summary=summary,
        )


@dataclass(frozen=True)
class CompactionSummary:
    """The summary of a compaction as its updates patch it: chunks append, an update's
    ``summary`` replaces (ACP's patch rules), capped at :data:`MAX_SUMMARY_BYTES`."""

    compaction_id: str
    text: str

    @classmethod
    def follow(
        cls, held: CompactionSummary | None, fact: Compaction | CompactionChunk
    ) -> CompactionSummary:
        before = held.text if held is not None and held.compaction_id == fact.compaction_id else ""
        if isinstance(fact, CompactionChunk):
            text = utf8_head(before + fact.text, MAX_SUMMARY_BYTES)
        else:
            text = before if fact.summary is None else fact.summary
        return cls(fact.compaction_id, text)


#: The most compaction ids a session remembers to count each compaction once (an agent may
#: repeat a terminal update): bounded whatever it sends.
RECENT_COMPACTIONS = 32


def hollow(record: TurnRecord, usage: UsageRecord | None) -> bool:
    """Nothing at all: no text, no tool call, no (or all-zero) usage."""
    if record.reply.strip() or record.tool_calls:
        return False
    counts = usage.turn if usage is not None else None
    if counts is None:
        return True
    spent = (counts.input_tokens, counts.output_tokens, counts.total_tokens)
    return not any(spent) and not counts.cost_usd


def count_usage(
    tracker: UsageTracker, key: str, fact: Cost | CumulativeUsage | PromptUsage
) -> None:
    """Give one usage fact to the tracker (``key``: the session's)."""
    if isinstance(fact, Cost):
        tracker.observe_cost(key, fact.usd)
    elif isinstance(fact, CumulativeUsage):  # a usage fact's fields are the tracker's keywords
        tracker.observe_cumulative(key, **msgspec.structs.asdict(fact))
    else:
        tracker.observe_turn(key, **msgspec.structs.asdict(fact))


OwnPhase = Literal["pending", "active", "running"]


# -- the session -------------------------------------------------------------------------------


class Session:
    """One ACP session of one agent process (see the module docstring)."""

    def __init__(
        self, profile: AdapterProfile, timeouts: Timeouts, max_reply_bytes: int | None = None
    ) -> None:
        self.profile = profile
        self.timeouts = timeouts
        #: UTF-8 bytes of text a turn keeps (``TurnRecord.max_text``).
        self.max_reply_bytes = max_reply_bytes
        self.phase = Phase.IDLE
        self.turn: TurnRecord | None = None  # the prompt's, from PromptSent to settle
        self.cancel_deadline: float | None = None
        self.ending: Ending | None = None
        #: The last settled turn of the session got a ``session/cancel``.
        self.cancelled_last = False
        self.run_id: str | None = None  # the agent's current run (goose), while a turn runs
        self.steering = False  # a steer is on the wire: one at a time
        self.own: TurnRecord | None = None
        self.own_phase: OwnPhase | None = None
        self.held: list[AgentFact] = []
        #: UTF-8 bytes of text held, and dropped past the reply cap while held.
        self.held_text, self.held_dropped = 0, 0
        self.usage_split = False
        #: Permission requests of the running prompt waiting for the owner's answer: the idle
        #: timeout does not run meanwhile (the hard one does).
        self.asking = 0
        #: Compactions the agent completed in this session, ever: whatever travelled in the
        #: conversation before the last one is gone from the model (docs/envelope.md).
        self.compactions = 0
        self._recent_compactions: deque[str] = deque(maxlen=RECENT_COMPACTIONS)
        #: What was compacted while no turn ran: the next turn's record takes it.
        self._idle_compactions = 0
        self._idle_summary: CompactionSummary | None = None
        self._building: CompactionSummary | None = None  # the summary being written

    # -- questions -----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """A prompt is unanswered and not being cancelled (permission requests are decided
        only then)."""
        return self.phase == Phase.PROMPTING

    @property
    def usable(self) -> bool:
        return self.phase != Phase.RETIRED

    def deadline(self) -> float | None:
        """When a ``Tick`` may end the prompt (None: no prompt waits)."""
        turn = self.turn
        if turn is None or self.phase not in (Phase.PROMPTING, Phase.CANCELLING):
            return None
        idle = turn.hard_deadline if self.asking else turn.last_activity + self.timeouts.idle
        at = min(idle, turn.hard_deadline)
        return at if self.cancel_deadline is None else min(at, self.cancel_deadline)

    # -- the machine ---------------------------------------------------------------------

    def receive(self, fact: Fact, now: float) -> tuple[Action, ...]:
        """Take one fact at monotonic time ``now``; the actions the driver must perform."""
        if isinstance(fact, PromptSent):
            return self._prompt_sent(now)
        if isinstance(fact, CancelAsked):
            if self.phase == Phase.PROMPTING:
                self.phase = Phase.CANCELLING
                self.cancel_deadline = now + self.timeouts.cancel_grace
            return (SendCancel(),)
        if isinstance(fact, Tick):
            return self._tick(now)
        if isinstance(fact, PromptAnswered | PromptFailed | AgentGone):
            return self._prompt_ended(fact)
        if isinstance(fact, SteerSent):
            self.steering = True
            if self.own_phase is None:
                self.own, self.own_phase = self._record(now), "pending"
            return ()
        if isinstance(fact, SteerAnswered):
            return self._steer_answered(fact, now)
        if isinstance(fact, AgentFact):
            return self._agent_fact(fact, now)
        return ()

    def ask_started(self) -> None:
        """A permission request went to the owner: the agent waits, it is not idle."""
        self.asking += 1

    def ask_ended(self, now: float) -> None:
        """The owner's answer (or its absence) came: the idle clock starts again from ``now``."""
        self.asking = max(0, self.asking - 1)
        if self.turn is not None:
            self.turn.last_activity = max(self.turn.last_activity, now)

    def may_steer(self) -> bool:
        """Whether a steer may go on the wire now: one steer at a time per running prompt (the
        rule's only place; a caller that holds several steers queues them)."""
        return not (self.steering and self.turn is not None)

    def _record(self, now: float) -> TurnRecord:
        return TurnRecord(now, now, now + self.timeouts.hard, max_text=self.max_reply_bytes)

    def _prompt_sent(self, now: float) -> tuple[Action, ...]:
        if self.phase == Phase.RETIRED:
            raise StateError("the session was retired after a cancelled or failed turn")
        if self.phase != Phase.IDLE or self.own_phase == "running":
            raise StateError("a prompt is already running in the session")
        self.phase, self.turn = Phase.PROMPTING, self._record(now)
        self.cancel_deadline, self.ending, self.usage_split = None, None, False
        self.turn.compactions, self.turn.summary = self._idle_compactions, self._idle_summary
        self._idle_compactions, self._idle_summary = 0, None
        return ()

    def _tick(self, now: float) -> tuple[Action, ...]:
        at = self.deadline()
        if at is None or now < at:
            return ()
        if self.cancel_deadline is not None and now >= self.cancel_deadline:
            return self._end(
                Ending("cancelled", "cancelled", "timeout", error="no answer to the cancel")
            )
        assert self.turn is not None
        idle = now >= self.turn.last_activity + self.timeouts.idle
        what = "idle" if idle else "hard"
        ending = Ending("error", "failed", "timeout", error=f"{what} timeout")
        self.cancel_deadline = self.cancel_deadline or now  # the cancel below counts
        return (*self._end(ending), SendCancel())

    def _prompt_ended(self, fact: PromptAnswered | PromptFailed | AgentGone) -> tuple[Action, ...]:
        if self.phase not in (Phase.PROMPTING, Phase.CANCELLING):
            return ()
        cancelling = self.phase == Phase.CANCELLING
        if isinstance(fact, AgentGone):
            return self._end(Ending("error", "failed", "agent_exit", error=fact.error))
        if isinstance(fact, PromptFailed):
            if cancelling:
                return self._end(
                    Ending("cancelled", "cancelled", "cancel_response", error=fact.error)
                )
            return self._end(Ending("error", "failed", "error", error=fact.error))
        native = fact.stop_reason
        if native is None:
            return self._end(
                Ending("error", "failed", "error", error="prompt response without stopReason")
            )
        stop = stop_reason(native)
        turn = self.turn
        if turn is not None and turn.model_failed and not cancelling:  # the text is the error
            error = "".join(turn.final).strip() or "the agent reported a system error"
            return self._end(Ending("error", "failed", "error", native=native, error=error))
        if stop == "cancelled":
            evidence: TerminalEvidence = "cancel_response" if cancelling else "prompt_response"
            return self._end(Ending("cancelled", "cancelled", evidence, native=native))
        return self._end(Ending(stop, "success", "prompt_response", native=native))

    def _end(self, ending: Ending) -> tuple[Action, ...]:
        self.phase, self.ending = Phase.ENDED, ending
        return (EndPrompt(ending),)

    def settle(self, usage: UsageRecord | None, now: float) -> tuple[Ending, tuple[Action, ...]]:
        """The prompt's final ending once its usage is closed, and whether to retire: a turn
        after a cancel that ends within the profile's hollow window with nothing at all is
        failed; a failed turn, and a troubled one of an agent that does not survive a cancel,
        retires the session."""
        if self.phase != Phase.ENDED or self.ending is None or self.turn is None:
            raise StateError("no prompt has ended in the session")
        ending, turn, cancelled = self.ending, self.turn, self.cancel_deadline is not None
        self.turn, self.ending, self.run_id = None, None, None
        if (
            self.cancelled_last
            and not cancelled
            and ending.outcome == "success"
            and now - turn.started <= self.profile.hollow_window
            and hollow(turn, usage)
        ):
            self.phase = Phase.RETIRED
            return Ending("error", "failed", "error", native=ending.native, error=HOLLOW_ERROR), (
                Retire(),
            )
        self.cancelled_last = cancelled
        troubled = cancelled or ending.outcome != "success"
        if (ending.outcome == "failed" and self.profile.retire_after_failure) or (
            troubled and not self.profile.survives_cancel
        ):
            self.phase = Phase.RETIRED
            return ending, (Retire(),)
        self.phase = Phase.IDLE
        return ending, ()

    # -- what the agent says, and where it belongs --------------------------------------

    def _answered(self) -> bool:
        return self.phase not in (Phase.PROMPTING, Phase.CANCELLING)

    def _agent_fact(self, fact: AgentFact, now: float) -> tuple[Action, ...]:
        if self.own_phase == "pending" and self._answered():
            # Whether it starts the agent's own turn is not known yet.
            if (held := self._hold(fact)) is not None:
                self.held.append(held)
            return ()
        actions: list[Action] = []
        record = self.turn
        if self.own_phase == "active" and self._answered() and self.own is not None:
            # The prompt has its answer: what comes now is the agent's own next turn.
            close = self.turn is not None and not self.usage_split
            self.usage_split = self.usage_split or close
            actions.append(SplitUsage(close))
            if close:
                actions.append(Report(OwnTurnBegan()))
            self.own.heard = True
            record = self.own
        elif self.own_phase == "running":
            record = self.own
        if isinstance(fact, RunId):
            self.run_id = fact.run_id
        if isinstance(fact, Compaction | CompactionChunk):
            self._compaction(fact, record)
        if record is not None:
            kept = record.apply(fact, now)
            if record is self.turn:
                actions.append(Report(kept))  # never the dropped text: the stream stays small
        if isinstance(fact, Cost | CumulativeUsage | PromptUsage):
            actions.append(Count(fact))
        return tuple(actions)

    def _compaction(self, fact: Compaction | CompactionChunk, record: TurnRecord | None) -> None:
        """Follow the summary being written; count a completed compaction once, with its
        summary, in the turn it belongs to (none running: the next one)."""
        building = CompactionSummary.follow(self._building, fact)
        self._building = building
        if not isinstance(fact, Compaction) or fact.status == "in_progress":
            return
        self._building = None  # ended, one way or another
        if not fact.completed or fact.compaction_id in self._recent_compactions:
            return  # failed, cancelled, or a repeated terminal update
        self._recent_compactions.append(fact.compaction_id)
        self.compactions += 1
        if record is not None:
            record.compactions += 1
            record.summary = building
        else:
            self._idle_compactions += 1
            self._idle_summary = building

    def _hold(self, fact: AgentFact) -> AgentFact | None:
        """``fact`` as held: text past the reply cap is dropped (counted) here too; None when
        nothing of it is kept."""
        if not isinstance(fact, Text) or self.max_reply_bytes is None:
            return fact
        kept = utf8_head(fact.text, max(0, self.max_reply_bytes - self.held_text))
        size, kept_size = utf8_size(fact.text), utf8_size(kept)
        self.held_text += kept_size
        self.held_dropped += size - kept_size
        if kept_size == size:
            return fact
        return Text(kept, fact.message_id) if kept else None

    def _steer_answered(self, fact: SteerAnswered, now: float) -> tuple[Action, ...]:
        self.steering = False
        actions: list[Action] = [Report(fact)] if self.turn is not None else []
        if self.own_phase == "pending":
            if fact.outcome == "started_new_turn":
                self.own_phase = "active"
            else:
                self.own, self.own_phase = None, None
            held, self.held = self.held, []
            for update in held:  # now that it is known where they belong
                actions += self._agent_fact(update, now)
            record = self.own if self.own_phase == "active" else self.turn
            if record is not None:
                record.dropped += self.held_dropped
            self.held_text, self.held_dropped = 0, 0
        if fact.outcome == "injected" and self.turn is not None and not self._answered():
            self.turn.hard_deadline = now + self.timeouts.hard  # docs/bot.md: renewed
            self.turn.last_activity = now
        return tuple(actions)

    # -- the agent's own turn (after a steer answered startedNewTurn) --------------------

    def begin_own(self) -> TurnRecord | None:
        """Collect the agent's own turn now (the prompt has returned); None when none was
        announced or a prompt runs."""
        if self.own_phase != "active" or self.phase != Phase.IDLE or self.own is None:
            return None
        self.own_phase = "running"
        return self.own

    def end_own(self) -> None:
        self.own, self.own_phase = None, None
