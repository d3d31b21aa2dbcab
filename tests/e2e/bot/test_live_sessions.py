"""``[sessions] max_live``: a real ``buzz run`` process serves a thousand channels with at most
16 agent sessions open at once.

The agent (tests/support/live_agent.py, a real subprocess) logs every ``session/new``,
``session/close`` and ``session/resume`` with the number of sessions open at it, and refuses a
prompt in a session it does not hold open.  Counted from outside: the most sessions ever open
at the agent, the replies and metrics on the relay (each mention answered once, one metric
each), and the bot's resident memory (``/proc``) after 200 channels and after 1,000, which
gives what an idle channel costs the bot.  Then one closed channel speaks again: its session is
continued (``session/resume``), not opened anew.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.event import Event
from nostr_buzz.io.agent_driver import AgentDriver
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import open_metric_event
from tests.support.bot_world import Recorder, World
from tests.support.buzz_process import Lines, run_bot
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER
from tests.support.live_agent import LiveAgent
from tests.support.relays import RunningRelay
from tests.support.scripted_agent import USAGE, Scripted
from tests.support.waits import wait_for

MAX_LIVE = 16
FIRST, CHANNELS = 200, 1000
#: What 800 idle channels may add to the bot's resident memory: about 5 MiB measured (7 KiB
#: each, docs/bot.md "Live sessions"); with no bound on live sessions it was 13 MiB.
IDLE_GROWTH_LIMIT_KB = 10 * 1024


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


async def by_agent(relay: RunningRelay, kind: int) -> list[Event]:
    """Every event of ``kind`` the agent signed, paged back by ``until`` (a relay answers at
    most 500 at a time)."""
    pool = RelayPool([relay.url], timeout=10.0)
    found: dict[str, Event] = {}
    until: int | None = None
    while True:
        flt = {"kinds": [kind], "authors": [AGENT.public_key.hex], "limit": 500}
        page = (await pool.query(flt if until is None else {**flt, "until": until})).events
        new = [e for e in page if e.id not in found]
        found.update((e.id, e) for e in new)
        if not new:
            await pool.close()
            return list(found.values())
        until = min(e.created_at for e in page)


async def publish(relay: RunningRelay, events: list[Event]) -> None:
    pool = RelayPool([relay.url], timeout=10.0)
    for start in range(0, len(events), 100):
        verdicts = await asyncio.gather(*(pool.publish(e) for e in events[start : start + 100]))
        assert all(v.ok for v in verdicts)
    await pool.close()


async def answered(
    relay: RunningRelay, agent: LiveAgent, count: int, timeout: float
) -> list[Event]:
    """The agent's replies, once there are ``count`` (or after ``timeout`` seconds).  The
    agent's log is watched until it has had ``count`` prompts: reading back up to a thousand
    replies, each signature checked, on every look would take the CPU the bot needs."""
    deadline = time.monotonic() + timeout
    while len(agent.records("session/prompt")) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    while len(replies := await by_agent(relay, 9)) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    return replies


def mentions(start: int, stop: int, at: int) -> list[Event]:
    return [
        chat(OWNER, at, content=f"hello channel {i}", channel=f"c{i}", mention=AGENT)
        for i in range(start, stop)
    ]


async def test_a_thousand_channels_never_hold_more_than_max_live_sessions_at_the_agent(
    relay: RunningRelay, tmp_path: Path
) -> None:
    agent = LiveAgent(tmp_path, {})
    now = int(time.time())
    first, rest = mentions(0, FIRST, now), mentions(FIRST, CHANNELS, now)
    env = {"BUZZ_SESSIONS_MAX_LIVE": str(MAX_LIVE)}
    bot = run_bot(
        relay.url,
        agent.command,
        tmp_path / "state",
        agent=AGENT,
        owner=OWNER,
        cwd=tmp_path,
        env=env,
    )
    try:
        assert bot.stderr is not None and bot.pid is not None
        Lines(bot.stderr).until("buzz: agent ")
        # A line per turn on stderr: read it all, or a full pipe would stop the bot.
        threading.Thread(target=bot.stderr.read, daemon=True).start()
        started = time.monotonic()
        await publish(relay, first)
        got = len(await answered(relay, agent, FIRST, 60))
        assert got == FIRST, f"{got} answered in {time.monotonic() - started:.1f} s"
        await asyncio.sleep(1)  # the last metrics and settlements land
        rss_first = rss_kb(bot.pid)
        await publish(relay, rest)
        replies = await answered(relay, agent, CHANNELS, 75)
        served = time.monotonic() - started
        await asyncio.sleep(1)
        rss_all = rss_kb(bot.pid)
        # A channel whose session was closed long ago speaks again: continued, not new.
        again = chat(OWNER, now + 1, content="and again", channel="c0", mention=AGENT)
        await publish(relay, [again])
        # A deadline, not a measure: under load the resumed turn may take a while.
        replies = await answered(relay, agent, CHANNELS + 1, 90)
        metrics = await by_agent(relay, METRIC_KIND)
    finally:
        bot.terminate()
        await asyncio.to_thread(bot.wait, 30)
    growth = rss_all - rss_first
    print(
        f"{CHANNELS} channels in {served:.1f} s; bot RSS {rss_first // 1024} MiB after {FIRST}, "
        f"{rss_all // 1024} MiB after {CHANNELS}: {growth * 1024 // (CHANNELS - FIRST)} bytes "
        f"per idle channel; at most {agent.most_open()} sessions open at the agent"
    )
    assert agent.most_open() <= MAX_LIVE
    assert len(agent.records("session/new")) == CHANNELS  # each channel opened once ...
    assert len(agent.records("session/close")) >= CHANNELS - MAX_LIVE  # ... and most closed
    [resumed] = agent.records("session/resume")  # c0's, continued for its second turn
    # Every mention answered once, one metric each, every metric of the real channel.
    roots = [nip10.thread_ref(r).root for r in replies]
    assert sorted(roots) == sorted(e.id for e in [*first, *rest, again])
    assert len(metrics) == CHANNELS + 1
    payloads = [open_metric_event(OWNER, m) for m in metrics]
    assert sorted(p.triggering_event_ids[0] for p in payloads) == sorted(roots)
    assert {p.channel_id for p in payloads} == {f"c{i}" for i in range(CHANNELS)}
    [c0_again] = [r for r in replies if nip10.thread_ref(r).root == again.id]
    assert c0_again.content.startswith(f"answer {resumed['sid']} #2")  # its earlier turn held
    assert growth < IDLE_GROWTH_LIMIT_KB, f"{growth} KiB for {CHANNELS - FIRST} idle channels"


async def test_a_closed_session_leaves_nothing_in_the_driver(world: World) -> None:
    """In process, the driver's own tables: a closed session's state machine and usage
    counters go with it, so they never hold more than ``max_live`` sessions."""
    agent = LiveAgent(world.tmp, {})
    rec = Recorder()
    config = world.config(agent_command=sys.executable, agent_args=agent.args, max_live_sessions=2)
    async with BuzzPlugin(config, on_diagnostic=rec) as bot:
        for i in range(6):
            await bot.handle_event(world.say(f"hello {i}", channel=f"c{i}"))
            await rec.kind("turn_completed", i + 1)
        driver = bot.supervisor.driver
        assert isinstance(driver, AgentDriver)
        assert len(bot.supervisor.sessions) == 2
        assert len(driver.hub.sessions) == 2 and len(driver.hub.wakes) == 2
        assert len(driver.usage._sessions) == 2
    assert agent.most_open() == 2
    closed = rec.of("session_closed")
    assert [r.channel_id for r in closed] == ["c0", "c1", "c2", "c3"]
    assert all(r.payload["sessionClose"] for r in closed)


async def test_a_session_the_owner_cancelled_is_closed_at_the_agent_and_leaves_the_driver(
    world: World,
) -> None:
    """Cancelled, it is never prompted again; before the next session opens it is closed
    (``session/close``) and the driver forgets it, instead of staying open for good."""
    caps = {"loadSession": False, "sessionCapabilities": {"close": {}}}
    agent = Scripted(
        world.tmp,
        {"turns": [{"then": "wait"}, {"usage": USAGE}], "numbered_sessions": True, "caps": caps},
    )
    rec = Recorder()
    config = world.config(agent_command=sys.executable, agent_args=agent.args)
    async with BuzzPlugin(config, on_diagnostic=rec) as bot:
        await bot.handle_event(world.say("a long task"))
        await wait_for(lambda: agent.requests("session/prompt"), "the prompt")
        await bot.handle_event(world.say("nostr:npub1xyz !cancel"))
        await rec.kind("turn_completed")
        await bot.handle_event(world.say("next"))
        await rec.kind("turn_completed", 2)
        driver = bot.supervisor.driver
        assert isinstance(driver, AgentDriver)
        assert list(driver.hub.sessions) == ["sess-2"]
    assert [r["params"]["sessionId"] for r in agent.requests("session/close")] == ["sess-1"]
    assert [r.payload["outcome"] for r in rec.of("turn_completed")] == ["cancelled", "success"]
