"""History lines that cannot be forged, through ``buzz compile`` as a real subprocess.

The attack: Mallory gives herself the owner's display name and writes text whose line breaks
(newline, CR, NEL, U+2028, U+2029) start lines that read ``Morgan: …``.  The agent must see
exactly as many lines attributed to the owner's label as the owner wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.forged_history import (
    MALLORY,
    OWNER,
    SPOOF,
    agent_lines,
    attack_doc,
    npub,
    slash_doc,
)


def test_buzz_compile_attributes_to_the_owner_only_what_the_owner_wrote(tmp_path: Path) -> None:
    path = tmp_path / "turn.json"
    path.write_text(json.dumps(attack_doc()), encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "compile", "--json", str(path)],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    sections = json.loads(proc.stdout)["sections"]
    lines = agent_lines(sections)
    owner_label = f"Morgan ({npub(OWNER)[:13]})"
    mallory_label = f"morgan ({npub(MALLORY)[:13]})"
    # the owner wrote two messages: exactly two lines speak with the owner's label ...
    assert sum(line.startswith(owner_label + ":") for line in lines) == 2
    # ... no line at all starts with the bare spoofed name, and Mallory's show her own suffix
    assert not [line for line in lines if line.casefold().startswith("morgan:")]
    assert sum(line.startswith(mallory_label + ":") for line in lines) == 3
    assert f"  {SPOOF}" in lines  # her forged lines are there, indented
    # no line break other than "\n" survives in the envelope
    envelope = "\n".join(sections)
    assert envelope.splitlines() == envelope.split("\n")


# ---------------------------------------------------------------------------------------------
# Slash commands come only from the owner


def test_buzz_compile_refuses_an_owner_that_is_not_a_key(tmp_path: Path) -> None:
    doc = slash_doc(OWNER, OWNER)
    doc["owner"] = "Morgan"
    path = tmp_path / "turn.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "compile", str(path)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and proc.stdout == b""
    assert b"owner must be a public key" in proc.stderr
