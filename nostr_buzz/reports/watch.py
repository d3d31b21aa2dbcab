"""What ``buzz watch`` shows of a bot, without I/O (docs/cli.md, "buzz watch").

Two inputs, both read by :mod:`nostr_buzz.io.watch`:

* the bot's diagnostics feed, folded record by record into a :class:`FeedSummary`: the turns
  running now, the last tool call each asked permission for, the agent, the spend per UTC day;
* a :class:`StateSnapshot` of its state database: the queued events, the channels' retry
  state, the outbox.

:func:`watch_view` joins them at a moment into a :class:`WatchView`, whose JSON is the stable
schema ``buzz watch --once`` prints (``version`` changes when a member changes meaning).

**Running turns.** A ``turn_started`` runs until a ``turn_completed``, ``turn_failed`` or
``turn_ended`` names its turn id; an ``agent_started`` ends every turn started before it (a
new agent process, after a crash or a restart of the bot, runs none of them).  A bot killed
outright leaves its turns shown as running until it starts again.  **Who**: the authors of
the turn's events, from their rows in the queue (a private conversation's author from its
channel: its rows hold gift wraps).  **Last tool call**: the newest ``permission_decision``
of the turn — tool calls the agent makes without asking are not in the feed; for a private
conversation's turn only the tool's kind, never its title (docs/bot.md).  **Spend**: the
``costUsd`` of each ``metric_queued`` (one per turn, every outcome), by the UTC day of the
record; what the feed no longer holds (rotated away twice) is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import msgspec

from nostr_buzz.core.budget import (
    CAP_NAMES,
    PERIODS,
    BudgetLedger,
    Caps,
    Spend,
    period_bounds,
    with_owner_notes,
)
from nostr_buzz.core.delivery_state import RelayRecord, waiting
from nostr_buzz.core.session_key import thread_of
from nostr_buzz.nips import nip10, nip19

__all__ = [
    "SCHEMA_VERSION",
    "AgentView",
    "ChannelView",
    "FeedRecord",
    "FeedSummary",
    "FeedView",
    "Moment",
    "OutboxEntryView",
    "OutboxKindView",
    "OutboxRelayView",
    "OutboxRow",
    "OutboxView",
    "QueuedRow",
    "RetryRow",
    "SpendView",
    "StateSnapshot",
    "ToolView",
    "TurnView",
    "WatchView",
    "outbox_kind_name",
    "watch_view",
]

#: The version of the ``--once`` JSON schema.
SCHEMA_VERSION: Final = 1
_DAY: Final = 86_400
#: What the outbox holds, by event kind (others are shown by number).
_OUTBOX_KINDS: Final = {
    9: "reply",
    1059: "private reply",
    10050: "DM relay list",
    44200: "metric",
}
#: Pending outbox entries shown one by one with their relays (the oldest); the rest are counted.
MAX_OUTBOX_ENTRIES: Final = 20
#: Records that end a running turn (by its turn id).
_TURN_ENDS: Final = frozenset({"turn_completed", "turn_failed", "turn_ended"})


# --- the inputs -------------------------------------------------------------------------------


class FeedRecord(msgspec.Struct, frozen=True, rename="camel"):
    """One line of the diagnostics feed, as ``buzz watch`` reads it (any kind)."""

    seq: int
    timestamp: str
    kind: str
    channel_id: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    payload: dict[str, Any] = msgspec.field(default_factory=dict)


class QueuedRow(NamedTuple):
    """An event of the queue journal: ``signer`` is its signing key (a gift wrap's, for a
    private message), ``cancelled`` a stored cancelled event."""

    id: str
    channel: str
    signer: str
    received_at: float
    cancelled: bool


class RetryRow(NamedTuple):
    """A queue channel's retry state: failed attempts of its front batch, backoff end."""

    channel: str
    attempts: int
    backoff_until: float | None


class OutboxRow(NamedTuple):
    """An outbox entry: ``targets`` the relays it is meant for (in order; empty in a file
    written before they were stored), ``relays`` its record on each relay tried or meant
    (core/delivery_state.py)."""

    kind: int
    added_at: float
    attempts: int
    event_id: str = ""
    targets: tuple[str, ...] = ()
    relays: tuple[RelayRecord, ...] = ()


@dataclass(frozen=True)
class StateSnapshot:
    """The state database at one read transaction."""

    queued: tuple[QueuedRow, ...] = ()
    retries: tuple[RetryRow, ...] = ()
    outbox: tuple[OutboxRow, ...] = ()
    #: The budget's settled spend and its notes (the owner's caps, ``cap:…``; held channels,
    #: ``held:…``), when the bot keeps a budget (docs/bot.md, "Budgets").
    spends: tuple[Spend, ...] = ()
    budget_notes: tuple[tuple[str, str], ...] = ()


