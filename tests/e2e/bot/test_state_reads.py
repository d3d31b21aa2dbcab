"""The fastest relay does not decide what the agent reads or where the owner is asked
(nips/STANDING.md, "Which version counts"): a real ``buzz run``, two real relays on 127.0.0.1.

The hostile relay answers 0.5 s sooner (the honest one is reached through a front that delays
every byte by 0.25 s each way) and holds OLDER versions of the owner's channel canvas, the
agent's core memory and the owner's kind 10050; the honest one holds the newest.  A stranger
(allowlisted) mentions the agent under ``permissions = "owner"``, so the scripted agent's tool
call asks the owner: the new session's standing context must carry the newest canvas and core
memory (the manifest's layer versions and the agent's own prompt), and the question must reach
the relay the newest kind 10050 names (counted there), never the one the older names.  And a
relay that should have answered and did not makes the standing context unconfirmed, said.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.manifest import content_hash
from nostr_buzz.nips import nip17, nip59
from nostr_buzz.nips import standing as docs
from tests.support.bot_world import Recorder, World, manifest_of
from tests.support.buzz_process import BUZZ, Lines, clean_env
from tests.support.relays import local_relay
from tests.support.scripted_agent import USAGE, Scripted
from tests.support.scripted_relay import scripted_relay
from tests.support.wan import Front

#: The honest relay's extra latency each way (0.5 s a round trip).
ONE_WAY = 0.25
WAIT = 60.0


def canvas_section(event: Event) -> str:
    return f"<channel-canvas>\n{docs.canvas_body(event, 'eng')}\n</channel-canvas>"


def dm_relays(owner: SecretKey, urls: list[str], created_at: int) -> Event:
    """The owner's kind 10050 naming ``urls``."""
    tags = [["relay", url] for url in urls]
    return sign_event(
        owner, kind=nip17.DM_RELAYS_KIND, content="", tags=tags, created_at=created_at
    )


def toml_list(urls: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(u) for u in urls) + "]"


async def owner_wraps(url: str, owner: SecretKey, agent: SecretKey) -> list[str]:
    """The texts of the agent's private messages to the owner on the relay at ``url``."""
    pool = RelayPool([url], timeout=5.0, grace=None)
    found = await pool.query({"kinds": [1059], "#p": [owner.public_key.hex]})
    texts = []
    for wrap in found.events:
        opened = nip59.open_gift_wrap(owner, wrap)
        if opened.rumor.pubkey == agent.public_key.hex:
            texts.append(opened.rumor.content)
    return texts


def feed(state: Path) -> list[dict[str, Any]]:
    path = state / "diagnostics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_the_newest_canvas_memory_and_dm_relays_win_over_a_faster_relay(
    tmp_path: Path,
) -> None:
    owner, agent, stranger = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    now = int(time.time())
    old_canvas = docs.build_canvas_event(
        owner, "eng", "# Plan\n- the OLD plan", created_at=now - 600
    )
    new_canvas = docs.build_canvas_event(
        owner, "eng", "# Plan\n- the NEW plan", created_at=now - 60
    )
    old_memory = docs.build_core_memory_event(agent, "old memory: tea", created_at=now - 600)
    new_memory = docs.build_core_memory_event(agent, "new memory: coffee", created_at=now - 60)
    scripted = Scripted(tmp_path, {"turns": [{"ask": "make deploy", "usage": USAGE}]})
    state = tmp_path / "state"
    async with local_relay() as hostile, local_relay() as honest, local_relay() as inbox:
        front = await Front(int(honest.url.rsplit(":", 1)[1]), delay=ONE_WAY).start()
        slow = f"ws://127.0.0.1:{front.port}"
        try:
            await RelayPool([hostile.url]).publish(old_canvas)
            await RelayPool([hostile.url]).publish(old_memory)
            await RelayPool([hostile.url]).publish(dm_relays(owner, [hostile.url], now - 600))
            await RelayPool([honest.url]).publish(new_canvas)
            await RelayPool([honest.url]).publish(new_memory)
            await RelayPool([honest.url]).publish(dm_relays(owner, [inbox.url], now - 60))
            (tmp_path / "buzz.toml").write_text(
                f"""
owner = "{owner.public_key.bech32}"
relays = {toml_list([hostile.url, slow])}
state_dir = "{state}"
[agent]
command = {json.dumps(sys.executable)}
args = {toml_list(scripted.args)}
permissions = "owner"
ask_timeout = 5
[gate]
mode = "allowlist"
allowlist = ["{stranger.public_key.hex}"]
[outbox]
local_relays = ["{inbox.url}"]
""",
                encoding="utf-8",
            )
            bot = subprocess.Popen(
                [*BUZZ, "run"],
                bufsize=0,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                env=clean_env({"BUZZ_PRIVATE_KEY": agent.hex}),
                cwd=tmp_path,
            )
            try:
                assert bot.stderr is not None
                Lines(bot.stderr).until("buzz: agent ")
                mention = sign_event(
                    stranger,
                    kind=9,
                    content=f"nostr:{agent.public_key.bech32} deploy it please",
                    tags=[["h", "eng"], ["p", agent.public_key.hex]],
                    created_at=int(time.time()),
                )
                await RelayPool([hostile.url, honest.url]).publish(mention, min_ok=2)
                deadline = time.monotonic() + WAIT
                asked = []
                while not asked and time.monotonic() < deadline:
                    asked = [e for e in feed(state) if e["kind"] == "permission_asked"]
                    await asyncio.sleep(0.2)
                assert asked, [(e["kind"], e["payload"]) for e in feed(state)]
                on_inbox = await owner_wraps(inbox.url, owner, agent)
                on_hostile = await owner_wraps(hostile.url, owner, agent)
            finally:
                bot.terminate()
                bot.communicate(timeout=30)
        finally:
            await front.close()
    # The question went where the newest kind 10050 says, never where the older one says.
    assert len(on_inbox) == 1 and "make deploy" in on_inbox[0], on_inbox
    assert on_hostile == []
    assert asked[0]["payload"]["sent"] is True
    # The session's standing context: the newest canvas and core memory.
    records = feed(state)
    [frozen] = [r for r in records if r["kind"] == "standing_context_frozen"]
    assert frozen["payload"]["canvasRevision"] == new_canvas.id
    assert frozen["payload"]["unconfirmed"] == []
    [delivery] = [r for r in records if r["kind"] == "prompt_context_delivery"]
    layers = {layer["layer"]: layer for layer in delivery["payload"]["contextManifest"]["layers"]}
    assert layers["channel_canvas"]["version"] == content_hash(canvas_section(new_canvas))
    memory = docs.core_memory_section("new memory: coffee")
    assert layers["core_memory"]["version"] == content_hash(memory)
    assert layers["core_memory"]["freshness"] == "session_start"
    # What the agent itself was given.
    given = json.dumps([m for m in scripted.received() if m.get("method") == "session/prompt"])
    given += json.dumps([m for m in scripted.received() if m.get("method") == "session/new"])
    assert new_canvas.id in given and "new memory: coffee" in given
    assert old_canvas.id not in given and "old memory" not in given


