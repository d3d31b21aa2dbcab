"""A session closed to keep ``[sessions] max_live`` continues on its channel's next turn, with
today's adapters (docs/bot.md, "Live sessions"): a real ``buzz run`` with ``max_live = 1``
drives claude-agent-acp or codex-acp against the tests' model server.  A turn in a second
channel closes the first channel's idle session (``session/close``, which both advertise); the
first channel's next turn continues it (``session/resume``, as after a restart), so the
model's request carries the earlier exchange as the conversation's own earlier turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nostr_buzz.event import Event
from tests.e2e.adapters.test_session_resume import started, write_config
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
from tests.support.model_server import ModelServer
from tests.support.real_adapters import CLAUDE, CODEX


@pytest.mark.parametrize("name", [CLAUDE, CODEX])
async def test_a_session_closed_for_room_continues_with_its_earlier_exchange(
    tmp_path: Path, name: str
) -> None:
    cast = Cast.generate()
    with ModelServer() as server:
        relay = RelayProcess(tmp_path / "relay-db", tmp_path / "relay.log")
        await relay.start()
        bot_dir = tmp_path / "bot"
        config = write_config(bot_dir, cast, relay.url, name, server)
        with config.open("a", encoding="utf-8") as toml:
            toml.write("[sessions]\nmax_live = 1\n")
        bot = BotProcess(config, tmp_path / "bot.log")
        tail = DiagnosticsTail(bot_dir / "state" / "diagnostics.jsonl")
        counter = Counter44200(cast, [relay.url])
        said: list[Event] = []
        try:
            await started(bot, tail)
            for text, channel in [
                ("the word is ASK:alpha", "eng"),
                ("meanwhile ASK:other", "ops"),  # eng's session is closed for this one
                ("and now ASK:beta", "eng"),
            ]:
                said.append(mention(cast, cast.owner, text, channel=channel))
                await publish([relay.url], [said[-1]])
                tally = await wait_answered(counter, said, timeout=90, tails=[tail])
                assert tally.ok, evidence(tally, [tail], said)
        finally:
            await bot.stop()
            await relay.stop()
    opened = [r["payload"] for r in tail.of("session_started")]
    assert [p.get("reopened") for p in opened] == [None, None, "resume"], opened
    closed = tail.of("session_closed")
    assert [(r["channelId"], r["payload"]["sessionClose"]) for r in closed][:2] == [
        ("eng", True),
        ("ops", True),
    ]
    assert closed[0]["payload"]["adapterSessionId"] == opened[0]["adapterSessionId"]
    assert opened[2]["adapterSessionId"] == opened[0]["adapterSessionId"]
    assert not tail.of("session_not_resumed")
    asked = [s for s in server.requests if s.main and "ASK:beta" in s.user_text]
    assert asked, [s.user_text[-60:] for s in server.requests]
    assert "ANSWER:alpha" in asked[0].earlier_answers
    assert "ANSWER:other" not in asked[0].earlier_answers  # another channel's session
