"""The relay-list cache: answers expire, and memory is bounded however many people ask."""

from __future__ import annotations

from nostr_buzz.io.relay_lists import TtlCache


def test_answers_expire_after_the_ttl() -> None:
    now = [0.0]
    cache: TtlCache[str, int] = TtlCache(10.0, 5, lambda: now[0])
    cache.put("a", 1)
    now[0] = 9.9
    assert cache.get("a") == 1
    now[0] = 10.0
    assert cache.get("a") is None


def test_the_oldest_answers_are_dropped_past_the_bound() -> None:
    cache: TtlCache[str, int] = TtlCache(10.0, 3, lambda: 0.0)
    for i in range(1000):
        cache.put(str(i), i)
    assert [cache.get(k) for k in ("996", "997", "998", "999")] == [None, 997, 998, 999]
    assert len(cache._items) == 3
