"""The bot's state database: the queue journal, remembered ids, position, import of old files."""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from nostr_buzz.bot.checkpoint import COMMITS
from nostr_buzz.bot.config import Shard
from nostr_buzz.bot.intake import Gate, refusal_scope
from nostr_buzz.bot.state import (
    REMEMBERED_COMMAND_KINDS,
    REMEMBERED_REFUSALS,
    STATE_DB,
    BotStore,
)
from nostr_buzz.core.queue import REMEMBERED_IDS, DispatchQueue, QueuedEvent
from nostr_buzz.core.session_key import keyer
from nostr_buzz.errors import StateError
from nostr_buzz.event import Event
from nostr_buzz.io.outbox import Outbox
from nostr_buzz.keys import SecretKey
from tests.support.events import chat
from tests.support.keys import ALICE, BOB

ROOT = "ab" * 32


def msg(
    who: SecretKey, at: int, *, channel: str | None = "room", thread: str | None = None
) -> Event:
    return chat(who, at, content=f"m{at}", channel=channel, thread=thread)


def state_of(q: DispatchQueue) -> dict[str, object]:
    """A queue's snapshot with its channels keyed by name (their order is not state)."""
    snap = json.loads(q.snapshot())
    snap["channels"] = {c["name"]: c for c in snap["channels"]}
    return snap  # type: ignore[no-any-return]


def push(store: BotStore, q: DispatchQueue, event: Event, now: float) -> None:
    result = q.push(event, now=now)
    queued = QueuedEvent(event, "@mention", now) if result.accepted else None
    store.journal.record_push(q, queued, result.dropped, int(now))


