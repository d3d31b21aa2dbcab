"""``buzz metrics`` against real relays on 127.0.0.1 (LocalRelay in a background loop).

The world is ``scenario()`` of tests/support/metric_scenario.py: two agents, three sessions over
two UTC days, created_at out of turn order, a tampered manifest and four forged metrics.  Then the
conformance cases of docs/metrics.md (publishing and the owner's reader).
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import os
import pty
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nostr_buzz import MetricPublisher, Outbox
from nostr_buzz.cli.app import main
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.metrics_reader import read_metrics
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts
from tests.support import cli
from tests.support.cli import BackgroundLoop, dead_url
from tests.support.hostile_relay import forge_signature, hostile_relay, tarpit
from tests.support.metric_scenario import (
    AGENT_A,
    AGENT_B,
    OWNER,
    Scenario,
    publish_all,
    scenario,
)
from tests.support.metric_wire import payload, wire
from tests.support.relays import free_port, local_relay, start_relay
from tests.support.scripted_relay import Conn, ScriptedRelay, scripted_relay, serving

pytestmark = pytest.mark.usefixtures("no_ambient_config")


@pytest.fixture(scope="module")
def world() -> Scenario:
    return scenario()


@pytest.fixture(scope="module")
def relays(world: Scenario) -> Iterator[tuple[str, str]]:
    """Relay one has everything; relay two a copy of part of it (to be de-duplicated)."""
    bg = BackgroundLoop()
    one = bg.call(start_relay())
    two = bg.call(start_relay())
    try:
        bg.call(publish_all(one.url, world.all))
        bg.call(publish_all(two.url, world.valid[:3] + world.forged[:2]))
        yield one.url, two.url
    finally:
        bg.call(one.close())
        bg.call(two.close())
        bg.close()


def buzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return cli.buzz(capsys, "metrics", *argv)


def as_owner(relays: tuple[str, str]) -> list[str]:
    return ["--relay", relays[0], "--relay", relays[1], "--key", OWNER.bech32, "--timeout", "5"]


# --- output formats ---------------------------------------------------------------------------


def test_json_report_has_totals_turns_ignored_counts_and_flags(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str], world: Scenario
) -> None:
    code, out, err = buzz(capsys, "--format", "json", *as_owner(relays))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["owner"] == OWNER.public_key.hex and doc["since"] is None
    assert set(doc["relays"]) == set(relays)
    assert all(r["finished"] for r in doc["relays"].values())
    # De-duplicated across the two relays; the metric for another owner never arrives.
    assert sorted(t["eventId"] for t in doc["turns"]) == sorted(e.id for e in world.valid)
    assert doc["ignored"] == {
        "total": 4,
        "byReason": {
            "not_for_owner": 1,
            "agent_mismatch": 1,
            "undecryptable": 1,
            "invalid_payload": 1,
        },
    }
    assert doc["manifestMismatches"] == 1
    a1 = [t for t in doc["turns"] if t["sessionId"] == "a1"]
    assert [t["turnSeq"] for t in a1] == [1, 2, 3]
    assert [t["manifestValid"] for t in a1] == [True, False, None]
    assert [t["inputTokens"] for t in a1] == [100, 150, None]
    assert [t["deltaSource"] for t in a1] == ["reported", "cumulative", "cumulative"]
    totals = {(t["day"], t["agent"], t["model"]): t for t in doc["totals"]}
    assert set(totals) == {
        ("2026-12-02", AGENT_A.public_key.hex, "model-a"),
        ("2026-12-01", AGENT_B.public_key.hex, "model-b"),
        ("2026-12-02", AGENT_B.public_key.hex, "model-b"),
    }
    b2 = totals[("2026-12-02", AGENT_B.public_key.hex, "model-b")]
    assert b2 == {
        "day": "2026-12-02",
        "agent": AGENT_B.public_key.hex,
        "model": "model-b",
        "turns": 2,
        "inputTokens": 2001,
        "outputTokens": 202,
        "totalTokens": 2203,
        "costUsd": 0.25,
        "unknownTurns": 0,  # its turn without a cost reported its tokens: usage known
        "cacheReadTokens": None,
        "cacheWriteTokens": None,
    }
    assert "ignored 4 metric event(s)" in err and "manifestValid: false" in err


def test_output_writes_the_report_to_a_file_whole(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str], tmp_path: Path
) -> None:
    code, printed, _ = buzz(capsys, "--format", "csv", *as_owner(relays))
    assert code == 0
    report = tmp_path / "usage.csv"
    report.write_text("an older, longer report\n" * 100)
    code, out, err = buzz(capsys, "--format", "csv", "-o", str(report), *as_owner(relays))
    assert (code, out) == (0, "")
    assert report.read_text() == printed  # replaced whole
    assert f"report written to {report}" in err
    assert [p.name for p in tmp_path.iterdir()] == ["usage.csv"]  # no partial file left
    code, out, err = buzz(capsys, "--output", str(tmp_path), *as_owner(relays))
    assert (code, out) == (1, "")  # a directory is not a file to write


def test_csv_totals_and_turns_have_a_header_line(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, err = buzz(capsys, "--format", "csv", *as_owner(relays))
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == [
        "day",
        "agent",
        "model",
        "turns",
        "inputTokens",
        "outputTokens",
        "totalTokens",
        "costUsd",
        "unknownTurns",
        "cacheReadTokens",
        "cacheWriteTokens",
    ]
    assert len(rows) == 4
    by_day = {(r[0], r[2]): r for r in rows[1:]}
    assert by_day[("2026-12-02", "model-a")][4:8] == ["250", "30", "280", "0.03"]

    code, out, _ = buzz(capsys, "--format", "CSV", "--turns", *as_owner(relays))
    assert code == 0
    turns = list(csv.DictReader(io.StringIO(out)))
    assert len(turns) == 6
    third = next(t for t in turns if t["sessionId"] == "a1" and t["turnSeq"] == "3")
    assert third["inputTokens"] == "" and third["deltaReliable"] == "false"


def test_plain_table_when_stdout_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, _ = buzz(capsys, *as_owner(relays))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "day",
        "agent",
        "model",
        "turns",
        "input",
        "cache",
        "read",
        "cache",
        "write",
        "output",
        "total",
        "cost",
        "USD",
        "unknown",
    ]
    assert len(lines) == 4
    assert "\x1b" not in out  # no terminal escapes when piped
    a_line = next(line for line in lines if "model-a" in line)
    assert AGENT_A.public_key.hex[:12] + "…" in a_line and "0.030000" in a_line

    code, out, _ = buzz(capsys, "--turns", *as_owner(relays))
    assert code == 0
    assert len(out.splitlines()) == 7 and "MISMATCH" in out


# --- windows ----------------------------------------------------------------------------------


def test_since_and_until_as_dates_cover_whole_utc_days(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, _ = buzz(
        capsys,
        "--format",
        "json",
        "--since",
        "2026-12-01",
        "--until",
        "2026-12-01",
        *as_owner(relays),
    )
    assert code == 0
    doc = json.loads(out)
    assert [t["timestamp"] for t in doc["turns"]] == ["2026-12-01T23:59:59.999Z"]
    assert doc["until"] - doc["since"] == 86_399

    code, out, _ = buzz(
        capsys, "--format", "json", "--since", "2026-12-02T10:30:00+00:00", *as_owner(relays)
    )
    assert code == 0
    assert sorted(t["timestamp"] for t in json.loads(out)["turns"]) == [
        "2026-12-02T11:00:00.000Z",
        "2026-12-02T12:00:00.000Z",
    ]


# --- sources and exit codes -------------------------------------------------------------------


def test_key_and_relays_from_the_environment(
    capsys: pytest.CaptureFixture[str],
    relays: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", OWNER.hex)
    monkeypatch.setenv("BUZZ_RELAYS", relays[0])
    code, out, _ = buzz(capsys, "--format", "json")
    assert code == 0
    assert len(json.loads(out)["turns"]) == 6


def test_another_key_reads_nothing_but_still_succeeds(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    code, out, err = buzz(capsys, "--format", "json", "--relay", relays[0], "--key", AGENT_A.hex)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["turns"] == [] and doc["totals"] == []


def test_one_dead_relay_is_a_warning(
    capsys: pytest.CaptureFixture[str], relays: tuple[str, str]
) -> None:
    dead = dead_url()
    code, out, err = buzz(
        capsys,
        "--format",
        "json",
        "--relay",
        relays[0],
        "--relay",
        dead,
        "--key",
        OWNER.hex,
        "--timeout",
        "2",
    )
    assert code == 0
    assert len(json.loads(out)["turns"]) == 6
    assert f"relay {dead}" in err


def test_no_relay_reachable_exits_2_with_empty_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = buzz(
        capsys,
        "--relay",
        dead_url(),
        "--relay",
        dead_url(),
        "--key",
        OWNER.hex,
        "--timeout",
        "2",
    )
    assert (code, out) == (2, "")
    assert "no relay answered" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--since", "last tuesday"], "--since"),
        (["--until", "2026-02-30"], "--until"),
        (["--since", "2026-12-03", "--until", "2026-12-02"], "later than --until"),
        (["--format", "xml"], "--format"),
        (["--format", "html", "--json"], "--json conflicts with --format html"),
        (["-o", "/no/such/dir/report.html", "--relay", "ws://127.0.0.1:9"], "not a directory"),
        (["--relay", "http://127.0.0.1:1"], "ws://"),
        (["--no-such-option"], "No such option"),
    ],
)
def test_bad_input_exits_1_with_empty_stdout(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = buzz(capsys, *argv, "--key", OWNER.hex)
    assert (code, out) == (1, "")
    assert message in err


def test_missing_key_or_relay_exits_1_naming_the_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = buzz(capsys, "--relay", dead_url())
    assert (code, out) == (1, "")
    assert "--key, BUZZ_PRIVATE_KEY" in err
    code, out, err = buzz(capsys, "--key", OWNER.hex)
    assert (code, out) == (1, "")
    assert "--relay, BUZZ_RELAYS" in err


def test_a_bad_key_is_never_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    bad = "nsec1" + "q" * 58
    code, out, err = buzz(capsys, "--relay", dead_url(), "--key", bad)
    assert (code, out) == (1, "")
    assert bad not in err


def test_real_process_prints_no_progress_when_stderr_is_not_a_terminal(
    relays: tuple[str, str], tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env["BUZZ_PRIVATE_KEY"] = OWNER.hex
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "metrics", "--format", "csv", "--relay", relays[0]],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("day,agent,model,")
    assert "reading metrics" not in proc.stderr and "so far" not in proc.stderr
    assert proc.stderr.startswith("buzz: ignored 4 metric event(s)")


def test_buzz_toml_is_used_and_the_environment_wins_over_it(
    capsys: pytest.CaptureFixture[str],
    relays: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    (tmp_path / "buzz.toml").write_text(
        f'secret_key = "{OWNER.hex}"\nrelays = ["{relays[0]}"]\n', encoding="utf-8"
    )
    (tmp_path / "buzz.toml").chmod(0o600)  # it holds secret_key inline
    code, out, err = buzz(capsys, "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)["turns"]) == 6
    monkeypatch.setenv("BUZZ_RELAYS", dead_url())  # replaces the file's list, never merged
    code, out, err = buzz(capsys, "--format", "json", "--timeout", "2")
    assert (code, out) == (2, "")


# =================================================================================================
# Conformance: metric publishing and the owner's reader checked from docs/metrics.md "Publishing:
# never lose a metric" and "The owner's reader (buzz metrics)".
# =================================================================================================


METRIC_OWNER = SecretKey.from_str("1c" * 32)
OTHER_OWNER = SecretKey.from_str("4f" * 32)
AGENT = SecretKey.from_str("2d" * 32)
AGENT2 = SecretKey.from_str("3e" * 32)
KIND = 44200
WAIT = 10.0  # bound on every wait for something a relay or a process does

#: A jitter source that always draws the middle of its range (no jitter).
MIDPOINT = SimpleNamespace(uniform=lambda a, b: (a + b) / 2)


# --- building metrics by hand -----------------------------------------------------------------


def tc(i: int | None, o: int | None, t: int | None, c: float | None) -> dict[str, Any]:
    return {"inputTokens": i, "outputTokens": o, "totalTokens": t, "costUsd": c}


def raw_metric(
    agent: SecretKey,
    payload: dict[str, Any] | str,
    *,
    created_at: int = 1_796_119_200,
    tags: tuple[tuple[str, ...], ...] | None = None,
    encrypt_to: SecretKey = METRIC_OWNER,
    kind: int = KIND,
) -> Event:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    key = nip44.conversation_key(agent, encrypt_to.public_key.hex)
    if tags is None:
        tags = (("p", METRIC_OWNER.public_key.hex), ("agent", agent.public_key.hex))
    return sign_event(
        agent, kind=kind, content=nip44.encrypt(text, key), tags=tags, created_at=created_at
    )


def layers_hash(layers: list[dict[str, Any]]) -> str:
    # 03/README: compact JSON of the layer array, fixed key order, no spaces, then SHA-256.
    body = json.dumps(layers, separators=(",", ":"), ensure_ascii=False).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest()


LAYERS = [
    {
        "order": 0,
        "layer": "system",
        "scope": "global",
        "source": "harness",
        "version": "v1",
        "authority": "host",
        "freshness": "static",
        "estimatedTokens": 40,
        "truncated": False,
    }
]


async def put(url: str, events: list[Event]) -> None:
    pool = RelayPool([url], timeout=5)
    for event in events:
        assert (await pool.publish(event)).ok


async def stored_ids(url: str, *, author: SecretKey = AGENT) -> list[str]:
    result = await RelayPool([url], timeout=5).query(
        {"kinds": [KIND], "authors": [author.public_key.hex]}
    )
    return [e.id for e in result.events]


async def until(predicate: Any, what: str) -> None:
    """Wait (bounded) for a condition another task or process makes true."""
    async with asyncio.timeout(WAIT):
        while not predicate():
            await asyncio.sleep(0.02)


def publisher(tmp_path: Path, relays: list[str], **kw: Any) -> MetricPublisher:
    kw.setdefault("timeout", 2.0)
    return MetricPublisher(
        AGENT, METRIC_OWNER.public_key, tmp_path / "outbox.sqlite3", relays, **kw
    )


def answer(prefix_for: dict[str, Any]) -> Any:
    """A scripted relay that answers each EVENT with ``prefix_for["verdict"]``:
    ``(accepted, message)``; REQs get EOSE."""

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            accepted, message = prefix_for["verdict"]
            await conn.send(["OK", msg[1]["id"], accepted, message])
        elif msg[0] == "REQ":
            await conn.send(["EOSE", msg[1]])

    return script


# --- publishing: the outbox -------------------------------------------------------------------


async def test_the_metric_is_committed_before_the_first_send_and_survives_a_cancel(
    tmp_path: Path,
) -> None:
    db = tmp_path / "outbox.sqlite3"
    seen_in_db: list[bool] = []

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            # Another connection, as a crash-recovering process would see the file right now.
            with sqlite3.connect(db) as other:
                rows = other.execute("SELECT count(*) FROM outbox WHERE id = ?", (msg[1]["id"],))
                seen_in_db.append(rows.fetchone()[0] == 1)
            # ... and never answers: the send is in flight when the turn is cancelled.

    async with scripted_relay(script) as hang:
        pub = publisher(tmp_path, [hang.url], timeout=30.0)
        task = asyncio.create_task(pub.publish(payload()))
        await until(lambda: bool(seen_in_db), "the EVENT frame")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        sent_id = hang.frames("EVENT")[0][1]["id"]
    assert seen_in_db == [True]
    with Outbox(db) as reopened:
        [entry] = reopened.entries()
    assert entry.id == sent_id and entry.event.kind == KIND
    async with local_relay() as good:
        again = publisher(tmp_path, [good.url])
        [report] = await again.flush(now=time.time() + 10**5)  # past any backoff, not the give-up
        assert report.delivered and report.event_id == sent_id
        assert again.pending_count() == 0
        assert await stored_ids(good.url) == [sent_id]  # the same signed event, same id
        again.close()
    pub.close()


async def test_removed_only_when_min_ok_relays_said_ok_true_or_duplicate(tmp_path: Path) -> None:
    behaviour: dict[str, Any] = {"verdict": (False, "blocked: not today")}
    async with local_relay() as good, scripted_relay(answer(behaviour)) as picky:
        pub = publisher(tmp_path, [good.url, picky.url], min_ok=2, rng=MIDPOINT)
        event = (await pub.publish(payload())).event
        assert event is not None
        [entry] = pub.outbox.entries()  # one relay has it, two are needed
        assert entry.id == event.id and entry.attempts == 1
        behaviour["verdict"] = (False, "duplicate: already have it")
        [report] = await pub.flush(now=time.time() + 10**5)  # past any backoff, not the give-up
        assert report.delivered
        assert pub.pending_count() == 0
        # Both attempts sent the very same signed event.
        assert {f[1]["id"] for f in picky.frames("EVENT")} == {event.id}
        assert len(picky.frames("EVENT")) == 2
        pub.close()


@pytest.mark.parametrize(
    "refusal",
    [
        "invalid: bad signature",
        "rate-limited: slow down",
        "blocked: go away",
        "restricted: members only",
        "pow: difficulty 30",
        "error: disk full",
        "",
    ],
)
async def test_a_refusal_keeps_the_metric_and_never_raises(tmp_path: Path, refusal: str) -> None:
    behaviour: dict[str, Any] = {"verdict": (False, refusal)}
    async with scripted_relay(answer(behaviour)) as refusing:
        pub = publisher(tmp_path, [refusing.url])
        event = (await pub.publish(payload())).event
        assert event is not None
        [entry] = pub.outbox.entries()
        assert entry.id == event.id
        assert entry.accepted_by == ()
        assert entry.next_attempt > time.time()  # scheduled for later, not now
        pub.close()


async def test_hanging_and_dead_relays_never_hold_the_turn(tmp_path: Path) -> None:
    async with (
        hostile_relay("silent") as silent,
        hostile_relay("frozen") as frozen,
        hostile_relay("ok_empty_id") as empty_id,
        tarpit() as pit,
    ):
        dead = f"ws://127.0.0.1:{free_port()}"
        pub = publisher(tmp_path, [silent.url, frozen.url, empty_id.url, pit, dead], timeout=0.5)
        started = time.monotonic()
        event = (await pub.publish(payload())).event
        elapsed = time.monotonic() - started
        assert event is not None
        assert elapsed < 4.0  # the timeout plus a bounded grace, never "forever"
        assert [e.id for e in pub.outbox.entries()] == [event.id]
        pub.close()


async def test_retries_back_off_and_nothing_is_sent_before_it_is_due(tmp_path: Path) -> None:
    behaviour: dict[str, Any] = {"verdict": (False, "error: try later")}
    clock = [1_000_000.0]
    async with scripted_relay(answer(behaviour)) as refusing:
        pub = publisher(tmp_path, [refusing.url], clock=lambda: clock[0], rng=MIDPOINT)
        event = (await pub.publish(payload())).event
        assert event is not None
        waits = []
        for attempt in range(1, 5):
            [entry] = pub.outbox.entries()
            assert entry.attempts == attempt
            wait = entry.next_attempt - clock[0]
            assert wait > 0
            waits.append(wait)
            sent = len(refusing.frames("EVENT"))
            assert await pub.flush(now=entry.next_attempt - 0.001) == []  # not due yet
            assert len(refusing.frames("EVENT")) == sent
            clock[0] = entry.next_attempt
            await pub.flush()
        assert waits == sorted(waits) and waits[-1] > waits[0]  # it backs off
        assert {f[1]["id"] for f in refusing.frames("EVENT")} == {event.id}
        pub.close()


async def test_auth_required_gets_a_nip42_auth_then_the_same_event_again(
    tmp_path: Path,
) -> None:
    state = {"authed": False}

    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            if state["authed"]:
                await conn.send(["OK", msg[1]["id"], True, ""])
            else:
                await conn.send(["AUTH", "chal-123"])
                await conn.send(["OK", msg[1]["id"], False, "auth-required: who are you"])
        elif msg[0] == "AUTH":
            auth = Event.from_dict(msg[1])  # verified
            assert auth.kind == 22242 and auth.pubkey == AGENT.public_key.hex
            assert auth.tag_values("challenge") == ["chal-123"]
            assert auth.tag_values("relay") == [relay.url]
            state["authed"] = True
            await conn.send(["OK", auth.id, True, ""])

    async with scripted_relay(script) as guarded:
        pub = publisher(tmp_path, [guarded.url])
        event = (await pub.publish(payload())).event
        assert event is not None
        assert state["authed"]
        assert [f[1]["id"] for f in guarded.frames("EVENT")] == [event.id, event.id]
        assert pub.pending_count() == 0
        pub.close()


async def test_a_local_relay_with_nip42_for_writes_gets_the_metric(tmp_path: Path) -> None:
    async with local_relay(auth="write") as guarded:
        pub = publisher(tmp_path, [guarded.url])
        event = (await pub.publish(payload())).event
        assert event is not None and pub.pending_count() == 0
        pub.close()
        # Read back through a client that authenticates (the relay gates writes only).
        assert await stored_ids(guarded.url) == [event.id]


async def test_the_outbox_files_hold_no_plaintext_and_no_key(tmp_path: Path) -> None:
    markers = ["model-7f3a9c", "session-1b2c", "turn-9e8d", "chan-5a6b", "harness-4c3d"]
    p = MetricPayload(
        harness=markers[4],
        timestamp="2026-12-01T10:00:00.000Z",
        model=markers[0],
        session_id=markers[1],
        turn_id=markers[2],
        channel_id=markers[3],
        turn_seq=1,
        turn=TokenCounts(123456, 654321, 777777, 0.5),
        cumulative=TokenCounts(123456, 654321, 777777, 0.5),
    )
    async with scripted_relay(answer({"verdict": (False, "error: later")})) as refusing:
        pub = publisher(tmp_path, [refusing.url])
        event = (await pub.publish(p)).event
        assert event is not None
        key = nip44.conversation_key(AGENT, METRIC_OWNER.public_key.hex)
        files = [f for f in tmp_path.iterdir() if f.name.startswith("outbox.sqlite3")]
        blob = b"".join(f.read_bytes() for f in files)
        assert event.id.encode() in blob  # the files do hold the entry
        forbidden = [
            *markers,
            "inputTokens",
            "contextManifest",
            "123456",
            AGENT.hex,
            AGENT.bech32,
            key.hex(),
        ]
        for text in forbidden:
            assert text.encode() not in blob, text
        assert key not in blob
        assert bytes.fromhex(AGENT.hex) not in blob
        pub.close()


async def test_the_same_signed_event_twice_is_one_entry_and_one_stored_event(
    tmp_path: Path,
) -> None:
    async with local_relay() as good:
        pub = publisher(tmp_path, [good.url])
        event = raw_metric(AGENT, wire(turn=tc(1, 1, 2, None)))
        first = await pub.submit(event)
        second = await pub.submit(event)
        assert first.delivered and second.delivered  # the second one: OK true or duplicate:
        assert pub.pending_count() == 0
        assert await stored_ids(good.url) == [event.id]
        pub.close()


_CHILD = """
import asyncio, sys
from nostr_buzz import MetricPublisher, MetricPayload, TokenCounts
async def go():
    pub = MetricPublisher(sys.argv[1], sys.argv[2], sys.argv[3], [sys.argv[4]], timeout=60)
    await pub.publish(MetricPayload(harness="goose", timestamp="2026-12-01T10:00:00.000Z",
                                    turn=TokenCounts(1, 2, 3, None)))
