"""``buzz watch``'s reader: a bot's state directory read without writing anything to it, a
directory that is not a bot's refused, the diagnostics feed followed through rotations."""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nostr_buzz.bot.plugin import DIAGNOSTICS_FILE
from nostr_buzz.bot.state import STATE_DB, BotStore
from nostr_buzz.core.queue import QueuedEvent
from nostr_buzz.errors import StateDirError
from nostr_buzz.io import watch
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.watch import FeedTail, Watcher, check_state_dir, read_snapshot
from tests.support.events import chat
from tests.support.keys import ALICE, BOB

NOW = 1_800_000_000.0


def clock() -> datetime:
    return datetime.fromtimestamp(NOW, UTC)


def bot_state(directory: Path) -> BotStore:
    """A bot's state with two events queued in ``room`` and one in ``ops``."""
    store = BotStore(directory)
    queue = store.journal.load_queue()
    for author, channel, at in ((ALICE, "room", 1), (BOB, "room", 2), (ALICE, "ops", 3)):
        event = chat(author, at, channel=channel)
        queue.push(event, now=NOW + at)
        store.journal.record_push(queue, QueuedEvent(event, "@mention", NOW + at), [], at)
    store.flush()
    return store


def test_the_file_names_are_the_bots() -> None:
    assert (watch.STATE_DB, watch.FEED_FILE) == (STATE_DB, DIAGNOSTICS_FILE)


def test_a_stopped_bots_state_is_read_without_creating_a_file(tmp_path: Path) -> None:
    bot_state(tmp_path / "s").close()
    before = sorted(os.listdir(tmp_path / "s"))
    snapshot = read_snapshot(check_state_dir(tmp_path / "s"))
    assert sorted((r.channel, r.signer) for r in snapshot.queued) == sorted(
        [
            ("ops", ALICE.public_key.hex),
            ("room", ALICE.public_key.hex),
            ("room", BOB.public_key.hex),
        ]
    )
    assert sorted(os.listdir(tmp_path / "s")) == before  # not even -wal or -shm


def test_a_running_bot_is_read_while_it_writes_and_never_blocked(tmp_path: Path) -> None:
    store = bot_state(tmp_path)
    writer = sqlite3.connect(tmp_path / STATE_DB, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # the bot in the middle of a write transaction
    writer.execute("DELETE FROM queued")
    assert len(read_snapshot(tmp_path).queued) == 3  # the last committed state
    writer.execute("COMMIT")  # the reader held no lock that could stop the bot
    assert read_snapshot(tmp_path).queued == ()
    writer.close()
    store.close()


def test_what_is_not_a_bots_state_directory_is_refused_with_its_reason(tmp_path: Path) -> None:
    def reason(path: Path) -> str:
        with pytest.raises(StateDirError) as caught:
            Watcher(path, clock=lambda: NOW).view()
        return caught.value.reason

    assert reason(tmp_path / "absent") == "missing"
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    assert reason(empty) == "missing"
    (tmp_path / "link").symlink_to(empty)
    assert reason(tmp_path / "link") == "unsafe"
    shared = tmp_path / "shared"
    bot_state(shared).close()
    shared.chmod(0o777)
    assert reason(shared) == "unsafe"
    shared.chmod(0o700)
    (tmp_path / "file").write_text("x")
    assert reason(tmp_path / "file") == "not_a_bot"

    def db_reason(make: str | bytes) -> str:
        directory = tmp_path / f"db{len(os.listdir(tmp_path))}"
        directory.mkdir(mode=0o700)
        if isinstance(make, bytes):
            (directory / STATE_DB).write_bytes(make)
        else:
            sqlite3.connect(directory / STATE_DB).executescript(make)
        return reason(directory)

    assert db_reason(b"not a database at all, just text" * 10) == "not_a_bot"
    assert db_reason("CREATE TABLE notes (x);") == "not_a_bot"
    newer = "CREATE TABLE meta(a); CREATE TABLE queued(a); CREATE TABLE channels(a); "
    newer += "CREATE TABLE outbox(a); PRAGMA user_version=3;"
    assert db_reason(newer) == "not_a_bot"
    db = tmp_path / "linked"
    db.mkdir(mode=0o700)
    (db / STATE_DB).symlink_to(shared / STATE_DB)
    assert reason(db) == "unsafe"
    # A feed that is a link to another file (say the agent's user planted one) is not read.
    (tmp_path / "secret.txt").write_text('{"seq":1,"timestamp":"x","kind":"agent_started"}\n')
    (shared / DIAGNOSTICS_FILE).symlink_to(tmp_path / "secret.txt")
    assert reason(shared) == "unsafe"


def test_the_feed_is_followed_as_it_grows_and_through_a_rotation(tmp_path: Path) -> None:
    path = tmp_path / DIAGNOSTICS_FILE
    tail = FeedTail(path)
    assert tail.read() == []  # no feed yet
    feed = DiagnosticsFeed(path, clock=clock, max_bytes=600)
    feed.emit("agent_started", payload={"agentName": "demo"})
    feed.turn_started(["a" * 64], channel_id="eng", session_id="s", turn_id="t1")
    assert [r.kind for r, _ in tail.read()] == ["agent_started", "turn_started"]
    with open(path, "ab") as fh:
        fh.write(b'{"seq": 99, "timest')  # a record being written: not read yet
    assert tail.read() == []
    with open(path, "ab") as fh:
        fh.write(b'amp": "2027-01-15T08:00:00.000Z", "kind": "turn_ended", "turnId": "t1"}\n')
    [(ended, at)] = tail.read()
    assert (ended.seq, ended.turn_id) == (99, "t1")
    assert at == datetime(2027, 1, 15, 8, tzinfo=UTC).timestamp()
    written = 0
    while not (tmp_path / (DIAGNOSTICS_FILE + ".1")).exists():  # past max_bytes: renamed
        feed.metric_queued(f"{written:064x}", cost_usd=0.5)
        written += 1
    feed.metric_queued("f" * 64, cost_usd=0.5)  # the first record of the new file
    assert [r.kind for r, _ in tail.read()] == ["metric_queued"] * (written + 1)
    feed.close()
    tail.close()
    # A new reader starts with the rotated file, then the current one.
    fresh = FeedTail(path)
    records = [r for r, _ in fresh.read()]
    assert records[-1].payload == {"eventId": "f" * 64, "costUsd": 0.5}
    fresh.close()


def test_a_watcher_joins_the_feed_and_the_database(tmp_path: Path) -> None:
    store = bot_state(tmp_path)
    feed = DiagnosticsFeed(tmp_path / DIAGNOSTICS_FILE, clock=clock)
    [ops] = [r for r in read_snapshot(tmp_path).queued if r.channel == "ops"]
    feed.emit("agent_started", payload={"agentName": "demo"})
    feed.turn_started([ops.id], channel_id="ops", session_id="s", turn_id="t1")
    watcher = Watcher(tmp_path, clock=lambda: NOW + 12)
    view = watcher.view()
    [turn] = view.running_turns
    assert turn.actors == [ALICE.public_key.bech32] and turn.duration_seconds == 12
    assert {(c.channel, c.pending, c.in_flight) for c in view.queue} == {
        ("ops", 0, 1),
        ("room", 2, 0),
    }
    feed.emit("turn_ended", turn_id="t1")
    assert watcher.view().running_turns == []
    watcher.close()
    feed.close()
    store.close()
