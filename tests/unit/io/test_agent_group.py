"""The agent group record and the checks made before a leftover group is signalled
(io/agent_group.py).  Ending a real group is shown with real processes in
tests/e2e/faults/test_orphan_group.py; here ``/proc`` is a directory the test writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nostr_buzz.errors import StateError
from nostr_buzz.io.agent_group import (
    RECORD_FILE,
    TOKEN_ENV,
    GroupRecord,
    clear_record,
    end_orphan_group,
    group_members,
    new_token,
    read_record,
    write_record,
)

NO_SUCH_GROUP = 999_999_999  # above any pid_max: a stray signal would find nobody


def _proc(root: Path, pid: int, pgid: int, *, state: str = "S", env: bytes = b"") -> None:
    entry = root / str(pid)
    entry.mkdir(parents=True)
    # A command name may hold ") " and digits: the fields are read after its last ')'.
    (entry / "stat").write_text(f"{pid} (odd) 1 2) {state} 1 {pgid} {pgid} 0 -1\n")
    (entry / "environ").write_bytes(env)


def test_the_record_is_private_round_trips_and_is_cleared(tmp_path: Path) -> None:
    state = tmp_path / "state"
    record = GroupRecord(pgid=4321, token=new_token())
    write_record(state, record)
    assert read_record(state) == record
    assert stat.S_IMODE((state / RECORD_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert record.token not in repr(record)
    clear_record(state)
    assert read_record(state) is None
    clear_record(state)  # nothing to clear: no error


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b'{"pgid": 12}', b'{"pgid": "12", "token": "t"}', b'{"pgid": 1, "token": "t"}',
     b'{"pgid": 12, "token": ""}', b'{"pgid": 12, "token": "t", "more": 1}',
     b'{"pgid": 12, "token": "' + b"a" * 5000 + b'"}'],
)  # fmt: skip
def test_a_torn_or_foreign_record_names_no_group(tmp_path: Path, data: bytes) -> None:
    (tmp_path / RECORD_FILE).write_bytes(data)
    assert read_record(tmp_path) is None


def test_an_unwritable_record_is_a_state_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StateError, match="cannot record the agent's process group"):
        write_record(tmp_path / "file", GroupRecord(pgid=12, token="t"))


def test_group_members_reads_the_group_of_each_live_process(tmp_path: Path) -> None:
    _proc(tmp_path, 10, NO_SUCH_GROUP)
    _proc(tmp_path, 11, NO_SUCH_GROUP, state="Z")  # a zombie is gone already
    _proc(tmp_path, 12, 77)
    (tmp_path / "self").mkdir()
    assert group_members(NO_SUCH_GROUP, tmp_path) == [10]


async def test_a_group_without_the_recorded_token_is_spared(tmp_path: Path) -> None:
    token = new_token()
    other = f"{TOKEN_ENV}={new_token()}\0PATH=/bin\0".encode()
    _proc(tmp_path, 10, NO_SUCH_GROUP, env=other)
    _proc(tmp_path, 11, NO_SUCH_GROUP, env=f"X{TOKEN_ENV}={token}\0".encode())  # not the name
    sweep = await end_orphan_group(GroupRecord(NO_SUCH_GROUP, token), proc=tmp_path)
    assert (sweep.outcome, sweep.processes) == ("spared", 2)
    assert "token" in str(sweep.payload()["reason"])


async def test_nothing_is_signalled_without_proc(tmp_path: Path) -> None:
    sweep = await end_orphan_group(GroupRecord(NO_SUCH_GROUP, "t"), proc=tmp_path / "absent")
    assert sweep.outcome == "unchecked"
    assert "absent or unreadable" in str(sweep.reason)


async def test_a_group_that_is_gone_needs_nothing(tmp_path: Path) -> None:
    _proc(tmp_path, 12, 77)
    sweep = await end_orphan_group(GroupRecord(NO_SUCH_GROUP, "t"), proc=tmp_path)
    assert sweep.outcome == "none"


async def test_the_bots_own_group_is_never_signalled() -> None:
    sweep = await end_orphan_group(GroupRecord(os.getpgrp(), "t"))
    assert sweep.outcome == "spared"
    assert "own process group" in str(sweep.reason)
