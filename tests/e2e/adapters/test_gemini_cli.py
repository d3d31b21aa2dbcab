"""The bot with gemini-cli 0.61 (``gemini --acp``) on a real relay, its Gemini API the model
server.

gemini-cli's sessions start in the approval mode of its command line or settings (``yolo``
approves every tool); the driver puts each in ``default``, so every tool call is asked of the bot
(docs/acp-adapters.md, "Permission modes").  The attacker is an allowlisted stranger whose
model asks to run a shell command: it must never run.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.adapter_bot import played
from tests.support.real_adapters import GEMINI, GEMINI_ARGS

# The operator trusts the workspace and starts gemini approving every tool on its own (in an
# untrusted folder gemini-cli falls back to "default" by itself).
TRUSTED = {"GEMINI_CLI_TRUST_WORKSPACE": "true"}
YOLO = (*GEMINI_ARGS, "--approval-mode", "yolo")


async def test_gemini_answers_meters_cancels_and_asks_the_bot(tmp_path: Path) -> None:
    bot, metrics = await played(tmp_path, GEMINI, env=TRUSTED, agent_args=YOLO)
    assert {r.payload["permissionMode"] for r in bot.of("session_started")} == {"default"}
    # no native steer: the message cancels the turn and is merged into the next one
    assert bot.of("steer_sent") == []
    # usage from the prompt response's _meta.quota.token_count (input includes the cache)
    first = metrics[0]
    assert first.turn is not None
    assert (first.turn.input_tokens, first.turn.output_tokens) == (130, 20)
    assert first.turn.total_tokens == 150
    assert first.turn.cost_usd is None and first.turn.cache_read_tokens is None
