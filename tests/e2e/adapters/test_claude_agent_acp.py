"""The bot with claude-agent-acp 0.101 (Claude Code underneath) on a real relay.

claude-agent-acp starts its sessions in permission mode ``auto`` (Claude decides on its own
what runs); the driver puts each in ``default``, where every tool call that needs permission
is asked of the bot (docs/acp-adapters.md, "Permission modes").  The attacker is an
allowlisted stranger whose model asks to run a shell command: it must never run.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.adapter_bot import played
from tests.support.real_adapters import CLAUDE


async def test_claude_answers_meters_steers_cancels_and_asks_the_bot(tmp_path: Path) -> None:
    bot, metrics = await played(tmp_path, CLAUDE)
    assert [r.payload["permissionMode"] for r in bot.of("session_started")] == ["default"] * 2
    # claude steers natively; its session is retired after the cancel, and a fresh one opened
    assert [r.payload["result"] for r in bot.of("steer_sent")] == ["injected"]
    assert len(bot.of("session_retired")) == 1
    # usage: input folded with the cache, the cache parts, output; cost from usage_update
    first = metrics[0]
    assert first.turn is not None
    assert (first.turn.input_tokens, first.turn.output_tokens) == (170, 20)
    assert (first.turn.cache_read_tokens, first.turn.cache_write_tokens) == (30, 40)
    assert first.turn.cost_usd is not None and first.turn.cost_usd > 0
    assert first.context_window_tokens == 1_000_000 and first.context_used_tokens == 190
