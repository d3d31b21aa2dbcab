"""docs/cli.md (relay client, pool, NIP-42, the ``buzz`` conventions) and docs/events.md's rules on
event references and secret-free messages, checked from the documents' text against hostile relays.

Expected values are computed here, independently: canonical JSON with ``json.dumps`` in the
canonical key order, AUTH events checked field by field.  Relays are real WebSocket servers on
127.0.0.1 (:mod:`hostile_relay2`, scripted per test) or refused/tarpit ports.  CLI cases call
``main(argv)`` in-process while the relays live on a background loop; one case runs ``buzz``
as a real subprocess under the C locale.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hostile_relay import tarpit
from hostile_relay2 import Conn, ScriptedRelay, scripted_relay
from relays import free_port

from nostr_buzz.cli.app import main
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip19

T = TypeVar("T")

ALICE = SecretKey.from_str("5c" * 32)
MALLORY = SecretKey.from_str("6d" * 32)
WAIT = 20.0
KEYS = ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")

NOTE = sign_event(ALICE, kind=1, content="héllo / <b> \u2028 ünïcode 🐝", created_at=1_700_000_123)
OTHER = sign_event(MALLORY, kind=1, content="an impostor", created_at=1_700_000_124)


def canonical(event: Event) -> str:
    """docs/events.md's canonical output, written independently of ``Event.to_json``."""
    d = event.to_dict()
    return json.dumps({k: d[k] for k in KEYS}, separators=(",", ":"), ensure_ascii=False)


def wire(event: Event, **changes: Any) -> dict[str, Any]:
    d = dict(event.to_dict())
    d.update(changes)
    return d


def forged_sig(event: Event) -> dict[str, Any]:
    sig = bytearray(bytes.fromhex(event.sig))
    sig[7] ^= 0x10
    return wire(event, sig=sig.hex())


def squatter(event: Event) -> dict[str, Any]:
    """Same id and signature, different content: an event squatting another's id."""
    return wire(event, content=event.content + " (edited by the relay)")


def refused_url() -> str:
    return f"ws://127.0.0.1:{free_port()}"


def now() -> float:
    return time.monotonic()


# --- scripts ---------------------------------------------------------------------------------


def serving(*events: Any, eose: bool = True, closed: str | None = None, other_sub: bool = False):  # type: ignore[no-untyped-def]
    """A script answering every REQ with ``events`` (Event or wire dict), then EOSE/CLOSED."""

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], True, ""])
            return
        if msg[0] != "REQ":
            return
        sub = "not-" + msg[1] if other_sub else msg[1]
        for ev in events:
            await conn.send(["EVENT", sub, ev.to_dict() if isinstance(ev, Event) else ev])
        if eose:
            await conn.send(["EOSE", msg[1]])
        if closed is not None:
            await conn.send(["CLOSED", msg[1], closed])

    return script


# --- relay client: frames ---------------------------------------------------------------------


async def test_malformed_frames_are_counted_and_never_affect_results() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] != "REQ":
            return
        sub = msg[1]
        await conn.send(["EVENT", "someone-else", NOTE.to_dict()])  # other subscription
        await conn.send(["EVENT", "someone-else", forged_sig(NOTE)])  # not even verified
        await conn.send(["WHATEVER", sub, 1])  # unknown type
        await conn.send({"EVENT": sub})  # not an array
        await conn.send('"EVENT"')  # not an array either
        await conn.send("[1, 2")  # not JSON
        await conn.send(["EOSE", "someone-else"])  # must not end our query
        await conn.send(["CLOSED", "someone-else", "blocked: no"])  # nor this
        await conn.send(["EVENT", sub, NOTE.to_dict()])
        await conn.send(["EOSE", sub])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as client:
        result = await client.query({"ids": [NOTE.id]})
    assert result.finished and result.error is None
    assert [e.id for e in result.events] == [NOTE.id]
    assert result.rejected_count == 0  # frames for other subscriptions are malformed, not failures
    assert result.malformed_frames == 8


async def test_notice_flood_is_harmless() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            for i in range(3000):
                await conn.send(["NOTICE", f"spam {i} " + "x" * 100])
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])
            await conn.send(["EOSE", msg[1]])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as client:
        result = await client.query({"ids": [NOTE.id]})
        assert len(client.notices) <= 100  # bounded memory
    assert result.finished and [e.id for e in result.events] == [NOTE.id]


