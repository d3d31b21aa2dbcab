"""``pip install nostr-buzz`` without extras: the library alone, in a fresh virtual environment.

The environment is new (no system site packages), the project is installed with its base
dependencies from pip's cache or the package index (never ``--no-deps``), and then: the agent
protocol's packages (acp, pydantic) and nostr-sdk are absent; typer and rich are there only as
pynostr's own dependencies (the library takes bech32 from pynostr) and the library never imports
them; every library export loads, the core path works (bech32 keys included), and ``buzz run``
names the extra to install.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.readme import ROOT

#: Exports that need the ``acp`` extra (the bot and the ACP edge).
NEED_ACP = {"AgentDriver", "BuzzPlugin", "PluginConfig"}

CHECK = r"""
import importlib.util, json, sys
absent = {name: importlib.util.find_spec(name) is None
          for name in ("acp", "pydantic", "nostr_sdk")}
need_acp = set(json.loads(sys.argv[1]))
import nostr_buzz
loaded = [name for name in nostr_buzz.__all__ if name not in need_acp
          and getattr(nostr_buzz, name) is not None]
from nostr_buzz import (
    ChannelInfo, Event, MetricPayload, SecretKey, TokenCounts, TurnEvent, TurnInput,
    build_metric_event, compile_turn, metric_timestamp, open_metric_event, sign_event,
)
agent, owner = SecretKey.from_str("07" * 32), SecretKey.from_str("08" * 32)
mention = sign_event(owner, kind=9, content="hi", tags=[["h", "dev"]], created_at=5)
event = Event.from_json(mention.to_json())  # id and signature checked
turn = compile_turn(TurnInput(events=(TurnEvent(event),), channel=ChannelInfo(name="dev")))
payload = MetricPayload(
    harness="slim", timestamp=metric_timestamp(1_767_225_600), model=None, channel_id="dev",
    session_id="s", turn_id="t", turn_seq=1, turn=TokenCounts(input_tokens=1, output_tokens=2),
    outcome="success", context_manifest=turn.manifest,
)
sealed = build_metric_event(agent, owner.public_key, payload)
opened = open_metric_event(owner, sealed)
assert SecretKey.from_str(agent.bech32).public_key.bech32 == agent.public_key.bech32
unwanted = ("typer", "rich", "click", "tornado", "requests", "acp", "pydantic")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in unwanted)
print(json.dumps({"absent": absent, "loaded": len(loaded), "heavy": heavy,
                  "hash": opened.context_manifest.hash == turn.manifest.hash}))
"""


def _source_copy(to: Path) -> Path:
    """What a build of the worktree reads (so that the build leaves nothing in the worktree)."""
    to.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, to / name)
    shutil.copytree(
        ROOT / "nostr_buzz", to / "nostr_buzz", ignore=shutil.ignore_patterns("__pycache__")
    )
    return to


def test_a_plain_install_is_the_library_without_the_cli_and_the_agent_protocol(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = venv / "bin" / "python"
    source = _source_copy(tmp_path / "src")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(source)],
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    checked = subprocess.run(
        [str(python), "-c", CHECK, json.dumps(sorted(NEED_ACP))],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,  # not the worktree: the installed copy is what runs
    )
    assert checked.returncode == 0, checked.stderr.decode()
    report = json.loads(checked.stdout)
    assert all(report["absent"].values()), report["absent"]
    assert report["heavy"] == [] and report["hash"] is True
    import nostr_buzz

    assert report["loaded"] == len(nostr_buzz.__all__) - len(NEED_ACP)
    # The bot is an extra: the script says which one, without a traceback.
    buzz = subprocess.run(
        [str(venv / "bin" / "buzz"), "run"], capture_output=True, timeout=60, check=False
    )
    stderr = buzz.stderr.decode()
    assert buzz.returncode == 1 and buzz.stdout == b""
    assert "pip install 'nostr-buzz[acp]'" in stderr and "Traceback" not in stderr