class Moment(NamedTuple):
    """When the view is made: Unix seconds, as an RFC 3339 timestamp, and its UTC day."""

    seconds: float
    timestamp: str
    day: str


# --- the view: the JSON schema of ``buzz watch --once`` -------------------------------------


class ToolView(msgspec.Struct, frozen=True, rename="camel"):
    """A permission request of the turn: the tool's title (None in a private turn), its ACP
    kind, the decision and when."""

    title: str | None
    kind: str | None
    decision: str | None
    at: str


class TurnView(msgspec.Struct, frozen=True, rename="camel"):
    channel: str | None
    queue_channel: str | None
    turn_id: str
    session_id: str | None
    actors: list[str]
    event_ids: list[str]
    started_at: str
    duration_seconds: float
    private: bool
    last_tool: ToolView | None


class ChannelView(msgspec.Struct, frozen=True, rename="camel"):
    channel: str
    pending: int
    in_flight: int
    cancelled: int
    oldest_age_seconds: float
    attempts: int
    backoff_seconds: float | None
    #: The thread root a ``[sessions] scope = "thread"`` key names (``channel`` is the key,
    #: ``{channel}/{root}``); None for a whole channel's queue.
    thread: str | None = None


class OutboxKindView(msgspec.Struct, frozen=True, rename="camel"):
    kind: int
    name: str
    pending: int
    oldest_age_seconds: float
    attempts: int


class OutboxRelayView(msgspec.Struct, frozen=True, rename="camel"):
    """Where one pending entry stands on one relay it is meant for: ``accepted``, ``pending``
    (not answered yet) or ``failing`` (refused, failed or timed out ``attempts`` times; tried
    again in ``retry_in_seconds``, after ``last_error``)."""

    relay: str
    state: str
    attempts: int
    retry_in_seconds: float | None
    last_error: str | None


class OutboxEntryView(msgspec.Struct, frozen=True, rename="camel"):
    """One pending entry and each relay it is meant for."""

    event_id: str
    kind: int
    name: str
    age_seconds: float
    attempts: int
    #: The relays that do not have it yet.
    waiting: int
    relays: list[OutboxRelayView]


class OutboxView(msgspec.Struct, frozen=True, rename="camel"):
    pending: int
    oldest_age_seconds: float | None
    kinds: list[OutboxKindView]
    #: The oldest pending entries (at most :data:`MAX_OUTBOX_ENTRIES`), relay by relay.
    entries: list[OutboxEntryView] = msgspec.field(default_factory=list)


class SpendView(msgspec.Struct, frozen=True, rename="camel"):
    day: str
    cost_usd: float
    turns: int
    turns_without_cost: int


class CapView(msgspec.Struct, frozen=True, rename="camel"):
    """One cap: its limit, what counts against it in the period now (USD, or tokens for
    ``daily_tokens``), and when the period ends (Unix seconds, UTC periods)."""

    name: str
    limit: float
    spent: float
    period_ends: float


class BudgetView(msgspec.Struct, frozen=True, rename="camel"):
    action: str
    caps: list[CapView]
    #: Queue channels held until a period ends or the owner raises the cap (``stop``).
    held: list[str]


class AgentView(msgspec.Struct, frozen=True, rename="camel"):
    name: str | None
    started_at: str
    exited: bool


class FeedView(msgspec.Struct, frozen=True, rename="camel"):
    last_seq: int
    last_record_at: str | None


class WatchView(msgspec.Struct, frozen=True, rename="camel"):
    """Everything ``buzz watch`` shows; its JSON is the ``--once`` output (docs/cli.md)."""

    version: int
    state_dir: str
    generated_at: str
    agent: AgentView | None
    running_turns: list[TurnView]
    queue: list[ChannelView]
    outbox: OutboxView
    spend: SpendView
    #: The caps in force (the configuration's, with the owner's ``!budget`` over them) and
    #: what counts against each; None when no cap is set.
    budget: BudgetView | None
    feed: FeedView

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode("utf-8")


# --- the fold ---------------------------------------------------------------------------------


@dataclass
class _Started:
    channel_id: str | None
    session_id: str | None
    event_ids: tuple[str, ...]
    timestamp: str
    at: float
    tool: ToolView | None = None


@dataclass
class _DaySpend:
    cost_usd: float = 0.0
    turns: int = 0
    without_cost: int = 0


