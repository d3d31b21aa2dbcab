"""A bot whose key lives in a NIP-46 bunker: this process, and so its agent, never holds it.

    BUZZ_BUNKER='bunker://…?relay=wss://…&secret=…' BUZZ_OWNER=npub1… \\
        BUZZ_RELAYS=wss://relay.one,wss://relay.two python examples/bunker_bot.py

(or ``python -m examples.bunker_bot`` from the repository's root).
:class:`~nostr_buzz.Nip46Signer` connects to the bunker with a client key kept in the state
directory (``BUZZ_STATE_DIR``, default ``.buzz-bunker-bot``), so a
restart is served again although the URI's secret is good for one connection; then the whole
bot — replies, private answers, encrypted metrics, NIP-42 AUTH — signs and encrypts through it
(``PluginConfig(signer=…)``).  The agent is the bundled demo agent; put your own ACP command, or
``BuzzPlugin(config, agent=obj)``, in its place.  It prints ``listening`` once the bot runs and
serves until SIGINT or SIGTERM (docs/signers.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from nostr_buzz import BuzzPlugin, Nip46Signer, PluginConfig, client_key_in
from nostr_buzz.io.filemodes import private_dir


async def main() -> None:
    missing = [n for n in ("BUZZ_BUNKER", "BUZZ_OWNER", "BUZZ_RELAYS") if not os.environ.get(n)]
    if missing:
        raise SystemExit(f"{(__doc__ or '').strip()}\n\nmissing: {', '.join(missing)}")
    state = Path(os.environ.get("BUZZ_STATE_DIR", ".buzz-bunker-bot")).absolute()
    private_dir(state)  # 0700: the client key inside may ask the bunker to sign
    relays = tuple(os.environ["BUZZ_RELAYS"].split(","))
    async with await Nip46Signer.connect(
        os.environ["BUZZ_BUNKER"], client_secret=client_key_in(state)
    ) as signer:
        config = PluginConfig(
            signer=signer,
            owner=os.environ["BUZZ_OWNER"],  # npub1… or hex, as a PublicKey
            read_relays=relays,
            write_relays=relays,
            agent_command=sys.executable,
            agent_args=("-m", "nostr_buzz.demo.agent", "--delay", "0"),
            state_dir=state,
        )
        plugin = BuzzPlugin(config)
        for signum in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(signum, plugin.stop)
        print(f"agent {signer.public_key.bech32}: listening", flush=True)
        await plugin.run()


if __name__ == "__main__":
    asyncio.run(main())
