"""The bot's own figures for ``make bench``: intake throughput and mention → prompt latency.

* Intake: events per second through :meth:`BuzzPlugin.handle_event` — the gate, routing, the
  dispatch queue and the state database — into an empty queue and with 4,000 and 100,000
  events already pending (200 a channel, below the queue's 500: 20 channels, then 500): each
  event in its own event-loop step (one commit each, the worst case), and all in one burst
  (what a relay delivering many events at once gives: one commit for the burst).  The worker
  is held back (a long coalescing window) and told of every event as in a running bot: it is
  woken only when an event could change what it does before the look it has planned (each
  event here holds its channel for the window), as in any flood; events are signed beforehand.
* Memory: what the bot keeps per pending event (the event, its queue entry, the state
  database's Python side), traced with :mod:`tracemalloc` while 100,000 events parsed from
  JSON go in, divided; SQLite's page cache, bounded by its own size, is not Python's.
* Latency: a mention published to a loopback relay until the agent's prompt goes out
  (``prompt_context_delivery``), with the bundled demo agent answering at once and the bot's
  default 0.25 s coalescing window included, one mention at a time.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nostr_buzz import Event, SecretKey, sign_event
from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.io.pool import RelayPool

CHANNELS = 20
#: Pending events a channel holds in the intake rows (the queue drops past 500 a channel).
PER_CHANNEL = 200


def _config(state: Path, owner: SecretKey, agent: SecretKey, relay: str) -> PluginConfig:
    return PluginConfig(
        agent_secret=agent,
        owner=owner.public_key,
        read_relays=(relay,),
        write_relays=(relay,),
        agent_command=sys.executable,
        agent_args=("-m", "nostr_buzz.demo.agent"),
        state_dir=state,
        relay_timeout=3.0,
    )


def _mentions(
    owner: SecretKey, agent: SecretKey, count: int, start: int, channels: int = CHANNELS
) -> list[Event]:
    now = int(time.time())
    return [
        sign_event(
            owner,
            kind=9,
            content=f"question {i}",
            tags=[["h", f"c{i % channels}"], ["p", agent.public_key.hex]],
            created_at=now - 3600 + i,
        )
        for i in range(start, start + count)
    ]


class _Load:
    """Signed mentions for the intake rows, made once: ``pending`` to fill a queue with, as
    JSON (parsed as a relay client would, so the bot's copy is its own), then ``measured``."""

    def __init__(self, pending: int, measured: int) -> None:
        self.owner, self.agent = SecretKey.generate(), SecretKey.generate()
        self.channels = max(CHANNELS, pending // PER_CHANNEL)
        made = _mentions(self.owner, self.agent, pending + measured, 0, self.channels)
        self.before = [e.to_json() for e in made[:pending]]
        self.timed = made[pending:]

    def config(self, state: str) -> PluginConfig:
        return replace(
            _config(Path(state), self.owner, self.agent, "ws://127.0.0.1:9"),
            coalesce_window=3600.0,  # hold the worker back: it wakes, and flushes nothing
            in_flight="queue",
        )

    def pending(self, plugin: BuzzPlugin) -> int:
        return sum(plugin.queue.pending(f"c{i}") for i in range(self.channels))


async def _fill(plugin: BuzzPlugin, texts: Iterable[str]) -> None:
    for text in texts:
        await plugin.handle_event(Event.from_json(text))
    await asyncio.sleep(0)  # the fill's commit


async def _intake(load: _Load, *, one_by_one: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="buzz-bench-") as state:
        async with BuzzPlugin(load.config(state)) as plugin:
            await _fill(plugin, load.before)
            started = time.perf_counter()
            for event in load.timed:
                await plugin.handle_event(event)
                if one_by_one:  # each event its own event-loop step: its own commit
                    await asyncio.sleep(0)
            elapsed = time.perf_counter() - started
            assert load.pending(plugin) == len(load.before) + len(load.timed)
    return len(load.timed) / elapsed


async def _memory(load: _Load) -> float:
    """Bytes of Python heap the bot keeps per pending event (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="buzz-bench-") as state:
        async with BuzzPlugin(load.config(state)) as plugin:
            await plugin.handle_event(Event.from_json(load.before[0]))  # warm: tables, caches
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                await _fill(plugin, load.before[1:])
                gc.collect()
                kept = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            assert load.pending(plugin) == len(load.before)
    return kept / (len(load.before) - 1)


async def _latency(samples: int) -> list[float]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.relays import local_relay  # the test suite's loopback LocalRelay

    owner, agent = SecretKey.generate(), SecretKey.generate()
    delivered: dict[str, float] = {}
    changed = asyncio.Event()

    def observe(record: DiagnosticRecord) -> None:
        if record.kind == "turn_started":
            for event_id in record.payload["triggeringEventIds"]:
                delivered.setdefault(event_id, 0.0)
        if record.kind == "prompt_context_delivery":
            for event_id, at in delivered.items():
                if at == 0.0:
                    delivered[event_id] = time.perf_counter()
            changed.set()

    latencies: list[float] = []
    async with local_relay() as relay:
        with tempfile.TemporaryDirectory(prefix="buzz-bench-") as state:
            plugin = BuzzPlugin(
                _config(Path(state), owner, agent, relay.url), on_diagnostic=observe
            )
            runner = asyncio.create_task(plugin.run())
            pool = RelayPool([relay.url], timeout=3.0)
            try:
                await _wait(lambda: plugin.delivery is not None, changed)
                for i in range(samples):
                    [mention] = _mentions(owner, agent, 1, i)
                    tags = [list(t) for t in mention.tags]
                    when = int(time.time())
                    mention = sign_event(
                        owner, kind=9, content=mention.content, tags=tags, created_at=when
                    )
                    sent = time.perf_counter()
                    await pool.publish(mention)
                    await _wait(lambda m=mention: delivered.get(m.id, 0.0) > 0.0, changed)
                    latencies.append(delivered[mention.id] - sent)
            finally:
                plugin.stop()
                await asyncio.wait_for(runner, 30)
    return latencies


async def _wait(condition: Callable[[], Any], changed: asyncio.Event, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        changed.clear()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the bot did not get there in time")
        try:
            await asyncio.wait_for(changed.wait(), min(remaining, 0.05))
        except TimeoutError:
            continue


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bot_lines(*, quick: bool = False) -> list[str]:
    """The bot's rows; ``quick``: a few events and samples each (a smoke run)."""
    measured, samples = (20, 3) if quick else (2_000, 60)
    rows = []
    for pending in (0, 200, 1_000) if quick else (0, 4_000, 100_000):
        load = _Load(pending, measured)
        alone = asyncio.run(_intake(load, one_by_one=True))
        burst = asyncio.run(_intake(load, one_by_one=False))
        rows.append(
            f"bot intake (gate, route, queue, store), {pending:>7,} pending: "
            f"{alone:>7,.0f} events/s one commit each, {burst:>7,.0f} events/s in one burst"
        )
    per_event = asyncio.run(_memory(load))
    rows.append(
        f"bot memory per pending event, {len(load.before):,} pending: {per_event:,.0f} bytes "
        "(Python heap, tracemalloc)"
    )
    latencies = asyncio.run(_latency(samples))
    return [
        *rows,
        f"mention → prompt on loopback, instant agent (n={len(latencies)}): "
        f"p50 {statistics.median(latencies) * 1e3:.0f} ms, "
        f"p99 {_percentile(latencies, 0.99) * 1e3:.0f} ms (includes the 0.25 s coalescing window)",
    ]


if __name__ == "__main__":
    print("\n".join(bot_lines(quick="--quick" in sys.argv[1:])))
