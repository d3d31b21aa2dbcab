"""A turn between its flush and its settlement, as the runner, the steering and the agent's
requests see it: its phase, its session and ledger, who spoke in it, and the running turn of
each queue channel with the permission decisions its requests get (docs/bot.md, "Turns")."""

from __future__ import annotations

import asyncio
import enum
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from nostr_buzz.acp.types import PermissionRequest
from nostr_buzz.core.context import direct_channel_type
from nostr_buzz.core.ledger import TurnLedger
from nostr_buzz.core.permission import (
    PermissionDecision,
    Policy,
    TurnProvenance,
    decide,
    speakers,
)
from nostr_buzz.core.queue import Batch, QueuedEvent
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.manifest import Layer, Manifest
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload, Outcome

from .approvals import Approvals
from .config import PluginConfig
from .outputs import TurnIds
from .supervisor import ChannelSession

__all__ = [
    "CancelWhy",
    "Followup",
    "Output",
    "Phase",
    "RunningTurns",
    "Settlement",
    "Turn",
    "settlement",
    "turn_permission",
]

CancelWhy = Literal["interrupt", "steer", "owner"]


class Phase(enum.IntEnum):
    PREPARING = 1
    LIVE = 2
    ENDED = 3
    SETTLED = 4


class Followup(NamedTuple):
    """A steer that started the agent's own next turn: its event and its own manifest."""

    event: Event
    manifest: Manifest


@dataclass(eq=False)
class Turn:
    """A batch between flush and settlement (see the module docstring)."""

    batch: Batch
    channel_id: str
    channel_type: Literal["stream", "dm"]
    turn_id: str
    ledger: TurnLedger = field(default_factory=TurnLedger)
    session: ChannelSession | None = None
    phase: Phase = Phase.PREPARING
    cancel_reason: CancelWhy | None = None
    steered: list[QueuedEvent] = field(default_factory=list)  # injected into this turn
    #: The authors of every steer sent into this turn, whatever the agent answered.
    steer_actors: list[str] = field(default_factory=list)
    #: Steers the agent answered ``startedNewTurn``: each is a turn of its own.
    followups: list[Followup] = field(default_factory=list)
    #: Held while a steer of this turn is on the wire: steers wait their turn here (whether
    #: one may go is the agent session's rule, ``acp.state.Session.may_steer``).
    steer_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The agent's permission requests decided in this turn: approved, rejected.
    permissions: tuple[int, int] = (0, 0)
    #: The session's actors when this turn's prompt went out: whose words reached it earlier.
    earlier_actors: frozenset[str] = frozenset()
    #: The agent's count of the session's compactions when this prompt carried the standing
    #: sections (None: it did not carry them).
    standing_sent_at: int | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def of(cls, batch: Batch) -> Turn:
        newest = batch.events[-1].event
        channel = nip10.channel(newest)
        return cls(
            batch=batch,
            # The real channel, whatever the session scope keys the batch by.
            channel_id=channel or nip10.queue_channel(newest),
            channel_type="stream" if channel is not None else direct_channel_type(newest),
            turn_id=uuid.uuid4().hex,
        )

    @property
    def ids(self) -> TurnIds:
        session = self.session.metric_session_id if self.session is not None else None
        return TurnIds(self.channel_id, session, self.turn_id)

    def advance(self, phase: Phase) -> None:
        """Move to ``phase`` (never backwards) and wake whoever waits on the turn."""
        if phase < self.phase:
            raise RuntimeError(f"a turn cannot go back from {self.phase.name} to {phase.name}")
        self.phase = phase
        self.notify()

    def notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def until(self, condition: Callable[[Turn], bool], timeout: float | None = None) -> bool:
        """Wait until ``condition(self)`` holds (True) or ``timeout`` passes (False)."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    changed = self._changed
                    if condition(self):
                        return True
                    await changed.wait()
        except TimeoutError:
            return False

    def may_steer(self) -> bool:
        """A steer may go into this turn now: its prompt is live and no cancel is pending."""
        return self.phase == Phase.LIVE and self.cancel_reason is None and self.session is not None

    def may_cancel_at_agent(self) -> bool:
        return self.session is not None and Phase.LIVE <= self.phase < Phase.SETTLED

    def provenance(self) -> TurnProvenance:
        """Whose words reach the agent in this turn (thread history aside)."""
        return TurnProvenance(
            batch=tuple(q.event.pubkey for q in self.batch.events),
            cancelled=tuple(q.event.pubkey for q in self.batch.cancelled_events),
            steers=tuple(self.steer_actors),
        )


@dataclass(frozen=True)
class Output:
    """What one turn leaves: the reply's target and text, the metric payload."""

    target: Event
    reply: str | None
    payload: MetricPayload | None
    ids: TurnIds


Settlement = Literal["complete", "requeue", "drop", "fail"]


def settlement(outcome: Outcome, cancel_reason: CancelWhy | None) -> Settlement:
    """What becomes of a turn's batch: success completes it; a cancel for ``interrupt`` or
    ``steer`` requeues it as cancelled events for the channel's next turn; the owner's
    ``!cancel`` (or a cancel by the agent itself) drops it as delivered; anything else fails
    it (back to the queue with backoff, until it is dead-lettered)."""
    if outcome == "success":
        return "complete"
    if outcome == "cancelled":
        return "requeue" if cancel_reason in ("interrupt", "steer") else "drop"
    return "fail"


