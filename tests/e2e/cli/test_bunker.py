"""``buzz run --bunker`` and the commands that sign, with the key in a NIP-46 bunker that is not
nostr-buzz's code (NDK's NDKNip46Backend, tests/agents/nip46_bunker.mjs).

The bot, a real subprocess with the bundled demo agent, answers a kind 9 mention, a NIP-17
private message and a kind 1 note on a relay that requires NIP-42 AUTH for reading and
writing, publishes one metric per turn that the owner opens, and at no point holds the key:
neither its environment, its command line, its configuration, its state directory nor its logs
(its stderr, the agent's log) contain the key, as hex or nsec.

``buzz event``, ``buzz mem set`` and ``buzz mem get`` sign, encrypt and decrypt through the
same bunker, one process after another: the client key kept in the state directory lets the
bunker serve each of them although the URI's secret is good for one connection.  NDK tags a
text as it signs (NIP-27): a reply, a message and a canvas whose text has a hashtag or a
``nostr:`` reference are tagged before they are sent, and signed as built; ``buzz event`` signs
exactly what it is given, so a change is refused there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nostr_sdk

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip59
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import open_metric_event
from tests.support.bunkers import ndk_bunker
from tests.support.buzz_process import BUZZ, clean_env
from tests.support.events import chat
from tests.support.relays import local_relay

WAIT = 30.0


@asynccontextmanager
async def bot_process(argv: list[str], cwd: Path) -> AsyncIterator[tuple[Any, list[str]]]:
    """``buzz run ARGV`` in ``cwd`` with no BUZZ_* variable; its stderr lines as they come."""
    process = await asyncio.create_subprocess_exec(
        *BUZZ,
        "run",
        *argv,
        cwd=cwd,
        env=clean_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    lines: list[str] = []

    async def read() -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            lines.append(raw.decode(errors="replace").rstrip("\n"))

    reader = asyncio.create_task(read())
    try:
        yield process, lines
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        await asyncio.gather(reader, return_exceptions=True)


async def until(what: str, probe: Any, timeout: float = WAIT) -> Any:
    """``await probe()`` again and again until it gives something true; bounded."""
    deadline = time.monotonic() + timeout
    while not (found := await probe()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return found


def write_config(where: Path, owner: SecretKey, relay: str, kinds: str) -> None:
    """A buzz.toml for ``owner``'s demo agent on ``relay``, serving ``kinds``, no key in it."""
    (where / "buzz.toml").write_text(
        f'owner = "{owner.public_key.bech32}"\nrelays = ["{relay}"]\n'
        f'state_dir = "state"\n[subscriptions]\nkinds = [{kinds}]\n'
        f'[agent]\ncommand = "{sys.executable}"\n'
        'args = ["-m", "nostr_buzz.demo.agent", "--delay", "0"]\n'
    )
    (where / "buzz.toml").chmod(0o600)


