"""Durability under real faults: ``buzz run`` and ``buzz relay --db`` as real processes.

Each scenario publishes signed mentions from the owner, an allowlisted friend and a stranger,
injects faults (SIGKILL of the bot at random instants and within milliseconds of a turn's end,
relay restarts on the same store and port, a relay down for 30 s, spam while the bot is down,
a 600-mention load with and without SIGKILLs, clock skew, two shards),
then counts on the relays what the bot published: every accepted mention must be answered by
exactly one metered turn with exactly one reply, no turn metered twice, and nothing a stranger
sent answered.  Helpers: ``procs.py`` in this folder.

Random choices come from one seeded RNG per scenario; the seed is printed, and
``BUZZ_E2E_SEED=<seed>`` replays the same choices.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from random import Random
from typing import Any

from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from tests.support.fault_harness import (
    BotProcess,
    Cast,
    Counter44200,
    DiagnosticsTail,
    RelayProcess,
    Tally,
    evidence,
    mention,
    publish,
    seeded_rng,
    wait_answered,
    write_config,
)

TURN_LIVE_KINDS = ("prompt_context_delivery",)
START_KINDS = ("agent_started",)
#: The demo agent works 0.3 s (steers are injected), then writes for 0.3 s (steers start a
#: turn of their own): turns long enough to be killed in, and every steer outcome.
AGENT_AT_WORK = ("--delay", "0.3", "--answer-time", "0.3")


@dataclass
class Bot:
    process: BotProcess
    tail: DiagnosticsTail
    directory: Path


@dataclass
class Stage:
    """One scenario: its seeded RNG, its processes (everything still running is ended on
    exit) and its report."""

    tmp: Path
    name: str
    rng: Random
    seed: int
    began: float = field(default_factory=time.monotonic)
    cast: Cast = field(default_factory=Cast.generate)
    relays: list[RelayProcess] = field(default_factory=list)
    bots: list[Bot] = field(default_factory=list)

    async def relay(self, name: str) -> RelayProcess:
        relay = RelayProcess(self.tmp / f"{name}-db", self.tmp / f"{name}.log")
        self.relays.append(relay)
        await relay.start()
        return relay

    async def bot(
        self, name: str, relays: Sequence[str], *args: str, agent_args: Sequence[str] = ()
    ) -> Bot:
        directory = self.tmp / name
        config = write_config(directory, self.cast, relays, agent_args=agent_args)
        bot = Bot(
            BotProcess(config, self.tmp / f"{name}.log", *args),
            DiagnosticsTail(directory / "state" / "diagnostics.jsonl"),
            directory,
        )
        self.bots.append(bot)
        await start(bot)
        return bot

    async def single(self, agent_args: Sequence[str] = ()) -> tuple[RelayProcess, Bot]:
        """One relay and one bot serving it."""
        relay = await self.relay("relay")
        return relay, await self.bot("bot", [relay.url], agent_args=agent_args)

    def report(self, tally: Tally, extra: str = "") -> None:
        took = time.monotonic() - self.began
        print(
            f"[{self.name}] seed {self.seed}: {tally.summary()}; {took:.1f} s {extra}", flush=True
        )

    def check(self, tally: Tally, events: Sequence[Event]) -> None:
        tails = [b.tail for b in self.bots]
        assert tally.ok, f"seed {self.seed}: " + evidence(tally, tails, events)

    async def close(self) -> None:
        for bot in self.bots:
            if bot.process.running:
                await bot.process.kill()
        for relay in self.relays:
            await relay.stop()


@asynccontextmanager
async def stage(tmp: Path, name: str) -> AsyncIterator[Stage]:
    rng, seed = seeded_rng(name)
    st = Stage(tmp, name, rng, seed)
    try:
        yield st
    finally:
        await st.close()


async def start(bot: Bot, timeout: float = 30.0) -> None:
    """Start the bot and wait until its agent runs (its subscription follows at once).  A
    fault watching the same round may already have killed it again: that is no failure."""
    mark = bot.tail.mark()
    kills = bot.process.kills
    await bot.process.start()
    started = asyncio.create_task(
        bot.tail.next_record(lambda r: r.get("kind") in START_KINDS, timeout, "start", mark)
    )
    exited = asyncio.create_task(bot.process.exited())
    await asyncio.wait({started, exited}, return_when=asyncio.FIRST_COMPLETED)
    for task in (started, exited):
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, AssertionError):
        await started
    bot.tail.poll()
    killed = bot.process.kills > kills  # by a fault of this round, while it started
    if not killed and not any(r.get("kind") in START_KINDS for r in bot.tail.records[mark:]):
        raise AssertionError(f"the bot did not start:\n{bot.process.log_tail()}")


async def kill_when(
    bot: Bot, kinds: Sequence[str], delay: float, after: int | None = None, timeout: float = 15.0
) -> str:
    """SIGKILL the bot ``delay`` seconds after its first record of one of ``kinds`` (after
    the mark ``after``), or at once if none comes in time; says what it did, with the time
    from the record's writing to the kill as measured on the wall clock."""
    try:
        record = await bot.tail.next_record(
            lambda r: r.get("kind") in kinds, timeout, str(kinds), after
        )
    except AssertionError:
        await bot.process.running_again()  # it may be being started for this round
        await bot.process.kill()
        return f"kill (no {'/'.join(kinds)} within {timeout:.0f} s)"
    if delay > 0:
        await asyncio.sleep(delay)  # deliberate fault timing
    lag = bot.tail.age_ms(record)
    await bot.process.kill()
    return f"kill {lag:.0f} ms after {record['kind']}"


