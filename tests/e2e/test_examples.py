"""The example bots (examples/) as real processes against a real relay: the owner mentions the
bot, and the bot answers in the thread and publishes the turn's encrypted metric to the owner,
whose manifest is the one its answer names; a stranger's mention is not answered.  Each runs as
a user runs it, ``python examples/NAME.py`` (and ``python -m examples.NAME``); without its
environment or arguments each says how to run it, with no traceback."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nostr_buzz import METRIC_KIND, Event, RelayPool, open_metric_event, sign_event
from tests.support.keys import AGENT, OWNER, STRANGER
from tests.support.readme import ROOT
from tests.support.relays import local_relay


async def _line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    return await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)


EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if p.name != "__init__.py")


def _environment(**buzz: str) -> dict[str, str]:
    """This environment without BUZZ_* variables, with ``buzz``'s; the library of this tree."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    return {**kept, "PYTHONPATH": str(ROOT), **buzz}


@pytest.mark.parametrize(
    "command",
    [
        ["examples/websockets_bot.py"],
        ["-m", "examples.websockets_bot"],
        ["examples/nostr_sdk_bot.py"],
        ["examples/function_bot.py"],
    ],
    ids=" ".join,
)
async def test_an_example_bot_answers_the_owner_and_accounts_the_turn(
    command: list[str], tmp_path: Path
) -> None:
    async with local_relay() as relay:
        env = _environment(
            BUZZ_PRIVATE_KEY=AGENT.bech32,
            BUZZ_OWNER=OWNER.public_key.bech32,
            BUZZ_RELAYS=relay.url,
            BUZZ_STATE_DIR=str(tmp_path / "state"),
        )
        proc = subprocess.Popen(
            [sys.executable, *command], cwd=ROOT, env=env, stdout=subprocess.PIPE
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
            if "function_bot" not in command[-1]:  # its answer is the function's own words
                assert payload.context_manifest.hash in reply.content
            else:
                assert reply.content.startswith("Hello from an in-process agent")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_runs_as_a_script_and_says_how_to_use_it(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        cwd=tmp_path,  # anywhere: the script finds its neighbours itself
        env=_environment(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = done.stderr.decode()
    assert done.returncode == 1 and done.stdout == b"", err
    assert "Traceback" not in err
    assert "python examples/" in err or "examples.http_agent" in err, err
