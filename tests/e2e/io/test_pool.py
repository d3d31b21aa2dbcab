"""RelayPool: concurrent fan-out, merged queries, and relays that are dead, silent or lying."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import Budget, RelayClient
from tests.support.hostile_relay import hostile_relay, tarpit
from tests.support.keys import NIP19_SECRET as SECRET
from tests.support.relays import free_port, local_relay
from tests.support.scripted_relay import scripted_relay, serving
from tests.support.wan import Front

NOW = 1_790_000_000


def note(content: str, created_at: int = NOW) -> Event:
    return sign_event(SECRET, kind=1, content=content, created_at=created_at)


def now() -> float:
    return asyncio.get_running_loop().time()


async def test_publish_to_three_relays_with_one_down() -> None:
    ev = note("fan out")
    down = f"ws://127.0.0.1:{free_port()}"
    async with local_relay() as a, local_relay() as b:
        pool = RelayPool([a.url, down, b.url], timeout=2)
        result = await pool.publish(ev)
        strict = await pool.publish(ev, min_ok=3)
    assert result.ok
    assert result.accepted == [a.url, b.url]
    assert result.failed == [down]
    assert result.verdicts[a.url].accepted and result.verdicts[b.url].accepted
    failed = result.verdicts[down]
    assert failed.prefix == "error:" and failed.message == "connect failed: connection refused"
    # second round: the two live relays already have it, which counts as ok
    assert all(strict.verdicts[u].duplicate for u in (a.url, b.url))
    assert not strict.ok


async def test_query_merges_and_deduplicates() -> None:
    e1, e2, e3 = note("one", NOW), note("two", NOW + 1), note("three", NOW + 2)
    async with local_relay() as a, local_relay() as b:
        async with RelayClient(a.url) as ca, RelayClient(b.url) as cb:
            for ev in (e1, e2):
                assert (await ca.publish(ev)).accepted
            for ev in (e2, e3):
                assert (await cb.publish(ev)).accepted
        result = await RelayPool([a.url, b.url], timeout=2).query({"kinds": [1]})
    assert sorted(e.id for e in result.events) == sorted(e.id for e in (e1, e2, e3))
    assert len(result.events) == 3
    assert all(r.finished for r in result.per_relay.values())
    assert [len(r.events) for r in result.per_relay.values()] == [2, 2]
    assert result.any_finished and result.rejected == {}


@pytest.mark.parametrize("grace", [None, 0.3])
async def test_relays_that_never_answer_do_not_delay_the_result(grace: float | None) -> None:
    """Without a grace period each relay is waited for until its timeout (1 s); with one, the
    others are left behind 0.3 s after the good relay's answer, however long their timeout."""
    ev = note("prompt")
    async with (
        local_relay() as good,
        hostile_relay("silent") as silent,
        hostile_relay("frozen") as frozen,
        tarpit() as pit,
    ):
        async with RelayClient(good.url) as c:
            assert (await c.publish(ev)).accepted
        timeout = 1.0 if grace is None else 5.0
        pool = RelayPool([silent.url, frozen.url, pit, good.url], timeout=timeout, grace=grace)
        start = now()
        result = await pool.query({"ids": [ev.id]} if grace is None else {"kinds": [1]})
        query_took = now() - start
        start = now()
        published = await pool.publish(note("again", NOW + 1))
        publish_took = now() - start
    assert query_took < 1.3 if grace is None else query_took < 1.0, query_took
    assert publish_took < 1.3 if grace is None else publish_took < 1.0, publish_took
    assert [e.id for e in result.events] == [ev.id]
    assert result.per_relay[good.url].finished
    assert published.accepted == [good.url]
    assert published.ok
    if grace is None:
        assert result.per_relay[silent.url].error == "timeout"
        assert result.per_relay[frozen.url].error == "timeout"
        assert result.per_relay[pit].error == "connect failed: timeout"
        return
    for url in (silent.url, frozen.url, pit):
        error = result.per_relay[url].error
        assert error == "left behind: no answer within 0.3 s of the first relay's EOSE"
        assert published.verdicts[url].message.startswith("not waited for")