async def test_huge_frame_fails_that_relay_only_and_quickly() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["NOTICE", "x" * (3 << 20)])
            await conn.send(["EOSE", msg[1]])

    async with scripted_relay(script) as bad, scripted_relay(serving(NOTE)) as good:
        start = now()
        result = await RelayPool([bad.url, good.url], timeout=5).query({"ids": [NOTE.id]})
        assert now() - start < 4
    assert [e.id for e in result.events] == [NOTE.id]
    assert not result.per_relay[bad.url].finished and result.per_relay[bad.url].error


async def test_verification_failures_are_dropped_counted_and_named() -> None:
    extra = wire(NOTE, seen_on="wss://elsewhere", relay_note={"a": 1})
    async with (
        scripted_relay(
            serving(forged_sig(NOTE), squatter(NOTE), OTHER, wire(NOTE, id="ab" * 32), extra)
        ) as relay,
        RelayClient(relay.url, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
    assert result.finished
    assert [canonical(e) for e in result.events] == [canonical(NOTE)]  # the extra-field copy
    assert result.rejected_count == 4
    assert result.rejected[:2] == ["bad_signature", "bad_id"]
    assert "bad_id" in result.rejected[3] or "match" in result.rejected[3]
    assert any("match" in r for r in result.rejected)  # OTHER: valid, not the id asked for


async def test_extra_fields_and_key_order_never_reach_the_canonical_output() -> None:
    d = NOTE.to_dict()
    shuffled = {"sig": d["sig"], "extra": [1, 2], **{k: d[k] for k in reversed(KEYS[:-1])}}
    async with (
        scripted_relay(serving(shuffled)) as relay,
        RelayClient(relay.url, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
    assert [e.to_json() for e in result.events] == [canonical(NOTE)]


async def test_event_frames_that_are_not_events_are_verification_failures() -> None:
    # "fails Event.from_json for any reason": not an object, missing fields, wrong types.
    junk: list[Any] = [42, "text", None, [NOTE.to_dict()], {"id": NOTE.id}, wire(NOTE, kind="1")]
    async with scripted_relay(serving(*junk)) as relay, RelayClient(relay.url, timeout=5) as c:
        result = await c.query({"ids": [NOTE.id]})
    assert result.finished and result.events == []
    assert result.rejected_count == len(junk)


# --- relay client: ending a query -------------------------------------------------------------


async def test_query_ends_at_eose_without_waiting_for_closed() -> None:
    async with scripted_relay(serving(NOTE)) as relay, RelayClient(relay.url, timeout=8) as c:
        start = now()
        result = await c.query({"ids": [NOTE.id]})
        assert now() - start < 2
    assert result.finished and result.error is None


@pytest.mark.parametrize(
    ("reason", "finished"),
    [("", True), ("blocked: not for you", False), ("error: shutting down", False)],
)
async def test_closed_with_empty_reason_is_normal_a_prefixed_one_a_failure(
    reason: str, finished: bool
) -> None:
    async with (
        scripted_relay(serving(NOTE, eose=False, closed=reason)) as relay,
        RelayClient(relay.url, timeout=5) as client,
    ):
        start = now()
        result = await client.query({"ids": [NOTE.id]})
        assert now() - start < 2
    assert result.finished is finished
    assert (result.error is None) is finished
    if not finished:
        assert reason in (result.error or "")


async def test_connection_cut_mid_frame_is_a_relay_failure_not_a_crash() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])
            conn.cut_mid_frame()

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as c:
        start = now()
        result = await c.query({"ids": [NOTE.id]})
        assert now() - start < 2
    assert not result.finished and result.error


async def test_an_ids_query_may_end_once_every_id_is_served_without_eose() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])  # and never an EOSE

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=1) as c:
        start = now()
        early = await c.query({"ids": [NOTE.id]}, end_when_ids_served=True)
        assert now() - start < 0.9  # well inside the timeout
        waited = await c.query({"ids": [NOTE.id]})  # by default, EOSE or the timeout ends it
    assert early.finished and [e.id for e in early.events] == [NOTE.id]
    assert not waited.finished and waited.error == "timeout"
    assert [e.id for e in waited.events] == [NOTE.id]


async def test_accept_then_silence_costs_at_most_the_timeout() -> None:
    async with tarpit() as url, scripted_relay() as silent:
        start = now()
        result = await RelayPool([url, silent.url], timeout=1.0).query({"ids": [NOTE.id]})
        took = now() - start
    assert took < 2.6  # the timeout plus closing the sockets
    assert all(not r.finished and r.error for r in result.per_relay.values())


