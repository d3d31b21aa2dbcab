"""A bot whose agent is a plain async function, on the base install (``pip install nostr-buzz``,
no extra: no ACP agent, no subprocess).

    BUZZ_PRIVATE_KEY=nsec1… BUZZ_OWNER=npub1… BUZZ_RELAYS=ws://127.0.0.1:7447 \\
        python examples/function_bot.py

The whole bot runs — the gate, the queue, the compiled turn, the reply in the mention's thread,
the owner's encrypted NIP-AM metric, the state directory (``BUZZ_STATE_DIR``, default
``.buzz-function-bot``) — and the agent is ``answer`` below: put a call to your model there
(return an ``AgentReply`` with its ``TokenCounts`` to have them in the metric).  It prints
``listening`` once the bot runs and serves until SIGINT or SIGTERM (docs/bot.md, "In-process
agents").
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from nostr_buzz import AgentTurn, BuzzPlugin, PluginConfig


async def answer(turn: AgentTurn) -> str:
    """The agent: the compiled turn in, the reply's text out."""
    return (
        f"Hello from an in-process agent: this turn's prompt is {len(turn.sections)} "
        f"section(s), {len(turn.text)} characters."
    )


async def main() -> None:
    missing = [
        n for n in ("BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_RELAYS") if not os.environ.get(n)
    ]
    if missing:
        raise SystemExit(f"{(__doc__ or '').strip()}\n\nmissing: {', '.join(missing)}")
    relays = tuple(os.environ["BUZZ_RELAYS"].split(","))
    config = PluginConfig(
        agent_secret=os.environ["BUZZ_PRIVATE_KEY"],  # nsec1… or hex
        owner=os.environ["BUZZ_OWNER"],  # npub1… or hex
        read_relays=relays,
        write_relays=relays,
        state_dir=Path(os.environ.get("BUZZ_STATE_DIR", ".buzz-function-bot")),
    )
    plugin = BuzzPlugin(config, agent=answer)
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, plugin.stop)
    print("listening", flush=True)
    await plugin.run()


if __name__ == "__main__":
    asyncio.run(main())
