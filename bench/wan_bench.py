"""The WAN row of ``make bench``: mention → reply on the relay, across a 40 ms round trip.

Two loopback relays (nostr-sdk's LocalRelay) are reached through fronts that delay every byte
by 20 ms each way and terminate TLS with a certificate from a test CA made at run time
(tests/support/wan.py); this process trusts the CA through ``SSL_CERT_FILE``, which Python's
default SSL context reads, so the bot dials plain ``wss://`` URLs with no option of its own.
The "bad" set adds a refusing relay, a silent one (WebSocket handshake, then nothing) and a
slow one (EOSE 2 s after every REQ), each behind its own delaying front.

The bot (``BuzzPlugin`` with an in-process agent that answers at once, the product's default
timeouts and coalescing window) is timed from the moment an observer publishes a mention
straight to the relays (loopback, no delay) until the observer, subscribed there too, sees the
answer: a kind 9 in a thread, and a NIP-17 private message (gift-wrapped both ways).
Connections per turn are what the fronts accepted after the warm-up turns, divided by the turns.

The peer is a minimal nostr-sdk bot: a client subscribed to mentions of its key that answers
each with a kind 9 in the thread, on the same relays (the bad ones included), timed and counted
the same way.  nostr-sdk trusts only the roots bundled in it, so it reaches each relay through a
front with the same delay and no TLS: its connections skip the TLS round trip when they open,
which its per-turn figures (persistent connections) do not include anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nostr_sdk

from nostr_buzz import Event, SecretKey, sign_event
from nostr_buzz.agent import AgentReply, AgentTurn
from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip17, nip59

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bot_bench import _percentile  # bench/ is on sys.path when run as a script

from tests.support.relays import local_relay
from tests.support.wan import ONE_WAY, Site, Wan, wan

CHANNEL = "bench"
WAIT = 120.0  # seconds one answer may take before the bench gives up
FULL_TIMEOUT = PluginConfig.__dataclass_fields__["relay_timeout"].default
QUICK_TIMEOUT = 0.5


class InstantAgent:
    """An in-process agent that answers at once: the agent's own time is ~0."""

    name = "instant"

    async def prompt(self, turn: AgentTurn) -> AgentReply:
        return AgentReply("on it")


@dataclass
class Phase:
    thread: list[float]
    private: list[float]
    connections: float  # new connections per turn after the warm-up


class Observer:
    """A loopback client of the relays themselves: publishes mentions, notes when answers land
    (first sight on any relay, keyed by every event id an answer refers to)."""

    def __init__(self, urls: list[str], owner: SecretKey) -> None:
        self.pool = RelayPool(urls, timeout=10.0)
        self.owner = owner
        self.seen: dict[str, float] = {}
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, authors: list[str]) -> None:
        filters = [
            {"kinds": [9], "authors": authors},
            {"kinds": [1059], "#p": [self.owner.public_key.hex]},
        ]
        self._task = asyncio.create_task(self._watch(filters))  # live by the warm-up's answer

    async def _watch(self, filters: list[dict[str, Any]]) -> None:
        async with contextlib.aclosing(self.pool.subscribe(filters)) as live:
            async for event in live:
                at = time.perf_counter()
                for ref in _refs(event, self.owner):
                    self.seen.setdefault(ref, at)
                self.changed.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def answer_time(self, event: Event, answering: str) -> float:
        """Publish ``event`` (the mention, or a gift wrap carrying it: ``answering`` is the id
        an answer refers to) and return the seconds until an answer lands on a relay."""
        sent = time.perf_counter()
        await self.pool.publish(event, min_ok=len(self.pool.urls))
        deadline = time.monotonic() + WAIT
        while answering not in self.seen:
            self.changed.clear()
            if time.monotonic() > deadline:
                raise TimeoutError("no answer reached the relays in time")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.5)
        return self.seen[answering] - sent


def _refs(event: Event, owner: SecretKey) -> list[str]:
    if event.kind == 1059:
        try:
            rumor = nip59.open_gift_wrap(owner, event).rumor
        except Exception:
            return []
        return [t[1] for t in rumor.tags if len(t) > 1 and t[0] == "e"]
    return [t[1] for t in event.tags if len(t) > 1 and t[0] == "e"]


def _now() -> int:
    return int(time.time())


def _mention(owner: SecretKey, root: Event, whom: str, i: int) -> Event:
    return sign_event(
        owner,
        kind=9,
        content=f"question {i}",
        tags=[["h", CHANNEL], ["e", root.id, "", "root"], ["p", whom]],
        created_at=_now(),
    )