@pytest.mark.parametrize("url", ["refused", "ws://no-such-host.invalid:7447"])
async def test_unreachable_relay_is_an_error_result_not_an_exception(url: str) -> None:
    target = refused_url() if url == "refused" else url
    result = await RelayPool([target], timeout=2).query({"ids": [NOTE.id]})
    assert not result.per_relay[target].finished and result.per_relay[target].error


# --- publishing ------------------------------------------------------------------------------


async def test_ok_for_another_event_id_is_not_our_verdict() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", OTHER.id, True, ""])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=0.7) as c:
        start = now()
        verdict = await c.publish(NOTE)
        assert now() - start < 2
    assert not verdict.accepted and not verdict.ok


async def test_ok_with_empty_id_is_matched_to_the_pending_publish() -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", "", False, "blocked: you are not welcome"])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as c:
        start = now()
        verdict = await c.publish(NOTE)
        assert now() - start < 2
    assert not verdict.accepted and verdict.prefix == "blocked:"


@pytest.mark.parametrize(
    ("message", "accepted", "duplicate", "prefix"),
    [
        ("", True, False, None),
        ("duplicate: have it", True, True, "duplicate:"),
        ("pow: difficulty 30", False, False, "pow:"),
        ("rate-limited: slow down", False, False, "rate-limited:"),
        ("restricted: members only", False, False, "restricted:"),
        ("invalid: bad tags", False, False, "invalid:"),
    ],
)
async def test_publish_reports_the_relays_verdict_and_prefix(
    message: str, accepted: bool, duplicate: bool, prefix: str | None
) -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], accepted, message])

    async with scripted_relay(script) as relay, RelayClient(relay.url, timeout=5) as c:
        verdict = await c.publish(NOTE)
    assert (verdict.accepted, verdict.duplicate, verdict.prefix) == (accepted, duplicate, prefix)
    assert verdict.ok is accepted


async def test_pool_publish_fans_out_and_reports_each_relay() -> None:
    async def refuse(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], False, "blocked: no"])

    async with scripted_relay(serving()) as yes, scripted_relay(refuse) as no, tarpit() as pit:
        dead = refused_url()
        start = now()
        result = await RelayPool([yes.url, no.url, pit, dead], timeout=1).publish(NOTE)
        assert now() - start < 2.6
    assert result.ok and result.accepted == [yes.url]
    assert set(result.failed) == {no.url, pit, dead}
    assert result.verdicts[no.url].prefix == "blocked:"


# --- NIP-42 ------------------------------------------------------------------------------------


def check_auth_event(frame: list[Any], url: str, challenge: str, key: SecretKey) -> None:
    assert frame[0] == "AUTH" and len(frame) == 2
    event = Event.from_dict(frame[1])  # a real, signed event
    assert event.kind == 22242
    assert event.pubkey == key.public_key.hex
    assert ("relay", url) in event.tags and ("challenge", challenge) in event.tags
    assert abs(event.created_at - time.time()) < 600


def auth_gate(*, on_connect: bool, ack: bool, late: bool = False, always: bool = False):  # type: ignore[no-untyped-def]
    """Refuse REQ and EVENT with ``auth-required:`` until an AUTH arrives (``always``: forever)."""
    state = {"authed": False}

    async def connect(relay: ScriptedRelay, conn: Conn) -> None:
        if on_connect:
            await conn.send(["AUTH", "chal-on-connect"])

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "AUTH":
            state["authed"] = True
            if ack:
                await conn.send(["OK", msg[1]["id"], True, ""])
            return
        if not state["authed"] or always:
            if not on_connect and not late:
                await conn.send(["AUTH", "chal-on-demand"])
            if msg[0] == "REQ":
                await conn.send(["CLOSED", msg[1], "auth-required: who are you?"])
            elif msg[0] == "EVENT":
                await conn.send(["OK", msg[1]["id"], False, "auth-required: who are you?"])
            if late:
                await conn.send(["AUTH", "chal-late"])
            return
        await serving(NOTE)(relay, conn, msg)

    return connect, script


@pytest.mark.parametrize(
    ("on_connect", "ack", "late", "challenge"),
    [
        (True, True, False, "chal-on-connect"),
        (False, True, False, "chal-on-demand"),
        (False, True, True, "chal-late"),
        (True, False, False, "chal-on-connect"),  # never acknowledges the AUTH
    ],
)
async def test_auth_required_query_authenticates_once_and_retries(
    on_connect: bool, ack: bool, late: bool, challenge: str
) -> None:
    connect, script = auth_gate(on_connect=on_connect, ack=ack, late=late)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=6) as client,
    ):
        start = now()
        result = await client.query({"ids": [NOTE.id]})
        assert now() - start < 3.5  # a missing AUTH OK costs a short wait, not the timeout
    assert result.finished and [e.id for e in result.events] == [NOTE.id]
    assert len(relay.frames("AUTH")) == 1 and len(relay.frames("REQ")) == 2
    check_auth_event(relay.frames("AUTH")[0], relay.url, challenge, ALICE)