# -- a. SIGKILLs at random instants and at turn ends, two relay restarts --------------------


def _round(
    rng: Random, cast: Cast, channels: Sequence[str], roots: dict[str, list[Event]], n: int
) -> tuple[list[Event], list[Event], Event]:
    """``n`` admitted mentions (new threads and replies in earlier ones), two strangers', and
    a follow-up by the first mention's author in its thread (a steer when its turn runs)."""
    admitted: list[Event] = []
    authors: list[SecretKey] = []
    for _ in range(n):
        channel = rng.choice(channels)
        author = rng.choice([cast.owner, cast.owner, cast.friend])
        text = f"question {rng.randrange(10**6)}"
        admitted.append(_in_thread(rng, cast, author, text, channel, roots))
        authors.append(author)
    strangers = [
        mention(cast, cast.stranger, "let me in", channel=rng.choice(channels)) for _ in range(2)
    ]
    first = admitted[0]
    channel = nip10.channel(first) or channels[0]
    root = _root_of(first, roots)
    follow = mention(cast, authors[0], "and one more thing", channel=channel, root=root)
    return admitted, strangers, follow


def _in_thread(
    rng: Random,
    cast: Cast,
    author: SecretKey,
    text: str,
    channel: str,
    roots: dict[str, list[Event]],
    created_at: int | None = None,
) -> Event:
    """A mention that starts a thread in ``channel`` or, half the time, follows up in one."""
    root = rng.choice(roots[channel]) if roots[channel] and rng.random() < 0.5 else None
    event = mention(cast, author, text, channel=channel, root=root, created_at=created_at)
    if root is None:
        roots[channel].append(event)
    return event


def _root_of(event: Event, roots: dict[str, list[Event]]) -> Event:
    thread = nip10.destination(event)
    return next(r for rs in roots.values() for r in rs if r.id == thread)


async def _follow_up(
    bot: Bot, relay: RelayProcess, first: Event, follow: Event, after: int, wait: float
) -> None:
    """Publish ``follow`` ``wait`` seconds after the turn of ``first`` (same thread) starts
    (or after 5 s): with the agent's 0.3 s of work and 0.3 s of writing, it reaches the turn
    while the prompt still takes steers (injected), while the answer is being written (the
    agent starts a turn of its own for it) or after the turn (a turn of its own)."""
    with contextlib.suppress(AssertionError):
        await bot.tail.next_record(
            lambda r: (
                r.get("kind") == "turn_started"
                and first.id in ((r.get("payload") or {}).get("triggeringEventIds") or ())
            ),
            5,
            "the turn of the first mention",
            after,
        )
    await asyncio.sleep(wait)  # deliberate timing of the steer
    await publish([relay.url], [follow])


