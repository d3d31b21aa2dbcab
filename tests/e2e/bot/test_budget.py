"""Budgets against a real relay and real ``buzz run`` processes (docs/bot.md, "Budgets").

The demo agent reports a cost of 0.02 USD per turn (``--turn-cost``) and the bots run with
``daily_usd = 0.01`` and ``action = "stop"``, given as ``buzz run`` flags: the first turn runs,
the turns after it are held in the queue and their sender is told once; the owner's
``!budget daily_usd 1`` lets them run.  With two shards of one agent key, the metric one shard
published stops the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from nostr_buzz.bot import shard_of
from nostr_buzz.event import Event
from nostr_buzz.nips import nip10, nip17, nip59
from tests.support.fault_harness import (
    BotProcess,
    Cast,
    Counter44200,
    DiagnosticsTail,
    fetch_all,
    mention,
    publish,
    tally,
    write_config,
)
from tests.support.relays import free_port, local_relay, start_relay

CAP = ("--budget-daily-usd", "0.01")
STOP = (*CAP, "--budget-action", "stop")
COSTLY = ("--turn-cost", "0.02")
WAIT = 20.0


class Bot:
    def __init__(
        self,
        tmp: Path,
        name: str,
        cast: Cast,
        url: str,
        *args: str,
        toml: str = "",
        more_relays: Sequence[str] = (),
    ) -> None:
        directory = tmp / name
        self.config = write_config(directory, cast, [url, *more_relays], agent_args=COSTLY)
        self.config.write_text(self.config.read_text(encoding="utf-8") + toml, encoding="utf-8")
        self.process = BotProcess(self.config, tmp / f"{name}.log", *args)
        self.tail = DiagnosticsTail(directory / "state" / "diagnostics.jsonl")

    async def start(self) -> None:
        mark = self.tail.mark()
        await self.process.start()
        await self.record("agent_started", lambda p: True, mark)

    async def record(
        self, kind: str, match: Callable[[dict[str, Any]], bool], after: int = 0
    ) -> dict[str, Any]:
        def wanted(record: dict[str, Any]) -> bool:
            return record.get("kind") == kind and match(record.get("payload") or {})

        try:
            return await self.tail.next_record(wanted, WAIT, kind, after)
        except AssertionError:
            raise AssertionError(f"no {kind}; the bot's log:\n{self.process.log_tail()}") from None

    def turns_for(self, event: Event) -> int:
        started = self.tail.of("turn_started")
        return sum(
            event.id in (r.get("payload") or {}).get("triggeringEventIds", []) for r in started
        )


@asynccontextmanager
async def bots(
    tmp: Path, cast: Cast, url: str, *shards: str, budget: Sequence[str] = STOP, toml: str = ""
) -> AsyncIterator[list[Bot]]:
    running = [
        Bot(tmp, f"bot{i}", cast, url, *budget, *(("--shard", s) if s else ()), toml=toml)
        for i, s in enumerate(shards)
    ]
    try:
        await asyncio.gather(*(b.start() for b in running))
        yield running
    finally:
        for bot in running:
            with contextlib.suppress(Exception):
                await bot.process.stop()


async def metrics_on_relay(counter: Counter44200, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while len(await counter.metrics()) < count:
        assert time.monotonic() < deadline, f"fewer than {count} metrics on the relay"
        await asyncio.sleep(0.2)


def notices_to(replies: Sequence[Event], event: Event) -> list[Event]:
    return [r for r in replies if event.id in r.tag_values("e") and "paused" in r.content]


async def test_stop_holds_turns_past_the_cap_until_the_owner_raises_it(tmp_path: Path) -> None:
    cast = Cast.generate()
    async with local_relay() as relay, bots(tmp_path, cast, relay.url, "") as (bot,):
        counter = Counter44200(cast, [relay.url])
        first = mention(cast, cast.friend, "first, within the budget", channel="room-a")
        await publish([relay.url], [first])
        await bot.record("turn_completed", lambda p: True)
        await metrics_on_relay(counter, 1)  # 0.02 USD spent: past daily_usd = 0.01

        second = mention(cast, cast.friend, "second, past the cap", channel="room-a")
        await publish([relay.url], [second])
        held = await bot.record("budget_stopped", lambda p: second.id in p["eventIds"])
        assert held["payload"]["notified"] is True
        assert held["payload"]["over"][0]["cap"] == "daily_usd"
        third = mention(cast, cast.friend, "third, elsewhere", channel="room-b")
        await publish([relay.url], [third])
        again = await bot.record("budget_stopped", lambda p: third.id in p["eventIds"])
        assert again["payload"]["notified"] is False  # one notice per sender and period
        deadline = time.monotonic() + WAIT
        while not notices_to(await counter.replies(), second):
            assert time.monotonic() < deadline, "the sender was not told the agent is paused"
            await asyncio.sleep(0.2)
        replies = await counter.replies()
        assert len(notices_to(replies, second)) == 1
        assert not notices_to(replies, third)
        assert bot.turns_for(second) == bot.turns_for(third) == 0

        # An attacker's !budget changes nothing: only the owner's is a command.
        forged = mention(cast, cast.friend, "!budget daily_usd 100", channel="room-a")
        raise_cap = mention(cast, cast.owner, "!budget daily_usd 1", channel="room-c")
        mark = bot.tail.mark()
        await publish([relay.url], [forged, raise_cap])
        changed = await bot.record("budget_changed", lambda p: True, mark)
        assert changed["payload"] == {"cap": "daily_usd", "value": 1.0}
        for event in (second, third):
            await bot.record("turn_started", lambda p, e=event: e.id in p["triggeringEventIds"])
        assert len(bot.tail.of("budget_changed")) == 1


def for_shard(cast: Cast, index: int, text: str) -> Event:
    """A message that shard ``index`` of 2 serves (a thread's root is its own destination)."""
    for n in range(64):
        event = mention(cast, cast.friend, text, channel=f"room-{n}")
        if shard_of(nip10.destination(event), 2) == index:
            return event
    raise AssertionError("no message for this shard")


def spread(cast: Cast, count: int, taken: str) -> dict[int, list[Event]]:
    """``count`` messages for each of 2 shards, each in a channel of its own (not ``taken``)."""
    found: dict[int, list[Event]] = {0: [], 1: []}
    for n in range(1024):
        channel = f"room-{n}"
        event = mention(cast, cast.friend, f"held in {channel}", channel=channel)
        index = shard_of(nip10.destination(event), 2)
        if channel != taken and len(found[index]) < count:
            found[index].append(event)
        if all(len(events) == count for events in found.values()):
            return found
    raise AssertionError("too few messages for the shards")


async def test_two_shards_stop_once_the_relays_show_the_cap_spent(tmp_path: Path) -> None:
    cast = Cast.generate()

    async with local_relay() as relay, bots(tmp_path, cast, relay.url, "0/2", "1/2") as shards:
        counter = Counter44200(cast, [relay.url])
        first = for_shard(cast, 0, "spend the budget")
        await publish([relay.url], [first])
        await metrics_on_relay(counter, 1)  # shard 0 spent 0.02 USD
        assert shards[0].turns_for(first) == 1

        other = for_shard(cast, 1, "the other shard")
        same = for_shard(cast, 0, "the same shard")
        await publish([relay.url], [other, same])
        await shards[1].record("budget_stopped", lambda p: other.id in p["eventIds"])
        await shards[0].record("budget_stopped", lambda p: same.id in p["eventIds"])
        assert shards[1].turns_for(other) == 0 and shards[0].turns_for(same) == 0
        assert len(await counter.metrics()) == 1


async def test_warn_runs_every_turn_and_tells_the_owner_once(tmp_path: Path) -> None:
    cast = Cast.generate()
    async with local_relay() as relay, bots(tmp_path, cast, relay.url, "", budget=CAP) as (bot,):
        counter = Counter44200(cast, [relay.url])
        first = mention(cast, cast.friend, "first", channel="room-a")
        await publish([relay.url], [first])
        await metrics_on_relay(counter, 1)
        second = mention(cast, cast.friend, "second, past the cap", channel="room-a")
        await publish([relay.url], [second])
        warned = await bot.record("budget_warned", lambda p: True)
        assert warned["payload"]["notified"] is True
        await metrics_on_relay(counter, 2)  # the turn ran all the same
        third = mention(cast, cast.friend, "third", channel="room-b")
        mark = bot.tail.mark()
        await publish([relay.url], [third])
        again = await bot.record("budget_warned", lambda p: True, mark)
        assert again["payload"]["notified"] is False  # once per period
        assert again["payload"]["over"][0]["cap"] == "daily_usd"
        await metrics_on_relay(counter, 3)
        wraps = await fetch_all([relay.url], {"kinds": [1059], "#p": [cast.owner.public_key.hex]})
        opened = [nip59.open_gift_wrap(cast.owner, w) for w in wraps]
        assert all(o.sender == cast.agent.public_key.hex for o in opened)
        told = [o.rumor.content for o in opened]
        assert len([t for t in told if t.startswith("Budget reached")]) == 1, told


async def test_the_warning_reaches_a_dm_relay_of_the_owner_that_was_down_at_first(
    tmp_path: Path,
) -> None:
    """As an approval question does: the owner's kind 10050 names two relays, one of them down
    when the bot warns; the outbox keeps sending the warning to it until it takes it."""
    cast = Cast.generate()
    port = free_port()
    down = f"ws://127.0.0.1:{port}"  # one of the bot's own relays: a local address counts
    async with local_relay() as relay:
        owner_dm = nip17.dm_relay_list(cast.owner, [relay.url, down], created_at=int(time.time()))
        await publish([relay.url], [owner_dm])
        bot = Bot(tmp_path, "bot", cast, relay.url, *CAP, more_relays=[down])
        await bot.start()
        try:
            counter = Counter44200(cast, [relay.url])
            await publish([relay.url], [mention(cast, cast.friend, "first", channel="room-a")])
            await metrics_on_relay(counter, 1)
            await publish([relay.url], [mention(cast, cast.friend, "second", channel="room-a")])
            warned = await bot.record("budget_warned", lambda p: True)
            assert warned["payload"]["notified"] is True  # on the relay that is up
            revived = await start_relay(port=port)
            try:
                owner = cast.owner.public_key.hex
                deadline = time.monotonic() + 3 * WAIT
                while True:
                    wraps = await fetch_all([revived.url], {"kinds": [1059], "#p": [owner]})
                    if wraps or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.5)
                told = [nip59.open_gift_wrap(cast.owner, w).rumor.content for w in wraps]
                assert len(told) == 1 and told[0].startswith("Budget reached"), told
            finally:
                revived.stop()
        finally:
            await bot.process.stop()