async def test_auth_retry_happens_only_once() -> None:
    connect, script = auth_gate(on_connect=True, ack=True, always=True)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
        verdict = await client.publish(NOTE)
    assert not result.finished and "auth-required:" in (result.error or "")
    assert not verdict.accepted and verdict.prefix == "auth-required:"
    assert len(relay.frames("REQ")) == 2 and len(relay.frames("EVENT")) == 2
    assert len(relay.frames("AUTH")) <= 2  # at most one per refused request


async def test_auth_required_publish_authenticates_and_resends() -> None:
    connect, script = auth_gate(on_connect=False, ack=True)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=5) as client,
    ):
        verdict = await client.publish(NOTE)
    assert verdict.accepted
    assert len(relay.frames("EVENT")) == 2 and len(relay.frames("AUTH")) == 1
    check_auth_event(relay.frames("AUTH")[0], relay.url, "chal-on-demand", ALICE)


async def test_no_key_or_a_hint_relay_never_authenticates() -> None:
    connect, script = auth_gate(on_connect=True, ack=True)
    async with (
        scripted_relay(script, connect) as relay,
        RelayClient(relay.url, timeout=3) as client,
    ):
        keyless = await client.query({"ids": [NOTE.id]})
        async with RelayClient(relay.url, secret=ALICE, auth=False, timeout=3) as client:
            hint = await client.query({"ids": [NOTE.id]})
        pooled = await RelayPool([], secret=ALICE, timeout=3).query(
            {"ids": [NOTE.id]}, extra_urls=[relay.url, "https://not-a-relay.example", "nonsense"]
        )
    assert not keyless.finished and not hint.finished
    assert list(pooled.per_relay) == [relay.url]  # non-ws hints skipped
    assert not pooled.per_relay[relay.url].finished
    assert relay.frames("AUTH") == []


async def test_a_challenge_on_connect_alone_triggers_no_auth() -> None:
    async def connect(relay: ScriptedRelay, conn: Conn) -> None:
        await conn.send(["AUTH", "unused"])

    async with (
        scripted_relay(serving(NOTE), connect) as relay,
        RelayClient(relay.url, secret=ALICE, timeout=5) as client,
    ):
        result = await client.query({"ids": [NOTE.id]})
        verdict = await client.publish(NOTE)
    assert result.finished and verdict.accepted
    assert relay.frames("AUTH") == []


async def test_live_subscription_resumes_with_since_and_deduplicates() -> None:
    e1, e2, e3 = (sign_event(ALICE, kind=1, content=f"m{i}", created_at=100 * i) for i in (1, 2, 3))

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] != "REQ":
            return
        if relay.connections == 1:
            for ev in (e1, e2):
                await conn.send(["EVENT", msg[1], ev.to_dict()])
            await conn.send(["EOSE", msg[1]])
            conn.cut_mid_frame()
        else:
            for ev in (e2, e3):  # e2 again: a resumed subscription re-serves the last second
                await conn.send(["EVENT", msg[1], ev.to_dict()])
            await conn.send(["EOSE", msg[1]])

    got: list[str] = []
    async with scripted_relay(script) as relay:
        client = RelayClient(relay.url, timeout=5)
        try:
            async with asyncio.timeout(10):
                async for event in client.subscribe({"kinds": [1]}, reconnect_delay=0.05):
                    got.append(event.id)
                    if len(got) == 3:
                        break
        finally:
            await client.close()
    assert got == [e1.id, e2.id, e3.id]
    reqs = relay.frames("REQ")
    assert reqs[0][2] == {"kinds": [1]}
    assert reqs[1][2] == {"kinds": [1], "since": 200}


# --- pool -------------------------------------------------------------------------------------


async def test_pool_merges_duplicates_and_one_dead_relay_never_stalls_the_others() -> None:
    async with (
        scripted_relay(serving(NOTE, OTHER)) as a,
        scripted_relay(serving(OTHER, NOTE)) as b,
        tarpit() as pit,
    ):
        start = now()
        result = await RelayPool([a.url, b.url, pit], timeout=1).query({"kinds": [1]})
        assert now() - start < 2.6
    assert sorted(e.id for e in result.events) == sorted([NOTE.id, OTHER.id])
    assert result.per_relay[a.url].finished and result.per_relay[b.url].finished
    assert not result.per_relay[pit].finished