async def test_buzz_run_with_its_key_in_an_ndk_bunker_answers_and_accounts(tmp_path: Path) -> None:
    agent, owner = SecretKey.generate(), SecretKey.generate()
    forms = (agent.hex, agent.bech32)
    async with (
        local_relay(auth="both") as relay,
        local_relay() as bunker_relay,
        ndk_bunker([bunker_relay.url], agent) as bunker,
    ):
        as_owner = RelayPool([relay.url], secret=owner, timeout=5)
        write_config(tmp_path, owner, relay.url, "9, 14, 1")
        async with bot_process(["--bunker", bunker.uri], tmp_path) as (bot, lines):
            start = await until("the start line", _line(lines, "buzz: agent "))
            assert agent.public_key.bech32 in start
            proc = Path(f"/proc/{bot.pid}")
            environ, cmdline = (proc / "environ").read_bytes(), (proc / "cmdline").read_bytes()

            now = int(time.time())
            mention = chat(
                owner, now, content="status of the deploy?", channel="eng", mention=agent
            )
            note = sign_event(
                owner,
                kind=1,
                content="thoughts?",
                tags=[["p", agent.public_key.hex]],
                created_at=now,
            )
            dm = Event.from_json(
                nostr_sdk.nip17_make_private_msg(
                    nostr_sdk.Keys.parse(owner.hex),
                    nostr_sdk.PublicKey.parse(agent.public_key.hex),
                    "a private question",
                ).as_json()
            )
            for event in (mention, note, dm):
                assert (await as_owner.publish(event)).ok

            async def answers() -> list[Event] | None:
                got = (await as_owner.query({"authors": [agent.public_key.hex]})).events
                kinds = {e.kind for e in got}
                return got if {9, 1} <= kinds else None

            replies = await until("a kind 9 and a kind 1 reply", answers)
            turn = await until("a turn's line", _line(lines, "buzz: turn in eng"))
            assert turn.endswith(" s") and ": success, tokens in the metric, " in turn
            answered = {value for e in replies for value in e.tag_values("e")}
            assert {mention.id, note.id} <= answered

            async def private_answer() -> list[Any] | None:
                wraps = (
                    await as_owner.query({"kinds": [1059], "#p": [owner.public_key.hex]})
                ).events
                opened = [nip59.open_gift_wrap(owner, w) for w in wraps]
                return [o for o in opened if o.rumor.pubkey == agent.public_key.hex] or None

            [private] = await until("the private answer", private_answer)
            assert private.rumor.kind == 14

            async def metrics() -> list[Any] | None:
                flt = {"kinds": [METRIC_KIND], "#p": [owner.public_key.hex]}
                found = (await as_owner.query(flt)).events
                return found if len(found) >= 3 else None

            published = await until("3 metrics", metrics)
            assert {e.pubkey for e in published} == {agent.public_key.hex}
            opened = [open_metric_event(owner, e) for e in published]
            assert len(opened) == 3

            bot.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(bot.wait(), WAIT) == 0
        assert bunker.answered("sign_event") >= 6  # AUTH, replies, the private seal, metrics
        logs = "\n".join(lines).encode()
        assert b"buzz: stopped" in logs
    files = [p for p in (tmp_path / "state").rglob("*") if p.is_file()] + [tmp_path / "buzz.toml"]
    assert any(p.name == "agent.log" for p in files)
    for where, data in [("environ", environ), ("cmdline", cmdline), ("stderr", logs)] + [
        (str(p), p.read_bytes()) for p in files
    ]:
        for form in forms:
            assert form.encode() not in data.lower(), f"the agent's key is in {where}"


async def test_mentions_whose_answers_quote_an_npub_are_answered_once_through_ndks_bunker(
    tmp_path: Path,
) -> None:
    """NDK tags a text's ``nostr:`` references as it signs: the bot tags them before it asks
    (NIP-27), so the bunker signs each reply as it was built, and each mention (the usual way:
    ``nostr:npub1…`` in the text, quoted by the demo agent) is answered once, on its first
    try, with one metric."""
    agent, owner, carol = SecretKey.generate(), SecretKey.generate(), SecretKey.generate()
    async with (
        local_relay(auth="both") as relay,
        local_relay() as bunker_relay,
        ndk_bunker([bunker_relay.url], agent) as bunker,
    ):
        as_owner = RelayPool([relay.url], secret=owner, timeout=5)
        write_config(tmp_path, owner, relay.url, "9, 1")
        async with bot_process(["--bunker", bunker.uri], tmp_path) as (bot, lines):
            await until("the start line", _line(lines, "buzz: agent "))
            now = int(time.time())
            mention = chat(
                owner,
                now,
                content=f"nostr:{agent.public_key.bech32} status of the deploy?",
                channel="eng",
                mention=agent,
            )
            note = sign_event(
                owner,
                kind=1,
                content=f"nostr:{agent.public_key.bech32} ask nostr:{carol.public_key.bech32}",
                tags=[["p", agent.public_key.hex]],
                created_at=now,
            )
            for event in (mention, note):
                assert (await as_owner.publish(event)).ok

            async def metrics() -> list[Any] | None:
                flt = {"kinds": [METRIC_KIND], "#p": [owner.public_key.hex]}
                found = (await as_owner.query(flt)).events
                return found if len(found) >= 2 else None

            published = await until("2 metrics", metrics)
            bot.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(bot.wait(), WAIT) == 0
        mine = (await as_owner.query({"authors": [agent.public_key.hex]})).events
    replies = [e for e in mine if e.kind in (9, 1)]
    assert sorted(e.kind for e in replies) == [1, 9]  # once each
    [chat_reply] = [e for e in replies if e.kind == 9]
    [note_reply] = [e for e in replies if e.kind == 1]
    assert mention.id in chat_reply.tag_values("e") and note.id in note_reply.tag_values("e")
    assert f"nostr:{agent.public_key.bech32}" in chat_reply.content  # the quote
    assert agent.public_key.hex in chat_reply.tag_values("p")  # tagged before signing
    assert f"nostr:{carol.public_key.bech32}" in note_reply.content
    assert carol.public_key.hex in note_reply.tag_values("p")
    opened = [open_metric_event(owner, e) for e in published]
    assert len(published) == 2 and all(m.outcome == "success" for m in opened)
    assert sorted(m.triggering_event_ids for m in opened) == sorted([(mention.id,), (note.id,)])
    logs = "\n".join(lines)
    assert "signed a different event" not in logs and "turn_failed" not in logs