async def _turns(
    count: int, warmup: int, run: Callable[[int], Awaitable[float]], wan_net: Wan, urls: list[str]
) -> tuple[list[float], int, int]:
    """Run ``count`` turns; the latencies after ``warmup`` and the connections they opened."""
    latencies, before = [], 0
    for i in range(count):
        if i == warmup:
            before = wan_net.accepted(urls)
        latency = await run(i)
        if i >= warmup:
            latencies.append(latency)
    return latencies, wan_net.accepted(urls) - before, count - warmup


async def _bot_phase(
    net: Wan,
    observer: Observer,
    urls: list[str],
    root: Event,
    samples: int,
    warmup: int,
    relay_timeout: float,
) -> Phase:
    owner, agent = observer.owner, SecretKey.generate()
    with tempfile.TemporaryDirectory(prefix="buzz-wan-") as state:
        config = PluginConfig(
            agent_secret=agent,
            owner=owner.public_key,
            read_relays=tuple(urls),
            write_relays=tuple(urls),
            state_dir=Path(state),
            relay_timeout=relay_timeout,
        )
        await observer.start([agent.public_key.hex])
        plugin = BuzzPlugin(config, agent=InstantAgent())
        runner = asyncio.create_task(plugin.run())
        try:

            async def thread(i: int) -> float:
                mention = _mention(owner, root, agent.public_key.hex, i)
                return await observer.answer_time(mention, mention.id)

            async def private(i: int) -> float:
                rumor = nip17.message(
                    owner.public_key.hex, [agent.public_key.hex], f"question {i}", created_at=_now()
                )
                wrap = nip59.gift_wrap(owner, agent.public_key, rumor, now=_now())
                return await observer.answer_time(wrap, rumor.id)

            threads, opened, turns = await _turns(samples + warmup, warmup, thread, net, urls)
            privates, opened_dm, turns_dm = await _turns(
                samples + warmup, warmup, private, net, urls
            )
        finally:
            plugin.stop()
            await asyncio.wait_for(runner, 60)
            await observer.stop()
    return Phase(threads, privates, (opened + opened_dm) / (turns + turns_dm))


@contextlib.asynccontextmanager
async def _peer(urls: list[str]) -> AsyncIterator[str]:
    """A minimal nostr-sdk bot: answers every kind 9 that mentions it, in the thread."""
    keys = nostr_sdk.Keys.generate()
    me = keys.public_key()
    client = nostr_sdk.Client()
    for url in urls:
        await client.add_relay(nostr_sdk.RelayUrl.parse(url))
    await client.connect()  # in the background: the warm-up turn waits for it
    mentions = (
        nostr_sdk.Filter()
        .kind(nostr_sdk.Kind(9))
        .pubkey(me)
        .since(nostr_sdk.Timestamp.from_secs(_now() - 5))
    )
    stream = client.notifications()
    await client.subscribe(nostr_sdk.ReqTarget.auto([mentions]))

    async def answer() -> None:
        while (note := await stream.next()) is not None:
            if not note.is_new_event():
                continue
            event = note.event
            if event.author().to_hex() == me.to_hex():
                continue
            tags = [nostr_sdk.Tag.parse(["e", event.id().to_hex(), "", "reply"])]
            tags += [nostr_sdk.Tag.parse(["p", event.author().to_hex()])]
            for t in event.tags():
                if t.to_vec()[:1] in (["h"],) or t.to_vec()[3:4] == ["root"]:
                    tags.append(t)
            builder = nostr_sdk.EventBuilder(nostr_sdk.Kind(9), "on it").tags(tags)
            # each answer its own task: a relay that never OKs delays no other answer
            sending = asyncio.create_task(
                client.send_event(keys.sign_event(builder.finalize_unsigned(me)))
            )
            sends.add(sending)
            sending.add_done_callback(sends.discard)

    sends: set[asyncio.Task[Any]] = set()
    task = asyncio.create_task(answer())
    try:
        yield me.to_hex()
    finally:
        for running in (task, *sends):
            running.cancel()
        await asyncio.gather(task, *sends, return_exceptions=True)
        await client.shutdown()


