"""The bot (:class:`BuzzPlugin`) on a real relay, driving a real adapter against the model server.

The questions carry ``ASK:<word>`` markers and the model answers ``ANSWER:<word>``, so each
reply can be traced to its question.  ``HOLD:<name>`` keeps a turn running until the test
releases it: mid-turn messages and the owner's ``!cancel`` land while the turn is provably
live, without timing guesses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.agent_group import group_members
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload, open_metric_event
from tests.support.model_server import ModelServer, Usage
from tests.support.real_adapters import BIN, adapter, adapter_args, adapter_env
from tests.support.relays import RunningRelay, local_relay
from tests.support.waits import wait_for

WAIT = 30.0
USAGE = Usage(input_tokens=100, output_tokens=20, cache_read=30, cache_write=40)


async def until(predicate: Callable[[], Any], what: str) -> Any:
    """:func:`~tests.support.waits.wait_for` bounded by :data:`WAIT`."""
    return await wait_for(predicate, what, WAIT)


@dataclass
class Bot:
    """A relay, keys, the model server and the diagnostics of one bot."""

    relay: RunningRelay
    server: ModelServer
    tmp: Path
    owner: SecretKey = field(default_factory=SecretKey.generate)
    agent: SecretKey = field(default_factory=SecretKey.generate)
    human: SecretKey = field(default_factory=SecretKey.generate)
    records: list[DiagnosticRecord] = field(default_factory=list)
    clock: int = field(default_factory=lambda: int(time.time()) - 100)

    def config(self, name: str, **changes: Any) -> PluginConfig:
        home, work = self.tmp / "home", self.tmp / "work"
        work.mkdir(exist_ok=True)
        values: dict[str, Any] = {
            "agent_secret": self.agent,
            "owner": self.owner.public_key,
            "read_relays": (self.relay.url,),
            "write_relays": (self.relay.url,),
            "agent_command": adapter(name),
            "agent_args": adapter_args(name),
            "agent_env": adapter_env(name, self.server, home),
            "agent_cwd": str(work),
            "state_dir": self.tmp / "state",
            "relay_timeout": 3.0,
            "coalesce_window": 0.1,
            "ask_timeout": 0.0,  # what the owner rule cannot approve is rejected, not asked
        }
        values.update(changes)
        return PluginConfig(**values)

    def of(self, kind: str) -> list[DiagnosticRecord]:
        return [r for r in self.records if r.kind == kind]

    async def count(self, kind: str, n: int) -> list[DiagnosticRecord]:
        return list(await until(lambda: len(self.of(kind)) >= n and self.of(kind), f"{n}× {kind}"))

    def message(
        self, content: str, *, author: SecretKey | None = None, reply_to: Event | None = None
    ) -> Event:
        tags = [["h", "eng"]]
        if reply_to is not None:
            tags.append(["e", reply_to.id, "", "root"])
        tags.append(["p", self.agent.public_key.hex])
        self.clock += 1
        return sign_event(
            author or self.owner, kind=9, content=content, tags=tags, created_at=self.clock
        )

    async def answers(self) -> dict[str, list[str]]:
        """The agent's replies on the relay: {the event answered: its replies' texts}."""
        pool = RelayPool([self.relay.url], timeout=3.0)
        found = await pool.query({"kinds": [9], "authors": [self.agent.public_key.hex]})
        answered: dict[str, list[str]] = {}
        for reply in sorted(found.events, key=lambda e: e.created_at):
            ref = nip10.thread_ref(reply)
            answered.setdefault(ref.parent or ref.root or "", []).append(reply.content)
        return answered

    async def replies(self) -> dict[str, str]:
        """The agent's replies on the relay: {the event answered: the (last) text}."""
        return {k: v[-1] for k, v in (await self.answers()).items()}

    async def metrics(self, count: int) -> list[MetricPayload]:
        pool = RelayPool([self.relay.url], timeout=3.0)
        flt = {"kinds": [44200], "#p": [self.owner.public_key.hex]}

        async def enough() -> list[Event]:
            deadline = time.monotonic() + WAIT
            while True:
                events = (await pool.query(flt)).events
                if len(events) >= count or time.monotonic() > deadline:
                    return events
                await asyncio.sleep(0.1)

        payloads = [open_metric_event(self.owner, e) for e in await enough()]
        return sorted(payloads, key=lambda p: p.timestamp)


