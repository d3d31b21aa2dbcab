"""Ten days of an owner's metrics: ``ten_days()`` gives 200 real kind 44200 events (signed,
NIP-44 encrypted to OWNER) from two agents and three models over four channels.

Agent A reports running totals (goose style: the reader recomputes each turn from the previous
``cumulative``), agent B per-turn usage; every turn has a ``startedAt`` (so a duration), most
report cache reads and writes, and one turn in ten reports no usage at all (unknown).  The
numbers come from a seeded generator: the same events every run.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from nostr_buzz.event import Event
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, build_metric_event
from nostr_buzz.timestamps import rfc3339_ms
from tests.support.keys import OWNER
from tests.support.metric_scenario import AGENT_A, AGENT_B

FIRST_DAY = datetime(2026, 11, 23, tzinfo=UTC)
DAYS = 10
CHANNELS = ("general", "ops", "research", None)


def _turn(rng: random.Random, unknown: bool) -> TokenCounts | None:
    if unknown:
        return None
    inputs = rng.randrange(2_000, 40_000)
    outputs = rng.randrange(100, 4_000)
    read = rng.randrange(0, inputs // 2) if rng.random() < 0.8 else None
    write = rng.randrange(0, inputs // 8) if read is not None else None
    cost = round(inputs * 3e-6 + outputs * 15e-6, 6)
    return TokenCounts(inputs, outputs, inputs + outputs, cost, read, write)


def _add(total: TokenCounts, turn: TokenCounts) -> TokenCounts:
    def plus(a: int | None, b: int | None) -> int | None:
        return a if a is None or b is None else a + b  # a turn without a cache figure adds none

    known = total.cost_usd is not None and turn.cost_usd is not None
    cost = (total.cost_usd or 0.0) + (turn.cost_usd or 0.0) if known else None
    return TokenCounts(
        plus(total.input_tokens, turn.input_tokens),
        plus(total.output_tokens, turn.output_tokens),
        plus(total.total_tokens, turn.total_tokens),
        None if cost is None else round(cost, 6),
        plus(total.cache_read_tokens, turn.cache_read_tokens),
        plus(total.cache_write_tokens, turn.cache_write_tokens),
    )


def ten_days(count: int = 200, seed: int = 22) -> list[Event]:
    """``count`` metrics spread evenly over :data:`DAYS` UTC days from :data:`FIRST_DAY`."""
    rng = random.Random(seed)
    events: list[Event] = []
    running = TokenCounts(0, 0, 0, 0.0, 0, 0)
    seq = 0
    for n in range(count):
        day = n * DAYS // count
        end = FIRST_DAY + timedelta(days=day, seconds=600 + rng.randrange(0, 80_000))
        started = end - timedelta(milliseconds=rng.randrange(1_500, 90_000))
        turn = _turn(rng, unknown=n % 10 == 7)
        common = {
            "timestamp": rfc3339_ms(end),
            "started_at": rfc3339_ms(started),
            "channel_id": CHANNELS[rng.randrange(len(CHANNELS))],
        }
        if n % 2 == 0:  # agent A: one long session of running totals
            seq += 1
            if turn is not None:
                running = _add(running, turn)
            payload = MetricPayload(
                harness="goose",
                model="model-a",
                session_id="a-session",
                turn_seq=seq,
                turn=turn,
                cumulative=running if turn is not None else None,
                **common,  # type: ignore[arg-type]
            )
            events.append(build_metric_event(AGENT_A, OWNER.public_key, payload))
        else:  # agent B: two models, usage per turn
            payload = MetricPayload(
                harness="codex",
                model="model-b-large" if n % 3 else "model-b-small",
                turn=turn,
                **common,  # type: ignore[arg-type]
            )
            events.append(build_metric_event(AGENT_B, OWNER.public_key, payload))
    return events