def _line(lines: list[str], fragment: str) -> Any:
    async def probe() -> str | None:
        return next((line for line in lines if fragment in line), None)

    return probe


async def buzz_async(*argv: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *BUZZ,
        *argv,
        cwd=cwd,
        env=clean_env(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), WAIT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_commands_sign_encrypt_and_decrypt_through_the_bunker(tmp_path: Path) -> None:
    key = SecretKey.generate()
    async with local_relay() as relay, ndk_bunker([relay.url], key) as bunker:
        env = {"BUZZ_BUNKER": bunker.uri, "BUZZ_RELAYS": relay.url}
        code, out, err = await buzz_async(
            "event", "-k", "1", "-c", "from afar", env=env, cwd=tmp_path
        )
        assert code == 0, err
        event = Event.from_json(out)
        assert (event.pubkey, event.content) == (key.public_key.hex, "from afar")
        carol = SecretKey.generate().public_key
        text = f"ask nostr:{carol.bech32} #deploy"  # NDK would tag both as it signs
        code, out, err = await buzz_async(
            "messages", "send", "--channel", "eng", text, env=env, cwd=tmp_path
        )
        assert code == 0, err
        [sent] = (await RelayPool([relay.url], timeout=5).query({"ids": [out.strip()]})).events
        assert (sent.content, sent.tags) == (
            text,
            (("h", "eng"), ("p", carol.hex), ("t", "deploy")),
        )
        code, out, err = await buzz_async(
            "mem", "set", "core", "remember this", env=env, cwd=tmp_path
        )
        assert code == 0, err
        code, out, err = await buzz_async("mem", "get", "core", env=env, cwd=tmp_path)
        assert (code, out) == (0, "remember this\n"), err
        assert bunker.answered("connect") == 4 and bunker.answered("nip44_decrypt") == 1
        assert (tmp_path / ".buzz" / "nip46-client.key").is_file()
        assert bunker.secret not in out + err


async def test_a_canvas_whose_text_ndk_tags_is_signed_as_built(tmp_path: Path) -> None:
    """NDK tags a text's hashtags and ``nostr:`` references as it signs: ``buzz canvas set``
    tags them before it asks (NIP-27), so the bunker signs the canvas as built; the stored
    canvas carries its ``t`` and ``p`` tags after its ``h`` tag, and ``buzz canvas get`` still
    reads it.  ``buzz event`` signs exactly what it is given: the bunker's change is refused,
    and the event given those tags is signed as built."""
    key, carol = SecretKey.generate(), SecretKey.generate().public_key
    text = f"# Plan\n- ship the #deploy with nostr:{carol.bech32}\n"
    tagged = (("p", carol.hex), ("t", "deploy"))
    async with local_relay() as relay, ndk_bunker([relay.url], key) as bunker:
        env = {"BUZZ_BUNKER": bunker.uri, "BUZZ_RELAYS": relay.url}
        code, out, err = await buzz_async(
            "canvas", "set", "--channel", "eng", text, env=env, cwd=tmp_path
        )
        assert code == 0, err
        stored = (await RelayPool([relay.url], timeout=5).query({"ids": [out.strip()]})).events
        [canvas] = stored
        assert (canvas.kind, canvas.pubkey) == (40100, key.public_key.hex)
        assert (canvas.content, canvas.tags) == (text, (("h", "eng"), *tagged))
        code, out, err = await buzz_async(
            "canvas", "get", "--channel", "eng", "--author", key.public_key.bech32,
            env={"BUZZ_RELAYS": relay.url}, cwd=tmp_path,
        )  # fmt: skip
        assert (code, out) == (0, text), err
        note = f"ask nostr:{carol.bech32} about the #deploy"
        code, out, err = await buzz_async("event", "-k", "1", "-c", note, env=env, cwd=tmp_path)
        assert code != 0 and out == "" and "signed a different event" in err, err
        given = ("-p", carol.hex, "-t", "t=deploy")
        code, out, err = await buzz_async(
            "event", "-k", "1", "-c", note, *given, env=env, cwd=tmp_path
        )
        assert code == 0, err
        event = Event.from_json(out)
        assert event.content == note and sorted(event.tags) == sorted(tagged)
        assert bunker.answered("sign_event") == 3


async def test_a_bunker_that_stops_answering_fails_the_turn_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """The bunker hangs while a turn's reply waits for its signature: the turn fails with the
    signer's typed error (``turn_failed``), nothing is published under the agent's key, and once
    the bunker answers again the queue runs the turn again: the mention is answered once, with
    its metric."""
    agent, owner = SecretKey.generate(), SecretKey.generate()
    async with (
        local_relay() as relay,
        local_relay() as bunker_relay,
        ndk_bunker([bunker_relay.url], agent) as bunker,
    ):
        as_owner = RelayPool([relay.url], secret=owner, timeout=5)
        (tmp_path / "buzz.toml").write_text(
            f'owner = "{owner.public_key.bech32}"\nrelays = ["{relay.url}"]\n'
            'state_dir = "state"\n[signer]\ntimeout = 2\n'
            f'[agent]\ncommand = "{sys.executable}"\n'
            'args = ["-m", "nostr_buzz.demo.agent", "--delay", "0"]\n'
        )
        (tmp_path / "buzz.toml").chmod(0o600)
        feed = tmp_path / "state" / "diagnostics.jsonl"
        async with bot_process(["--bunker", bunker.uri], tmp_path) as (bot, lines):
            await until("the start line", _line(lines, "buzz: agent "))
            bunker.stop_answering()
            mention = chat(owner, int(time.time()), content="hello?", channel="eng", mention=agent)
            assert (await as_owner.publish(mention)).ok

            async def failed() -> list[dict[str, Any]] | None:
                text = feed.read_text() if feed.exists() else ""
                records = [json.loads(line) for line in text.splitlines()]
                return [r for r in records if r["kind"] == "turn_failed"] or None

            [failure] = await until("the failed turn", failed)
            assert "SignerError" in failure["payload"]["error"]
            mine = {"authors": [agent.public_key.hex]}
            # Nothing of the turn half-published (the bot's relay lists, signed at its start
            # before the bunker hung, may be there).
            turn_kinds = {"authors": [agent.public_key.hex], "kinds": [9, METRIC_KIND]}
            assert (await as_owner.query(turn_kinds)).events == []
            bunker.answer_again()

            async def answered() -> list[Event] | None:
                got = (await as_owner.query(mine)).events
                replies = [e for e in got if e.kind == 9 and mention.id in e.tag_values("e")]
                metrics = [e for e in got if e.kind == METRIC_KIND]
                return got if replies and metrics else None

            published = await until("the retried turn's reply and metric", answered)
            bot.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(bot.wait(), WAIT) == 0
    replies = [e for e in published if e.kind == 9 and mention.id in e.tag_values("e")]
    assert len(replies) == 1
    [metric] = [open_metric_event(owner, e) for e in published if e.kind == METRIC_KIND]
    assert metric.outcome == "success" and mention.id in metric.triggering_event_ids
