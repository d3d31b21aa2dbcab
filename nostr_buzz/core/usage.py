"""Usage accounting: agent usage reports → NIP-AM ``turn``/``cumulative`` counters
(docs/metrics.md).

A pure state machine.  The ACP driver feeds it what the agent reports, per session:

* the *cumulative* source (goose-style ``usage_update`` running totals) through
  :meth:`UsageTracker.observe_cumulative`;
* the *standard* source (ACP ``session/prompt`` result ``usage``) through
  :meth:`UsageTracker.observe_turn`, with an optional running cost through
  :meth:`UsageTracker.observe_cost`.

:meth:`UsageTracker.end_turn` returns one :class:`UsageRecord` per turn that observed usage.
Deltas are never negative and never guessed: whatever cannot be derived is ``None``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import msgspec

from nostr_buzz._deprecated import renamed_keywords
from nostr_buzz.nips.nip_am import (
    MAX_CUMULATIVE_COST_USD,
    MAX_TOKENS,
    MAX_TURN_COST_USD,
    TokenCounts,
)

__all__ = ["UsageRecord", "UsageTracker", "checked_counts"]

_UNRELIABLE_TURN: Final = TokenCounts(None, None, None, None)


class UsageRecord(msgspec.Struct, frozen=True):
    """What one completed turn contributes to a metric payload."""

    turn: TokenCounts
    cumulative: TokenCounts | None
    delta_reliable: bool
    turn_seq: int


def _tokens(value: object) -> int | None:
    """A token count, or None when it is absent, negative or not an integer (bool included)."""
    return value if type(value) is int and value >= 0 else None


def _cost(value: object) -> float | None:
    """A cost, or None when it is absent, negative or not a finite number."""
    if type(value) not in (int, float):
        return None
    try:
        cost = float(value)  # type: ignore[arg-type]
    except OverflowError:
        return None
    return cost if math.isfinite(cost) and cost >= 0 else None


def _bounded_count(value: int | None) -> int | None:
    return value if value is None or value <= MAX_TOKENS else None


def _within_bounds(counts: TokenCounts, max_cost: float) -> TokenCounts:
    """``counts`` with every value a metric cannot carry (a count above 2^53, a cost above
    ``max_cost``) made unknown, so an agent's absurd report never makes its metric invalid."""
    cost = counts.cost_usd
    return TokenCounts(
        _bounded_count(counts.input_tokens),
        _bounded_count(counts.output_tokens),
        _bounded_count(counts.total_tokens),
        None if cost is None or cost > max_cost else cost,
        cache_read_tokens=_bounded_count(counts.cache_read_tokens),
        cache_write_tokens=_bounded_count(counts.cache_write_tokens),
    )


def checked_counts(counts: TokenCounts) -> TokenCounts:
    """One turn's counts as an agent reported them whole (an in-process agent's
    ``AgentReply.usage``), with every value a metric cannot carry (not a count, negative, not
    finite, beyond the metric's bounds) made unknown: an agent's mistake costs its counters,
    never the turn's metric."""
    checked = TokenCounts(
        _tokens(counts.input_tokens),
        _tokens(counts.output_tokens),
        _tokens(counts.total_tokens),
        _cost(counts.cost_usd),
        cache_read_tokens=_tokens(counts.cache_read_tokens),
        cache_write_tokens=_tokens(counts.cache_write_tokens),
    )
    return _within_bounds(checked, MAX_TURN_COST_USD)


def _fold(base: int | None, *parts: int | None) -> int | None:
    """``inputTokens`` as NIP-AM counts it: input plus the cache reads and writes.

    A missing cache component adds nothing; a missing input leaves the total unknown.
    """
    if base is None:
        return None
    return base + sum(part for part in parts if part is not None)


@dataclass(frozen=True)
class _Totals:
    """One cumulative observation (goose-style running totals), already sanitized."""

    input: int | None = None
    output: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    total: int | None = None
    cost: float | None = None

    @property
    def folded_input(self) -> int | None:
        return _fold(self.input, self.cache_read, self.cache_write)

    def is_empty(self) -> bool:
        return all(
            v is None
            for v in (
                self.input,
                self.output,
                self.cache_read,
                self.cache_write,
                self.total,
                self.cost,
            )
        )


