"""Compaction with today's adapters (docs/acp-adapters.md, "Compaction"): a real ``buzz run``
drives claude-agent-acp or codex-acp against the tests' model server, which reports a context
all but full (990,000 input tokens) for every answer.  Each adapter then compacts its context at
the start of the next prompt — Claude Code's auto-compaction, codex's checkpoint compaction —
and, since the bot advertises ``clientCapabilities.session.compaction``, says so with ACP's
``compaction_update``.

- The metrics of the turns that compacted, decrypted as the owner, say so (``compactions: 1``,
  though claude-agent-acp repeats its terminal update); the first turn's does not.  The replies
  are the answers alone.
- Both adapters take the standing context beside the conversation (``systemPrompt``): it
  survived.  The model's every request after a compaction still carries it, while the first
  answer is gone from them (and, with claude, the first question: codex keeps the user's own
  messages); no prompt carries it again and the manifest's standing layers do not change.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from nostr_buzz.core.compaction import REDELIVERED_AFTER_COMPACTION
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips.nip_am import MetricPayload
from nostr_buzz.reports.manifest_diff import diff_manifests
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
from tests.support.model_server import ModelServer, Usage
from tests.support.real_adapters import (
    CLAUDE,
    CODEX,
    GEMINI,
    adapter_driver,
)

#: A context all but full: the adapters compact before their next model call.
FULL = Usage(input_tokens=990_000, output_tokens=20)
STANDING_LAYERS = {
    "workspace",
    "platform_contract",
    "persona_and_team_guidance",
    "core_memory",
    "channel_canvas",
}


@pytest.mark.parametrize("name", [CLAUDE, CODEX])
async def test_a_real_adapters_compaction_is_in_the_metric_and_its_system_prompt_survives(
    tmp_path: Path, name: str
) -> None:
    cast = Cast.generate()
    with ModelServer(usage=FULL) as server:
        relay = RelayProcess(tmp_path / "relay-db", tmp_path / "relay.log")
        await relay.start()
        bot_dir = tmp_path / "bot"
        bot = BotProcess(write_config(bot_dir, cast, relay.url, name, server), tmp_path / "bot.log")
        tail = DiagnosticsTail(bot_dir / "state" / "diagnostics.jsonl")
        counter = Counter44200(cast, [relay.url])
        sent = []
        try:
            await started(bot, tail)
            for word in ("alpha", "beta", "gamma"):
                sent.append(mention(cast, cast.owner, f"the word is ASK:{word}", channel="eng"))
                await publish([relay.url], [sent[-1]])
                tally = await wait_answered(counter, sent, timeout=90, tails=[tail])
                assert tally.ok, evidence(tally, [tail], sent)
            metrics = sorted(await counter.metrics(), key=lambda m: m.turn_seq or 0)
            replies = [r.content for r in await counter.replies()]
        finally:
            await bot.stop()
            await relay.stop()
    assert [m.turn_seq for m in metrics] == [1, 2, 3]
    assert [m.compactions for m in metrics] == [None, 1, 1]
    assert len(tail.of("session_started")) == 1  # one session all along
    assert sorted(replies) == ["ANSWER:alpha", "ANSWER:beta", "ANSWER:gamma"]
    # The standing context went beside the conversation, and the model still has it.
    workspace = f"Your working directory is {bot_dir / 'work'}."
    asked = {
        word: [s for s in server.main_requests() if f"ASK:{word}" in s.user_text]
        for word in ("alpha", "beta", "gamma")
    }
    assert all(asked.values()), [s.user_text[-60:] for s in server.requests]
    assert all(workspace in s.body for requests in asked.values() for s in requests)
    # The first exchange was compacted away: its answer is gone from the conversation (codex
    # keeps the user's own messages in its compacted history, Claude Code a summary only).
    assert not any("ANSWER:alpha" in s.body for s in asked["gamma"])
    assert (name == CODEX) == any("ASK:alpha" in s.body for s in asked["gamma"])
    delivered = tail.of("prompt_context_delivery")
    assert [r["payload"]["standingContextIncluded"] for r in delivered] == [False] * 3
    # So the manifest after a compaction records the same standing layers as before it.
    assert {layer.layer for layer in manifest(metrics[2]).layers} >= {"workspace"}
    for before, after in pairwise(metrics):
        diff = diff_manifests(manifest(before), manifest(after))
        assert not STANDING_LAYERS & {c.layer for c in diff.changed}, diff.changed
        assert not diff.added and not diff.removed
    assert all(
        layer.freshness != REDELIVERED_AFTER_COMPACTION
        for m in metrics
        for layer in manifest(m).layers
    )


def manifest(payload: MetricPayload) -> Manifest:
    assert payload.context_manifest is not None
    return payload.context_manifest


async def test_claude_compacts_on_a_prompt_that_is_compact_alone_and_not_before_an_envelope(
    tmp_path: Path,
) -> None:
    """What the owner's ``/compact`` does (docs/acp-adapters.md, "Compaction"): Claude Code runs
    a slash command only when it is the prompt's whole text.  The bot sends the owner's command
    as the first text block with the envelope after it, which the model gets as text."""
    with ModelServer() as server:
        async with adapter_driver(CLAUDE, server, tmp_path, request_timeout=60) as driver:
            sid = (await driver.new_session(str(tmp_path / "work"), "STANDING")).session_id
            first = await driver.run_turn(sid, ["ASK:one"])
            before_envelope = await driver.run_turn(
                sid, ["/compact", "<buzz-turn>", "ASK:two", "</buzz-turn>"]
            )
            alone = await driver.run_turn(sid, ["/compact"])
            counted = driver.compactions(sid)
    assert first.compactions == 0 and first.reply == "ANSWER:one"
    assert before_envelope.compactions == 0 and before_envelope.reply == "ANSWER:two"
    assert any(s.user_text.startswith("/compact\n<buzz-turn>") for s in server.main_requests())
    assert alone.compactions == 1 and alone.reply == ""
    # The summary is the model's answer to Claude Code's request for one.
    asked = [s for s in server.main_requests() if "CRITICAL: Respond with TEXT ONLY" in s.user_text]
    assert alone.compaction_summary is not None
    assert asked and {s.answer for s in asked} == {alone.compaction_summary}
    assert counted == 1  # what the bot asks before compiling the session's next turn


@pytest.mark.parametrize(("usage", "kept"), [(FULL, False), (Usage(), True)])
async def test_gemini_cli_compresses_its_chat_without_a_word(
    tmp_path: Path, usage: Usage, kept: bool
) -> None:
    """gemini-cli 0.61 has no compaction update (docs/acp-adapters.md, "Compaction"): with a
    context all but full it compresses its chat on its own, and its next model request has lost
    the first prompt — where the bot's standing sections travel for it — while nothing on the
    ACP wire said so (with a small context the first prompt stays).  Pinned so that a version
    that starts reporting it is noticed."""
    with ModelServer(usage=usage) as server:
        async with adapter_driver(GEMINI, server, tmp_path, request_timeout=60) as driver:
            sid = (await driver.new_session(str(tmp_path / "work"))).session_id
            results = [await driver.run_turn(sid, [f"ASK:{w}"]) for w in ("one", "two")]
            counted = driver.compactions(sid)
    assert [r.reply for r in results] == ["ANSWER:one", "ANSWER:two"]
    assert [r.compactions for r in results] == [0, 0] and counted == 0
    [first, second] = server.main_requests()
    assert "ASK:one" in first.body and ("ASK:one" in second.body) is kept
