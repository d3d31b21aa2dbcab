"""The bot's own figures for ``make bench``: intake throughput and mention → prompt latency.

* Intake: events per second through :meth:`BuzzPlugin.handle_event` — the gate, routing, the
  dispatch queue and the state database — into an empty queue and with 4,000 events already
  pending: each event in its own event-loop step (one commit each, the worst case), and all
  in one burst (what a relay delivering many events at once gives: one commit for the burst).
  The worker is held back (a long coalescing window), so only intake is timed; events are
  signed beforehand.
* Latency: a mention published to a loopback relay until the agent's prompt goes out
  (``prompt_context_delivery``), with the bundled demo agent answering at once and the bot's
  default 0.25 s coalescing window included, one mention at a time.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from nostr_buzz import Event, SecretKey, sign_event
from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.io.pool import RelayPool

CHANNELS = 20


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


def _mentions(owner: SecretKey, agent: SecretKey, count: int, start: int) -> list[Event]:
    now = int(time.time())
    return [
        sign_event(
            owner,
            kind=9,
            content=f"question {i}",
            tags=[["h", f"c{i % CHANNELS}"], ["p", agent.public_key.hex]],
            created_at=now - 3600 + i,
        )
        for i in range(start, start + count)
    ]


async def _intake(pending: int, measured: int, *, one_by_one: bool) -> float:
    owner, agent = SecretKey.generate(), SecretKey.generate()
    before = _mentions(owner, agent, pending, 0)
    timed = _mentions(owner, agent, measured, pending)
    with tempfile.TemporaryDirectory(prefix="buzz-bench-") as state:
        config = replace(
            _config(Path(state), owner, agent, "ws://127.0.0.1:9"),
            coalesce_window=3600.0,  # hold the worker back: intake alone is timed
            in_flight="queue",
        )
        async with BuzzPlugin(config) as plugin:
            for event in before:
                await plugin.handle_event(event)
            started = time.perf_counter()
            for event in timed:
                await plugin.handle_event(event)
                if one_by_one:  # each event its own event-loop step: its own commit
                    await asyncio.sleep(0)
            elapsed = time.perf_counter() - started
            assert sum(plugin.queue.pending(f"c{i}") for i in range(CHANNELS)) == pending + measured
    return measured / elapsed


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
    for pending in (0, 200 if quick else 4_000):
        alone = asyncio.run(_intake(pending, measured, one_by_one=True))
        burst = asyncio.run(_intake(pending, measured, one_by_one=False))
        rows.append(
            f"bot intake (gate, route, queue, store), {pending:>5,} pending: "
            f"{alone:>7,.0f} events/s one commit each, {burst:>7,.0f} events/s in one burst"
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
