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

from nostr_buzz import Event, RelayPool, SecretKey, sign_event
from tests.support.buzz_process import relay_process
from tests.support.readme import README, ROOT, readme_block
from tests.support.relays import start_relay


async def test_the_plugin_example_serves_a_mention_with_a_real_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the default state directory is ./.buzz
    agent, owner = SecretKey.from_str("08" * 32), SecretKey.from_str("09" * 32)
    relay = await start_relay()
    try:
        source = readme_block("async def serve(")
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
            stdin=subprocess.DEVNULL,  # buzz event and buzz req read a piped stdin (docs/cli.md)
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
        source = readme_block("RelayPool([").replace("ws://127.0.0.1:7447", relay.url)
        source = source.replace("asyncio.run(main())", "")
        ns: dict[str, Any] = {}
        exec(source, ns)
        await ns["main"]()
        assert capsys.readouterr().out.strip() == event.to_json()
    finally:
        relay.stop()
