"""The bound on live sessions (docs/bot.md, "Live sessions"): a slot is taken before a session
opens; the least recently used idle session is closed for it; with every session busy the
opener waits; a closing session counts until its close has returned."""

from __future__ import annotations

import asyncio

from nostr_buzz.bot.live import LiveSessions, touch


async def test_the_least_recently_used_idle_session_is_closed_for_a_new_one() -> None:
    live = LiveSessions(2)
    sessions = {"a": "sa", "b": "sb"}
    touch(sessions, "a")  # a used last: b is the least recently used
    closed: list[str] = []

    async def close(key: str, session: str) -> None:
        closed.append(key)

    async with live.slot(sessions, lambda k: False, close):
        sessions["c"] = "sc"
    assert closed == ["b"] and list(sessions) == ["a", "c"]
    async with live.slot(sessions, lambda k: k == "a", close):  # a is busy: c goes
        sessions["d"] = "sd"
    assert closed == ["b", "c"] and list(sessions) == ["a", "d"]


async def test_with_every_session_busy_the_opener_waits_and_a_closing_one_still_counts() -> None:
    live = LiveSessions(1)
    sessions = {"a": "sa"}
    busy = {"a"}
    release = asyncio.Event()
    calls: list[str] = []

    async def close(key: str, session: str) -> None:
        calls.append(f"close {key}")
        await release.wait()  # the agent has not answered the close yet
        calls.append(f"closed {key}")

    async def opener() -> None:
        async with live.slot(sessions, lambda k: k in busy, close):
            calls.append("open b")
            sessions["b"] = "sb"

    task = asyncio.create_task(opener())
    for _ in range(5):
        await asyncio.sleep(0)
    assert calls == [] and not task.done()  # a runs a turn: nothing to close, b waits
    busy.clear()
    live.notify()  # a's turn ended
    for _ in range(5):
        await asyncio.sleep(0)
    assert calls == ["close a"]  # b does not open while a's close is on the wire
    await live.closed("b")  # nothing closing for b
    release.set()
    await task
    assert calls == ["close a", "closed a", "open b"] and list(sessions) == ["b"]
