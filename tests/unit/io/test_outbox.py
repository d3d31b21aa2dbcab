"""The durable metric outbox: SQLite, survives reopening, idempotent, backoff, ciphertext only."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from nostr_buzz.errors import OutboxError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.outbox import BACKOFF_CAP, OUTBOX_FILE, Outbox, backoff_delay
from nostr_buzz.io.relay import Verdict
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, build_metric_event
from tests.support.keys import AGENT, OWNER

MARKER = "plaintext-marker-model-7f3a"

#: A jitter source that always draws the middle of its range (no jitter).
MIDPOINT = SimpleNamespace(uniform=lambda a, b: (a + b) / 2)


def metric(seq: int = 1) -> Event:
    payload = MetricPayload(
        harness="goose",
        timestamp=f"2026-12-02T10:00:{seq:02d}.000Z",
        model=MARKER,
        session_id="session-marker-55",
        turn_seq=seq,
        turn=TokenCounts(100 * seq, 10, 110 * seq, 0.25),
    )
    return build_metric_event(AGENT, OWNER.public_key, payload)


def ok(relay: str, event: Event) -> Verdict:
    return Verdict(relay, event.id, True)


def refused(relay: str, event: Event, message: str = "error: down") -> Verdict:
    return Verdict(relay, event.id, False, False, "error:", message)


def test_entries_survive_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "state" / "outbox.sqlite3"
    first, second = metric(1), metric(2)
    with Outbox(path) as box:
        assert box.add(first, now=100.0)
        assert box.add(second, now=101.0)
        box.record_attempt(second.id, 102.0, [refused("ws://a", second)], rng=MIDPOINT)
    with Outbox(path) as again:
        assert again.pending_count() == 2
        entries = {e.id: e for e in again.entries()}
        assert entries[first.id].event == first
        assert entries[second.id].attempts == 1
        assert entries[second.id].last_error == "ws://a: error: down"
        assert [e.id for e in again.due(102.0)] == [first.id]


def test_add_is_idempotent_by_id_and_keeps_the_schedule(tmp_path: Path) -> None:
    event = metric()
    with Outbox(tmp_path / "o.db") as box:
        assert box.add(event) is True
        box.record_attempt(event.id, 50.0, {"ws://a": refused("ws://a", event)}, rng=MIDPOINT)
        assert box.add(event) is False
        assert box.pending_count() == 1
        entry = box.get(event.id)
        assert entry is not None
        assert entry.attempts == 1 and entry.next_attempt == 55.0


def test_a_new_entry_is_due_at_once_and_remove_forgets_it(tmp_path: Path) -> None:
    event = metric()
    with Outbox(tmp_path / "o.db") as box:
        box.add(event, now=10.0)
        assert [e.id for e in box.due(0.0)] == [event.id]
        assert box.remove(event.id) is True
        assert box.remove(event.id) is False
        assert box.pending_count() == 0
        assert box.next_due() is None
        assert box.record_attempt(event.id, 1.0, []) is None


def test_backoff_doubles_from_five_seconds_up_to_fifteen_minutes() -> None:
    assert [backoff_delay(n, 0.5) for n in range(1, 11)] == [
        5.0,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        320.0,
        640.0,
        900.0,
        900.0,
    ]
    assert backoff_delay(0, 0.5) == 0.0
    assert backoff_delay(1, 0.0) == pytest.approx(4.0)  # jitter spans ±20 %
    assert backoff_delay(1, 0.999) == pytest.approx(5.998)
    assert backoff_delay(10_000, 0.999) == BACKOFF_CAP  # never past the cap, no overflow


def test_record_attempt_schedules_with_the_injected_jitter(tmp_path: Path) -> None:
    event = metric()
    draws = iter([0.0, 1.0 - 1e-9, 0.5])
    with Outbox(tmp_path / "o.db", rng=SimpleNamespace(uniform=lambda a, b: next(draws))) as box:
        box.add(event)
        now = 1_000.0
        expected = [4.0, 12.0, 20.0]  # 5×0.8, 10×1.2, 20×1.0
        for delay in expected:
            entry = box.record_attempt(event.id, now, [refused("ws://a", event)])
            assert entry is not None
            assert entry.next_attempt == pytest.approx(now + delay)
            assert box.due(entry.next_attempt - 0.01) == []
            assert [e.id for e in box.due(entry.next_attempt)] == [event.id]
            now = entry.next_attempt
        assert box.get(event.id).attempts == 3  # type: ignore[union-attr]


def test_relays_that_took_the_event_add_up_across_attempts(tmp_path: Path) -> None:
    event = metric()
    with Outbox(tmp_path / "o.db") as box:
        box.add(event)
        box.record_attempt(event.id, 1.0, [ok("ws://a", event), refused("ws://b", event)])
        dup = Verdict("ws://b", event.id, False, True, "duplicate:", "duplicate: have it")
        entry = box.record_attempt(event.id, 2.0, [refused("ws://a", event), dup])
        assert entry is not None
        assert entry.accepted_by == ("ws://a", "ws://b")
        assert entry.last_error == "ws://a: error: down"
        entry = box.record_attempt(event.id, 3.0, [], error="send failed: " + "x" * 600)
        assert entry is not None and len(entry.last_error or "") == 500


def test_the_file_holds_only_signed_ciphertext(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    event = metric()
    with Outbox(path) as box:
        box.add(event)
        stored = path.read_bytes() + b"".join(
            p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("o.db-")
        )
    # Long rows spill into overflow pages, so the ciphertext is looked for in pieces.
    assert event.id.encode() in stored and event.content[:40].encode() in stored
    for secret_text in (MARKER, "session-marker-55", AGENT.hex, AGENT.bech32, OWNER.hex):
        assert secret_text.encode() not in stored, secret_text


def test_only_event_objects_are_accepted(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o.db") as box:
        with pytest.raises(OutboxError, match="signed Event"):
            box.add(metric().to_dict())  # type: ignore[arg-type]
        assert box.pending_count() == 0


def test_a_damaged_row_is_skipped_not_sent(tmp_path: Path) -> None:
    path = tmp_path / "o.db"
    good, bad = metric(1), metric(2)
    with Outbox(path) as box:
        box.add(good)
        box.add(bad)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE outbox SET event = ? WHERE id = ?",
            (bad.to_json().replace('"kind":44200', '"kind":44201'), bad.id),
        )
    with Outbox(path) as box:
        assert [e.id for e in box.due(0.0)] == [good.id]
        assert box.damaged == {bad.id}
        assert box.pending_count() == 2


def test_unusable_files_raise_outbox_errors(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version=9")
    with pytest.raises(OutboxError, match="schema version 9"):
        Outbox(newer)
    not_db = tmp_path / "text.db"
    not_db.write_text("this is not a database, just some text " * 100)
    with pytest.raises(OutboxError, match="cannot open the outbox"):
        Outbox(not_db)


def test_signed_events_of_other_kinds_round_trip(tmp_path: Path) -> None:
    other = sign_event(AGENT, kind=1, content="hello", created_at=1_700_000_000)
    with Outbox(tmp_path / "o.db") as box:
        box.add(other)
        assert box.due(0.0)[0].event == other


def test_the_file_lives_in_the_state_directory_and_is_private(tmp_path: Path) -> None:
    with Outbox.in_state_dir(tmp_path / ".buzz") as box:
        box.add(metric())
        assert box.path == tmp_path / ".buzz" / OUTBOX_FILE
    assert (box.path.stat().st_mode & 0o777) == 0o600


# -- one record per relay ---------------------------------------------------------------------


def test_each_relay_has_its_own_record_and_the_entry_waits_for_the_slowest(tmp_path: Path) -> None:
    event = metric(1)
    a, b = "ws://a", "ws://b"
    with Outbox(tmp_path / "o.sqlite3") as box:
        box.add(event, now=100.0, relays=(a, b), due=115.0)
        entry = box.get(event.id)
        assert entry is not None
        assert [(r.relay, r.state) for r in entry.relay_records] == [(a, "pending"), (b, "pending")]
        # a takes it; b has not answered yet: the entry stays, due when b's first send may end.
        entry = box.record_attempt(event.id, 101.0, [ok(a, event)], rng=MIDPOINT)
        assert entry is not None and entry.accepted_by == (a,)
        assert entry.next_attempt == 115.0
        # b refuses: its own backoff, a untouched.
        entry = box.record_attempt(
            event.id, 102.0, [refused(b, event, "blocked: no")], rng=MIDPOINT
        )
        assert entry is not None
        records = {r.relay: r for r in entry.relay_records}
        assert records[a].state == "accepted" and records[a].accepted_at == 101.0
        assert records[b].state == "failing" and records[b].attempts == 1
        assert records[b].last_error == "blocked: no"
        assert entry.next_attempt == records[b].next_attempt == 102.0 + backoff_delay(1, 0.5)
        assert box.remove(event.id)
    with sqlite3.connect(tmp_path / "o.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM outbox_relay").fetchone()[0] == 0


def test_a_reconnect_makes_every_relay_due(tmp_path: Path) -> None:
    event = metric(1)
    with Outbox(tmp_path / "o.sqlite3") as box:
        box.add(event, now=0.0, relays=("ws://a",))
        box.record_attempt(event.id, 1.0, [refused("ws://a", event)], rng=MIDPOINT)
        assert box.make_due(2.0) == 1
        entry = box.get(event.id)
        assert entry is not None and entry.relay_records[0].next_attempt == 2.0


_V1_SCHEMA = """
CREATE TABLE outbox (
    id TEXT PRIMARY KEY, event TEXT NOT NULL, kind INTEGER NOT NULL, created_at INTEGER NOT NULL,
    added_at REAL NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_attempt REAL NOT NULL,
    accepted_by TEXT NOT NULL DEFAULT '[]', last_error TEXT, relays TEXT
) WITHOUT ROWID;
CREATE INDEX outbox_due ON outbox (next_attempt);
PRAGMA user_version=1;
"""


def test_a_version_1_file_opens_and_its_accepting_relays_are_not_sent_again(
    tmp_path: Path,
) -> None:
    """A file written before the per-relay records: it opens (migrated to version 2), and the
    relays it named as having an event are recorded as accepted."""
    path = tmp_path / "o.sqlite3"
    event = metric(1)
    with sqlite3.connect(path) as db:
        db.executescript(_V1_SCHEMA)
        db.execute(
            "INSERT INTO outbox (id, event, kind, created_at, added_at, attempts, next_attempt, "
            "accepted_by, relays) VALUES (?, ?, ?, ?, 5.0, 1, 9.0, ?, ?)",
            (event.id, event.to_json(), event.kind, event.created_at, '["ws://a"]',
             '["ws://a", "ws://b"]'),
        )  # fmt: skip
    with Outbox(path) as box:
        [entry] = box.entries()
        assert entry.relays == ("ws://a", "ws://b") and entry.attempts == 1
        assert [(r.relay, r.state) for r in entry.relay_records] == [("ws://a", "accepted")]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    with Outbox(path) as box:  # and again: nothing doubled
        [entry] = box.entries()
        assert len(entry.relay_records) == 1