def test_rows_rebuild_the_queue_after_every_kind_of_settlement(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = BotStore(tmp_path)
    q = store.journal.load_queue(rng=random.Random(1))
    events = [
        msg(rng.choice([ALICE, BOB]), 100 + i, channel=rng.choice(["room", "ops", None]))
        for i in range(40)
    ]
    for i, event in enumerate(events):
        push(store, q, event, float(i))
    for step in range(30):
        batch = q.flush_next(1000.0 + step * 400)
        if batch is None:
            continue
        action = step % 4
        if action == 0:
            q.complete(batch)
        elif action == 1:
            q.fail(batch, 1000.0 + step * 400)
        elif action == 2:
            q.requeue_cancelled(batch, "interrupt")
        # action 3: left in flight, as a crash would leave it
        store.journal.sync_channel(q, batch.channel)
    store.close()
    reopened = BotStore(tmp_path)
    rebuilt = reopened.journal.load_queue()
    assert state_of(rebuilt) == state_of(q)
    assert reopened.position() == 39


def test_an_admitted_event_costs_constant_writes_and_a_duplicate_none(tmp_path: Path) -> None:
    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    costs = []
    for n in range(600):
        before = store.changes
        push(store, q, msg(ALICE, 1000 + n, channel=f"c{n % 3}"), float(n))
        costs.append(store.changes - before)
    assert max(costs) == min(costs) <= 3  # the row, next_seq, the position
    before = store.changes
    again = msg(ALICE, 1000, channel="c0")
    assert q.push(again, now=700.0).duplicate
    assert store.changes == before


def test_the_log_is_checkpointed_by_a_thread_every_few_hundred_commits(tmp_path: Path) -> None:
    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    database = tmp_path / STATE_DB
    empty = database.stat().st_size
    for n in range(COMMITS):  # outside an event loop each push commits at once
        push(store, q, msg(ALICE, 1000 + n, channel=f"c{n % 3}"), float(n))
    store.checkpoints.join()
    assert store.checkpoints.runs == 1
    # The rows reached the database file, far before SQLite's own checkpoint would have run.
    assert database.stat().st_size > empty
    store.close()
    assert BotStore(tmp_path).journal.load_queue().pending("c0") == len(range(0, COMMITS, 3))


def test_a_version_1_database_has_its_queue_rows_moved_into_write_order(tmp_path: Path) -> None:
    # Version 1 kept the queue's rows in id order (WITHOUT ROWID); what it held is kept.
    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    events = [msg(ALICE, 1000 + n, channel=f"c{n % 2}") for n in range(6)]
    for n, event in enumerate(events):
        push(store, q, event, float(n))
    batch = q.flush_next(10.0)
    assert batch is not None
    q.requeue_cancelled(batch, "interrupt")
    store.journal.sync_channel(q, batch.channel)
    store.close()
    db = sqlite3.connect(tmp_path / STATE_DB)
    db.executescript(
        """
        ALTER TABLE queued RENAME TO v2; DROP INDEX queued_channel;
        CREATE TABLE queued (id TEXT PRIMARY KEY, channel TEXT NOT NULL, seq INTEGER NOT NULL,
            event TEXT NOT NULL, prompt_tag TEXT NOT NULL, received_at REAL NOT NULL,
            cancelled_ord INTEGER) WITHOUT ROWID;
        CREATE INDEX queued_channel ON queued (channel, seq);
        INSERT INTO queued SELECT id, channel, seq, event, prompt_tag, received_at, cancelled_ord
            FROM v2;
        DROP TABLE v2; PRAGMA user_version=1;
        """
    )
    db.close()
    reopened = BotStore(tmp_path)
    assert state_of(reopened.journal.load_queue()) == state_of(q)
    reopened.close()
    db = sqlite3.connect(tmp_path / STATE_DB)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'queued'").fetchone()[0]
    assert "WITHOUT ROWID" not in sql and db.execute("SELECT count(n) FROM queued").fetchone()[0]
    db.close()


def test_remembered_ids_are_capped_and_restored(tmp_path: Path) -> None:
    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    first = msg(ALICE, 1)
    push(store, q, first, 1.0)
    q.complete(q.flush_next(2.0))  # type: ignore[arg-type]
    store.journal.sync_channel(q, "room")
    rebuilt = BotStore(tmp_path).journal.load_queue()
    assert rebuilt.is_remembered(first.id)
    assert rebuilt.push(first, now=3.0).duplicate
    # The table keeps the newest REMEMBERED_IDS ids.
    store.remember((f"{i:064x}" for i in range(REMEMBERED_IDS + 5)), "event", REMEMBERED_IDS)
    count = store.execute("SELECT count(*) FROM remembered WHERE kind = 'event'").fetchone()[0]
    assert count == REMEMBERED_IDS


def test_commands_are_remembered_with_the_position(tmp_path: Path) -> None:
    store = BotStore(tmp_path)
    commands = [chat(ALICE, 50 + i, content=f"!budget daily_usd {i}") for i in range(105)]
    for i, event in enumerate(commands):
        store.remember_command(event, "budget:daily_usd", 50 + i)
    store.close()
    again = BotStore(tmp_path)
    assert again.commands() == [e.id for e in commands[5:]]
    assert again.position() == 154
    assert again.owner_commands.last("budget:daily_usd") == (154, commands[-1].id)
    assert again.owner_commands.last("budget:monthly_usd") is None


def test_the_last_command_of_each_kind_is_kept_for_the_newest_kinds(tmp_path: Path) -> None:
    store = BotStore(tmp_path)
    for i in range(REMEMBERED_COMMAND_KINDS + 3):
        store.remember_command(chat(ALICE, 1_000 + i, content="!new"), f"new:c{i}", 1_000 + i)
    count = store.execute("SELECT count(*) FROM owner_commands").fetchone()[0]
    assert count == REMEMBERED_COMMAND_KINDS
    assert store.owner_commands.last("new:c0") is None  # the oldest kinds went first
    assert store.owner_commands.last(f"new:c{REMEMBERED_COMMAND_KINDS + 2}") is not None


def test_a_database_without_the_owner_commands_table_opens_and_gets_it(tmp_path: Path) -> None:
    import sqlite3

    BotStore(tmp_path).close()
    db = sqlite3.connect(tmp_path / STATE_DB)
    db.execute("DROP TABLE owner_commands")  # what an earlier version wrote
    db.commit()
    db.close()
    store = BotStore(tmp_path)
    assert store.owner_commands.last("shutdown") is None
    store.remember_command(chat(ALICE, 5, content="!shutdown"), "shutdown", 5)
    assert store.owner_commands.last("shutdown") is not None


def test_files_of_an_earlier_version_are_imported_once(tmp_path: Path) -> None:
    q = DispatchQueue(rng=random.Random(3))
    done = msg(ALICE, 1)
    waiting = msg(BOB, 2, channel="ops")
    q.push(done, now=1.0)
    q.complete(q.flush_next(1.0))  # type: ignore[arg-type]
    q.push(waiting, now=2.0)
    (tmp_path / "queue.json").write_bytes(q.snapshot())
    state = {"position": 1234, "commands": ["cd" * 32]}
    (tmp_path / "bot-state.json").write_text(json.dumps(state), encoding="utf-8")
    metric = msg(ALICE, 3, channel=None)
    with Outbox(tmp_path / "outbox.sqlite3") as old:
        old.add(metric, now=5.0)
    store = BotStore(tmp_path)
    assert store.import_problems == []
    assert state_of(store.journal.load_queue()) == state_of(q)
    assert store.position() == 1234 and store.commands() == ["cd" * 32]
    assert [e.id for e in store.outbox.entries()] == [metric.id]
    assert not (tmp_path / "queue.json").exists()
    assert (tmp_path / "queue.json.imported").exists()
    assert (tmp_path / "outbox.sqlite3.imported").exists()
    store.close()
    # Only a new database imports: the old files are not read again.
    (tmp_path / "queue.json").write_text("{}", encoding="utf-8")
    assert BotStore(tmp_path).import_problems == []


def test_a_corrupt_old_queue_file_is_kept_aside_and_reported(tmp_path: Path) -> None:
    (tmp_path / "queue.json").write_text('{"version": 1, "next', encoding="utf-8")
    store = BotStore(tmp_path)
    assert len(store.import_problems) == 1 and "queue.json" in store.import_problems[0]
    assert (tmp_path / "queue.json.corrupt").exists()
    assert store.journal.load_queue().channel_names() == []


def test_a_malformed_old_state_file_is_kept_aside_and_reported(tmp_path: Path) -> None:
    state = {"position": -5, "commands": ["cd" * 32]}  # a position before 1970: not ours
    (tmp_path / "bot-state.json").write_text(json.dumps(state), encoding="utf-8")
    store = BotStore(tmp_path)
    assert len(store.import_problems) == 1 and "bot-state.json" in store.import_problems[0]
    assert (tmp_path / "bot-state.json.corrupt").exists()
    assert store.position() is None and store.commands() == []


def test_a_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    BotStore(tmp_path).close()
    import sqlite3

    db = sqlite3.connect(tmp_path / STATE_DB)
    db.execute("PRAGMA user_version=99")
    db.close()
    with pytest.raises(StateError, match="schema version 99"):
        BotStore(tmp_path)


def test_an_inconsistent_database_is_a_state_error(tmp_path: Path) -> None:
    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    event = msg(ALICE, 1)
    push(store, q, event, 1.0)
    store.execute("INSERT INTO remembered (id, kind) VALUES (?, 'event')", (event.id,))
    with pytest.raises(StateError, match="inconsistent"):
        store.journal.load_queue()


async def test_a_burst_commits_once_at_the_end_of_the_loop_step(tmp_path: Path) -> None:
    import asyncio
    import sqlite3

    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    other = sqlite3.connect(tmp_path / STATE_DB)

    def visible() -> int:
        return int(other.execute("SELECT count(*) FROM queued").fetchone()[0])

    for n in range(50):
        push(store, q, msg(ALICE, 2000 + n), float(n))
    assert visible() == 0  # one transaction, still open during this step
    await asyncio.sleep(0)  # the step ends: the burst commits
    assert visible() == 50
    assert other.execute("SELECT value FROM meta WHERE key = 'position'").fetchone()[0] == 49
    # Any other transaction commits pending intake first.
    push(store, q, msg(ALICE, 3000), 60.0)
    store.remember_command(chat(ALICE, 61, content="!new"), "new:room", 61)
    assert visible() == 51
    other.close()
    store.close()


async def test_a_send_recorded_while_intake_is_open_joins_it(tmp_path: Path) -> None:
    import asyncio

    from nostr_buzz.io.relay import Verdict

    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    reply = msg(BOB, 5, channel=None)
    store.outbox.add(reply, now=1.0)
    push(store, q, msg(ALICE, 6), 6.0)  # the intake transaction is open for this step
    entry = store.outbox.record_attempt(reply.id, 2.0, [Verdict("ws://r", reply.id, True)])
    assert entry is not None and entry.accepted_by == ("ws://r",)
    await asyncio.sleep(0)  # the step ends: both commit
    again = BotStore(tmp_path)
    assert again.outbox.entries()[0].attempts == 1 and again.position() == 6
    store.close()
    again.close()


def test_refused_wraps_are_remembered_capped_and_kept_only_under_the_same_gate(
    tmp_path: Path,
) -> None:
    store = BotStore(tmp_path)
    store.refusals.load("gate-a")
    unopenable, by_gate = "aa" * 32, "bb" * 32
    store.refusals.remember(unopenable, by_gate=False)
    store.refusals.remember(by_gate, by_gate=True)
    store.refusals.remember(by_gate, by_gate=True)  # once
    assert unopenable in store.refusals and by_gate in store.refusals
    assert "cc" * 32 not in store.refusals
    store.close()
    same = BotStore(tmp_path)
    same.refusals.load("gate-a")  # a restart with the same gate
    assert unopenable in same.refusals and by_gate in same.refusals
    same.close()
    changed = BotStore(tmp_path)
    changed.refusals.load("gate-b")  # the gate changed: what it refused may be admitted now
    assert unopenable in changed.refusals and by_gate not in changed.refusals
    changed.close()
    back = BotStore(tmp_path)
    back.refusals.load("gate-a")  # forgotten for good, not kept aside
    assert by_gate not in back.refusals
    # The newest REMEMBERED_REFUSALS of each kind are kept, in the database and in memory.
    for i in range(REMEMBERED_REFUSALS + 3):
        back.refusals.remember(f"{i:064x}", by_gate=False)
    back.flush()
    rows = back.execute("SELECT count(*) FROM remembered WHERE kind = 'refusal'").fetchone()[0]
    assert rows == REMEMBERED_REFUSALS
    assert unopenable not in back.refusals and f"{0:064x}" not in back.refusals
    back.close()
    again = BotStore(tmp_path)
    again.refusals.load("gate-a")
    assert f"{REMEMBERED_REFUSALS + 2:064x}" in again.refusals and f"{2:064x}" not in again.refusals
    # An older nostr-buzz reads only its own kinds: refusals are no commands nor delivered ids.
    assert again.commands() == [] and not again.journal.load_queue().is_remembered(f"{5:064x}")


def test_a_refusal_scope_is_the_gates_whole_configuration() -> None:
    KEYS = {c: SecretKey(bytes([n]) * 32).public_key.hex for n, c in enumerate("abcde", 1)}
    base = Gate(
        agent=KEYS["a"],
        owner=KEYS["b"],
        kinds=frozenset({9, 14}),
        channels=frozenset(),
        mentions_required=True,
        mode="allowlist",
        allowlist=frozenset({KEYS["c"], KEYS["d"]}),
    )
    scope = refusal_scope(base)
    assert len(scope) == 16 and int(scope, 16) >= 0
    assert refusal_scope(replace(base, allowlist=frozenset({KEYS["d"], KEYS["c"]}))) == scope
    changes = [
        {"mode": "anyone"},
        {"allowlist": frozenset({KEYS["c"]})},
        {"kinds": frozenset({9})},
        {"shard": Shard(0, 2)},
        {"plaintext_dm": True},
        {"owner": KEYS["e"]},
    ]
    scopes = {refusal_scope(replace(base, **c)) for c in changes}  # type: ignore[arg-type]
    assert scope not in scopes and len(scopes) == len(changes)


def test_a_changed_session_scope_moves_the_stored_events_to_their_keys(tmp_path: Path) -> None:
    store = BotStore(tmp_path)
    q = store.journal.load_queue()
    first, second = msg(ALICE, 100), msg(BOB, 101)
    reply = msg(BOB, 102, thread=first.id)
    for i, event in enumerate((first, second, reply)):
        push(store, q, event, float(i))
    store.close()
    by_thread = BotStore(tmp_path).journal.load_queue(channel_of=keyer("thread"))
    assert sorted(by_thread.channel_names()) == sorted([f"room/{first.id}", f"room/{second.id}"])
    assert by_thread.pending(f"room/{first.id}") == 2
    back = BotStore(tmp_path).journal.load_queue()  # and back to one queue per channel
    assert back.channel_names() == ["room"] and back.pending("room") == 3