async def _peer_phase(
    net: Wan, observer: Observer, urls: list[str], root: Event, samples: int, warmup: int
) -> Phase:
    async with _peer(urls) as peer:
        await observer.start([peer])
        try:

            async def thread(i: int) -> float:
                mention = _mention(observer.owner, root, peer, i)
                return await observer.answer_time(mention, mention.id)

            threads, opened, turns = await _turns(samples + warmup, warmup, thread, net, urls)
        finally:
            await observer.stop()
    return Phase(threads, [], opened / turns)


async def _measure(quick: bool) -> dict[str, tuple[Phase, Phase]]:
    # quick: one turn of each, no warm-up, the relay timeout 0.5 s rather than the default
    # (the smoke's figures mean nothing)
    samples, bad_samples, warmup, timeout = (
        (1, 1, 0, QUICK_TIMEOUT) if quick else (20, 5, 1, FULL_TIMEOUT)
    )
    owner = SecretKey.generate()
    with tempfile.TemporaryDirectory(prefix="buzz-wan-ca-") as tmp:
        async with local_relay() as one, local_relay() as two, wan(Path(tmp)) as net:
            good = [await net.relay(one.url), await net.relay(two.url)]
            bad = [await net.refusing(), await net.silent_relay(), await net.slow_relay()]
            observer = Observer([one.url, two.url], owner)
            root = sign_event(
                owner, kind=9, content="a thread", tags=[["h", CHANNEL]], created_at=_now()
            )
            await observer.pool.publish(root, min_ok=2)
            results: dict[str, tuple[Phase, Phase]] = {}
            for label, sites, n in (("clean", good, samples), ("bad", good + bad, bad_samples)):
                wss = _urls(sites, tls=True)
                bot = await _bot_phase(net, observer, wss, root, n, warmup, timeout)
                peer = await _peer_phase(net, observer, _urls(sites, tls=False), root, n, warmup)
                results[label] = (bot, peer)
    return results


def _urls(sites: list[Site], *, tls: bool) -> list[str]:
    return [s.wss if tls else s.ws for s in sites]


def wan_lines(*, quick: bool = False) -> list[str]:
    """The WAN rows; ``quick``: a turn or two each, 1 s relay timeout (a smoke run)."""
    results = asyncio.run(_measure(quick))
    rtt = 2 * ONE_WAY
    window = PluginConfig.__dataclass_fields__["coalesce_window"].default
    lines = [
        f"{'mention → reply on the relay':<36} {'relays':<6} {'p50 s':>6} {'p99 s':>6} "
        f"{'over clean':>10} {'conns/turn':>10} {'vs peer':>8}"
    ]
    clean = {k: statistics.median(v) for k, v in _series(results["clean"]).items()}
    for label, phases in results.items():
        peer_p50 = statistics.median(phases[1].thread)
        for (title, who), values in _series(phases).items():
            p50 = statistics.median(values)
            extra = f"{p50 - clean[title, who]:>+10.2f}" if label != "clean" else f"{'':>10}"
            ratio = f"{p50 / peer_p50:>7.1f}x" if title == "thread reply" else ""
            conns = phases[0 if who == "bot" else 1].connections
            lines.append(
                f"{f'{title}, {who} (n={len(values)})':<36} {label:<6} {p50:>6.2f} "
                f"{_percentile(values, 0.99):>6.2f} {extra} {conns:>10.1f} {ratio:>8}"
            )
    timeout = QUICK_TIMEOUT if quick else FULL_TIMEOUT
    note = (
        f"(round trip {rtt * 1e3:.0f} ms, wss:// with a test CA, 2 relays; 'bad' adds a refusing,"
        f" a silent and a 2 s relay; the bot's relay timeout {timeout:.1f} s; conns/turn: new"
        f" connections per turn after {'no' if quick else 'one'} warm-up turn; the peer answers"
        f" each mention in its own task. Goals for the bot: p50 ≤ {window + 4 * rtt:.2f} s (the"
        " coalescing window + 4 round trips, the agent taking ~0), 0 new connections per turn,"
        " the bad relays costing ≤ the grace period.)"
    )
    lines += textwrap.wrap(note, 96, subsequent_indent=" ")
    return lines


def _series(phases: tuple[Phase, Phase]) -> dict[tuple[str, str], list[float]]:
    bot, peer = phases
    return {
        ("thread reply", "bot"): bot.thread,
        ("private message", "bot"): bot.private,
        ("thread reply", "nostr-sdk peer"): peer.thread,
    }


if __name__ == "__main__":
    print("\n".join(wan_lines(quick="--quick" in sys.argv[1:])))
