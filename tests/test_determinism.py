"""Determinism across processes and purity of the core (docs/envelope.md, docs/architecture.md
"Layers")."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nostr_buzz"

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


# ---------------------------------------------------------------------------------------------
# Purity: the core and the codecs import no sockets, event loops, subprocesses, clocks or
# non-cryptographic randomness, and never read the environment.

FORBIDDEN_MODULES = {"socket", "asyncio", "subprocess", "time", "datetime", "random"}
FORBIDDEN_OS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _pure_modules() -> list[Path]:
    files = sorted((PACKAGE / "core").glob("*.py")) + sorted((PACKAGE / "nips").glob("*.py"))
    files += [PACKAGE / name for name in ("event.py", "keys.py", "errors.py", "profile.py")]
    return [f for f in files if f.is_file()]


def impurities(source: str) -> list[str]:
    """What in ``source`` breaks the purity rule, as readable strings."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".")[0]
            if node.level == 0 and module in FORBIDDEN_MODULES:
                found.append(f"from {node.module} import …")
            if module == "os" and any(a.name in FORBIDDEN_OS for a in node.names):
                found.append("from os import environ/getenv")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_OS:
            found.append(f"…{node.attr}")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            target = node.args[0]
            if (
                name in ("__import__", "import_module")
                and isinstance(target, ast.Constant)
                and isinstance(target.value, str)
                and target.value.split(".")[0] in FORBIDDEN_MODULES
            ):
                found.append(f"{name}({target.value!r})")
    return found


@pytest.mark.parametrize("path", _pure_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_and_codecs_are_pure(path: Path) -> None:
    assert impurities(path.read_text(encoding="utf-8")) == []


def test_purity_scan_catches_each_kind_of_impurity() -> None:
    for snippet in (
        "import socket",
        "import asyncio.events",
        "from subprocess import run",
        "import time",
        "from datetime import datetime",
        "import random as r",
        "import os\nx = os.environ['HOME']",
        "import os\nx = os.getenv('HOME')",
        "from os import environ",
        "m = __import__('time')",
        "import importlib\nm = importlib.import_module('socket')",
    ):
        assert impurities(snippet), snippet
    assert impurities("import os\nx = os.urandom(32)\nimport hashlib, json") == []
    assert impurities("import importlib\nm = importlib.import_module('coincurve')") == []


def test_the_compiler_modules_are_in_the_scan() -> None:
    names = {p.name for p in _pure_modules()}
    assert {"compiler.py", "turn_input.py", "escape.py", "ledger.py", "manifest.py"} <= names
    assert {"nip10.py", "nip19.py"} <= names
