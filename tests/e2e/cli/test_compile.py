"""``buzz compile`` as a real subprocess under the C locale: exit codes, empty stdout on failure
and raw UTF-8 output (the in-process cases are in tests/unit/cli/test_compile.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from nostr_buzz.core.compiler import compile_turn
from nostr_buzz.core.turn_input import TurnInput
from tests.support.buzz_process import c_locale_env
from tests.support.turn_file import (
    forge_sig,
    turn_doc,
    write,
)

# --- as a real subprocess, in the C locale -----------------------------------------------------


def buzz(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "nostr_buzz", *args],
        capture_output=True,
        env=c_locale_env(),
        timeout=60,
        check=False,
    )


def test_the_subprocess_locale_really_is_ascii() -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.stdout.encoding)"],
        capture_output=True,
        env=c_locale_env(),
        timeout=60,
        check=True,
    )
    assert probe.stdout.strip().lower() in (b"ascii", b"ansi_x3.4-1968", b"us-ascii")


def test_subprocess_exit_codes_and_utf8(tmp_path: Path) -> None:
    good = write(tmp_path, turn_doc(), "good.json")
    doc = turn_doc()
    forge_sig(doc["cancelledEvents"][0]["event"])
    forged = write(tmp_path, doc, "forged.json")
    bad = write(tmp_path, {**turn_doc(), "events": []}, "bad.json")

    ok = buzz("compile", "--json", str(good))
    assert ok.returncode == 0, ok.stderr
    compiled = compile_turn(TurnInput.from_json(good.read_bytes()))
    assert msgspec.json.decode(ok.stdout)["manifest"]["hash"] == compiled.manifest.hash
    assert "ünïcødé ✓".encode() in ok.stdout  # raw UTF-8 under LANG=C

    text = buzz("compile", str(good))
    assert text.returncode == 0
    assert "ünïcødé ✓".encode() in text.stdout
    assert compiled.manifest.hash.encode() in text.stdout

    failed = buzz("compile", "--json", str(forged))
    assert (failed.returncode, failed.stdout) == (4, b"")
    assert b"cancelledEvents[0]" in failed.stderr and b"bad_signature" in failed.stderr

    invalid = buzz("compile", str(bad))
    assert (invalid.returncode, invalid.stdout) == (1, b"")
    assert b"events" in invalid.stderr