async def test_a_lying_relay_is_reported_and_the_honest_answer_kept() -> None:
    ev = note("the real one")
    async with local_relay() as good, hostile_relay("forged_sig", [ev]) as liar:
        async with RelayClient(good.url) as c:
            assert (await c.publish(ev)).accepted
        result = await RelayPool([liar.url, good.url], timeout=2).query({"ids": [ev.id]})
    assert [e.to_json() for e in result.events] == [ev.to_json()]
    assert result.rejected == {liar.url: ["bad_signature"]}


async def test_hint_relays_are_never_authenticated_to() -> None:
    ev = note("behind auth")
    async with local_relay(auth="read") as listed, local_relay(auth="read") as hint:
        for url in (listed.url, hint.url):
            async with RelayClient(url) as c:
                assert (await c.publish(ev)).accepted  # READ mode: writing is open
        pool = RelayPool([listed.url], secret=SECRET, timeout=2)
        result = await pool.query({"ids": [ev.id]}, extra_urls=[hint.url, "https://not-a-relay"])
    assert list(result.per_relay) == [listed.url, hint.url]  # the bad hint is skipped
    assert result.per_relay[listed.url].finished
    hinted = result.per_relay[hint.url]
    assert not hinted.finished
    assert hinted.error is not None and "authentication disabled for this relay" in hinted.error
    assert [e.id for e in result.events] == [ev.id]


async def test_a_hint_that_is_also_listed_is_asked_once_as_listed() -> None:
    async with local_relay() as relay:
        pool = RelayPool([relay.url, relay.url + "/"], timeout=2)
        assert pool.urls == [relay.url]
        result = await pool.query({"kinds": [1]}, extra_urls=[relay.url])
    assert list(result.per_relay) == [relay.url]


async def test_live_subscription_merges_relays_and_yields_each_event_once() -> None:
    both, only_b = note("on both", NOW), note("only on b", NOW + 1)
    async with local_relay() as a, local_relay() as b:
        pool = RelayPool([a.url, b.url, f"ws://127.0.0.1:{free_port()}"], timeout=1)
        got: list[str] = []
        async with contextlib.aclosing(pool.subscribe({"kinds": [1]})) as stream:
            async with RelayClient(a.url) as ca, RelayClient(b.url) as cb:
                assert (await ca.publish(both)).accepted
                assert (await cb.publish(both)).accepted
                assert (await cb.publish(only_b)).accepted
            async with asyncio.timeout(3):
                async for ev in stream:
                    got.append(ev.id)
                    if len(got) == 2:
                        break
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert others == []
    assert sorted(got) == sorted([both.id, only_b.id])


async def test_hints_are_capped_after_the_listed_relays() -> None:
    """A hint that is also listed costs no place among the hints; past the cap none is asked."""
    async with contextlib.AsyncExitStack() as stack:
        relays = [await stack.enter_async_context(scripted_relay(serving([]))) for _ in range(12)]
        listed, hints = relays[0], relays[1:]
        pool = RelayPool([listed.url], timeout=2)
        result = await pool.query(
            {"kinds": [1]}, extra_urls=[listed.url, *(h.url for h in hints)], max_hints=3
        )
    assert list(result.per_relay) == [listed.url, *(h.url for h in hints[:3])]
    assert [r.connections for r in relays] == [1, 1, 1, 1] + [0] * 8
    assert all(r.finished for r in result.per_relay.values())


def big_notes(relay_no: int, count: int, size: int) -> list[dict[str, Any]]:
    return [
        sign_event(
            SECRET, kind=1, content=f"{relay_no}.{i} " + "x" * size, created_at=NOW
        ).to_dict()
        for i in range(count)
    ]


