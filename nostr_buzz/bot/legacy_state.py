"""A state directory written by an earlier nostr-buzz (``queue.json``, ``bot-state.json`` and
``outbox.sqlite3``), imported once into the state database when that is created
(:class:`~.state.BotStore`); the old files are renamed with an ``.imported`` suffix, and a file
that cannot be read is kept aside (``.corrupt``) and reported, never silently dropped."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Annotated, Final

import msgspec

from nostr_buzz.core.queue import REMEMBERED_IDS, DispatchQueue
from nostr_buzz.errors import ConfigError, QueueError
from nostr_buzz.io.filemodes import read_private
from nostr_buzz.io.outbox import Outbox

from .queue_journal import QueueJournal
from .state_db import StateDatabase
from .state_table import REMEMBERED_COMMANDS

__all__ = ["LEGACY_FILES", "import_legacy"]

#: What earlier versions kept in the state directory: the queue snapshot, the position and
#: commands, the metric outbox.
LEGACY_FILES: Final = ("queue.json", "bot-state.json", "outbox.sqlite3")


def import_legacy(
    store: StateDatabase, journal: QueueJournal, outbox: Outbox, state_dir: Path
) -> list[str]:
    """Import an earlier version's files once (docs/bot.md) into ``store``, its queue's
    ``journal`` and its ``outbox``;
    what cannot be read is set aside, and the problems met are returned (for a diagnostic)."""
    queue_file, state_file, outbox_file = (state_dir / name for name in LEGACY_FILES)
    problems: list[str] = []
    with store.transaction():
        if queue_file.exists():
            try:
                queue = DispatchQueue.restore(_read(queue_file))
            except (OSError, ConfigError, QueueError) as exc:
                _set_aside(problems, queue_file, f"queue.json: {exc}")
            else:
                _import_queue(store, journal, queue)
                _rename(queue_file, ".imported")
        if state_file.exists():
            try:
                legacy = msgspec.json.decode(_read(state_file), type=_LegacyState)
            except (OSError, ConfigError, msgspec.DecodeError) as exc:
                _set_aside(problems, state_file, f"bot-state.json: {exc}")
            else:
                if legacy.position is not None:
                    store.save_position(legacy.position)
                store.remember(legacy.commands, "command", REMEMBERED_COMMANDS)
                _rename(state_file, ".imported")
        if outbox_file.exists():
            try:
                with Outbox(outbox_file) as old:
                    for entry in old.entries():
                        outbox.add(entry.event, now=entry.added_at)
            except Exception as exc:  # any trouble with the old file: keep it, report it
                _set_aside(problems, outbox_file, f"outbox.sqlite3: {exc}")
            else:
                for suffix in ("", "-wal", "-shm"):
                    old_file = state_dir / (LEGACY_FILES[2] + suffix)
                    if old_file.exists():
                        _rename(old_file, ".imported")
    return problems


def _import_queue(store: StateDatabase, journal: QueueJournal, queue: DispatchQueue) -> None:
    for name in queue.channel_names():
        state = queue.channel_state(name)
        assert state is not None
        for i, stored in enumerate([*state.pending, *state.cancelled]):
            ord_ = i - len(state.pending) if i >= len(state.pending) else None
            journal.store_row(name, stored, ord_)
        journal.sync_channel(queue, name)
    store.remember(queue.remembered_ids(), "event", REMEMBERED_IDS)
    store.set_meta("next_seq", queue.next_seq)


def _set_aside(problems: list[str], path: Path, problem: str) -> None:
    problems.append(problem)
    _rename(path, ".corrupt")


class _LegacyState(msgspec.Struct):
    """``bot-state.json`` of an earlier nostr-buzz: the position and the obeyed owner commands
    (other fields are ignored)."""

    position: Annotated[int, msgspec.Meta(ge=0)] | None = None
    commands: list[str] = msgspec.field(default_factory=list)


def _read(path: Path) -> bytes:
    """An earlier version's file, never read through a symbolic link (ConfigError)."""
    with read_private(path) as fh:
        return fh.read()


def _rename(path: Path, suffix: str) -> None:
    with contextlib.suppress(OSError):
        os.replace(path, path.with_name(path.name + suffix))