async def test_sigkills_and_relay_restarts_answer_every_mention_exactly_once(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path, "sigkills") as st:
        relay, bot = await st.single(AGENT_AT_WORK)
        rng = st.rng
        channels = ["alpha", "beta", "gamma", "delta"]
        roots: dict[str, list[Event]] = {c: [] for c in channels}
        accepted: list[Event] = []
        refused: list[Event] = []
        faults: list[str] = []
        # One kill per round: two at random instants (right after a relay restart that
        # happened while turns ran), two while a prompt is live, two within milliseconds of a
        # turn's completion, two within milliseconds of its metric being stored, and two up
        # to 1.2 s after a steer was answered (the agent's own turn for it may be running).
        # The watch starts before the round is published, so that no record can slip by.
        modes = ["turn_completed", "live", "restart", "metric_queued", "steer"] * 2
        for index, mode in enumerate(modes):
            admitted, strangers, follow = _round(rng, st.cast, channels, roots, 6)
            accepted += [*admitted, follow]
            refused += strangers
            pause, kill_delay = rng.uniform(0.0, 1.5), rng.uniform(0.0, 0.004)
            live_delay, restart_bot = rng.uniform(0.0, 0.25), rng.random() < 0.6
            steer_wait = rng.uniform(0.3, 0.55) if mode == "steer" else rng.uniform(0.0, 0.7)
            steer_kill = rng.uniform(0.0, 1.2)
            mark = bot.tail.mark()
            watch = asyncio.create_task(
                _fault(bot, relay, mode, mark, pause, kill_delay, live_delay, steer_kill)
            )
            was_down = not bot.process.running
            await publish([relay.url], [*admitted, *strangers])
            if was_down:  # published while the bot was down: it finds them on start
                await start(bot)
            await _follow_up(bot, relay, admitted[0], follow, mark, steer_wait)
            faults.extend(await watch)
            if restart_bot or index == len(modes) - 1:
                await start(bot)  # else the next round is published while the bot is down
        counter = Counter44200(st.cast, [relay.url])
        tally = await wait_answered(
            counter, accepted, refused=refused, timeout=60, tails=[bot.tail]
        )
        st.report(tally, f"kills {bot.process.kills}; faults {faults}")
        assert bot.process.kills >= 10 and relay.starts == 3
        st.check(tally, accepted)


async def _fault(
    bot: Bot,
    relay: RelayProcess,
    mode: str,
    after: int,
    pause: float,
    kill_delay: float,
    live_delay: float,
    steer_kill: float,
) -> list[str]:
    await bot.process.running_again(60)  # a bot that was down is started for this round
    if mode == "restart":  # same store, same port, while turns run
        with contextlib.suppress(AssertionError):  # no live turn in time: restart anyway
            await bot.tail.next_record(lambda r: r.get("kind") in TURN_LIVE_KINDS, 15, "", after)
        await relay.restart()
        await asyncio.sleep(pause)  # deliberate fault timing
        await bot.process.running_again()
        await bot.process.kill()
        return ["relay restart", f"kill {pause * 1000:.0f} ms after the relay restart"]
    if mode == "live":
        return [await kill_when(bot, TURN_LIVE_KINDS, live_delay, after)]
    if mode == "steer":  # while the steer's own turn (or the turn it joined) runs
        return [await kill_when(bot, ("prompt_context_steer",), steer_kill, after, timeout=8)]
    return [await kill_when(bot, (mode,), kill_delay, after)]


# -- b. the relay is down for 30 s while turns run -------------------------------------------


async def test_relay_down_30s_while_turns_run_every_answer_and_metric_follow(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path, "relay-down") as st:
        relay, bot = await st.single(["--delay", "2"])
        rng = st.rng
        accepted = [
            mention(
                st.cast, rng.choice([st.cast.owner, st.cast.friend]), f"task {i}", channel=f"c{i}"
            )
            for i in range(6)
        ]
        mark = bot.tail.mark()
        await publish([relay.url], accepted)
        live = await _records(bot.tail, TURN_LIVE_KINDS, 6, timeout=20, after=mark)
        await relay.stop()
        down_at = time.monotonic()
        # The turns end while the relay is away: their replies and metrics cannot be sent.
        ended = await _records(bot.tail, ("turn_completed",), 6, timeout=25, after=mark)
        await asyncio.sleep(max(0.0, 30.0 - (time.monotonic() - down_at)))  # the outage
        await relay.start()
        back_at = time.monotonic()
        counter = Counter44200(st.cast, [relay.url])
        # A generous bound: the bot first has to reconnect (its backoff reaches 10 s during
        # the outage), then sends what waits in its outbox.
        tally = await wait_answered(counter, accepted, timeout=75, tails=[bot.tail])
        after = time.monotonic() - back_at  # includes the final quiet period
        st.report(
            tally, f"turns live {live}, ended while down {ended}, settled {after:.0f} s after"
        )
        st.check(tally, accepted)


