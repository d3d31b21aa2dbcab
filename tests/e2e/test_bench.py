"""``make bench`` cannot rot: its script runs every row once, quickly, on a fresh checkout.

The figures of a ``--quick`` run mean nothing and are not checked; what is checked is that
every row of the real benchmark still runs to the end (the peers, start-up, the imports, the
bot against a real relay with the demo agent, the bot and a nostr-sdk bot across the WAN of
tests/support/wan.py) and prints its line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_bench_runs_every_row() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env.pop("PYTHONPATH", None)  # as `make bench` runs it: the installed package, bench/ alone
    done = subprocess.run(
        [sys.executable, "bench/bench.py", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for row in (
        "parse + verify one event (JSON in)",
        "sign one kind-9 event",
        "NIP-44 v2 decrypt 680 B",
        "compile a thread turn with history",
        "queue: push 50, flush 1 batch, complete",
        "buzz messages raw (local relay)",
    ):
        assert row in out, f"row {row!r} missing"
    for peer in ("nostr-sdk", "pynostr", "raw coincurve"):
        assert re.search(rf"^\s+{re.escape(peer)}\s+[\d.]+\s+[\d.]+x$", out, re.M), peer
    for name, statement in (
        ("nostr-buzz", "from nostr_buzz import BuzzPlugin"),
        ("nostr-sdk", "import nostr_sdk"),
        ("pynostr", "from pynostr.relay_manager import RelayManager"),
    ):  # the import rows: each in fresh processes, beside nostr-buzz's
        assert re.search(rf"^{statement}\s+{name}\s+[\d.]+\s+[\d.]+x$", out, re.M), name
    assert len(re.findall(r"^bot intake .* events/s in one burst$", out, re.M)) == 3
    assert re.search(r"^bot memory per pending event, [\d,]+ pending: [\d,]+ bytes", out, re.M)
    assert re.search(r"^mention → prompt on loopback, instant agent \(n=3\): p50 \d+ ms", out, re.M)
    for relays in ("clean", "bad"):  # the WAN rows: the bot and its nostr-sdk peer
        for who in ("thread reply, bot", "private message, bot", "thread reply, nostr-sdk peer"):
            row = rf"^{who} \(n=1\)\s+{relays}\s+[\d.]+\s+[\d.]+\s.*\s[\d.]+\s*(\s[\d.]+x)?$"
            assert re.search(row, out, re.M), (who, relays)
