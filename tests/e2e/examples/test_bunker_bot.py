"""examples/bunker_bot.py as a user runs it: a real process whose key is held by NDK's bunker
(tests/agents/nip46_bunker.mjs), answering the owner on a real relay with a reply and an
encrypted metric, with no secret key anywhere in its environment or command line."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import open_metric_event
from tests.support.bunkers import ndk_bunker
from tests.support.events import chat
from tests.support.relays import local_relay
from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[3]


async def test_the_bunker_bot_answers_with_a_key_it_never_holds(tmp_path: Path) -> None:
    agent, owner = SecretKey.generate(), SecretKey.generate()
    async with (
        local_relay() as relay,
        local_relay() as bunker_relay,
        ndk_bunker([bunker_relay.url], agent) as bunker,
    ):
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path),
            "BUZZ_BUNKER": bunker.uri,
            "BUZZ_OWNER": owner.public_key.bech32,
            "BUZZ_RELAYS": relay.url,
            "BUZZ_STATE_DIR": str(tmp_path / "state"),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "examples.bunker_bot", cwd=ROOT, env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(30):
                first = (await proc.stdout.readline()).decode()
            assert f"agent {agent.public_key.bech32}: listening" in first, first
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            mention = chat(owner, int(time.time()), content="up?", channel="eng", mention=agent)
            as_owner = RelayPool([relay.url], timeout=5)
            assert (await as_owner.publish(mention)).ok
            mine = {"authors": [agent.public_key.hex]}
            found: list[Event] = []

            async def published() -> bool:
                found[:] = (await as_owner.query(mine)).events
                return {e.kind for e in found} >= {9, METRIC_KIND}

            async with asyncio.timeout(30):
                while not await published():
                    await asyncio.sleep(0.2)
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await wait_for(lambda: bunker.answered("sign_event") >= 2, "the bunker's signatures", 5)
    [reply] = [e for e in found if e.kind == 9]
    assert mention.id in reply.tag_values("e")
    [metric] = [open_metric_event(owner, e) for e in found if e.kind == METRIC_KIND]
    assert metric.outcome == "success" and mention.id in metric.triggering_event_ids
    assert proc.returncode == 0
    for where, data in (("environ", environ), ("cmdline", cmdline)):
        for form in (agent.hex, agent.bech32):
            assert form.encode() not in data.lower(), f"the agent's key is in its {where}"