_ZERO: Final = _Totals(0, 0, 0, 0, 0, 0.0)


@dataclass(frozen=True)
class _TurnUsage:
    """One standard per-turn ``usage`` report, already sanitized."""

    input: int | None = None
    output: int | None = None
    total: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None


@dataclass
class _SessionUsage:
    """The accounting of one adapter session: its baselines and the open turn's reports."""

    cumulative_baseline: _Totals | None = None
    cost_baseline: float | None = None
    in_turn: bool = False
    seq: int = 0
    # What the open turn has seen so far (last report of each kind).
    turn_totals: _Totals | None = None
    turn_usage: _TurnUsage | None = None
    turn_cost: float | None = None

    def reset_turn(self) -> None:
        self.turn_totals = None
        self.turn_usage = None
        self.turn_cost = None


def _delta(now: int | None, base: int | None) -> int | None:
    """A field-local difference: None when either side is unknown or the counter went down."""
    if now is None or base is None or now < base:
        return None
    return now - base


class UsageTracker:
    """Per-session usage accounting; see the module docstring and docs/metrics.md "Usage
    accounting".

    Choices docs/metrics.md leaves open:

    * an observation in which every value is absent (after sanitizing) carries nothing and is
      ignored: it neither replaces the turn's last observation nor moves a baseline;
    * ``begin_turn`` on a session whose turn is still open keeps the open turn;
    * ``session_started`` on a session already seen only sets the baselines it does not yet
      have to zero (a notification that arrived first is newer information);
    * a missing cache component adds nothing to the folded ``inputTokens``.
    """

    def __init__(self) -> None:
        self._sessions: dict[str, _SessionUsage] = {}

    def _session(self, session_id: str) -> _SessionUsage:
        if not isinstance(session_id, str):
            raise TypeError("session_id must be a string")
        state = self._sessions.get(session_id)
        if state is None:
            state = self._sessions[session_id] = _SessionUsage()
        return state

    # -- lifecycle --------------------------------------------------------------------------

    def session_started(self, session_id: str) -> None:
        """A session this harness created: both sources start from a zero baseline."""
        state = self._session(session_id)
        if state.cumulative_baseline is None:
            state.cumulative_baseline = _ZERO
        if state.cost_baseline is None:
            state.cost_baseline = 0.0

    def forget(self, session_id: str) -> None:
        """The session was closed: its counters go (a continued session's baselines are unknown
        until the agent reports again, as after a restart)."""
        self._sessions.pop(session_id, None)

    def begin_turn(self, session_id: str) -> None:
        state = self._session(session_id)
        if not state.in_turn:
            state.in_turn = True
            state.reset_turn()

    def in_turn(self, session_id: str) -> bool:
        state = self._sessions.get(session_id)
        return state is not None and state.in_turn

    # -- observations -----------------------------------------------------------------------

    def observe_cumulative(
        self,
        session_id: str,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        total_tokens: int | None = None,
        cost_usd: float | None = None,
    ) -> None:
        """Goose-style running totals.  Inside a turn the last one wins (whole); outside a
        turn it becomes the session's cumulative baseline directly."""
        totals = _Totals(
            input=_tokens(input_tokens),
            output=_tokens(output_tokens),
            cache_read=_tokens(cache_read_tokens),
            cache_write=_tokens(cache_write_tokens),
            total=_tokens(total_tokens),
            cost=_cost(cost_usd),
        )
        if totals.is_empty():
            return
        state = self._session(session_id)
        if state.in_turn:
            state.turn_totals = totals
        else:
            state.cumulative_baseline = totals

    @renamed_keywords(
        {"cached_read_tokens": "cache_read_tokens", "cached_write_tokens": "cache_write_tokens"},
        removed_in="0.2.0",
    )
    def observe_turn(
        self,
        session_id: str,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        total_tokens: int | None = None,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
    ) -> None:
        """Standard ACP per-turn ``usage``; ignored outside a turn.  (The earlier names
        ``cached_read_tokens`` and ``cached_write_tokens`` work until 0.2.0, with a
        :class:`DeprecationWarning`: CHANGELOG.md.)"""
        usage = _TurnUsage(
            input=_tokens(input_tokens),
            output=_tokens(output_tokens),
            total=_tokens(total_tokens),
            cache_read=_tokens(cache_read_tokens),
            cache_write=_tokens(cache_write_tokens),
        )
        if all(v is None for v in vars(usage).values()):
            return
        state = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if state is None or not state.in_turn:
            return
        state.turn_usage = usage

    def observe_cost(self, session_id: str, cost_usd: float | None) -> None:
        """Standard running cost (``usage_update`` ``cost.amount``); outside a turn it becomes
        the cost baseline directly."""
        cost = _cost(cost_usd)
        if cost is None:
            return
        state = self._session(session_id)
        if state.in_turn:
            state.turn_cost = cost
        else:
            state.cost_baseline = cost

    # -- end of turn ------------------------------------------------------------------------

    def end_turn(self, session_id: str) -> UsageRecord | None:
        """Close the turn; None when no usage was observed in it (or no turn was open)."""
        state = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if state is None or not state.in_turn:
            return None
        state.in_turn = False
        totals, usage, turn_cost = state.turn_totals, state.turn_usage, state.turn_cost
        state.reset_turn()

        standard_cost: float | None = None
        if turn_cost is not None:
            # The standard source's cost baseline moves even when the cumulative source wins.
            base = state.cost_baseline
            if base is not None and turn_cost >= base:
                standard_cost = turn_cost - base
            state.cost_baseline = turn_cost

        if totals is not None:
            record_turn, cumulative, reliable = self._from_totals(state, totals)
        elif usage is not None or turn_cost is not None:
            record_turn, cumulative, reliable = _from_usage(usage, standard_cost), None, True
        else:
            return None
        state.seq += 1
        turn = _within_bounds(record_turn, MAX_TURN_COST_USD)
        total = None if cumulative is None else _within_bounds(cumulative, MAX_CUMULATIVE_COST_USD)
        return UsageRecord(turn, total, reliable, state.seq)

    def unknown_turn(self, session_id: str) -> int:
        """Number a turn that :meth:`end_turn` had no usage for (None): its ``turn_seq``, so
        that its metric, with every counter unknown, keeps the session's sequence."""
        state = self._session(session_id)
        state.seq += 1
        return state.seq

    @staticmethod
    def _from_totals(
        state: _SessionUsage, totals: _Totals
    ) -> tuple[TokenCounts, TokenCounts, bool]:
        base = state.cumulative_baseline
        state.cumulative_baseline = totals  # the last observation, whole
        folded = totals.folded_input
        cumulative = TokenCounts(
            folded,
            totals.output,
            totals.total,
            totals.cost,
            cache_read_tokens=totals.cache_read,
            cache_write_tokens=totals.cache_write,
        )
        if base is None:
            return _UNRELIABLE_TURN, cumulative, False
        base_folded = base.folded_input
        if (
            folded is None
            or totals.output is None
            or base_folded is None
            or base.output is None
            or folded < base_folded
            or totals.output < base.output
            or (totals.cost is not None and base.cost is not None and totals.cost < base.cost)
        ):
            return _UNRELIABLE_TURN, cumulative, False
        cost = None
        if totals.cost is not None and base.cost is not None:
            cost = totals.cost - base.cost
        turn = TokenCounts(
            folded - base_folded,
            totals.output - base.output,
            _delta(totals.total, base.total),
            cost,
            cache_read_tokens=_delta(totals.cache_read, base.cache_read),
            cache_write_tokens=_delta(totals.cache_write, base.cache_write),
        )
        return turn, cumulative, True


def _from_usage(usage: _TurnUsage | None, cost: float | None) -> TokenCounts:
    if usage is None:
        return TokenCounts(None, None, None, cost)
    return TokenCounts(
        _fold(usage.input, usage.cache_read, usage.cache_write),
        usage.output,
        usage.total,  # as reported, never derived
        cost,
        cache_read_tokens=usage.cache_read,
        cache_write_tokens=usage.cache_write,
    )
