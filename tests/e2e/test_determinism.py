"""Determinism across processes: the goldens compile byte-identically under different hash seeds
(docs/envelope.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.data import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
# Compiles every golden input (and a steer of each batch's newest event) and prints the results.
_PROGRAM = r"""
import json, sys
from pathlib import Path
from nostr_buzz.core.compiler import compile_steer, compile_turn
from nostr_buzz.core.turn_input import TurnInput

out = {}
for path in sorted(Path(sys.argv[1]).glob("*.input.json")):
    ti = TurnInput.from_json(path.read_bytes())
    compiled = compile_turn(ti)
    steer = compile_steer(ti.events[-1].event, channel_id=ti.channel_id)
    out[path.name] = {
        "sections": compiled.sections,
        "manifest": compiled.manifest.to_json(),
        "steer": [steer.text, steer.manifest.to_json()],
    }
sys.stdout.buffer.write(json.dumps(out, ensure_ascii=False, sort_keys=True).encode("utf-8"))
"""


def _compile_in_subprocess(seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(FIXTURES / "turns")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def test_goldens_compile_byte_identically_under_different_hash_seeds() -> None:
    first = _compile_in_subprocess("1")
    second = _compile_in_subprocess("4242")
    assert first == second
    results = json.loads(first)
    assert len(results) >= 14
    for name, result in results.items():
        stem = name.removesuffix(".input.json")
        manifest = (FIXTURES / "turns" / f"{stem}.manifest.json").read_bytes().decode()
        assert result["manifest"] + "\n" == manifest
