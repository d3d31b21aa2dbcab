"""examples/fetch_event.py as a user runs it: a real process against a real relay."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.nips import nip19
from tests.support.keys import NIP19_SECRET as SECRET
from tests.support.relays import local_relay

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "fetch_event.py"


async def run_example(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_fetch_event_example_prints_the_event_and_says_not_found() -> None:
    event = sign_event(SECRET, kind=1, content="fetched by the example", created_at=1_790_000_000)
    async with local_relay() as relay:
        async with RelayClient(relay.url) as client:
            assert (await client.publish(event)).accepted
        # An nevent carries its relay: no relay argument needed.
        found = await run_example(nip19.encode("nevent", event.id, relays=[relay.url]))
        missing = await run_example("cd" * 32, relay.url)
    code, out, err = found
    assert (code, err) == (0, ""), err
    assert Event.from_json(out.strip()) == event
    assert out == event.to_json() + "\n"
    code, out, err = missing
    assert (code, out) == (3, "")
    assert "not found" in err