async def _records(
    tail: DiagnosticsTail, kinds: Sequence[str], count: int, timeout: float, after: int
) -> int:
    """Wait (bounded) for ``count`` records of ``kinds`` after the mark; returns how many."""
    deadline = time.monotonic() + timeout
    while True:
        tail.poll()
        seen = sum(1 for r in tail.records[after:] if r.get("kind") in kinds)
        if seen >= count or time.monotonic() >= deadline:
            return seen
        await asyncio.sleep(0.05)


# -- c. the bot is down while 30 owner mentions and 600 strangers' arrive -----------------------


async def test_bot_down_while_owner_and_spam_arrive_answers_all_owner_mentions(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path, "spam-while-down") as st:
        relay, bot = await st.single()
        rng = st.rng
        counter = Counter44200(st.cast, [relay.url])
        first = [mention(st.cast, st.cast.owner, "are you there?", channel="c0")]
        await publish([relay.url], first)
        warm = await wait_answered(counter, first, timeout=20, tails=[bot.tail])
        assert warm.ok, warm.summary()
        assert await bot.process.stop() == 0
        owner = [
            mention(st.cast, st.cast.owner, f"while you were out {i}", channel=f"c{i % 5}")
            for i in range(30)
        ]
        spam = [
            mention(st.cast, st.cast.stranger, f"spam {i}", channel=f"c{rng.randrange(5)}")
            for i in range(600)
        ]
        await publish([relay.url], owner)
        await publish([relay.url], spam)
        await start(bot)
        accepted = [*first, *owner]
        tally = await wait_answered(counter, accepted, refused=spam, timeout=40, tails=[bot.tail])
        st.report(tally)
        st.check(tally, accepted)


# -- d. 600 owner mentions over 20 channels and 1,100 strangers' events, instant agent ---------
# (and the same load with three SIGKILLs of the bot)


def _load(st: Stage, second: int | None = None) -> tuple[list[Event], list[Event], list[Event]]:
    """600 owner mentions over 20 channels (half of them follow-ups in a thread), 1,100
    strangers' events (most mention the agent), and all of them shuffled.  They are signed in
    one burst, so they share one or two seconds of ``created_at`` (all ``second`` if given)."""
    rng = st.rng
    channels = [f"room{i:02d}" for i in range(20)]
    roots: dict[str, list[Event]] = {c: [] for c in channels}
    owner = [
        _in_thread(rng, st.cast, st.cast.owner, f"load {i}", channels[i % 20], roots, second)
        for i in range(600)
    ]
    strangers = [
        mention(
            st.cast,
            st.cast.stranger,
            f"noise {i}",
            channel=rng.choice(channels),
            mentions_agent=rng.random() < 0.8,
        )
        for i in range(1100)
    ]
    mixed = [*owner, *strangers]
    rng.shuffle(mixed)
    return owner, strangers, mixed


async def test_600_owner_mentions_among_1100_stranger_events_are_all_answered(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path, "load") as st:
        relay, bot = await st.single()
        owner, strangers, mixed = _load(st)
        # Paced over a few seconds, so that mentions arrive while turns run (steering).
        for chunk in range(0, len(mixed), 100):
            await publish([relay.url], mixed[chunk : chunk + 100])
            await asyncio.sleep(0.3)  # deliberate load shape, not synchronisation
        counter = Counter44200(st.cast, [relay.url])
        tally = await wait_answered(
            counter, owner, refused=strangers, timeout=120, tails=[bot.tail]
        )
        st.report(tally)
        st.check(tally, owner)


