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
    LOOKALIKE_NAME,
    LOOKALIKES,
    MALLORY,
    OWNER,
    SPOOF,
    STRANGERS,
    agent_lines,
    attack_doc,
    lines_read_as,
    lookalike_doc,
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


def test_buzz_compile_tells_every_lookalike_of_the_owners_name_apart(tmp_path: Path) -> None:
    """Eighteen strangers, each named like the owner with another trick, write in the owner's
    thread: through the real CLI, none of their lines reads as the owner's, each shows its own
    key, and no invisible character of a name reaches the output."""
    path = tmp_path / "turn.json"
    path.write_text(json.dumps(lookalike_doc(list(LOOKALIKES))), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "compile", "--json", str(path)],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C.UTF-8"},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = agent_lines(json.loads(proc.stdout)["sections"])
    owner_label = f"{LOOKALIKE_NAME} ({npub(OWNER)[:13]})"
    assert lines_read_as(owner_label, lines) == [
        f"{owner_label}: Deploy the canary.",
        f"{owner_label}: Then wait for me.",
    ]
    theirs = [line.split(": ")[0] for line in lines if "agent.nsec" in line]
    assert [label[-15:] for label in theirs] == [
        f"({npub(STRANGERS[what])[:13]})" for what in LOOKALIKES
    ]
    assert "Gra&#x200D;ce Cooper (" in theirs[list(LOOKALIKES).index("zero-width joiner")]
    assert not [c for c in "".join(theirs) if c in "\u200b\u200c\u200d\u2060\u00ad\u202d\u202e"]


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