asyncio.run(go())
"""


async def test_a_killed_process_leaves_the_metric_for_the_next_one(tmp_path: Path) -> None:
    db = tmp_path / "state" / "outbox.sqlite3"
    async with hostile_relay("silent") as hang:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            AGENT.hex,
            METRIC_OWNER.public_key.hex,
            str(db),
            hang.url,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await until(lambda: any(m[0] == "EVENT" for m in hang.received), "the child's EVENT")
        finally:
            child.send_signal(signal.SIGKILL)
            async with asyncio.timeout(WAIT):
                await child.wait()
        [sent] = [m[1] for m in hang.received if m[0] == "EVENT"]
    async with local_relay() as good:
        pub = MetricPublisher(AGENT, METRIC_OWNER.public_key, db, [good.url], timeout=2.0)
        [report] = await pub.flush()
        assert report.delivered and report.event_id == sent["id"]
        assert await stored_ids(good.url) == [sent["id"]]
        assert pub.pending_count() == 0
        pub.close()


# --- the reader -------------------------------------------------------------------------------


async def test_the_query_asks_for_kind_44200_addressed_to_the_owner_since() -> None:
    async with scripted_relay(serving([])) as relay:
        await read_metrics(
            METRIC_OWNER, [relay.url], since=1_796_000_000, until=1_796_200_000, timeout=3
        )
    flt = relay.frames("REQ")[0][2]
    assert flt["kinds"] == [KIND]
    assert flt["#p"] == [METRIC_OWNER.public_key.hex]
    assert flt["since"] == 1_796_000_000
    assert flt["until"] == 1_796_200_000
    assert "authors" not in flt and "ids" not in flt


async def test_forged_and_off_filter_events_from_a_hostile_relay_are_ignored_and_counted() -> None:
    good = raw_metric(AGENT, wire(turn=tc(7, 3, 10, 0.5)), created_at=1_796_119_200)
    other = raw_metric(AGENT, wire(turn=tc(1000, 1000, 2000, 9.0)), created_at=1_796_119_201)
    for_someone_else = raw_metric(
        AGENT,
        wire(turn=tc(1000, 1, 1, 1.0)),
        tags=(("p", OTHER_OWNER.public_key.hex), ("agent", AGENT.public_key.hex)),
        encrypt_to=OTHER_OWNER,
    )
    chat = sign_event(AGENT, kind=1, content="hi", created_at=1_796_119_200)
    too_old = raw_metric(AGENT, wire(turn=tc(1000, 1, 1, 1.0)), created_at=1_000)
    served = [
        forge_signature(good),  # bad signature, the id of a real metric
        {**other.to_dict(), "id": good.id},  # content of one, id of another
        {**good.to_dict(), "content": other.content},  # id no longer matches the content
        for_someone_else.to_dict(),  # does not match #p
        chat.to_dict(),  # does not match kinds
        too_old.to_dict(),  # does not match since
        good.to_dict(),
    ]
    async with scripted_relay(serving(served)) as hostile:
        report, fetch = await read_metrics(
            METRIC_OWNER, [hostile.url], since=1_796_000_000, timeout=3
        )
    assert [t.event_id for t in report.turns] == [good.id]
    assert (report.turns[0].input_tokens, report.turns[0].cost_usd) == (7, 0.5)
    assert report.ignored.get("verification") == 6
    assert report.ignored_total == 6
    assert fetch.relays[hostile.url].rejected == 6


async def test_tag_layout_decryption_and_payload_are_checked() -> None:
    owner_p = ("p", METRIC_OWNER.public_key.hex)
    agent_t = ("agent", AGENT.public_key.hex)
    ok = wire(turn=tc(1, 1, 2, None))
    accepted = [
        # extra tag elements and unrelated tags are ignored
        raw_metric(
            AGENT, ok, tags=(("p", METRIC_OWNER.public_key.hex, "wss://x"), agent_t, ("t", "x"))
        ),
        # nullable fields may be missing; deltaReliable defaults to true
        raw_metric(AGENT, {"harness": "codex", "timestamp": "2026-12-01T10:00:01.000Z"}),
    ]
    refused = [
        raw_metric(AGENT, ok, tags=(owner_p, ("p", OTHER_OWNER.public_key.hex), agent_t)),
        raw_metric(AGENT, ok, tags=(owner_p,)),
        raw_metric(AGENT, ok, tags=(owner_p, ("agent", AGENT2.public_key.hex))),
        raw_metric(AGENT, ok, tags=(owner_p, agent_t, agent_t)),
        raw_metric(AGENT, ok, tags=(owner_p, agent_t, ("h", "secret-channel"))),
        raw_metric(AGENT, ok, encrypt_to=OTHER_OWNER),  # cannot be decrypted by the owner
        raw_metric(AGENT, {"harness": "goose"}),  # no timestamp
        raw_metric(AGENT, wire(turn=tc(-1, 1, 2, None))),  # negative tokens
        raw_metric(AGENT, wire(turn=tc(1, 1, 2, -0.5))),  # negative cost
        raw_metric(AGENT, wire(turn=tc(1.5, 1, 2, None))),  # not an integer
        raw_metric(AGENT, wire(stopReason=None)),  # omittable, never null
        raw_metric(AGENT, "not json at all"),
    ]
    async with local_relay() as relay:
        await put(relay.url, accepted + refused)
        report, _ = await read_metrics(METRIC_OWNER, [relay.url], timeout=5)
    assert sorted(t.event_id for t in report.turns) == sorted(e.id for e in accepted)
    assert report.ignored_total == len(refused)
    assert "verification" not in report.ignored  # these are signed correctly


async def test_duplicates_across_relays_count_once() -> None:
    events = [
        raw_metric(AGENT, wire(turn=tc(10 * i, i, None, None)), created_at=1_796_119_200 + i)
        for i in range(1, 5)
    ]
    async with local_relay() as one, local_relay() as two:
        await put(one.url, events[:3])
        await put(two.url, events[1:])
        report, _ = await read_metrics(METRIC_OWNER, [one.url, two.url], timeout=5)
    assert sorted(t.event_id for t in report.turns) == sorted(e.id for e in events)
    [total] = report.totals
    assert (total.turns, total.input_tokens, total.output_tokens) == (4, 100, 10)
    assert total.total_tokens is None  # nobody reported it: unknown, not 0


def session_world() -> list[Event]:
    """Agent A, session s1, published with created_at in reverse order of turnSeq; agent B
    uses the same session id (its own session).  Reported ``turn`` values are deliberately
    wrong wherever the reader must recompute them from ``cumulative``."""
    t0 = 1_796_119_200  # 2026-12-01T10:00:00Z

    def a(seq: int, cum: dict[str, Any], turn: dict[str, Any], created: int, **kw: Any) -> Event:
        p = wire(
            sessionId="s1",
            turnSeq=seq,
            cumulative=cum,
            turn=turn,
            timestamp=f"2026-12-01T1{seq}:00:00.000Z",
            **kw,
        )
        return raw_metric(AGENT, p, created_at=created)

    bogus = tc(999, 999, 999, 9.0)
    return [
        a(1, tc(100, 10, 110, 0.01), tc(100, 10, 110, 0.01), t0 + 400),
        a(2, tc(250, 40, 290, 0.03), bogus, t0 + 300),
        a(3, tc(200, 50, 250, 0.04), bogus, t0 + 200),  # input went down
        a(4, tc(300, 70, 370, 0.05), bogus, t0 + 100, model="m2"),
        raw_metric(
            AGENT2,
            wire(sessionId="s1", turnSeq=1, cumulative=tc(1000, 100, 1100, 1.0)),
            created_at=t0 + 50,
        ),
        raw_metric(
            AGENT2,
            wire(sessionId="s1", turnSeq=2, cumulative=tc(1010, 110, 1120, 1.5), turn=bogus),
            created_at=t0 + 10,
        ),
    ]


async def test_sessions_are_ordered_by_turn_seq_and_deltas_recomputed_from_cumulative() -> None:
    events = session_world()
    async with local_relay() as relay:
        await put(relay.url, events)
        report, _ = await read_metrics(METRIC_OWNER, [relay.url], timeout=5)
    a_rows = [t for t in report.turns if t.agent == AGENT.public_key.hex]
    b_rows = [t for t in report.turns if t.agent == AGENT2.public_key.hex]
    assert [t.turn_seq for t in a_rows] == [1, 2, 3, 4]
    assert [t.turn_seq for t in b_rows] == [1, 2]
    counters = [(t.input_tokens, t.output_tokens, t.total_tokens) for t in a_rows]
    assert counters[0] == (100, 10, 110)
    assert counters[1] == (150, 30, 180)
    assert counters[2][0] is None  # a decrease is unknown, never negative
    assert counters[3] == (100, 20, 120)
    assert a_rows[1].cost_usd == pytest.approx(0.02)
    assert a_rows[3].cost_usd == pytest.approx(0.01)
    for row in report.turns:
        for value in (row.input_tokens, row.output_tokens, row.total_tokens, row.cost_usd):
            assert value is None or value >= 0
    assert (b_rows[1].input_tokens, b_rows[1].output_tokens, b_rows[1].total_tokens) == (
        10,
        10,
        20,
    )
    assert b_rows[1].cost_usd == pytest.approx(0.5)
    # Totals per agent, model and day (the day of the payload's UTC timestamp).
    totals = {(r.agent[:4], r.model, r.day): r for r in report.totals}
    a, b = AGENT.public_key.hex[:4], AGENT2.public_key.hex[:4]
    assert set(totals) == {
        (a, "m1", "2026-12-01"),
        (a, "m2", "2026-12-01"),
        (b, "m1", "2026-12-01"),
    }
    m1 = totals[(a, "m1", "2026-12-01")]
    assert (m1.turns, m1.input_tokens, m1.output_tokens, m1.total_tokens) == (3, 250, 40, 290)
    assert m1.cost_usd == pytest.approx(0.03)
    m2 = totals[(a, "m2", "2026-12-01")]
    assert (m2.turns, m2.input_tokens, m2.output_tokens, m2.total_tokens) == (1, 100, 20, 120)


async def test_manifest_hashes_are_recomputed_and_mismatches_flagged_not_dropped() -> None:
    good = {"schemaVersion": 1, "hash": layers_hash(LAYERS), "layers": LAYERS}
    bad = {"schemaVersion": 1, "hash": "sha256:" + "ab" * 32, "layers": LAYERS}
    events = {
        "good": raw_metric(AGENT, wire(contextManifest=good), created_at=1_796_119_201),
        "bad": raw_metric(AGENT, wire(contextManifest=bad), created_at=1_796_119_202),
        "none": raw_metric(AGENT, wire(), created_at=1_796_119_203),
    }
    async with local_relay() as relay:
        await put(relay.url, list(events.values()))
        report, _ = await read_metrics(METRIC_OWNER, [relay.url], timeout=5)
    valid = {t.event_id: t.manifest_valid for t in report.turns}
    assert valid == {events["good"].id: True, events["bad"].id: False, events["none"].id: None}
    assert report.manifest_mismatches == 1


async def test_paging_does_not_stall_on_a_page_that_is_all_one_second() -> None:
    # Three metrics in one second fill a page of two; the one a second earlier must still come.
    same = [
        raw_metric(AGENT, wire(turn=tc(1, 0, None, None), turnId=f"t{i}"), created_at=1_796_119_210)
        for i in range(3)
    ]
    earlier = raw_metric(AGENT, wire(turn=tc(100, 0, None, None)), created_at=1_796_119_209)
    async with local_relay() as relay:
        await put(relay.url, [*same, earlier])
        report, _ = await read_metrics(METRIC_OWNER, [relay.url], timeout=5, page_limit=2)
    assert earlier.id in {t.event_id for t in report.turns}


# --- the command line -------------------------------------------------------------------------


CLI_T0 = 1_796_119_200  # 2026-12-01T10:00:00Z


def cli_events() -> list[Event]:
    return [
        raw_metric(
            AGENT,
            wire(turn=tc(10, 1, 11, 0.25), timestamp="2026-12-01T10:00:00.000Z"),
            created_at=CLI_T0,
        ),
        raw_metric(
            AGENT,
            wire(turn=tc(20, 2, None, None), timestamp="2026-12-01T12:00:00.000Z"),
            created_at=CLI_T0 + 7200,
        ),
        raw_metric(
            AGENT,
            wire(turn=tc(40, 4, 44, 1.0), timestamp="2026-12-02T10:00:00.000Z", model="m2"),
            created_at=CLI_T0 + 86_400,
        ),
    ]


@pytest.fixture(scope="module")
def cli_relay() -> Iterator[str]:
    bg = BackgroundLoop()
    relay = bg.call(start_relay())
    try:
        bg.call(put(relay.url, cli_events()))
        yield relay.url
    finally:
        relay.stop()
        bg.close()


def test_json_totals_per_agent_model_and_day(
    capsys: pytest.CaptureFixture[str], cli_relay: str
) -> None:
    code, out, err = buzz(
        capsys, "--relay", cli_relay, "--key", METRIC_OWNER.bech32, "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert out.endswith("\n") and out.count("\n") == 1
    rows = {(r["day"], r["model"]): r for r in doc["totals"]}
    assert set(rows) == {("2026-12-01", "m1"), ("2026-12-02", "m2")}
    day1 = rows[("2026-12-01", "m1")]
    assert (day1["agent"], day1["turns"]) == (AGENT.public_key.hex, 2)
    assert (day1["inputTokens"], day1["outputTokens"], day1["totalTokens"]) == (30, 3, 11)
    assert day1["costUsd"] == pytest.approx(0.25)
    assert len(doc["turns"]) == 3


def test_json_and_csv_agree_and_csv_starts_with_a_header(
    capsys: pytest.CaptureFixture[str], cli_relay: str
) -> None:
    args = ("--relay", cli_relay, "--key", METRIC_OWNER.hex)
    code, out, _ = buzz(capsys, *args, "--format", "json")
    assert code == 0
    totals = json.loads(out)["totals"]
    code, out, _ = buzz(capsys, *args, "--format", "csv")
    assert code == 0
    rows = list(csv.reader(io.StringIO(out)))
    header, body = rows[0], rows[1:]
    assert {"day", "agent", "model"} <= set(header)
    assert len(body) == len(totals)
    for line, total in zip(body, totals, strict=True):
        cells = dict(zip(header, line, strict=True))
        for name in ("day", "agent", "model"):
            assert cells[name] == total[name]
    code, out, err = buzz(capsys, *args, "--format", "table")
    assert code == 0 and out.strip(), err


@pytest.mark.parametrize(
    ("window", "days"),
    [
        (["--since", "2026-12-02"], {"2026-12-02"}),
        (["--until", "2026-12-01"], {"2026-12-01"}),
        (["--since", str(CLI_T0 + 1), "--until", str(CLI_T0 + 7200)], {"2026-12-01"}),
        (
            ["--since", "2026-12-01T11:00:00+01:00", "--until", "2026-12-01T10:00:00Z"],
            {"2026-12-01"},
        ),
    ],
)
def test_since_and_until_windows(
    capsys: pytest.CaptureFixture[str], cli_relay: str, window: list[str], days: set[str]
) -> None:
    code, out, err = buzz(
        capsys, "--relay", cli_relay, "--key", METRIC_OWNER.hex, "--format", "json", *window
    )
    assert code == 0, err
    doc = json.loads(out)
    assert {r["day"] for r in doc["totals"]} == days


def test_window_boundaries_are_inclusive(
    capsys: pytest.CaptureFixture[str], cli_relay: str
) -> None:
    code, out, _ = buzz(
        capsys,
        *("--relay", cli_relay, "--key", METRIC_OWNER.hex, "--format", "json"),
        *("--since", str(CLI_T0 + 7200), "--until", str(CLI_T0 + 7200)),
    )
    assert code == 0
    [turn] = json.loads(out)["turns"]
    assert turn["inputTokens"] == 20


async def test_every_relay_refusing_or_silent_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    async def closes(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "REQ":
            await conn.send(["CLOSED", msg[1], "restricted: members only"])

    async with (
        hostile_relay("auth_never_ack") as refusing,
        hostile_relay("silent") as silent,
        scripted_relay(closes) as closing,
    ):
        argv = [
            *("metrics", "--relay", refusing.url, "--relay", silent.url, "--relay", closing.url),
            *("--key", METRIC_OWNER.hex, "--timeout", "1", "--format", "json"),
        ]
        started = time.monotonic()
        code = await asyncio.to_thread(main, argv)
        elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert refusing.url in err and silent.url in err and closing.url in err
    assert elapsed < 8


@pytest.mark.parametrize(
    "argv",
    [
        ["--key", "nsec1notakey"],
        ["--key", "00" * 32],  # zero is not a valid secret key
        ["--key", "zz" * 32],
        ["--key", AGENT.public_key.bech32],  # a public key cannot decrypt
        ["--relay", "http://127.0.0.1:1"],
        ["--relay", "ws://"],
        ["--relay", "ws://127.0.0.1:99999"],
        ["--relay", "127.0.0.1:7777"],
        ["--since", "yesterday"],
        ["--until", "2026-13-01"],
        ["--since", "2026-12-02", "--until", "2026-12-01"],
        ["--format", "yaml"],
        ["--json", "--format", "csv"],
        ["--timeout"],
        ["--bogus"],
    ],
)
def test_bad_input_exits_1_with_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    base = {"--key": METRIC_OWNER.hex, "--relay": f"ws://127.0.0.1:{free_port()}"}
    for name, value in base.items():
        if name not in argv:
            argv = [*argv, name, value]
    code, out, err = buzz(capsys, *argv)
    assert (code, out) == (1, ""), err
    assert err.strip()
    assert "Traceback" not in err
    assert "zz" * 32 not in err


def test_bad_relay_list_in_the_environment_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_RELAYS", "https://relay.example")
    code, out, err = buzz(capsys, "--key", METRIC_OWNER.hex)
    assert (code, out) == (1, "")
    assert "ws://" in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = buzz(capsys, "--help")
    assert code == 0 and "--since" in out and "--format" in out


async def test_progress_goes_to_stderr_only_when_it_is_a_terminal(tmp_path: Path) -> None:
    async with local_relay() as relay:
        await put(relay.url, cli_events())
        env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
        primary, secondary = pty.openpty()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "nostr_buzz", "metrics", "--format", "csv"),
                *("--relay", relay.url, "--key", METRIC_OWNER.hex),
                stdout=asyncio.subprocess.PIPE,
                stderr=secondary,
                env=env,
                cwd=tmp_path,
            )
            os.close(secondary)
            async with asyncio.timeout(30):
                out, _ = await proc.communicate()
            terminal = b""
            while True:
                try:
                    chunk = os.read(primary, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                terminal += chunk
        finally:
            os.close(primary)
    assert proc.returncode == 0
    assert out.decode().startswith("day,")
    assert terminal.strip()  # something about the fetch was shown to the person watching
    assert b"day," not in terminal  # and no data went there


async def test_an_unknown_model_and_an_empty_model_name_are_different_totals() -> None:
    events = [
        raw_metric(AGENT, wire(model=None, turn=tc(1, 1, 2, None)), created_at=1_796_119_201),
        raw_metric(AGENT, wire(model="", turn=tc(10, 10, 20, None)), created_at=1_796_119_202),
        raw_metric(AGENT, wire(model="", turn=tc(100, 100, 200, None)), created_at=1_796_119_203),
    ]
    async with local_relay() as relay:
        await put(relay.url, events)
        report, _ = await read_metrics(METRIC_OWNER, [relay.url], timeout=5)
    by_model = {r.model: (r.turns, r.input_tokens) for r in report.totals}
    assert by_model == {None: (1, 1), "": (2, 110)}


async def test_the_report_does_not_depend_on_which_relay_answered_first() -> None:
    events = session_world() + cli_events()
    async with local_relay() as one, local_relay() as two:
        await put(one.url, events[::2])
        await put(two.url, events[1::2])
        forward, _ = await read_metrics(METRIC_OWNER, [one.url, two.url], timeout=5)
        backward, _ = await read_metrics(METRIC_OWNER, [two.url, one.url], timeout=5)
    assert forward == backward
    assert len(forward.turns) == len(events)


async def test_a_forging_relay_next_to_an_honest_one_is_named_and_the_report_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    events = cli_events()
    async with local_relay() as honest, hostile_relay("forged_sig", stored=events) as liar:
        await put(honest.url, events)
        argv = [
            *("metrics", "--relay", honest.url, "--relay", liar.url),
            *("--key", METRIC_OWNER.hex, "--format", "json"),
        ]
        code = await asyncio.to_thread(main, argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert len(json.loads(out)["turns"]) == 3
    assert liar.url in err and honest.url not in err
    assert events[0].content not in err  # never the event itself


async def test_an_ok_for_another_event_is_not_a_delivery(tmp_path: Path) -> None:
    async def script(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
        if msg[0] == "EVENT":
            await conn.send(["OK", "ab" * 32, True, ""])

    async with scripted_relay(script) as confused:
        pub = publisher(tmp_path, [confused.url], timeout=1.0)
        event = (await pub.publish(payload())).event
        assert event is not None
        assert [e.id for e in pub.outbox.entries()] == [event.id]
        pub.close()


def test_json_flag_is_format_json(capsys: pytest.CaptureFixture[str], cli_relay: str) -> None:
    args = ("--relay", cli_relay, "--key", METRIC_OWNER.hex)
    code, by_flag, err = buzz(capsys, *args, "--json")
    assert code == 0, err
    code, by_format, _ = buzz(capsys, *args, "--format", "JSON")
    assert code == 0
    assert json.loads(by_flag) == json.loads(by_format)