@asynccontextmanager
async def bot_world(tmp_path: Path, **server: Any) -> AsyncIterator[Bot]:
    """A relay and the model server (which no request may leave)."""
    async with local_relay() as relay:
        with ModelServer(usage=USAGE, **server) as model:
            bot = Bot(relay, model, tmp_path)
            yield bot
            assert model.outbound == []


@asynccontextmanager
async def running(bot: Bot, name: str, **changes: Any) -> AsyncIterator[BuzzPlugin]:
    """The bot with adapter ``name``; on exit no process of the agent's group is left."""
    plugin = BuzzPlugin(bot.config(name, **changes), on_diagnostic=bot.records.append)
    async with plugin:
        pid = plugin.supervisor.driver.pid
        yield plugin
    assert pid is not None and group_members(pid) == []


async def until_reply(bot: Bot, question: Event) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        answered = await bot.replies()
        if question.id in answered:
            return answered[question.id]
        await asyncio.sleep(0.05)
    seen = [(r.kind, r.payload) for r in bot.records]
    raise AssertionError(f"no reply to {question.content!r}; replies: {answered}; {seen}")


async def until_answer(bot: Bot, events: tuple[Event, ...], ending: str) -> str:
    """The first reply to one of ``events`` that ends with ``ending`` (bounded wait)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        answered = await bot.answers()
        for text in (t for e in events for t in answered.get(e.id, [])):
            if text.endswith(ending):
                return text
        await asyncio.sleep(0.05)
    raise AssertionError(f"no reply ending with {ending!r}: {await bot.answers()}")


async def answer(bot: Bot, plugin: BuzzPlugin, event: Event) -> str:
    await plugin.handle_event(event)
    return await until_reply(bot, event)


async def held(bot: Bot, plugin: BuzzPlugin, event: Event, hold: str) -> None:
    """Queue ``event`` and wait until the model is holding its turn (the prompt is live)."""
    await plugin.handle_event(event)
    await until(lambda: bot.server.holding(hold), f"the model holding {hold}")


def adapter_processes(tmp_path: Path) -> list[int]:
    """Live processes started from this checkout's adapters (launchers and native binaries)
    for the test of ``tmp_path``: their environment names it (HOME and the adapters' own homes
    are there, and every process of an adapter inherits them).  The adapters another test runs
    at the same time, on another pytest-xdist worker, are not this test's."""
    mine, ours = str(BIN.parent), str(tmp_path).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if mine not in cmdline or state == "Z":
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if ours in environ:
            found.append(int(entry.name))
    return found


@dataclass
class Conversation:
    """What :func:`conversation` saw: the replies, by question, and the stranger's and the
    owner's shell commands' marker files."""

    first: str
    steered: str
    later: list[str]
    stranger_file: Path
    owner_file: Path
    owner_reply: str
    questions: list[Event]


