"""Addresses, not spellings: strangers' relay lists against a real ``buzz run``.

Strangers publish kind 10002 and kind 10050 lists naming this host in every spelling the
WebSocket client resolves to it (full-width and circled letters and digits, the decimal, octal,
hex and short IPv4 forms, IPv4-mapped IPv6, the machine's own host name), and the link-local and
carrier-grade NAT networks the same ways; then each mentions the bot in a channel and writes
to it privately, so that the bot answers them where their lists say.  Each loopback spelling
points at a listener of its own on this host that counts the connections it accepts: none may
arrive, the diagnostics may name none of the listed relays, and every answer is on the bot's
configured relay (docs/bot.md, "Addresses, not spellings").

A stranger's relay the bot may reach (``[outbox] local_relays`` lets it stand in for a public
one) sends NIP-42 challenges and refuses events until authenticated: the bot delivers there
but never authenticates, while the owner's listed relay, the same script, is answered.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59, nip65
from tests.support.buzz_process import relay_process, run_bot
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER
from tests.support.listeners import Listener, counting_listener
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay
from tests.support.waits import wait_for

#: Spellings of 127.0.0.1 (``{port}`` is a listener's): a list uses its first three relays.
LOOPBACK = (
    (
        "ws://１２７.０.０.１:{port}",
        "ws://１２７．０．０．１:{port}",
        "ws://ｌｏｃａｌｈｏｓｔ:{port}",
    ),
    ("ws://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ:{port}", "ws://ＬｏｃａｌＨｏｓｔ.:{port}", "ws://2130706433:{port}"),
    ("ws://0177.0.0.1:{port}", "ws://0x7f.1:{port}", "ws://127.1:{port}"),
    ("ws://[::ffff:127.0.0.1]:{port}", "ws://[::ffff:7f00:1]:{port}", "ws://0x7F000001:{port}"),
)
#: 169.254.169.254 (link-local: cloud metadata) and 100.64.0.1 (carrier-grade NAT), spelt so.
ELSEWHERE = (
    ("ws://１６９.２５４.１６９.２５４/", "ws://2852039166/", "ws://0xa9.0xfe.0xa9.0xfe/"),
    ("ws://１００.６４.０.１/", "ws://1681915905/", "ws://0144.0100.0.1/"),
    ("ws://[::ffff:169.254.169.254]/", "ws://[64:ff9b::a9fe:a9fe]/", "ws://[::ffff:6440:1]/"),
)


def host_name_address() -> str:
    """The address this machine's own host name resolves to: a name that passes any check of
    spellings, and must be caught on the address it resolves to."""
    name = socket.gethostname()
    address = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    assert ipaddress.ip_address(address).is_private, (name, address)
    return str(address)


def lists_of(key: SecretKey, urls: list[str], now: int, *, dm_too: bool = True) -> list[Event]:
    """``key``'s kind 10002 (every relay read and write) and kind 10050 naming ``urls``."""
    relays = sign_event(
        key, kind=nip65.KIND, content="", tags=[["r", u] for u in urls], created_at=now
    )
    dm = sign_event(
        key,
        kind=nip17.DM_RELAYS_KIND,
        content="",
        tags=[["relay", u] for u in urls],
        created_at=now,
    )
    return [relays, dm] if dm_too else [relays]


def feed(state: Path) -> list[dict[str, Any]]:
    path = state / "diagnostics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def sent(state: Path) -> set[str]:
    """The events whose answer the bot sent (published, or failed everywhere)."""
    done = ("reply_published", "reply_failed")
    return {r["payload"]["inReplyTo"] for r in feed(state) if r["kind"] in done}


