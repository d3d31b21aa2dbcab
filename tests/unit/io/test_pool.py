"""RelayPool refuses a badly configured URL as bad input before connecting anywhere (the pool
against real relays is in tests/e2e/io/test_pool.py)."""

from __future__ import annotations

import pytest

from nostr_buzz.errors import RelayError
from nostr_buzz.io.pool import PoolQueryResult, RelayPool
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
