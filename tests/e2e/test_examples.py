"""The example bots (examples/) as real processes against a real relay: the owner mentions the
bot, and the bot answers in the thread and publishes the turn's encrypted metric to the owner,
whose manifest is the one its answer names; a stranger's mention is not answered."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from nostr_buzz import METRIC_KIND, Event, RelayPool, open_metric_event, sign_event
from tests.support.keys import AGENT, OWNER, STRANGER
from tests.support.readme import ROOT
from tests.support.relays import local_relay


async def _line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    return await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)


@pytest.mark.parametrize("module", ["examples.websockets_bot", "examples.nostr_sdk_bot"])
async def test_an_example_bot_answers_the_owner_and_accounts_the_turn(module: str) -> None:
    async with local_relay() as relay:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")},
            "BUZZ_PRIVATE_KEY": AGENT.bech32,
            "BUZZ_OWNER": OWNER.public_key.bech32,
            "BUZZ_RELAYS": relay.url,
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", module], cwd=ROOT, env=env, stdout=subprocess.PIPE
        )
        try:
            assert await _line(proc, 30) == b"listening\n"
            pool = RelayPool([relay.url], timeout=5)
            agent = AGENT.public_key.hex
            now = int(time.time())
            tags = [["h", "engineering"], ["p", agent]]
            stranger = sign_event(STRANGER, kind=9, content="me?", tags=tags, created_at=now)
            mention = sign_event(OWNER, kind=9, content="status?", tags=tags, created_at=now)
            for event in (stranger, mention):
                assert (await pool.publish(event)).ok
            deadline = time.monotonic() + 20
            found: list[Event] = []
            while len(found) < 2:  # bounded polling of the relay for the answer
                assert time.monotonic() < deadline, "timed out waiting for the reply and metric"
                await asyncio.sleep(0.05)
                found = (await pool.query({"authors": [agent], "kinds": [9, METRIC_KIND]})).events
            [reply] = [e for e in found if e.kind == 9]
            [metric] = [e for e in found if e.kind == METRIC_KIND]
            assert ("e", mention.id, "", "root", OWNER.public_key.hex) in reply.tags
            assert ("h", "engineering") in reply.tags
            payload = open_metric_event(OWNER, metric)
            assert payload.triggering_event_ids == (mention.id,)
            assert payload.context_manifest is not None
            assert payload.context_manifest.hash_matches()
            assert payload.context_manifest.hash in reply.content
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