def strings(value: object) -> Iterator[str]:
    """Every string in a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)


@asynccontextmanager
async def bot(relay: str, tmp_path: Path, toml: str) -> AsyncIterator[Path]:
    """``buzz run`` (the demo agent, ``toml`` as its buzz.toml) until its replay is done;
    yields its state directory, and stops it afterwards."""
    (tmp_path / "buzz.toml").write_text(toml, encoding="utf-8")
    state = tmp_path / "state"
    command = f"{sys.executable} -m nostr_buzz.demo.agent --delay 0"
    process = run_bot(relay, command, state, agent=AGENT, owner=OWNER, cwd=tmp_path)
    try:
        await wait_for(
            lambda: any(r["kind"] == "replay_completed" for r in feed(state)),
            "the bot's start",
            timeout=30,
        )
        yield state
    finally:
        process.terminate()
        await asyncio.to_thread(process.communicate, timeout=30)


async def publish(relay: str, *events: Event) -> None:
    for event in events:
        assert (await RelayPool([relay], timeout=5.0).publish(event)).ok


async def speak(relay: str, stranger: SecretKey, now: int) -> tuple[str, str]:
    """A mention in a channel and a private message from ``stranger``; their ids."""
    mention = chat(stranger, now, content="hello bot", channel="eng", mention=AGENT)
    agent = AGENT.public_key.hex
    rumor = nip17.message(stranger.public_key.hex, [agent], "hello privately", created_at=now)
    await publish(relay, mention, nip59.gift_wrap(stranger, AGENT.public_key, rumor, now=now))
    return mention.id, rumor.id


async def test_no_spelling_of_a_local_address_in_a_strangers_lists_is_ever_contacted(
    tmp_path: Path,
) -> None:
    with relay_process() as relay:
        async with AsyncExitStack() as stack:
            listeners: dict[str, Listener] = {}
            lists: list[list[str]] = []
            for group in LOOPBACK:
                urls = []
                for spelling in group:
                    listener = await stack.enter_async_context(counting_listener())
                    urls.append(spelling.format(port=listener.port))
                    listeners[urls[-1]] = listener
                lists.append(urls)
            named = await stack.enter_async_context(counting_listener(host_name_address()))
            by_name = f"ws://{socket.gethostname()}:{named.port}"
            listeners[by_name] = named
            lists += [[by_name], *map(list, ELSEWHERE)]
            strangers = [SecretKey.generate() for _ in lists]
            now = int(time.time())
            for key, urls in zip(strangers, lists, strict=True):
                # A name is refused only when a connection is tried, and a private answer goes
                # to the DM relays alone: that stranger lists it in a kind 10002 only, so that
                # its private answer reaches the bot's write relay.
                await publish(relay, *lists_of(key, urls, now, dm_too=urls != [by_name]))
            async with bot(relay, tmp_path, '[gate]\nmode = "anyone"\n') as state:
                asked = [await speak(relay, key, int(time.time())) for key in strangers]
                # Each answer's first send is over: taken by a relay, or refused by all.
                await wait_for(
                    lambda: {i for pair in asked for i in pair} <= sent(state),
                    "every mention and private message answered",
                    timeout=120,
                )
            reached = {url: n.connections for url, n in listeners.items() if n.connections}
            print("connections reached:", reached)
            assert reached == {}
            # Nothing the strangers listed appears in what the bot reported doing, but the
            # name refused on the address it resolves to.
            listed = {u for urls in lists for u in urls}
            records = feed(state)
            said = {s for record in records for s in strings(record.get("payload"))}
            assert listed & said <= {by_name}
            refused = [r["payload"] for r in records if r["kind"] == "relay_backing_off"]
            assert {r["relay"] for r in refused} <= {by_name}
            assert all("resolves to a local address" in r["reason"] for r in refused)
            # Every answer is on the configured relay: the public ones, and the private ones
            # to each stranger (their DM relays unusable, the bot's write relay instead).
            pool = RelayPool([relay], timeout=5.0)
            replies = await pool.query({"kinds": [9], "authors": [AGENT.public_key.hex]})
            answered = {t for e in replies.events for t in e.tag_values("e")}
            assert {mention for mention, _ in asked} <= answered
            for key in strangers:
                wraps = await pool.query({"kinds": [1059], "#p": [key.public_key.hex]})
                opened = [nip59.open_gift_wrap(key, w) for w in wraps.events]
                assert [o.rumor.pubkey for o in opened] == [AGENT.public_key.hex]


def auth_script() -> Any:
    """A relay that takes an event only on a connection that authenticated (NIP-42): it
    refuses it with ``auth-required:`` until then."""
    authenticated: set[int] = set()

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "AUTH":
            authenticated.add(id(conn.ws))
            await conn.send(["OK", msg[1]["id"], True, ""])
        elif msg[0] == "EVENT":
            ok = id(conn.ws) in authenticated
            await conn.send(["OK", msg[1]["id"], ok, "" if ok else "auth-required: who are you?"])
        elif msg[0] == "REQ":
            await conn.send(["EOSE", msg[1]])

    return script


async def challenge(relay: ScriptedRelay, conn: Conn) -> None:
    """Every connection is challenged at once."""
    await conn.send(["AUTH", "challenge-for-this-connection"])


async def test_a_relay_only_a_stranger_names_gets_no_auth_answer(tmp_path: Path) -> None:
    with relay_process() as relay:
        async with (
            scripted_relay(auth_script(), challenge) as theirs,
            scripted_relay(auth_script(), challenge) as owners,
        ):
            stranger = SecretKey.generate()
            now = int(time.time())
            await publish(
                relay,
                sign_event(
                    stranger, kind=nip65.KIND, content="", tags=[["r", theirs.url]], created_at=now
                ),
                sign_event(
                    OWNER, kind=nip65.KIND, content="", tags=[["r", owners.url]], created_at=now
                ),
            )
            # Both stand for public relays: the bot may reach them on this host.
            local = json.dumps([theirs.url, owners.url])
            toml = f'[gate]\nmode = "anyone"\n[outbox]\nlocal_relays = {local}\n'
            async with bot(relay, tmp_path, toml) as state:
                mention = chat(
                    stranger, int(time.time()), content="hi", channel="eng", mention=AGENT
                )
                await publish(relay, mention)
                # The reply goes to the stranger's relay, the metric to the owner's.
                await wait_for(
                    lambda: theirs.frames("EVENT") and len(owners.frames("AUTH")) >= 1,
                    "the reply at the stranger's relay and the owner's relay authenticated",
                    timeout=60,
                )
                await wait_for(
                    lambda: any(r["kind"] == "metric_published" for r in feed(state)),
                    "the metric",
                    timeout=60,
                )
            assert theirs.frames("AUTH") == []
            assert theirs.connections >= 1 and theirs.frames("EVENT")
            assert owners.frames("AUTH")