async def test_load_with_sigkills_answers_every_mention(tmp_path: Path) -> None:
    """The same load, all dated in one second, with three SIGKILLs of the bot: after the 3rd
    chunk (restarted at once), after the 6th (it stays down while the other 11 chunks
    arrive) and while it works through them after its restart.  Each restart must replay
    more than a relay's page (500) of events that share one second."""
    async with stage(tmp_path, "load-kills") as st:
        relay, bot = await st.single()
        owner, strangers, mixed = _load(st, second=int(time.time()))
        pauses = [st.rng.uniform(0.05, 0.6) for _ in range(3)]
        faults: list[str] = []
        for index, chunk in enumerate(range(0, len(mixed), 100)):
            await publish([relay.url], mixed[chunk : chunk + 100])
            if index in (2, 5):
                await asyncio.sleep(pauses[index // 3])  # deliberate fault timing
                await bot.process.kill()
                faults.append(f"kill {pauses[index // 3] * 1000:.0f} ms after chunk {index + 1}")
                if index == 2:
                    await start(bot)
            elif bot.process.running:
                await asyncio.sleep(0.3)  # deliberate load shape, not synchronisation
        await start(bot)
        await asyncio.sleep(pauses[2])  # deliberate fault timing: while it catches up
        await bot.process.kill()
        faults.append(f"kill {pauses[2] * 1000:.0f} ms after the restart")
        await start(bot)
        counter = Counter44200(st.cast, [relay.url])
        tally = await wait_answered(
            counter, owner, refused=strangers, timeout=120, tails=[bot.tail]
        )
        st.report(tally, "; ".join(faults))
        st.check(tally, owner)


# -- e. clock skew both ways, then a relay reconnect --------------------------------------------


async def test_skewed_mentions_and_a_mention_after_reconnect_are_answered(
    tmp_path: Path,
) -> None:
    async with stage(tmp_path, "skew") as st:
        relay, bot = await st.single()
        now = int(time.time())
        skewed = [
            mention(
                st.cast, st.cast.owner, "from a slow clock", channel="c1", created_at=now - 300
            ),
            mention(st.cast, st.cast.owner, "from tomorrow", channel="c2", created_at=now + 86_400),
        ]
        await publish([relay.url], skewed)
        counter = Counter44200(st.cast, [relay.url])
        first = await wait_answered(counter, skewed, timeout=20, tails=[bot.tail])
        await relay.restart()
        later = [mention(st.cast, st.cast.owner, "after the reconnect", channel="c3")]
        await publish([relay.url], later)
        accepted = [*skewed, *later]
        tally = await wait_answered(counter, accepted, timeout=40, tails=[bot.tail])
        st.report(tally, f"before the reconnect: {first.summary()}")
        st.check(tally, accepted)


# -- f. two shards on two relays; a SIGKILLed shard catches up --------------------------------


def _shard(event: Event, count: int) -> int:
    from nostr_buzz.bot import shard_of

    return shard_of(nip10.destination(event), count)


async def test_two_shards_split_the_load_and_a_killed_shard_catches_up(tmp_path: Path) -> None:
    async with stage(tmp_path, "shards") as st:
        rng = st.rng
        relays = [await st.relay("relay-a"), await st.relay("relay-b")]
        urls = [r.url for r in relays]
        shards = [
            await st.bot(f"shard{i}", urls, "--shard", f"{i}/2", agent_args=AGENT_AT_WORK)
            for i in range(2)
        ]
        channels = [f"team{i}" for i in range(8)]
        roots: dict[str, list[Event]] = {c: [] for c in channels}
        first, refused, _ = _round(rng, st.cast, channels, roots, 20)
        victim = shards[1]
        watch = asyncio.create_task(
            kill_when(victim, TURN_LIVE_KINDS, rng.uniform(0.0, 0.2), victim.tail.mark())
        )
        await publish(urls, [*first, *refused])
        fault = await watch
        second, spam, _ = _round(rng, st.cast, channels, roots, 20)
        await publish(urls, [*second, *spam])
        await start(victim)
        accepted = [*first, *second]
        counter = Counter44200(st.cast, urls)
        tally = await wait_answered(
            counter, accepted, refused=[*refused, *spam], timeout=60, tails=[s.tail for s in shards]
        )
        served = [_turn_events(s.tail) for s in shards]
        st.report(tally, f"{fault}; turns per shard {[len(s) for s in served]}")
        st.check(tally, accepted)
        by_id = {e.id: e for e in accepted}
        for index, ids in enumerate(served):
            wrong = [i for i in ids if i in by_id and _shard(by_id[i], 2) != index]
            assert not wrong, f"seed {st.seed}: shard {index} served {len(wrong)} of the other's"
        assert all(served), f"seed {st.seed}: a shard served nothing: {[len(s) for s in served]}"


def _turn_events(tail: DiagnosticsTail) -> set[str]:
    ids: set[str] = set()
    for record in tail.of("turn_started"):
        payload: dict[str, Any] = record.get("payload") or {}
        ids.update(payload.get("triggeringEventIds") or [])
    return ids
