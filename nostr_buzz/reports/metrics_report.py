"""The owner's metrics report, pure (docs/metrics.md, "The owner's reader").

Given the kind-44200 events a reader fetched, :func:`open_metric` keeps what
:func:`~nostr_buzz.nips.nip_am.open_metric_event` accepts and names why anything else is ignored;
:func:`build_report` then orders each session by ``(sessionId, turnSeq)`` — never by
``created_at`` —, recomputes per-turn usage from consecutive ``cumulative`` values where it
can, checks every manifest hash, measures each turn's duration (``startedAt`` to
``timestamp``), and totals usage per agent, model and UTC day.

Unknown numbers stay unknown: ``null`` is never summed as zero, and a decreasing cumulative
counter gives an unknown delta, never a negative one.  No I/O, no clock.

Anyone can encrypt a metric to the owner.  Given the owner's agents (``agents``), metrics signed
by any other key are listed apart as unknown agents (:class:`UnknownAgentRow`) and never reach
the turns or the totals.  Every counter of a valid metric is at most 2^53 and every turn's cost
at most 10^6 USD (a recomputed delta above that is unknown), so every total is finite.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from nostr_buzz.errors import MetricError, Nip44Error
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44, nip_am
from nostr_buzz.nips.nip_am import (
    KIND,
    MAX_TURN_COST_USD,
    MetricPayload,
    TokenCounts,
    open_metric_event,
)

__all__ = [
    "COST_DECIMALS",
    "IGNORE_REASONS",
    "IgnoreReason",
    "MetricsReport",
    "OpenedMetric",
    "TotalRow",
    "TurnRow",
    "UnknownAgentRow",
    "build_report",
    "open_metric",
]

IgnoreReason = Literal[
    "verification",  # failed its id/signature check or the filter (counted by the relay client)
    "wrong_kind",
    "not_for_owner",  # not exactly one p tag, or it names someone else
    "agent_mismatch",  # not exactly one agent tag, or it is not the event's pubkey
    "channel_tag",  # an h tag: a metric's channel is private
    "undecryptable",  # not NIP-44 v2 from this agent to this owner
    "invalid_payload",  # decrypted, but not a valid NIP-AM payload
]
IGNORE_REASONS: Final[tuple[IgnoreReason, ...]] = (
    "verification",
    "wrong_kind",
    "not_for_owner",
    "agent_mismatch",
    "channel_tag",
    "undecryptable",
    "invalid_payload",
)

DeltaSource = Literal["cumulative", "reported", "none"]


@dataclass(frozen=True)
class OpenedMetric:
    """A metric that passed every check, with the event facts the report needs."""

    event_id: str
    agent: str
    created_at: int
    payload: MetricPayload


class TurnRow(msgspec.Struct, frozen=True, rename="camel"):
    """One metric in the report.  The four counters are this turn's usage: recomputed from
    the previous turn's ``cumulative`` when ``delta_source`` is ``cumulative``, else as the
    agent reported them (``reported``), or all unknown (``none``: the payload had no ``turn``).
    ``manifest_valid`` is None when the metric carried no manifest.  The cache counters are
    the informational parts of ``input_tokens`` (None when unknown); the context figures are
    the agent's last report of its context window's occupancy (never summed).
    ``duration_seconds`` runs from the payload's ``startedAt`` to its ``timestamp`` (None
    without a ``startedAt``, or when it is later than the end)."""

    event_id: str
    agent: str
    harness: str
    model: str | None
    day: str
    timestamp: str
    session_id: str | None
    turn_seq: int | None
    turn_id: str | None
    channel_id: str | None
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cost_usd: float | None
    delta_source: DeltaSource
    delta_reliable: bool
    stop_reason: str | None
    outcome: str | None
    manifest_hash: str | None
    manifest_valid: bool | None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    context_used_tokens: int | None = None
    context_window_tokens: int | None = None
    duration_seconds: float | None = None
    #: Context compactions the agent completed in the turn (None: none said).
    compactions: int | None = None


class TotalRow(msgspec.Struct, frozen=True, rename="camel"):
    """Usage of one agent with one model on one UTC day (from the payload ``timestamp``).

    A counter is the sum of the turns that reported it, None when none did; ``unknown_turns``
    counts the turns whose usage is unknown (:func:`usage_known`: no input or no output token
    count), so a partial token sum is visible as such; a total or a cost left unreported (many
    agents report tokens only) and the cache sums do not make a turn unknown."""

    day: str
    agent: str
    model: str | None
    turns: int
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cost_usd: float | None
    unknown_turns: int
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


class UnknownAgentRow(msgspec.Struct, frozen=True, rename="camel"):
    """Valid metrics signed by a key that is not one of the owner's agents: counted here only."""

    agent: str
    metrics: int
    first_timestamp: str
    last_timestamp: str