CAPPED = '[budget]\ndaily_usd = 0.01\naction = "stop"\n'


async def hold_ten(cast: Cast, url: str, shards: list[Bot]) -> dict[int, list[Event]]:
    """Shard 0 spends the day's budget; then 5 messages for each shard, each in a channel of
    its own, are held (counted in each shard's feed)."""
    counter = Counter44200(cast, [url])
    first = for_shard(cast, 0, "spend the budget")
    await publish([url], [first])
    await metrics_on_relay(counter, 1)  # 0.02 USD spent: past daily_usd = 0.01
    held = spread(cast, 5, taken=first.tag_values("h")[0])
    await publish([url], [*held[0], *held[1]])
    for index, events in held.items():
        for event in events:
            await shards[index].record("budget_stopped", lambda p, e=event: e.id in p["eventIds"])
    return held


async def restart(shards: list[Bot], change: Callable[[str], str] = lambda text: text) -> None:
    """Stop every shard, ``change`` its buzz.toml, start them all again."""
    for bot in shards:
        await bot.process.stop()
        bot.config.write_text(change(bot.config.read_text(encoding="utf-8")), encoding="utf-8")
    await asyncio.gather(*(bot.start() for bot in shards))


async def test_a_cap_raised_in_buzz_toml_runs_every_held_turn_once_on_its_shard_after_a_restart(
    tmp_path: Path,
) -> None:
    """A hold is decided again under the caps in force at start: held until the end of the day
    under ``daily_usd = 0.01``, every held turn runs once the cap is raised in buzz.toml and the
    shards restarted, each on its own shard (counted on the relay and in each shard's feed)."""
    cast = Cast.generate()
    async with (
        local_relay() as relay,
        bots(tmp_path, cast, relay.url, "0/2", "1/2", budget=(), toml=CAPPED) as shards,
    ):
        counter = Counter44200(cast, [relay.url])
        held = await hold_ten(cast, relay.url, shards)
        await restart(shards, lambda text: text.replace("daily_usd = 0.01", "daily_usd = 10"))

        every = [*held[0], *held[1]]
        replies = [r for r in await counter.replies() if "paused" not in r.content]
        deadline = time.monotonic() + WAIT
        while len(found := tally(every, [], await counter.metrics(), replies).answered) < 10:
            assert time.monotonic() < deadline, f"{len(found)} of 10 held turns ran"
            await asyncio.sleep(0.5)
            replies = [r for r in await counter.replies() if "paused" not in r.content]
        for bot in shards:
            await bot.tail.quiet(1.5, timeout=10.0)  # late duplicates are counted too
        replies = [r for r in await counter.replies() if "paused" not in r.content]
        result = tally(every, [], await counter.metrics(), replies)

    assert result.ok and result.turns == 11, result.summary()
    for index, events in held.items():
        other = shards[1 - index]
        assert [shards[index].turns_for(e) for e in events] == [1] * 5
        assert [other.turns_for(e) for e in events] == [0] * 5
        assert len(shards[index].tail.of("budget_released")) == 1


async def test_a_restart_under_the_same_cap_holds_every_held_turn_again_and_tells_no_one_twice(
    tmp_path: Path,
) -> None:
    """The hold decided again at start still holds when the cap is still spent: no turn runs,
    and the senders told at the first hold are not told again."""
    cast = Cast.generate()
    async with (
        local_relay() as relay,
        bots(tmp_path, cast, relay.url, "0/2", "1/2", budget=(), toml=CAPPED) as shards,
    ):
        counter = Counter44200(cast, [relay.url])
        held = await hold_ten(cast, relay.url, shards)
        marks = [bot.tail.mark() for bot in shards]
        await restart(shards)
        for index, events in held.items():
            for event in events:
                again = await shards[index].record(
                    "budget_stopped", lambda p, e=event: e.id in p["eventIds"], marks[index]
                )
                assert again["payload"]["notified"] is False
        assert len(await counter.metrics()) == 1
        notices = [r for r in await counter.replies() if "paused" in r.content]
        assert len(notices) == 2  # one per shard, at the first hold
        assert [len(bot.tail.of("budget_released")) for bot in shards] == [1, 1]