# --- the CLI ------------------------------------------------------------------------------------


class BackgroundLoop:
    """Relays on an asyncio loop in a daemon thread, for in-process ``main(argv)`` calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._exits: list[AbstractAsyncContextManager[Any]] = []

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def relay(self, script: Any = None, on_connect: Any = None) -> ScriptedRelay:
        manager = scripted_relay(script or serving(), on_connect)
        value = self.call(manager.__aenter__())
        self._exits.append(manager)
        return value

    def tarpit(self) -> str:
        manager = tarpit()
        value = self.call(manager.__aenter__())
        self._exits.append(manager)
        return value

    def close(self) -> None:
        while self._exits:
            self.call(self._exits.pop().__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


@pytest.fixture(scope="module")
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    try:
        yield loop
    finally:
        loop.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ambient configuration: an empty working directory and no BUZZ_* variables."""
    for name in list(os.environ):
        if name.startswith("BUZZ_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def buzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    if code != 0:
        assert out == "", f"stdout must be empty on exit {code}"
    return code, out, err


def raw(capsys: pytest.CaptureFixture[str], ref: str, *relays: str, timeout: str = "3"):  # type: ignore[no-untyped-def]
    args = ["messages", "raw", "--event", ref, "--timeout", timeout]
    for url in relays:
        args += ["--relay", url]
    return buzz(capsys, *args)


@pytest.fixture(scope="module")
def good(bg: BackgroundLoop) -> ScriptedRelay:
    return bg.relay(serving(NOTE))


@pytest.fixture(scope="module")
def empty(bg: BackgroundLoop) -> ScriptedRelay:
    return bg.relay(serving())


def test_raw_good_and_forger_prints_the_event_and_names_the_forger(
    bg: BackgroundLoop, good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    forger = bg.relay(serving(forged_sig(NOTE)))
    code, out, err = raw(capsys, NOTE.id, forger.url, good.url)
    assert code == 0
    assert out == canonical(NOTE) + "\n"
    assert forger.url in err and good.url not in err


@pytest.mark.parametrize("bad", ["sig", "squat", "other", "extra-under-wrong-id"])
def test_raw_forgers_only_exit_4_naming_each_relay_and_check(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    first = bg.relay(serving(forged_sig(NOTE)))
    served = {
        "sig": forged_sig(NOTE),
        "squat": squatter(NOTE),
        "other": OTHER.to_dict(),
        "extra-under-wrong-id": wire(OTHER, id=NOTE.id, extra=1),
    }[bad]
    second = bg.relay(serving(served))
    code, out, err = raw(capsys, NOTE.id, first.url, second.url)
    assert code == 4 and out == ""
    assert first.url in err and second.url in err
    assert "bad_signature" in err
    expected_check = {
        "sig": "bad_signature",
        "squat": "bad_id",
        "other": "match",
        "extra-under-wrong-id": "bad_id",
    }[bad]
    assert expected_check in err.split(second.url, 1)[1].splitlines()[0]
    assert NOTE.content not in err and OTHER.content not in err  # never the event JSON


def test_raw_event_for_another_subscription_does_not_count(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(NOTE, other_sub=True))
    code, _, _ = raw(capsys, NOTE.id, relay.url)
    assert code == 3


def test_raw_not_found_plus_unreachable_is_3(
    empty: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = raw(capsys, NOTE.id, empty.url, refused_url())
    assert code == 3 and "not found" in err


def test_raw_closed_with_empty_reason_counts_as_finished(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(eose=False, closed=""))
    assert raw(capsys, NOTE.id, relay.url)[0] == 3


def test_raw_event_then_dropped_connection_still_counts(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["EVENT", msg[1], NOTE.to_dict()])
            conn.cut_mid_frame()

    relay = bg.relay(script)
    code, out, _ = raw(capsys, NOTE.id, relay.url, refused_url())
    assert (code, out) == (0, canonical(NOTE) + "\n")


def test_raw_junk_event_frame_alone_is_exit_4(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving("not an event"))
    code, _, err = raw(capsys, NOTE.id, relay.url)
    assert code == 4 and relay.url in err and "malformed" in err


def test_raw_every_relay_refusing_is_2(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(eose=False, closed="blocked: go away"))
    code, _, err = raw(capsys, NOTE.id, relay.url, refused_url())
    assert code == 2 and "blocked: go away" in err


def test_raw_all_unreachable_is_2_within_the_timeout(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    pit = bg.tarpit()
    start = now()
    code, _, err = raw(capsys, NOTE.id, refused_url(), pit, timeout="1")
    assert code == 2 and now() - start < 3.0
    assert pit in err


def test_raw_closed_after_eose_is_not_waited_for(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    start = now()
    code, out, err = raw(capsys, NOTE.id, good.url, timeout="8")
    assert code == 0 and out == canonical(NOTE) + "\n"
    assert err == ""  # no progress lines when stderr is not a terminal
    assert now() - start < 3


def test_raw_uppercase_hex_and_note_are_accepted(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    for ref in (NOTE.id.upper(), f"  {NOTE.id}  ", nip19.encode("note", NOTE.id)):
        code, out, _ = raw(capsys, ref, good.url)
        assert (code, out) == (0, canonical(NOTE) + "\n"), ref
    req = good.frames("REQ")[-1]
    assert req[2] == {"ids": [NOTE.id]}  # lowercased in the filter


def test_raw_nevent_hints_are_used_unauthenticated_and_never_narrow_the_filter(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    connect, script = auth_gate(on_connect=True, ack=True)
    configured = bg.relay(script, connect)  # demands AUTH and gets it: it was listed
    hint = bg.relay(serving(NOTE))
    gated_hint = bg.relay(*auth_gate(on_connect=True, ack=True)[::-1])
    ref = nip19.encode(
        "nevent",
        NOTE.id,
        relays=("https://web.example", hint.url, "not a url", gated_hint.url),
        author=MALLORY.public_key.hex,
        kind=7,
    )
    code, out, _ = buzz(
        capsys,
        "messages", "raw", "--event", ref, "--relay", configured.url,
        "--key", ALICE.hex, "--timeout", "4",
    )  # fmt: skip
    assert code == 0 and out == canonical(NOTE) + "\n"
    assert len(configured.frames("AUTH")) == 1
    assert hint.frames("AUTH") == [] and gated_hint.frames("AUTH") == []
    for relay in (configured, hint, gated_hint):
        for req in relay.frames("REQ"):
            assert req[2:] == [{"ids": [NOTE.id]}]


def test_raw_nevent_hint_alone_needs_no_configured_relay(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = nip19.encode("nevent", NOTE.id, relays=(good.url,))
    code, out, _ = buzz(capsys, "messages", "raw", "--event", ref, "--timeout", "3")
    assert (code, out) == (0, canonical(NOTE) + "\n")
    only_bad_hints = nip19.encode("nevent", NOTE.id, relays=("https://x.example",))
    code, _, err = buzz(capsys, "messages", "raw", "--event", only_bad_hints)
    assert code == 1
    assert "--relay" in err and "BUZZ_RELAYS" in err and "buzz.toml" in err


NSEC = ALICE.bech32


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "a" * 63,
        "a" * 65,
        "g" * 64,
        "0x" + "a" * 62,
        "note1qqqq",
        ALICE.public_key.bech32,  # npub
        ALICE.public_key.hex[:10] + "zz",
        NSEC,
        NSEC.upper(),
        nip19.encode("nprofile", ALICE.public_key.hex, relays=("wss://r.example",)),
        "nevent1" + "q" * 40,
    ],
)
def test_raw_bad_references_are_exit_1(
    ref: str, good: ScriptedRelay, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = raw(capsys, ref, good.url)
    assert code == 1
    assert NSEC not in err and NSEC.upper() not in err
    if ref.lower().startswith("nsec1"):
        assert "looks like a secret key" in err


def test_secret_values_are_never_echoed(
    good: ScriptedRelay, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A value given as the key (valid or not) is never repeated, whatever option carries it.
    for secret in ("deadbeefcafe0123", NSEC[:-1] + "x", ALICE.hex):
        cases = [
            ("messages", "raw", "--event", secret, "--key", secret, "--relay", good.url),
            ("keys", "show", "--key", secret, "--bogus", secret),
            ("messages", "raw", "--event", NOTE.id, "--relay", secret, "--key", secret),
        ]
        for argv in cases:
            code, _, err = buzz(capsys, *argv)
            # A 64-hex key is also a well-formed event id: that raw query runs (and fails).
            assert code in (1, 4) and secret not in err, argv
        monkeypatch.setenv("BUZZ_PRIVATE_KEY", secret)
        code, _, err = buzz(capsys, "messages", "raw", "--event", secret, "--relay", good.url)
        assert code in (1, 4) and secret not in err
        monkeypatch.delenv("BUZZ_PRIVATE_KEY")


# --- configuration precedence ---------------------------------------------------------------


def write_toml(path: Path, relays: list[str], key: str | None = None) -> None:
    lines = [f"relays = {json.dumps(relays)}"]
    if key is not None:
        lines.append(f'secret_key = "{key}"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)  # it may hold secret_key inline


def test_relay_sources_first_wins_never_merged(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flag, env, toml = bg.relay(serving(NOTE)), bg.relay(serving(NOTE)), bg.relay(serving(NOTE))
    write_toml(Path("buzz.toml"), [toml.url])

    def asked() -> list[ScriptedRelay]:
        return [r for r in (flag, env, toml) if r.frames("REQ")]

    def run(*extra: str) -> None:
        for r in (flag, env, toml):
            r.received.clear()
        assert raw(capsys, NOTE.id, *extra)[0] == 0

    monkeypatch.setenv("BUZZ_RELAYS", f" {env.url} ,")
    run(flag.url)
    assert asked() == [flag]
    run()
    assert asked() == [env]
    for blank in ("", "   ", ","):
        monkeypatch.setenv("BUZZ_RELAYS", blank)
        run()
        assert asked() == [toml]


@pytest.mark.parametrize("where", ["flag", "env", "toml"])
@pytest.mark.parametrize("url", ["http://relay.example", "relay.example", "wss://", "ftp://x"])
def test_non_websocket_relay_urls_are_bad_input(
    where: str, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "env":
        monkeypatch.setenv("BUZZ_RELAYS", url)
    elif where == "toml":
        write_toml(Path("buzz.toml"), [url])
    code, _, _ = raw(capsys, NOTE.id, *([url] if where == "flag" else []))
    assert code == 1


def test_no_relay_anywhere_names_the_three_sources(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_RELAYS", " ")
    write_toml(Path("buzz.toml"), [])
    for argv in (
        ("messages", "raw", "--event", NOTE.id),
        ("messages", "get", "--channel", "general"),
        ("messages", "send", "--channel", "general", "--key", ALICE.hex, "hi"),
    ):
        code, _, err = buzz(capsys, *argv)
        assert code == 1, argv
        assert "--relay" in err and "BUZZ_RELAYS" in err and "buzz.toml" in err, argv


def test_key_sources_first_wins(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [SecretKey.from_str(c * 64) for c in "123"]
    write_toml(Path("buzz.toml"), [], key=keys[2].hex)
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", keys[1].bech32)

    def shown(*extra: str) -> str:
        code, out, _ = buzz(capsys, "keys", "show", "--json", *extra)
        assert code == 0
        hex_key: str = json.loads(out)["hex"]
        return hex_key

    assert shown("--key", keys[0].hex.upper()) == keys[0].public_key.hex
    assert shown() == keys[1].public_key.hex
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", "  ")
    assert shown() == keys[2].public_key.hex
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", "not a key")
    assert buzz(capsys, "keys", "show")[0] == 1  # a bad env key is not skipped for the file


# --- conventions --------------------------------------------------------------------------------


HELP_PATHS = [
    (),
    ("messages",),
    ("messages", "raw"),
    ("messages", "get"),
    ("messages", "thread"),
    ("messages", "send"),
    ("keys",),
    ("keys", "generate"),
    ("keys", "show"),
    ("relay",),
    ("compile",),
    ("manifest",),
    ("manifest", "diff"),
]


@pytest.mark.parametrize("path", HELP_PATHS)
def test_help_everywhere_is_exit_0(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = buzz(capsys, *path, "--help")
    assert code == 0 and "Usage" in out


@pytest.mark.parametrize(
    "argv",
    [
        ("--bogus",),
        ("messages", "raw", "--bogus", "--event", "a" * 64),
        ("messages", "raw"),  # missing --event
        ("messages", "raw", "--event"),  # missing value
        ("messages", "raw", "--event", "a" * 64, "--timeout", "soon"),
        ("messages", "nosuchcommand"),
        ("keys", "show", "--key"),
        ("relay", "--port", "99999"),
        ("messages", "raw", "--event", "a" * 64, "--timeout", "inf"),
        ("messages", "raw", "--event", "a" * 64, "--timeout", "nan"),
        ("messages", "raw", "--event", "a" * 64, "--timeout", "0"),
        ("messages",),
        (),
    ],
)
def test_usage_errors_are_exit_1_with_empty_stdout(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = buzz(capsys, *argv)
    assert code == 1 and out == ""


async def test_a_single_url_string_is_one_relay() -> None:
    async with scripted_relay(serving(NOTE)) as relay:
        pool = RelayPool(relay.url, timeout=3)
        result = await pool.query({"ids": [NOTE.id]})
    assert pool.urls == [relay.url] and [e.id for e in result.events] == [NOTE.id]


def test_public_signatures() -> None:
    params = inspect.signature(RelayPool).parameters
    assert "timeout" in params and "secret" in params
    assert "timeout" in inspect.signature(RelayClient).parameters


def test_subprocess_raw_prints_utf8_under_the_c_locale(good: ScriptedRelay) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUZZ_", "LC_", "PYTHON"))}
    env.update({"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"})
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "messages", "raw", "--event", NOTE.id,
         "--relay", good.url, "--timeout", "5"],
        capture_output=True, env=env, timeout=WAIT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (canonical(NOTE) + "\n").encode("utf-8")


def test_help_and_version_never_read_configuration(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_RELAYS", "http://not-a-relay")
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", "garbage-key-value")
    Path("buzz.toml").write_text("this is [not toml", encoding="utf-8")
    for argv in (("messages", "raw", "--help"), ("keys", "show", "--help")):
        assert buzz(capsys, *argv)[0] == 0
    code, out, _ = buzz(capsys, "--version")
    assert code == 0 and out.startswith("buzz ")  # asked-for data goes to stdout


def test_send_refused_everywhere_is_2_with_each_reason(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    async def empty_id(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", "", False, "blocked: not you"])

    async def limited(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", msg[1]["id"], False, "rate-limited: slow down"])

    a, b = bg.relay(empty_id), bg.relay(limited)
    code, _, err = buzz(
        capsys,
        "messages", "send", "--channel", "general", "--key", ALICE.hex,
        "--relay", a.url, "--relay", b.url, "--timeout", "3", "hello",
    )  # fmt: skip
    assert code == 2
    assert "blocked: not you" in err and "rate-limited: slow down" in err
    assert len(a.frames("EVENT")) == 1 and len(b.frames("EVENT")) == 1


async def test_closing_leaves_no_task_running() -> None:
    before = asyncio.all_tasks()

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["NOTICE", "hi"])  # and never EOSE

    async with scripted_relay(script) as relay:
        client = RelayClient(relay.url, timeout=0.3)
        await client.query({"kinds": [1]})
        await client.publish(NOTE)
        await client.close()
        await RelayPool([relay.url, refused_url()], timeout=0.3).query({"kinds": [1]})
    leftover = [t for t in asyncio.all_tasks() - before if t is not asyncio.current_task()]
    assert leftover == []


_STALLED_DNS = """
import socket, sys, time
real = socket.getaddrinfo
def stalled(host, *args, **kwargs):
    if host == "stalled-dns.invalid":
        time.sleep(8)  # a DNS server that never answers in time
    return real(host, *args, **kwargs)
socket.getaddrinfo = stalled
from nostr_buzz.cli.app import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_stalled_dns_lookup_costs_at_most_the_timeout() -> None:
    # Name resolution runs in a thread that cannot be cancelled; the command must not wait for
    # it at exit (docs/cli.md: --timeout bounds connecting plus querying).
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    start = now()
    proc = subprocess.run(
        [sys.executable, "-c", _STALLED_DNS, "messages", "raw", "--event", NOTE.id,
         "--relay", "ws://stalled-dns.invalid:7447", "--timeout", "1"],
        capture_output=True, env=env, timeout=WAIT, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == b""
    assert now() - start < 5


def test_relay_text_on_stderr_cannot_drive_the_terminal(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    relay = bg.relay(serving(eose=False, closed="blocked: \x1b[2J\nbuzz: all good\r"))
    code, _, err = raw(capsys, NOTE.id, relay.url)
    assert code == 2 and "blocked:" in err
    assert "\x1b" not in err and "\r" not in err and "\nbuzz: all good" not in err


@pytest.mark.parametrize("url", [NSEC, NSEC.upper(), "http://" + NSEC, "wss://x:" + NSEC])
def test_relay_url_errors_never_repeat_a_secret(url: str) -> None:
    for make in (lambda: RelayPool([url]), lambda: RelayClient(url)):
        with pytest.raises(ValueError) as info:
            make()
        assert isinstance(info.value, BuzzError)
        assert NSEC not in str(info.value).lower()
