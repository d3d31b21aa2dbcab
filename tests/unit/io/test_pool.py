"""RelayPool refuses a badly configured URL as bad input before connecting anywhere, names the
relays that served an event, and waits for the relays a read of state must hear (the pool
against real relays is in tests/e2e/io/test_pool.py)."""

from __future__ import annotations

import asyncio

import pytest

from nostr_buzz.errors import RelayError
from nostr_buzz.io.answers import AnswerRecord
from nostr_buzz.io.pool import PoolQueryResult, RelayPool, _settle
from nostr_buzz.io.relay import QueryResult
from tests.support.events import chat
from tests.support.keys import OWNER


def test_bad_configured_url_is_bad_input() -> None:
    with pytest.raises(RelayError, match="ws:// or wss://"):
        RelayPool(["ws://127.0.0.1:1", "http://relay.example"])


def test_served_by_names_each_relay_that_served_an_event_itself() -> None:
    both, only_b = chat(OWNER, 1, content="on both"), chat(OWNER, 2, content="on b")
    result = PoolQueryResult(
        events=[both, only_b],
        per_relay={
            "ws://a": QueryResult(relay="ws://a", events=[both], finished=True),
            "ws://b": QueryResult(relay="ws://b", events=[only_b, both], finished=True),
            "ws://c": QueryResult(relay="ws://c", error="timeout"),
        },
    )
    assert result.served_by() == {
        both.id: frozenset({"ws://a", "ws://b"}),
        only_b.id: frozenset({"ws://b"}),
    }


# --- reads of state: which relays are waited for --------------------------------------------


def test_a_relay_serves_until_its_last_definite_answer_is_a_failure() -> None:
    record = AnswerRecord()
    url = "ws://relay.example"
    assert record.serves(url)  # never asked: waited for
    record.note(url, QueryResult(relay=url, error="left behind: no answer within 0.3 s"))
    assert record.serves(url)  # slow says nothing: still waited for
    record.note(url, QueryResult(relay=url, error="timeout"))
    assert not record.serves(url)
    record.note(url, QueryResult(relay=url, error="closed: auth-required: who"))
    assert not record.serves(url)  # nothing definite: the failure stands
    record.note(url + "/", QueryResult(relay=url, finished=True))  # the same relay
    assert record.serves(url)
    record.note(url, QueryResult(relay=url, error="connect failed: connection refused"))
    assert not record.serves(url)


def test_a_relay_a_stranger_named_serves_only_once_it_has_answered() -> None:
    record = AnswerRecord()
    url = "ws://theirs.example"
    assert not record.serves(url, unknown=False)
    record.note(url, QueryResult(relay=url, error="left behind: no answer within 0.3 s"))
    assert not record.serves(url, unknown=False)
    record.note(url, QueryResult(relay=url, finished=True))
    assert record.serves(url, unknown=False)


def test_the_answer_record_is_bounded() -> None:
    record = AnswerRecord(size=3)
    for i in range(5):
        record.note(f"ws://r{i}.example", QueryResult(relay="", error="timeout"))
    assert record.serves("ws://r0.example") and record.serves("ws://r1.example")
    assert not any(record.serves(f"ws://r{i}.example") for i in (2, 3, 4))


async def _settled(wait_for: set[str]) -> tuple[set[str], list[str]]:
    """A fast relay that answers at once and a slow one that answers only once the fast one
    is done and the loop turned a few times, settled with no grace at all."""
    fast_done = asyncio.Event()
    order: list[str] = []

    async def fast() -> QueryResult:
        order.append("fast")
        fast_done.set()
        return QueryResult(relay="ws://fast", finished=True)

    async def slow() -> QueryResult:
        await fast_done.wait()
        for _ in range(5):
            await asyncio.sleep(0)
        order.append("slow")
        return QueryResult(relay="ws://slow", finished=True)

    tasks = {
        "ws://fast": asyncio.create_task(fast()),
        "ws://slow": asyncio.create_task(slow()),
    }
    left = await _settle(tasks, 0.0, lambda r: r.finished, wait_for=wait_for)
    return left, order


async def test_the_grace_period_leaves_a_slower_relay_behind() -> None:
    left, order = await _settled(set())
    assert left == {"ws://slow"} and order == ["fast"]


async def test_a_read_of_state_waits_for_the_relays_it_must() -> None:
    left, order = await _settled({"ws://slow"})
    assert left == set() and order == ["fast", "slow"]