async def test_hostile_relays_together_cannot_pass_the_query_total() -> None:
    """Five relays each answer with 40 distinct 16 KiB events (well within one relay's own
    budget): what the pool holds stays under the one total all the relays share."""
    total = Budget(events=10_000, bytes=256 << 10, tags=10_000)
    served = [big_notes(n, 40, 16 << 10) for n in range(5)]

    async with contextlib.AsyncExitStack() as stack:
        relays = [await stack.enter_async_context(scripted_relay(serving(e))) for e in served]
        cut: list[str] = []
        pool = RelayPool([r.url for r in relays], timeout=5, total_budget=total)
        pool.on_cut_off = lambda url, why: cut.append(url)
        result = await pool.query({"kinds": [1]})
    held = sum(len(e.to_json()) for r in result.per_relay.values() for e in r.events)
    assert 0 < held <= total.bytes
    assert cut, "some relay must have been cut off at the total"
    for url in cut:
        error = result.per_relay[url].error
        assert error is not None and "all relays together" in error
    # Without the total, the same relays are served whole: the bound is what cut them.
    async with contextlib.AsyncExitStack() as stack:
        relays = [await stack.enter_async_context(scripted_relay(serving(e))) for e in served]
        whole = await RelayPool([r.url for r in relays], timeout=5).query({"kinds": [1]})
    assert len(whole.events) == 200


async def test_the_total_bounds_the_number_of_events_too() -> None:
    served = [big_notes(n, 30, 10) for n in range(4)]

    async with contextlib.AsyncExitStack() as stack:
        relays = [await stack.enter_async_context(scripted_relay(serving(e))) for e in served]
        pool = RelayPool([r.url for r in relays], timeout=5, total_budget=Budget(events=50))
        result = await pool.query({"kinds": [1]})
    assert sum(len(r.events) for r in result.per_relay.values()) <= 50
    assert len(result.events) <= 50


# --- reads of state ---------------------------------------------------------------------------


async def test_a_read_of_state_takes_the_newest_version_not_the_fastest_relays() -> None:
    """A relay 0.5 s faster holds the older kind 10002; the honest one, behind a delaying
    front, the newest: a plain query keeps the fast relay's (the honest one left behind by the
    grace period), a read of state waits for the honest one and keeps the newest."""
    old = sign_event(
        SECRET, kind=10002, content="", tags=[["r", "wss://old.example"]], created_at=NOW
    )
    new = sign_event(
        SECRET, kind=10002, content="", tags=[["r", "wss://new.example"]], created_at=NOW + 60
    )
    async with local_relay() as fast, local_relay() as honest:
        front = await Front(int(honest.url.rsplit(":", 1)[1]), delay=0.25).start()
        try:
            assert (await RelayPool([fast.url]).publish(old)).ok
            assert (await RelayPool([honest.url]).publish(new)).ok
            urls = [fast.url, f"ws://127.0.0.1:{front.port}"]
            flt = {"kinds": [10002], "authors": [SECRET.public_key.hex]}
            plain = await RelayPool(urls, timeout=5.0, grace=0.3).query(flt)
            state = await RelayPool(urls, timeout=5.0, grace=0.3).query_state(flt)
        finally:
            await front.close()
    assert [e.id for e in plain.events] == [old.id]
    assert plain.per_relay[urls[1]].error is not None
    assert plain.per_relay[urls[1]].error.startswith("left behind")
    assert [e.id for e in state.events] == [new.id]
    assert state.unconfirmed == {}


async def test_a_silent_relay_costs_a_read_of_state_its_timeout_once_and_is_named() -> None:
    ev = sign_event(SECRET, kind=0, content="{}", created_at=NOW)
    async with local_relay() as good, scripted_relay() as silent:
        assert (await RelayPool([good.url]).publish(ev)).ok
        told: list[tuple[list[int], dict[str, str]]] = []
        async with RelayPool([good.url, silent.url], timeout=0.5, grace=0.1) as pool:
            pool.on_unconfirmed = lambda kinds, relays: told.append((kinds, relays))
            flt = {"kinds": [0], "authors": [SECRET.public_key.hex]}
            first = await pool.query_state(flt)
            second = await pool.query_state(flt)
    assert [e.id for e in first.events] == [ev.id] == [e.id for e in second.events]
    # Waited for the first time (its timeout), not the second (left behind by the grace
    # period, or skipped while it backs off): named as unconfirmed both times.
    assert first.per_relay[silent.url].error == "timeout"
    second_error = second.per_relay[silent.url].error or ""
    assert second_error.startswith(("left behind", "skipped")), second_error
    assert list(first.unconfirmed) == [silent.url] == list(second.unconfirmed)
    assert told == [([0], first.unconfirmed), ([0], second.unconfirmed)]
