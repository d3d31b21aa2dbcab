"""Sessions that survive a restart, with today's adapters (docs/bot.md, "Sessions that survive
a restart"): a real ``buzz run`` drives claude-agent-acp, codex-acp or gemini-cli against the
tests' model server; after the first exchange of a channel has committed, the bot is
SIGKILLed and started again on the same state.  The channel's next turn continues the agent
session — ``session/resume`` for claude and codex, ``session/load`` for gemini-cli, which
replays the history first — so the model's next request carries the earlier exchange as the
conversation's own earlier turn (not as quoted context), and no reply or usage repeats what was
replayed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.support.fault_harness import (
    BotProcess,
    Cast,
    Counter44200,
    DiagnosticsTail,
    RelayProcess,
    evidence,
    mention,
    publish,
    wait_answered,
)
from tests.support.model_server import ModelServer, Seen
from tests.support.real_adapters import CLAUDE, CODEX, GEMINI, adapter, adapter_args, adapter_env

LATER_CLOCK = Path(__file__).resolve().parents[2] / "agents" / "shims" / "later_clock.cjs"


def write_config(
    directory: Path, cast: Cast, relay: str, name: str, server: ModelServer, *, later: int = 0
) -> Path:
    """buzz.toml: the owner speaks to the adapter ``name`` (its home and work folders kept
    across restarts, where the adapter stores its sessions); ``later``: the adapter's clock
    runs that many milliseconds ahead."""
    directory.mkdir(parents=True, exist_ok=True)
    key_file = directory / "agent.key"
    key_file.write_text(cast.agent.hex + "\n", encoding="utf-8")
    key_file.chmod(0o600)
    work = directory / "work"
    work.mkdir(exist_ok=True)
    env = adapter_env(name, server, directory / "home")
    if later:
        env.update(NODE_OPTIONS=f"--require {LATER_CLOCK}", LATER_CLOCK_MS=str(later))
    env_lines = "".join(f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in env.items())
    config = directory / "buzz.toml"
    config.write_text(
        'key_file = "agent.key"\n'
        f'owner = "{cast.owner.public_key.hex}"\n'
        f"relays = {json.dumps([relay])}\n"
        'state_dir = "state"\n'
        "[agent]\n"
        f"command = {json.dumps(adapter(name))}\n"
        f"args = {json.dumps(list(adapter_args(name)))}\n"
        f"cwd = {json.dumps(str(work))}\n"
        "ask_timeout = 0\n"  # a stranger's session: rejected at once, the owner is not asked
        "[agent.env]\n"
        f"{env_lines}"
        "[timeouts]\n"
        "relay = 3\n",
        encoding="utf-8",
    )
    return config


async def started(bot: BotProcess, tail: DiagnosticsTail) -> None:
    mark = tail.mark()
    await bot.start()
    try:
        await tail.next_record(lambda r: r.get("kind") == "agent_started", 60, "start", mark)
    except AssertionError:
        raise AssertionError(f"the bot did not start:\n{bot.log_tail()}") from None


@pytest.mark.parametrize(
    ("name", "method"), [(CLAUDE, "resume"), (CODEX, "resume"), (GEMINI, "load")]
)
async def test_a_channels_session_continues_after_the_bot_is_sigkilled_between_two_turns(
    tmp_path: Path, name: str, method: str
) -> None:
    cast = Cast.generate()
    with ModelServer() as server:
        relay = RelayProcess(tmp_path / "relay-db", tmp_path / "relay.log")
        await relay.start()
        bot_dir = tmp_path / "bot"
        bot = BotProcess(write_config(bot_dir, cast, relay.url, name, server), tmp_path / "bot.log")
        tail = DiagnosticsTail(bot_dir / "state" / "diagnostics.jsonl")
        counter = Counter44200(cast, [relay.url])
        try:
            await started(bot, tail)
            first = mention(cast, cast.owner, "the word is ASK:alpha", channel="eng")
            await publish([relay.url], [first])
            tally = await wait_answered(counter, [first], timeout=60, tails=[tail])
            assert tally.ok, evidence(tally, [tail], [first])
            await bot.kill()  # between two turns: the first one's outcome has committed
            if name == GEMINI:
                # gemini-cli 0.61 names a session's file by the minute it starts, and a load
                # in that same minute writes a new start into that file, losing the history
                # (docs/acp-adapters.md): this restart comes "a minute later" to the adapter.
                write_config(bot_dir, cast, relay.url, name, server, later=61_000)
            await started(bot, tail)
            second = mention(cast, cast.owner, "and now ASK:beta", channel="eng")
            await publish([relay.url], [second])
            tally = await wait_answered(counter, [first, second], timeout=60, tails=[tail])
            assert tally.ok, evidence(tally, [tail], [first, second])
            replies = {r.content for r in await counter.replies()}
            metrics = await counter.metrics()
        finally:
            await bot.stop()
            await relay.stop()
    # The session the first turn ran in is the one the second turn continued.
    opened = tail.of("session_started")
    assert len(opened) == 2, opened
    assert opened[1]["payload"].get("reopened") == method
    assert opened[0]["payload"]["adapterSessionId"] == opened[1]["payload"]["adapterSessionId"]
    assert not tail.of("session_not_resumed")
    # The model got the first exchange back as the conversation's own earlier turn.
    asked = [s for s in server.requests if s.main and "ASK:beta" in s.user_text]
    assert asked, [s.user_text[-60:] for s in server.requests]
    assert "ANSWER:alpha" in asked[0].earlier_answers
    # Nothing replayed was answered or metered again: one reply each, each its own answer.
    assert any("ANSWER:alpha" in r for r in replies) and any("ANSWER:beta" in r for r in replies)
    assert not any("ANSWER:alpha" in r and "ANSWER:beta" in r for r in replies), replies
    assert len(replies) == 2
    first_usage, second_usage = (m.turn for m in sorted(metrics, key=lambda m: m.timestamp))
    assert first_usage is not None and second_usage is not None
    assert second_usage.output_tokens == first_usage.output_tokens


async def test_a_continued_session_keeps_its_speakers_and_a_turn_cut_short_is_never_continued(
    tmp_path: Path,
) -> None:
    """The attacker is an allowlisted friend whose words entered the channel's session before
    a SIGKILL: after the restart the owner's tool call in the continued session is rejected
    (``permissions = "owner"`` follows every speaker of the session, docs/bot.md), so the
    restart launders nothing.  Then the bot is killed while the agent holds a prompt: that
    session may hold half an exchange the queue runs again, so it is not continued — a new
    session, and a ``session_not_resumed`` diagnostic that says why."""
    cast = Cast.generate()
    with ModelServer() as server:
        relay = RelayProcess(tmp_path / "relay-db", tmp_path / "relay.log")
        await relay.start()
        bot_dir = tmp_path / "bot"
        config = write_config(bot_dir, cast, relay.url, CLAUDE, server)
        with config.open("a", encoding="utf-8") as toml:
            toml.write(
                f'[gate]\nmode = "allowlist"\nallowlist = ["{cast.friend.public_key.hex}"]\n'
            )
        bot = BotProcess(config, tmp_path / "bot.log")
        tail = DiagnosticsTail(bot_dir / "state" / "diagnostics.jsonl")
        counter = Counter44200(cast, [relay.url])
        work = bot_dir / "work"
        try:
            await started(bot, tail)
            friends = mention(cast, cast.friend, "hello ASK:alpha", channel="eng")
            await publish([relay.url], [friends])
            assert (await wait_answered(counter, [friends], timeout=60, tails=[tail])).ok
            await bot.kill()
            await started(bot, tail)
            owners = mention(cast, cast.owner, "SHELL:touch by-owner;; ASK:beta", channel="eng")
            await publish([relay.url], [owners])
            tally = await wait_answered(counter, [friends, owners], timeout=60, tails=[tail])
            assert tally.ok, evidence(tally, [tail], [friends, owners])
            held = mention(cast, cast.owner, "wait ASK:gamma HOLD:cut", channel="eng")
            await publish([relay.url], [held])
            await asyncio.to_thread(server.wait_for, lambda seen: _holding(seen, "cut"), 30)
            await bot.kill()  # the agent has the prompt: the session is indeterminate now
            await started(bot, tail)
            await asyncio.to_thread(
                server.wait_for, lambda seen: sum(_holding([s], "cut") for s in seen) >= 2, 30
            )
            server.release("cut")
            accepted = [friends, owners, held]
            tally = await wait_answered(counter, accepted, timeout=60, tails=[tail])
            assert tally.ok, evidence(tally, [tail], accepted)
        finally:
            await bot.stop()
            await relay.stop()
    opened = [r["payload"] for r in tail.of("session_started")]
    assert [p.get("reopened") for p in opened] == [None, "resume", None]
    decisions = [r["payload"] for r in tail.of("permission_decision")]
    assert [d["decision"] for d in decisions] == ["rejected"], decisions
    assert (decisions[0]["reason"], decisions[0]["part"]) == ("not_owner", "session")
    assert decisions[0]["actor"] == cast.friend.public_key.hex
    assert "touch by-owner" in decisions[0]["title"]
    assert not (work / "by-owner").exists()
    refused = [r["payload"] for r in tail.of("session_not_resumed")]
    assert [(p["reason"], p["adapterSessionId"]) for p in refused] == [
        ("indeterminate", opened[1]["adapterSessionId"])
    ]


def _holding(seen: list[Seen], name: str) -> bool:
    return any(s.main and f"HOLD:{name}" in s.user_text for s in seen)
