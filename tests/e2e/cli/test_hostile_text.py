"""``buzz messages get --format table`` (a real subprocess) against a relay serving hostile text.

A sender writes a chat message that would set the terminal's title (OSC), recolour it (CSI, also
as the one-byte C1 form), reverse what follows (RLO) and hide characters (zero-width space, word
joiner, BOM); another signs a valid event dated 2^53 - 1 (past the year 9999), and one signs a
timestamp of 2^53, which no JavaScript client can hold.  The table shows every hidden character
as an escape, prints the far-future date as a number, and never shows the 2^53 event.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from nostr_buzz.event import sign_event
from tests.support.cli import BackgroundLoop
from tests.support.keys import ALICE
from tests.support.reference import NSEC_HEX, make
from tests.support.scripted_relay import Conn, ScriptedRelay

CHANNEL = "hostile-text"
HOSTILE = "\x1b]0;owned\x07\x1b[31mred\x9b32m \u202eevil\u200bhidden\u2060\ufeffend"
SHOWN = "\\x1b]0;owned\\x07\\x1b[31mred\\x9b32m \\u202eevil\\u200bhidden\\u2060\\ufeffend"


def _events() -> list[dict[str, Any]]:
    tags = [["h", CHANNEL]]
    hostile = sign_event(ALICE, kind=9, content=HOSTILE, tags=tags, created_at=1_700_000_000)
    far = sign_event(ALICE, kind=9, content="far future", tags=tags, created_at=2**53 - 1)
    too_far = make(sk=NSEC_HEX, kind=9, tags=tags, content="past 2^53", created_at=2**53)
    return [hostile.to_dict(), far.to_dict(), too_far]


def test_the_table_shows_hostile_text_as_escapes(bg: BackgroundLoop) -> None:
    served = _events()

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            for event in served:
                await conn.send(["EVENT", msg[1], event])
            await conn.send(["EOSE", msg[1]])

    relay = bg.relay(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    cmd = ["messages", "get", "--channel", CHANNEL, "--format", "table", "--relay", relay.url]
    done = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", *cmd, "--timeout", "5"],
        capture_output=True,
        env={**env, "LC_ALL": "C.UTF-8"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")
    rows = out.splitlines()
    assert len(rows) == 2, out  # the 2^53 event failed verification
    assert SHOWN in rows[0]
    assert not [c for c in out if c in "\x1b\x07\x9b\u202e\u200b\u2060\ufeff"], out
    assert rows[1].startswith(f"{2**53 - 1}  ") and "far future" in rows[1]
    assert "past 2^53" not in out
    assert b"failed verification (malformed)" in done.stderr