async def test_a_relay_that_should_have_answered_makes_the_standing_context_unconfirmed(
    world: World,
) -> None:
    """A read relay that times out (it accepts the connection, never answers): the session
    still gets the canvas the good relay holds, and says it could not be confirmed, in the
    manifest (freshness ``unconfirmed``) and in the diagnostics."""
    canvas = docs.build_canvas_event(world.owner, "eng", "# Plan", created_at=int(time.time()))
    await world.publish(canvas)
    rec = Recorder()
    async with scripted_relay() as silent:
        config = world.config(relay_timeout=2.0, read_relays=(world.relay.url, silent.url))
        async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
            await plugin.handle_event(world.message(world.owner, "what is the plan?"))
            await rec.kind("turn_completed")
    [frozen] = rec.of("standing_context_frozen")
    assert frozen.payload["canvasRevision"] == canvas.id
    assert [u.split(": ")[0] for u in frozen.payload["unconfirmed"]] == [silent.url]
    [delivery] = rec.of("prompt_context_delivery")
    layers = {lay.layer: lay for lay in manifest_of(delivery).layers}
    assert layers["channel_canvas"].freshness == "unconfirmed"
    assert layers["channel_canvas"].version == content_hash(canvas_section(canvas))
    told = [r.payload for r in rec.of("state_unconfirmed")]
    assert any(40100 in p["kinds"] and silent.url in p["relays"] for p in told), told


async def test_silent_relays_a_stranger_lists_as_write_relays_are_asked_never_waited_for(
    world: World,
) -> None:
    """A stranger (allowlisted) whose kind 10002 names a silent relay as a write relay: the
    read of the turn's profiles asks it (its REQs counted there) but does not wait its
    timeout for it, as it would for a configured relay or the owner's; it is named as
    unconfirmed (left behind by the grace period, never "timeout")."""
    rec = Recorder()
    async with scripted_relay() as silent:
        listed = sign_event(
            world.human,
            kind=10002,
            content="",
            tags=[["r", silent.url, "write"]],
            created_at=int(time.time()) - 5,
        )
        await world.publish(listed)
        config = world.config(
            relay_timeout=5.0,
            gate="allowlist",
            allowlist=frozenset({world.human.public_key.hex}),
            local_relays=(silent.url,),  # a loopback relay in someone's list is used
        )
        async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
            await plugin.handle_event(world.message(world.human, "hello"))
            await rec.kind("turn_completed")
        asked = silent.frames("REQ")
    assert asked  # the stranger's write relay was asked
    profiles = [r.payload for r in rec.of("state_unconfirmed") if 0 in r.payload["kinds"]]
    assert profiles, [r.payload for r in rec.of("state_unconfirmed")]
    why = profiles[0]["relays"][silent.url]
    assert why.startswith("left behind"), why
