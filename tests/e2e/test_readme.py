"""The README's examples run as written: every Python block of its library section (against a
real relay, with the documented placeholders substituted), and the quick session in a shell."""

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
from nostr_buzz.nips import nip10
from tests.support.buzz_process import clean_env, relay_process
from tests.support.readme import README, ROOT
from tests.support.relays import local_relay

LIBRARY = README.split("## The library", 1)[1].split("\n## ", 1)[0]
SNIPPETS = re.findall(r"```python\n(.*?)```", LIBRARY, re.S)
AGENT, OWNER = SecretKey.from_str("08" * 32), SecretKey.from_str("09" * 32)


def substituted(block: str, relay_url: str) -> str:
    """The block with the placeholders the README names: a relay, the agent's and the owner's
    keys, and (in the plugin's block) the demo agent for goose."""
    for old, new in (
        ('"wss://relay.example"', repr(relay_url)),
        ('"nsec1…"', repr(AGENT.bech32)),
        ('"npub1…"', repr(OWNER.public_key.bech32)),
        ('agent_command="goose"', f"agent_command={sys.executable!r}"),
        ('agent_args=("acp",)', 'agent_args=("-m", "nostr_buzz.demo.agent", "--delay", "0")'),
    ):
        block = block.replace(old, new)
    assert "relay.example" not in block and "1…" not in block, block
    return block


async def test_every_python_block_of_the_library_section_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(SNIPPETS) == 4
    for block in SNIPPETS:
        async with local_relay() as relay:
            source = substituted(block, relay.url)
            if "async def serve(" in block:
                await _the_plugin_serves_a_mention(source, relay.url, tmp_path, monkeypatch, capsys)
            else:
                await _the_script_runs(source, relay.url, tmp_path)


async def _the_script_runs(source: str, relay_url: str, tmp_path: Path) -> None:
    """A self-running block, as its own process, after the owner asked the agent in a thread."""
    now = int(time.time())
    root = sign_event(
        OWNER, kind=9, content="the deploy", tags=[["h", "engineering"]], created_at=now
    )
    tags = [["h", "engineering"], *nip10.reply_tags(root, sender=OWNER.public_key.hex)]
    mention = sign_event(
        OWNER,
        kind=9,
        content="why is it failing?",
        tags=[*tags, ["p", AGENT.public_key.hex]],
        created_at=now + 1,
    )
    pool = RelayPool([relay_url], timeout=5)
    for event in (root, mention):
        assert (await pool.publish(event)).ok
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", source],
        capture_output=True,
        env=clean_env(),
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    if "def next_turn" in source:  # the pure core: a forgery dropped, a turn compiled
        assert "dropped: bad_id" in out and "<buzz-turn>" in out and "fixed" not in out
    elif "fetch_turn_context" in source:  # a bot's own loop: the mention answered in its thread
        assert out == "answered: True\n"
        replies = await pool.query({"kinds": [9], "authors": [AGENT.public_key.hex]})
        [reply] = replies.events
        assert nip10.thread_ref(reply).root == root.id and mention.id in str(reply.tags)
    else:  # the relay pool: the channel's messages, each verified
        assert mention.to_json() in out.splitlines() and root.to_json() in out.splitlines()


async def _the_plugin_serves_a_mention(
    source: str,
    relay_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The plugin's block with the demo agent: a tampered event dropped, the mention answered."""
    monkeypatch.chdir(tmp_path)  # the default state directory is ./.buzz
    ns: dict[str, Any] = {}
    exec(source, ns)
    assert "nsec" not in repr(ns["config"])
    agent = AGENT.public_key.hex
    mention = sign_event(
        OWNER,
        kind=9,
        content="hello agent",
        tags=[["h", "engineering"], ["p", agent]],
        created_at=int(time.time()),
    )
    pool = RelayPool([relay_url], timeout=5)
    replies: list[Event] = []

    async def incoming() -> AsyncIterator[str]:
        yield mention.to_json().replace("hello", "jello")  # tampered: dropped
        yield mention.to_json()
        deadline = time.monotonic() + 30
        while not replies and time.monotonic() < deadline:  # bounded wait for the answer
            found = await pool.query({"kinds": [9], "authors": [agent]})
            replies.extend(found.events)
            if not replies:
                await asyncio.sleep(0.1)

    await ns["serve"](incoming())
    assert "dropped: bad_id" in capsys.readouterr().out
    assert len(replies) == 1
    assert ("e", mention.id, "", "root", OWNER.public_key.hex) in replies[0].tags
    assert (tmp_path / ".buzz").is_dir()  # close() saved the state


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