def turn_permission(turn: Turn | None, policy: Policy, owner: str) -> PermissionDecision:
    """The decision for a permission request of the session ``turn`` runs in (None: no turn
    runs there): only a live turn with no cancel pending may be approved
    (:func:`nostr_buzz.core.permission.decide`)."""
    live = turn if turn is not None and turn.phase == Phase.LIVE else None
    live = live if live is not None and live.cancel_reason is None else None
    session = live.session.actors if live is not None and live.session is not None else ()
    provenance = live.provenance() if live is not None else None
    return decide(policy, owner, provenance, session)


#: Told of each permission decision of a turn (telemetry): the turn, the request, the decision.
Decided = Callable[["Turn", PermissionRequest, PermissionDecision], None]
#: Told of each call of the agent's Nostr tools in a turn (telemetry): the turn, the tool, the
#: layers it handed over, else its typed error and the event id it asked for.
Retrieved = Callable[["Turn", str, Sequence[Layer], str | None, str | None], None]


def _counted(
    turn: Turn | None,
    decision: PermissionDecision,
    request: PermissionRequest | None = None,
    decided: Decided | None = None,
) -> PermissionDecision:
    """Count ``decision`` in its turn (for the metric), and tell ``decided``."""
    if turn is not None:
        approved, rejected = turn.permissions
        yes = int(decision.approve)
        turn.permissions = (approved + yes, rejected + 1 - yes)
        if decided is not None and request is not None:
            decided(turn, request, decision)
    return decision


async def _counted_later(
    turn: Turn,
    later: Awaitable[PermissionDecision],
    request: PermissionRequest,
    decided: Decided | None,
) -> PermissionDecision:
    return _counted(turn, await later, request, decided)


class RunningTurns(dict[str, Turn]):
    """The running turn of each queue channel, and the lookups the agent's requests need
    (by adapter session): made before the supervisor and the runner, and given to both."""

    def __init__(self, policy: Policy, owner: str, approvals: Approvals | None = None) -> None:
        super().__init__()
        self.policy, self.owner = policy, owner
        #: Where a request the owner must decide goes (None: such requests are rejected).
        self.approvals = approvals
        #: Told of every decision made for a running turn (the runner's telemetry).
        self.decided: Decided | None = None
        #: Told of every call of the agent's Nostr tools in a running turn (likewise).
        self.retrieved: Retrieved | None = None

    @classmethod
    def of(
        cls, config: PluginConfig, diagnostics: DiagnosticsFeed, clock: Callable[[], float]
    ) -> RunningTurns:
        """A bot's running turns, asking its owner through its signer (:mod:`.approvals`)."""
        return cls(config.permissions, config.owner.hex, Approvals(config, diagnostics, clock))

    def in_session(self, adapter_session_id: str) -> Turn | None:
        for turn in self.values():
            session = turn.session
            if session is not None and session.start.session_id == adapter_session_id:
                return turn
        return None

    def permission(
        self, request: PermissionRequest
    ) -> PermissionDecision | Awaitable[PermissionDecision]:
        """Approve? Only for a live turn of the asking session; under ``owner``, only when
        the owner alone spoke in that turn and in its session; what the rule leaves to the
        owner is decided later, by the owner's answer (:mod:`.approvals`)."""
        turn = self.in_session(request.session_id)
        decision = turn_permission(turn, self.policy, self.owner)
        approvals = self.approvals
        if turn is None or approvals is None or not approvals.enabled:
            return _counted(turn, decision, request, self.decided)
        if not decision.asks_owner:
            return _counted(turn, decision, request, self.decided)
        private = nip10.is_private_channel(turn.batch.channel)
        provenance = turn.provenance()
        others = speakers(self.owner, provenance, turn.earlier_actors)
        asked = approvals.ask(request, decision, turn.ids, provenance.batch, private, others)
        return _counted_later(turn, asked, request, self.decided)

    def answer(self, event: Event, verdict: Literal["allow", "deny"], code: str) -> None:
        """An ``!allow``/``!deny`` seen in ``event`` (anyone's: only the owner's decides)."""
        if self.approvals is not None:
            self.approvals.answer(event, verdict, code)

    def withdraw(self, turn: Turn) -> None:
        """``turn`` ends or is being cancelled: the questions it put to the owner are void."""
        if self.approvals is not None:
            self.approvals.withdraw(turn.turn_id)

    def ended(self, turn: Turn) -> Coroutine[Any, Any, None] | None:
        """``turn`` ended: what tells the owner the requests it could not ask (to run; None:
        nothing to tell, :meth:`.approvals.Approvals.end_turn`)."""
        return self.approvals.end_turn(turn.ids) if self.approvals is not None else None

    def locate(self, adapter_session_id: str) -> dict[str, str | None] | None:
        """The ids of the turn running in an adapter session (for diagnostics)."""
        turn = self.in_session(adapter_session_id)
        return turn.ids.as_kwargs() if turn is not None else None