class FeedSummary:
    """The diagnostics feed folded so far; :meth:`add` each record in order."""

    def __init__(self) -> None:
        self.running: dict[str, _Started] = {}
        self._spend: dict[int, _DaySpend] = {}
        self.agent: AgentView | None = None
        self.last_seq = 0
        self.last_record_at: str | None = None

    def add_all(self, records: Iterable[tuple[FeedRecord, float]]) -> None:
        for record, at in records:
            self.add(record, at)

    def add(self, record: FeedRecord, at: float) -> None:
        """Fold one record; ``at`` is its timestamp in Unix seconds."""
        self.last_seq, self.last_record_at = record.seq, record.timestamp
        kind, turn, payload = record.kind, record.turn_id, record.payload
        if kind == "agent_started":
            self.running.clear()
            name = payload.get("agentName")
            self.agent = AgentView(_text(name), record.timestamp, exited=False)
        elif kind == "agent_exited" and self.agent is not None:
            self.agent = msgspec.structs.replace(self.agent, exited=True)
        elif kind == "turn_started" and turn is not None:
            ids = payload.get("triggeringEventIds")
            events = tuple(i for i in ids if isinstance(i, str)) if isinstance(ids, list) else ()
            self.running[turn] = _Started(
                record.channel_id, record.session_id, events, record.timestamp, at
            )
        elif kind in _TURN_ENDS and turn is not None:
            self.running.pop(turn, None)
        elif kind == "permission_decision" and turn in self.running:
            started = self.running[turn]
            private = started.channel_id is not None and nip10.is_private_channel(
                started.channel_id
            )
            title = None if private else _text(payload.get("title"))
            tool = ToolView(
                title,
                _text(payload.get("toolKind")),
                _text(payload.get("decision")),
                record.timestamp,
            )
            started.tool = tool
        elif kind == "metric_queued":
            self._count_cost(payload.get("costUsd"), at)

    def _count_cost(self, cost: object, at: float) -> None:
        day = int(at // _DAY)
        spend = self._spend.setdefault(day, _DaySpend())
        spend.turns += 1
        if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
            spend.cost_usd += float(cost)
        else:
            spend.without_cost += 1
        for old in [d for d in self._spend if d < day - 1]:  # only today's is ever shown
            del self._spend[old]

    def spend_on(self, seconds: float, day: str) -> SpendView:
        """The spend of the UTC day ``seconds`` falls in (``day``: its date)."""
        spend = self._spend.get(int(seconds // _DAY), _DaySpend())
        return SpendView(day, round(spend.cost_usd, 9), spend.turns, spend.without_cost)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


# --- the view ---------------------------------------------------------------------------------


def outbox_kind_name(kind: int) -> str:
    return _OUTBOX_KINDS.get(kind, f"kind {kind}")


def _age(now: float, then: float) -> float:
    return round(max(0.0, now - then), 3)


def _author(row: QueuedRow) -> str:
    """Who wrote a queued event: a private message's row is its gift wrap, signed by a
    throwaway key; its author is the one its channel is named after."""
    if nip10.is_private_channel(row.channel):
        return row.channel[len(nip10.PRIVATE_CHANNEL_PREFIX) :]
    return row.signer


def _npub(pubkey: str) -> str:
    try:
        return nip19.encode("npub", pubkey)
    except ValueError:  # not a key (a damaged row): shown as it is
        return pubkey


def _turn_view(
    turn_id: str, started: _Started, rows: Mapping[str, QueuedRow], now: float
) -> TurnView:
    mine = [rows[i] for i in started.event_ids if i in rows]
    actors = list(dict.fromkeys(_npub(_author(row)) for row in mine))
    queue_channel = mine[0].channel if mine else None
    private = any(
        c is not None and nip10.is_private_channel(c) for c in (started.channel_id, queue_channel)
    )
    tool = started.tool
    if private and tool is not None and tool.title is not None:
        tool = msgspec.structs.replace(tool, title=None)
    return TurnView(
        channel=started.channel_id,
        queue_channel=queue_channel,
        turn_id=turn_id,
        session_id=started.session_id,
        actors=actors,
        event_ids=list(started.event_ids),
        started_at=started.timestamp,
        duration_seconds=_age(now, started.at),
        private=private,
        last_tool=tool,
    )


def _channel_views(snapshot: StateSnapshot, in_flight: set[str], now: float) -> list[ChannelView]:
    by_channel: dict[str, list[QueuedRow]] = {}
    for row in snapshot.queued:
        by_channel.setdefault(row.channel, []).append(row)
    retries = {r.channel: r for r in snapshot.retries}
    views = []
    for channel in sorted(by_channel):
        rows = by_channel[channel]
        flying = sum(1 for r in rows if r.id in in_flight and not r.cancelled)
        cancelled = sum(1 for r in rows if r.cancelled)
        retry = retries.get(channel)
        until = retry.backoff_until if retry is not None else None
        views.append(
            ChannelView(
                channel=channel,
                pending=len(rows) - flying - cancelled,
                in_flight=flying,
                cancelled=cancelled,
                oldest_age_seconds=_age(now, min(r.received_at for r in rows)),
                attempts=retry.attempts if retry is not None else 0,
                backoff_seconds=round(until - now, 3)
                if until is not None and until > now
                else None,
                thread=thread_of(channel),
            )
        )
    return views


def _outbox_view(rows: tuple[OutboxRow, ...], now: float) -> OutboxView:
    by_kind: dict[int, list[OutboxRow]] = {}
    for row in rows:
        by_kind.setdefault(row.kind, []).append(row)
    kinds = [
        OutboxKindView(
            kind=kind,
            name=outbox_kind_name(kind),
            pending=len(group),
            oldest_age_seconds=_age(now, min(r.added_at for r in group)),
            attempts=max(r.attempts for r in group),
        )
        for kind, group in sorted(by_kind.items())
    ]
    oldest = max((k.oldest_age_seconds for k in kinds), default=None)
    shown = sorted(rows, key=lambda r: (r.added_at, r.event_id))[:MAX_OUTBOX_ENTRIES]
    entries = [_outbox_entry(row, now) for row in shown]
    return OutboxView(pending=len(rows), oldest_age_seconds=oldest, kinds=kinds, entries=entries)


def _outbox_entry(row: OutboxRow, now: float) -> OutboxEntryView:
    """One entry, relay by relay: the relays it is meant for in order, then any other it was
    tried on (an entry written before its relays were stored)."""
    held = {r.relay: r for r in row.relays}
    order = list(dict.fromkeys([*row.targets, *held]))
    relays = []
    for url in order:
        record = held.get(url, RelayRecord(url))
        retry = None
        if record.state == "failing" and record.next_attempt > now:
            retry = round(record.next_attempt - now, 3)
        relays.append(OutboxRelayView(url, record.state, record.attempts, retry, record.last_error))
    return OutboxEntryView(
        event_id=row.event_id,
        kind=row.kind,
        name=outbox_kind_name(row.kind),
        age_seconds=_age(now, row.added_at),
        attempts=row.attempts,
        waiting=len(waiting(order, row.relays)),
        relays=relays,
    )


def budget_view(snapshot: StateSnapshot, configured: Caps, now: float) -> BudgetView | None:
    """The caps in force at ``now`` and the settled spend against each (None: no cap)."""
    notes = dict(snapshot.budget_notes)
    owners = {k[4:]: v for k, v in notes.items() if k.startswith("cap:")}
    caps = with_owner_notes(configured, owners)
    if not caps.active:
        return None
    ledger = BudgetLedger(caps)
    ledger.add_all(snapshot.spends)
    views = []
    for name in CAP_NAMES:
        limit = caps.value(name)
        if limit is not None:
            end = period_bounds(PERIODS[name], now)[1]
            views.append(CapView(name, limit, round(ledger.spent(name, now), 9), end))
    held = sorted(k[5:] for k in notes if k.startswith("held:"))
    return BudgetView(action=caps.action, caps=views, held=held)


def watch_view(
    snapshot: StateSnapshot,
    feed: FeedSummary,
    *,
    moment: Moment,
    state_dir: str,
    caps: Caps | None = None,
) -> WatchView:
    """The bot as ``buzz watch`` shows it at ``moment`` (see the module docstring)."""
    now = moment.seconds
    rows = {row.id: row for row in snapshot.queued}
    running = sorted(feed.running.items(), key=lambda item: item[1].at)
    in_flight = {i for _, started in running for i in started.event_ids}
    return WatchView(
        version=SCHEMA_VERSION,
        state_dir=state_dir,
        generated_at=moment.timestamp,
        agent=feed.agent,
        running_turns=[_turn_view(turn, started, rows, now) for turn, started in running],
        queue=_channel_views(snapshot, in_flight, now),
        outbox=_outbox_view(snapshot.outbox, now),
        spend=feed.spend_on(now, moment.day),
        budget=budget_view(snapshot, caps or Caps(), now),
        feed=FeedView(last_seq=feed.last_seq, last_record_at=feed.last_record_at),
    )