class MetricsReport(msgspec.Struct, frozen=True, rename="camel"):
    """The owner's usage report (``buzz metrics``, :func:`build_report`): totals per agent,
    model and UTC day, every turn in session order, the events ignored by reason (forgeries,
    undecryptable, invalid payloads), how many manifests do not match their hash, and the
    metrics of keys that are not the owner's agents."""

    totals: tuple[TotalRow, ...]
    turns: tuple[TurnRow, ...]
    #: Ignored events per reason (only reasons that occurred).
    ignored: dict[str, int]
    manifest_mismatches: int
    #: Metrics from keys outside the owner's agents (empty when no agents were given).
    unknown_agents: tuple[UnknownAgentRow, ...] = ()

    @property
    def ignored_total(self) -> int:
        return sum(self.ignored.values())


# --- opening ----------------------------------------------------------------------------------


def _tag_values(event: Event, name: str) -> list[str | None]:
    return [tag[1] if len(tag) > 1 else None for tag in event.tags if tag and tag[0] == name]


def _failure_reason(owner: SecretKey, event: Event) -> IgnoreReason:
    """Why ``open_metric_event`` refused ``event``, re-checked step by step in its order."""
    if event.kind != KIND:
        return "wrong_kind"
    p_values = _tag_values(event, "p")
    if len(p_values) != 1 or p_values[0] != owner.public_key.hex:
        return "not_for_owner"
    agents = _tag_values(event, "agent")
    if len(agents) != 1 or agents[0] != event.pubkey:
        return "agent_mismatch"
    if _tag_values(event, "h"):
        return "channel_tag"
    try:
        nip44.decrypt(event.content, nip44.conversation_key(owner, event.pubkey))
    except Nip44Error:
        return "undecryptable"
    return "invalid_payload"


def open_metric(owner: SecretKey, event: Event) -> OpenedMetric | IgnoreReason:
    """The opened metric, or the reason it is ignored.  ``open_metric_event`` decides; the
    reason is only a label for the count."""
    try:
        payload = open_metric_event(owner, event)
    except MetricError:
        return _failure_reason(owner, event)
    return OpenedMetric(event.id, event.pubkey, event.created_at, payload)


# --- deltas -----------------------------------------------------------------------------------


def _diff(after: int | None, before: int | None) -> int | None:
    if after is None or before is None or after < before:
        return None
    return after - before


#: Costs are rounded to this many decimals after arithmetic, so that 0.03 − 0.01 reads 0.02
#: rather than 0.019999999999999997 (far below any price's precision).
COST_DECIMALS: Final = 10


def _cost_diff(after: float | None, before: float | None) -> float | None:
    if after is None or before is None or after < before:
        return None
    cost = round(after - before, COST_DECIMALS)
    return cost if cost <= MAX_TURN_COST_USD else None


def _from_cumulative(
    current: TokenCounts, previous: TokenCounts
) -> tuple[tuple[int | None, int | None, int | None, float | None], bool]:
    """Turn usage as the difference of two consecutive cumulative values, and whether it is
    reliable.  As in the usage tracker (docs/metrics.md): input or output that is unknown or went
    down, or a cost that went down, make every counter unknown; total and cost are otherwise
    field-local."""
    inputs = _diff(current.input_tokens, previous.input_tokens)
    outputs = _diff(current.output_tokens, previous.output_tokens)
    cost_fell = (
        current.cost_usd is not None
        and previous.cost_usd is not None
        and current.cost_usd < previous.cost_usd
    )
    if inputs is None or outputs is None or cost_fell:
        return (None, None, None, None), False
    total = _diff(current.total_tokens, previous.total_tokens)
    return (inputs, outputs, total, _cost_diff(current.cost_usd, previous.cost_usd)), True


