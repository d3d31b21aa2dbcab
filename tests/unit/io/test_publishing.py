"""One event on its way to several relays (io/publishing.py): the verdicts in at the first
acceptance, then the slower relays' — deterministic, each relay's answer released by the test."""

from __future__ import annotations

import asyncio

from nostr_buzz.io.publishing import PublishRun
from nostr_buzz.io.relay import Verdict

EVENT = "e" * 64


def run_of(answers: dict[str, tuple[bool, asyncio.Event | None]]) -> PublishRun:
    """A run whose relay ``url`` answers ``ok`` once its gate (if any) is set."""

    async def answer(url: str, ok: bool, gate: asyncio.Event | None) -> Verdict:
        if gate is not None:
            await gate.wait()
        return Verdict(url, EVENT, ok, False, None if ok else "error:", "" if ok else "down")

    tasks = {url: asyncio.create_task(answer(url, ok, gate)) for url, (ok, gate) in answers.items()}
    return PublishRun(EVENT, tasks)


async def test_the_first_acceptance_reports_and_the_slower_relay_comes_after() -> None:
    slower = asyncio.Event()
    run = run_of({"wss://fast": (True, None), "wss://slow": (True, slower)})
    first = await run.first(1, grace=0.0)
    assert list(first) == ["wss://fast"] and run.pending == ["wss://slow"]
    slower.set()
    rest = await run.rest()
    assert list(rest) == ["wss://slow"] and rest["wss://slow"].ok  # each verdict given once
    assert run.pending == []


async def test_a_refusal_is_no_acceptance_the_first_phase_waits_for_one() -> None:
    slower = asyncio.Event()
    run = run_of({"wss://down": (False, None), "wss://slow": (True, slower)})
    waiting = asyncio.create_task(run.first(1, grace=0.0))
    await asyncio.sleep(0)  # the refusal is in; no acceptance yet
    assert not waiting.done()
    slower.set()
    first = await waiting
    assert set(first) == {"wss://down", "wss://slow"} and not first["wss://down"].ok


async def test_cancel_abandons_the_relays_still_working() -> None:
    never = asyncio.Event()
    run = run_of({"wss://fast": (True, None), "wss://silent": (True, never)})
    await run.first(1, grace=0.0)
    await run.cancel()
    rest = await run.rest()
    assert rest["wss://silent"].message == "cancelled" and not rest["wss://silent"].ok


async def test_without_a_grace_period_every_relay_is_waited_for() -> None:
    slower = asyncio.Event()
    run = run_of({"wss://fast": (True, None), "wss://slow": (False, slower)})
    waiting = asyncio.create_task(run.first(1, grace=None))
    await asyncio.sleep(0)
    assert not waiting.done()
    slower.set()
    assert set(await waiting) == {"wss://fast", "wss://slow"}