async def conversation(bot: Bot, plugin: BuzzPlugin) -> Conversation:
    """The scenario every adapter plays, with the bot's gate ``allowlist`` (``bot.human``):

    a mention answered; a message into a running turn's thread (steered natively, or the turn
    cancelled and merged); the owner's ``!cancel`` mid-turn; three more questions; then the
    owner's and an allowlisted stranger's turns whose model runs ``touch <file>``."""
    first_q = bot.message("Hello buzz ASK:one")
    first = await answer(bot, plugin, first_q)

    busy = bot.message("ASK:two HOLD:two")
    await held(bot, plugin, busy, "two")
    nudge = bot.message("ASK:three", reply_to=busy)
    steers, completed = len(bot.of("steer_sent")), len(bot.of("turn_completed"))
    await plugin.handle_event(nudge)
    await until(
        lambda: len(bot.of("steer_sent")) > steers or len(bot.of("turn_completed")) > completed,
        "the message steered in or the turn cancelled",
    )
    bot.server.release("two")
    steered = await until_answer(bot, (busy, nudge), "ANSWER:three")

    doomed = bot.message("ASK:four HOLD:four")
    await held(bot, plugin, doomed, "four")
    completed = len(bot.of("turn_completed"))
    await plugin.handle_event(bot.message("!cancel"))
    await bot.count("turn_completed", completed + 1)
    bot.server.release("four")

    questions = [bot.message(f"ASK:{word}") for word in ("five", "six", "seven")]
    later = [await answer(bot, plugin, q) for q in questions]

    # The owner's command first: once a stranger has spoken in the session, the policy
    # refuses everyone's commands in it (docs/bot.md, "Permissions").
    work = bot.tmp / "work"
    owners = bot.message("SHELL:touch by-owner;; ASK:o")
    owner_reply = await answer(bot, plugin, owners)
    stranger = bot.message("SHELL:touch by-stranger;; ASK:s", author=bot.human)
    decided = len(bot.of("permission_decision"))
    completed = len(bot.of("turn_completed"))
    await plugin.handle_event(stranger)
    await bot.count("permission_decision", decided + 1)
    await bot.count("turn_completed", completed + 1)
    return Conversation(
        first, steered, later, work / "by-stranger", work / "by-owner", owner_reply, questions
    )


async def check_conversation(bot: Bot, seen: Conversation) -> list[MetricPayload]:
    """What every adapter must have done in :func:`conversation`; its metrics, one a turn."""
    assert seen.first.endswith("ANSWER:one")
    assert seen.steered.endswith("ANSWER:three")
    assert [text.rsplit("\n", 1)[-1] for text in seen.later] == [
        "ANSWER:five",
        "ANSWER:six",
        "ANSWER:seven",
    ]
    answers = await bot.answers()
    assert [len(answers[q.id]) for q in seen.questions] == [1, 1, 1]
    # The bot was asked both times, while the turn ran, and its policy decided.
    decisions = [
        (r.payload["decision"], r.payload["title"], r.payload["turnRunning"], r.payload["reason"])
        for r in bot.of("permission_decision")
    ]
    assert decisions == [
        ("approved", "touch by-owner", True, "owner_only"),
        ("rejected", "touch by-stranger", True, "not_owner"),
    ]
    assert seen.owner_reply.endswith("TOOL-DONE ANSWER:o")
    assert seen.owner_file.exists() and not seen.stranger_file.exists()
    # every session was put in the adapter's asking mode, and said so
    assert all(r.payload["permissionMode"] for r in bot.of("session_started"))
    turns = bot.of("turn_completed")
    metrics = await bot.metrics(len(turns))
    assert len(metrics) == len(turns)
    assert {m.outcome for m in metrics} >= {"success", "cancelled"}
    return metrics


async def played(
    tmp_path: Path, name: str, *, env: dict[str, str] | None = None, **changes: Any
) -> tuple[Bot, list[MetricPayload]]:
    """:func:`conversation` with adapter ``name`` (gate ``allowlist``: ``bot.human``), checked
    by :func:`check_conversation`; the bot and its metrics.  ``env`` adds to the adapter's
    environment, ``changes`` go to the config."""
    async with bot_world(tmp_path) as bot:
        gate = {"gate": "allowlist", "allowlist": frozenset({bot.human.public_key.hex})}
        if env:
            changes["agent_env"] = {**adapter_env(name, bot.server, tmp_path / "home"), **env}
        async with running(bot, name, **gate, **changes) as plugin:
            seen = await conversation(bot, plugin)
            metrics = await check_conversation(bot, seen)
    assert adapter_processes(tmp_path) == []
    return bot, metrics