def _session_key(m: OpenedMetric) -> tuple[str, str] | None:
    p = m.payload
    if p.session_id is None or p.turn_seq is None:
        return None
    return (m.agent, p.session_id)  # session ids are the agent's own: scoped by agent


def _unix_seconds(text: str) -> float | None:
    """Unix seconds of a validated RFC 3339 date-time (any offset or fraction; a leap second
    60 reads as the next minute's 0).  The syntax and calendar are the validator's own."""
    match = nip_am._RFC3339.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    offset = 0
    if match[9] is not None:
        offset = (int(match[9]) * 3600 + int(match[10]) * 60) * (1 if match[8][0] == "+" else -1)
    clock = hour * 3600 + minute * 60 + second - offset + float("0" + (match[7] or ""))
    return nip_am._days_from_civil(year, month, day) * 86_400 + clock


def _duration(p: MetricPayload) -> float | None:
    if p.started_at is None:
        return None
    start, end = _unix_seconds(p.started_at), _unix_seconds(p.timestamp)
    if start is None or end is None or end < start:
        return None
    return round(end - start, 3)


def _row(
    m: OpenedMetric,
    counters: tuple[int | None, int | None, int | None, float | None],
    source: DeltaSource,
    reliable: bool,
    cache: tuple[int | None, int | None] = (None, None),
) -> TurnRow:
    p = m.payload
    manifest = p.context_manifest
    return TurnRow(
        event_id=m.event_id,
        agent=m.agent,
        harness=p.harness,
        model=p.model,
        day=p.timestamp[:10],  # validated YYYY-MM-DDT…Z, so the UTC day
        timestamp=p.timestamp,
        session_id=p.session_id,
        turn_seq=p.turn_seq,
        turn_id=p.turn_id,
        channel_id=p.channel_id,
        input_tokens=counters[0],
        output_tokens=counters[1],
        total_tokens=counters[2],
        cost_usd=counters[3],
        delta_source=source,
        delta_reliable=reliable,
        stop_reason=p.stop_reason,
        outcome=p.outcome,
        manifest_hash=None if manifest is None else manifest.hash,
        manifest_valid=None if manifest is None else manifest.hash_matches(),
        cache_read_tokens=cache[0],
        cache_write_tokens=cache[1],
        context_used_tokens=p.context_used_tokens,
        context_window_tokens=p.context_window_tokens,
        duration_seconds=_duration(p),
        compactions=p.compactions,
    )


def _reported_row(m: OpenedMetric) -> TurnRow:
    turn = m.payload.turn
    if turn is None:
        return _row(m, (None, None, None, None), "none", m.payload.delta_reliable)
    counters = (turn.input_tokens, turn.output_tokens, turn.total_tokens, turn.cost_usd)
    cache = (turn.cache_read_tokens, turn.cache_write_tokens)
    return _row(m, counters, "reported", m.payload.delta_reliable, cache)


def _turn_rows(metrics: Iterable[OpenedMetric]) -> list[TurnRow]:
    sessions: dict[tuple[str, str], list[OpenedMetric]] = defaultdict(list)
    loose: list[OpenedMetric] = []
    for m in metrics:
        key = _session_key(m)
        if key is None:
            loose.append(m)
        else:
            sessions[key].append(m)
    rows: list[TurnRow] = []
    for key in sorted(sessions):
        ordered = sorted(sessions[key], key=lambda m: (m.payload.turn_seq or 0, m.event_id))
        previous: OpenedMetric | None = None
        for m in ordered:
            before = previous.payload if previous is not None else None
            # Only the immediately preceding turn gives this turn's own delta: after a gap
            # (a lost metric) the difference would include the missing turns.
            if (
                before is not None
                and before.turn_seq is not None
                and m.payload.turn_seq == before.turn_seq + 1
                and before.cumulative is not None
                and m.payload.cumulative is not None
            ):
                now, then = m.payload.cumulative, before.cumulative
                counters, reliable = _from_cumulative(now, then)
                cache = (
                    _diff(now.cache_read_tokens, then.cache_read_tokens) if reliable else None,
                    _diff(now.cache_write_tokens, then.cache_write_tokens) if reliable else None,
                )
                rows.append(_row(m, counters, "cumulative", reliable, cache))
            else:
                rows.append(_reported_row(m))
            previous = m
    for m in sorted(loose, key=lambda m: (m.agent, m.payload.timestamp, m.event_id)):
        rows.append(_reported_row(m))
    return rows


