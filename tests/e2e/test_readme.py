"""The README's Python examples run as written (against a real relay where they need one)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import nostr_buzz
from nostr_buzz import Event, RelayPool, SecretKey, sign_event
from nostr_buzz.cli.app import COMMANDS, main
from tests.support.buzz_process import relay_process
from tests.support.relays import start_relay

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def _block(marker: str) -> str:
    found = [b for b in BLOCKS if marker in b]
    assert len(found) == 1, f"expected one README block containing {marker!r}"
    return found[0]


def test_the_pure_core_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    ns: dict[str, Any] = {}
    exec(_block("def next_turn"), ns)
    secret = SecretKey.from_str("07" * 32)
    good = sign_event(secret, kind=9, content="hi", tags=[["h", "engineering"]], created_at=5)
    ns["on_relay_frame"](good.to_json(), 1.0)
    ns["on_relay_frame"](good.to_json().replace('"hi"', '"ho"'), 1.0)
    assert "dropped: bad_id" in capsys.readouterr().out
    ns["next_turn"](2.0)
    snapshot = ns["ledger"].snapshot()
    assert snapshot is not None and snapshot.hash_matches()
    assert [layer.layer for layer in snapshot.layers][-2:] == [
        "current_instruction",
        "delivery_contract",
    ]


async def test_the_plugin_example_serves_a_mention_with_a_real_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the default state directory is ./.buzz
    agent, owner = SecretKey.from_str("08" * 32), SecretKey.from_str("09" * 32)
    relay = await start_relay()
    try:
        source = _block("async def serve(")
        for old, new in (
            ('"nsec1…"', repr(agent.bech32)),
            ('"npub1…"', repr(owner.public_key.bech32)),
            ('"wss://relay.example"', repr(relay.url)),
            ('agent_command="goose"', f"agent_command={sys.executable!r}"),
            ('agent_args=("acp",)', 'agent_args=("-m", "nostr_buzz.demo.agent", "--delay", "0")'),
        ):
            assert old in source
            source = source.replace(old, new)
        ns: dict[str, Any] = {}
        exec(source, ns)
        assert "nsec" not in repr(ns["config"])
        mention = sign_event(
            owner,
            kind=9,
            content="hello agent",
            tags=[["h", "engineering"], ["p", agent.public_key.hex]],
            created_at=int(time.time()),
        )
        pool = RelayPool([relay.url], timeout=5)
        replies: list[Event] = []

        async def incoming() -> AsyncIterator[str]:
            yield mention.to_json().replace("hello", "jello")  # tampered: dropped
            yield mention.to_json()
            deadline = time.monotonic() + 30
            while not replies and time.monotonic() < deadline:  # bounded wait for the answer
                found = await pool.query({"kinds": [9], "authors": [agent.public_key.hex]})
                replies.extend(found.events)
                if not replies:
                    await asyncio.sleep(0.1)

        await ns["serve"](incoming())
        assert "dropped: bad_id" in capsys.readouterr().out
        assert len(replies) == 1 and ("e", mention.id, "", "root", owner.public_key.hex) in (
            replies[0].tags
        )
        assert (tmp_path / ".buzz").is_dir()  # close() saved the state
    finally:
        relay.stop()


def test_the_library_list_names_every_export() -> None:
    section = README.split("## The library", 1)[1].split("### Plugging it into a bot", 1)[0]
    listed = set(re.findall(r"`(\w+)`", section)) - {"nostr_buzz"}
    assert listed == set(nostr_buzz.__all__)


def test_the_command_table_matches_buzz_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    commands = capsys.readouterr().out.split("Commands:", 1)[1]
    helped = {
        line.split()[0]
        for line in commands.splitlines()
        if line.startswith("  ") and line[2] != " "
    }
    table = README.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"^\| `buzz (\w+)", table, re.M))
    documented |= set(re.findall(r" / `buzz (\w+)", table))
    assert documented == helped == set(COMMANDS)


def test_the_quick_session_runs_as_written_in_a_fresh_shell(tmp_path: Path) -> None:
    first, second = re.findall(r"```sh\n(.*?)```", README.split("A quick session", 1)[1], re.S)[:2]
    assert first.startswith("buzz relay --port 7447")
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
    }
    with relay_process() as url:
        port = url.rsplit(":", 1)[1]
        script = "set -euo pipefail\n" + second.replace("7447", port)
        done = subprocess.run(
            ["bash", "-c", script],
            capture_output=True,
            env=env,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "the deploy is failing" in out and "hello from buzz" in out
    assert '"type": "note"' in out
    assert "<current_instruction" in out or "manifest" in out


async def test_the_relay_pool_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    relay = await start_relay()
    try:
        secret = SecretKey.from_str("0a" * 32)
        event = sign_event(
            secret, kind=9, content="ü <x>", tags=[["h", "engineering"]], created_at=9
        )
        from nostr_buzz import RelayPool

        assert (await RelayPool([relay.url]).publish(event)).ok
        source = _block("RelayPool([").replace("ws://127.0.0.1:7447", relay.url)
        source = source.replace("asyncio.run(main())", "")
        ns: dict[str, Any] = {}
        exec(source, ns)
        await ns["main"]()
        assert capsys.readouterr().out.strip() == event.to_json()
    finally:
        relay.stop()
