"""The bot with codex-acp 2.6 (codex 0.166's app-server underneath) on a real relay.

codex-acp starts its sessions in mode ``agent`` ("Auto review": codex's own reviewer decides
what runs); the driver puts each in ``read-only``, where a command that would write or reach
the network is asked of the bot (docs/acp-adapters.md, "Permission modes").  The attacker is
an allowlisted stranger whose model asks to run a shell command: it must never run.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.adapter_bot import played
from tests.support.real_adapters import CODEX


async def test_codex_answers_meters_steers_cancels_and_asks_the_bot(tmp_path: Path) -> None:
    bot, metrics = await played(tmp_path, CODEX)
    assert {r.payload["permissionMode"] for r in bot.of("session_started")} == {"read-only"}
    assert [r.payload["result"] for r in bot.of("steer_sent")] == ["injected"]
    # codex's only refusal of a command aborts its turn
    assert bot.of("turn_completed")[-1].payload["outcome"] == "cancelled"
    # usage now arrives per prompt: input includes the cached part, which is also reported
    first = metrics[0]
    assert first.turn is not None
    assert (first.turn.input_tokens, first.turn.output_tokens) == (130, 20)
    assert (first.turn.cache_read_tokens, first.turn.total_tokens) == (30, 150)
    assert first.turn.cost_usd is None
    assert first.context_window_tokens and first.context_used_tokens