# --- totals -----------------------------------------------------------------------------------


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def _add_cost(total: float | None, value: float | None) -> float | None:
    if value is None:
        return total
    return value if total is None else total + value


def usage_known(row: TurnRow) -> bool:
    """Whether the turn reported its usage: its input and output token counts."""
    return row.input_tokens is not None and row.output_tokens is not None


def _totals(rows: Iterable[TurnRow]) -> list[TotalRow]:
    # An unknown model (null) and a model named "" are different groups; unknown sorts first.
    groups: dict[tuple[str, str, bool, str], list[TurnRow]] = defaultdict(list)
    for row in rows:
        groups[(row.day, row.agent, row.model is not None, row.model or "")].append(row)
    totals: list[TotalRow] = []
    for (day, agent, _, _), members in sorted(groups.items()):
        inputs = outputs = total = cache_read = cache_write = None
        cost: float | None = None
        unknown = 0
        for r in members:
            cache_read = _add(cache_read, r.cache_read_tokens)
            cache_write = _add(cache_write, r.cache_write_tokens)
            inputs = _add(inputs, r.input_tokens)
            outputs = _add(outputs, r.output_tokens)
            total = _add(total, r.total_tokens)
            cost = _add_cost(cost, r.cost_usd)
            unknown += not usage_known(r)
        totals.append(
            TotalRow(
                day=day,
                agent=agent,
                model=members[0].model,
                turns=len(members),
                input_tokens=inputs,
                output_tokens=outputs,
                total_tokens=total,
                cost_usd=None if cost is None else round(cost, COST_DECIMALS),
                unknown_turns=unknown,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )
        )
    return totals


def _unknown_agents(metrics: Iterable[OpenedMetric]) -> tuple[UnknownAgentRow, ...]:
    by_agent: dict[str, list[str]] = defaultdict(list)
    for m in metrics:
        by_agent[m.agent].append(m.payload.timestamp)
    return tuple(
        UnknownAgentRow(agent, len(stamps), min(stamps), max(stamps))
        for agent, stamps in sorted(by_agent.items())
    )


def build_report(
    metrics: Iterable[OpenedMetric],
    ignored: Mapping[str, int] | None = None,
    *,
    agents: Collection[str] | None = None,
) -> MetricsReport:
    """The report for ``metrics`` (de-duplicated by event id here, first wins) and the
    ignored counts gathered while opening them.

    ``agents`` (hex public keys, any case) are the owner's agents: metrics signed by any other
    key are only listed in ``unknown_agents``.  None counts every agent.
    """
    unique: dict[str, OpenedMetric] = {}
    for m in metrics:
        unique.setdefault(m.event_id, m)
    known = list(unique.values())
    strangers: list[OpenedMetric] = []
    if agents is not None:
        mine = {a.lower() for a in agents}
        strangers = [m for m in known if m.agent not in mine]
        known = [m for m in known if m.agent in mine]
    rows = _turn_rows(known)
    counts = Counter({k: v for k, v in (ignored or {}).items() if v})
    reasons: dict[str, int] = {r: counts.pop(r) for r in IGNORE_REASONS if r in counts}
    reasons.update(sorted(counts.items()))
    return MetricsReport(
        totals=tuple(_totals(rows)),
        turns=tuple(rows),
        ignored=reasons,
        manifest_mismatches=sum(r.manifest_valid is False for r in rows),
        unknown_agents=_unknown_agents(strangers),
    )
