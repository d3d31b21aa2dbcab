"""The agent's process group, remembered so that a bot killed outright can end it next time.

The driver starts every agent in a process group of its own and a graceful stop ends the whole
group.  A bot that is SIGKILLed (a crash, the OOM killer, ``kill -9``) ends nothing: the agent's
direct child usually exits on end-of-file, but a launcher's descendants (codex-acp's native
binary, say) keep running, one more orphan group per restart.

So each agent is started with a random token in its environment (:data:`TOKEN_ENV`; every
descendant inherits it, and the ``[agent] user`` launcher keeps it) and the bot records the
group's id and that token in a small private file of its state directory (:data:`RECORD_FILE`).
A graceful stop removes the record.  On the next start, before its agent starts, the bot looks
for the recorded group (:func:`end_orphan_group`): when processes of that group still exist and
at least one of them carries the recorded token (read from ``/proc/<pid>/environ``), the group
is sent SIGTERM, given a bounded wait, then SIGKILL.  A group none of whose processes carries the
token is never signalled (process ids are reused).  This needs Linux's ``/proc``: where it is
absent or unreadable nothing is signalled, and the outcome says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec

from nostr_buzz.errors import StateError
from nostr_buzz.io.filemodes import open_private, read_private

__all__ = [
    "RECORD_FILE",
    "TOKEN_ENV",
    "GroupRecord",
    "Sweep",
    "clear_record",
    "end_orphan_group",
    "group_members",
    "new_token",
    "read_record",
    "wait_group_gone",
    "write_record",
]

#: The environment variable that marks every process of an agent's group.
TOKEN_ENV: Final = "BUZZ_AGENT_TOKEN"
#: The record's file name in the state directory (next to the state database).
RECORD_FILE: Final = "agent-group.json"
_MAX_RECORD: Final = 4096


class GroupRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The running agent's process group id and the token its processes carry."""

    pgid: int
    token: str

    def __repr__(self) -> str:  # the token is not a secret, but it has no business in logs
        return f"GroupRecord(pgid={self.pgid})"


def new_token() -> str:
    """A fresh random token (128 bits, hex) for one agent start."""
    return secrets.token_hex(16)


def write_record(state_dir: Path, record: GroupRecord) -> None:
    """Record ``record`` durably (written aside, synced, renamed over the old one); private
    (``0600`` in a ``0700`` directory).  :class:`StateError` when it cannot be written."""
    path = state_dir / RECORD_FILE
    aside = path.with_name(path.name + ".new")
    try:
        with open_private(aside, append=False) as fh:
            fh.write(msgspec.json.encode(record))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(aside, path)
    except OSError as exc:
        raise StateError(
            f"cannot record the agent's process group in {path}: {exc.strerror or exc}"
        ) from None


def read_record(state_dir: Path) -> GroupRecord | None:
    """The recorded group, or None when there is no record or it is unreadable or malformed
    (a record torn by a crash names no group worth signalling)."""
    try:
        with read_private(state_dir / RECORD_FILE) as fh:
            data = fh.read(_MAX_RECORD + 1)
    except OSError:
        return None
    if len(data) > _MAX_RECORD:
        return None
    try:
        record = msgspec.json.decode(data, type=GroupRecord)
    except msgspec.DecodeError:  # ValidationError included
        return None
    return record if record.pgid > 1 and record.token else None


def clear_record(state_dir: Path) -> None:
    """Remove the record (a graceful stop: the group was ended)."""
    with contextlib.suppress(OSError):
        (state_dir / RECORD_FILE).unlink(missing_ok=True)


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """The live (not zombie) processes of group ``pgid``, from ``proc``.  :class:`OSError` when
    ``proc`` cannot be listed."""
    members: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp …": comm may hold anything, so split after its last ')'.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) < 3 or fields[0] == "Z" or not fields[2].isdigit():
            continue
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _carries(pid: int, token: str, proc: Path) -> bool:
    """True when process ``pid`` was started with ``TOKEN_ENV=token`` (an unreadable
    environment — another user's process — does not carry it)."""
    try:
        environ = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{TOKEN_ENV}={token}".encode() in environ.split(b"\0")


@dataclass(frozen=True)
class Sweep:
    """What :func:`end_orphan_group` did.

    ``outcome``: ``none`` (no process of the group is left), ``killed`` (``signal`` is the
    last signal it needed; ``left`` processes outlived the bounded waits), ``spared`` or
    ``unchecked`` (nothing signalled: ``reason`` says why).
    """

    outcome: Literal["none", "killed", "spared", "unchecked"]
    pgid: int
    processes: int = 0
    signal: str | None = None
    left: int = 0
    reason: str | None = None

    def payload(self) -> dict[str, object]:
        """The diagnostic's payload."""
        if self.outcome == "killed":
            return {
                "pgid": self.pgid,
                "processes": self.processes,
                "signal": self.signal,
                "left": self.left,
            }
        return {"pgid": self.pgid, "processes": self.processes, "reason": self.reason}


def _members(pgid: int, proc: Path) -> list[int]:
    """The group's live processes; where ``proc`` cannot be listed, ``[pgid]`` while the kernel
    still knows the group (its members are then unknown) and ``[]`` once it does not."""
    try:
        return group_members(pgid, proc)
    except OSError:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]


async def wait_group_gone(pgid: int, within: float, proc: Path = Path("/proc")) -> list[int]:
    """Wait (bounded) until no live process of the group is left (SIGKILL is not instant);
    those still there."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        members = _members(pgid, proc)
        if not members or loop.time() >= deadline:
            return members
        await asyncio.sleep(0.01)


async def end_orphan_group(
    record: GroupRecord, *, proc: Path = Path("/proc"), grace: float = 2.0
) -> Sweep:
    """End the recorded group if (and only if) one of its processes carries the token:
    SIGTERM, up to ``grace`` seconds, SIGKILL, up to ``grace`` more.  Never raises."""
    pgid = record.pgid
    if pgid == os.getpgrp():
        return Sweep("spared", pgid, reason="it is this bot's own process group")
    try:
        members = group_members(pgid, proc)
    except OSError as exc:
        reason = f"{proc} is absent or unreadable ({exc.strerror or exc}); Linux only"
        return Sweep("unchecked", pgid, reason=reason)
    if not members:
        return Sweep("none", pgid)
    if not any(_carries(pid, record.token, proc) for pid in members):
        return Sweep(
            "spared",
            pgid,
            len(members),
            reason="no process of the group carries the recorded token (the id was reused)",
        )
    sent = "SIGTERM"
    try:
        os.killpg(pgid, signal.SIGTERM)
        left = await wait_group_gone(pgid, grace, proc)
        if left:
            sent = "SIGKILL"
            os.killpg(pgid, signal.SIGKILL)
            left = await wait_group_gone(pgid, grace, proc)
    except ProcessLookupError:
        left = []
    except PermissionError as exc:
        return Sweep(
            "spared", pgid, len(members), reason=f"not allowed to signal it ({exc.strerror})"
        )
    return Sweep("killed", pgid, len(members), signal=sent, left=len(left))
