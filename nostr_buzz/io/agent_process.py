"""The agent's process group: spawned with a JSON-RPC connection on its stdio, ended whole.

Every agent runs in a new session and process group (its pid is the group id): launchers such
as codex-acp's npm script neither forward SIGTERM nor make their child exit when its stdin
closes (docs/acp-adapters.md, "Processes"), so stopping an agent closes its stdin, then
signals the whole group (SIGTERM, then SIGKILL) and waits until none of it is left.  Each start
puts a fresh token in ``BUZZ_AGENT_TOKEN`` and hands the group's id and that token to
``on_spawn`` before anything is said to the agent, so a bot killed outright can end the group
on its next start (:mod:`nostr_buzz.io.agent_group`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from acp.connection import Connection
from acp.transports import default_environment

from nostr_buzz.errors import AgentError, BuzzError
from nostr_buzz.io.agent_group import TOKEN_ENV, GroupRecord, new_token, wait_group_gone
from nostr_buzz.io.filemodes import open_private
from nostr_buzz.io.run_as import launcher_argv

__all__ = ["STDIO_LIMIT", "AgentCommand", "AgentProcess", "end_group", "kill_group", "spawn_group"]

#: Lines from the agent may be large (embedded resources); the package's default is 64 KiB.
STDIO_LIMIT: Final = 50 * 1024 * 1024


@contextlib.asynccontextmanager
async def spawn_group(
    handler: Any,
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | Path | None,
    stderr: int,
    shutdown_timeout: float,
) -> AsyncIterator[tuple[Connection, asyncio.subprocess.Process]]:
    """The agent in a new session and process group (its pid is the group id), with a
    JSON-RPC connection on its stdio; on exit the whole group is ended (:func:`end_group`).

    The environment is the package's trimmed base (HOME, LOGNAME, PATH, SHELL, TERM, USER)
    plus ``env``."""
    merged = default_environment()
    merged.update(env)
    process = await asyncio.create_subprocess_exec(
        command,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=merged,
        cwd=str(cwd) if cwd is not None else None,
        limit=STDIO_LIMIT,
        start_new_session=True,
    )
    try:
        if process.stdin is None or process.stdout is None:  # pragma: no cover - PIPE given
            raise OSError("the agent's stdio could not be opened")
        conn = Connection(handler, process.stdin, process.stdout)
        try:
            yield conn, process
        finally:
            with contextlib.suppress(Exception):
                await conn.close()
    finally:
        await end_group(process, shutdown_timeout)


async def _exited(process: asyncio.subprocess.Process, within: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), within)
    return process.returncode is not None


async def end_group(process: asyncio.subprocess.Process, grace: float) -> None:
    """Close the agent's stdin (the ACP way to ask it to leave), give it ``grace`` seconds,
    then SIGTERM its group, ``grace`` more, then SIGKILL; finally SIGKILL whatever is left of
    the group (children that outlived the leader, or that ignore both EOF and SIGTERM)."""
    stdin = process.stdin
    if stdin is not None:
        with contextlib.suppress(Exception):
            stdin.close()
        with contextlib.suppress(Exception):
            await stdin.wait_closed()
    if not await _exited(process, grace):
        _signal_group(process.pid, signal.SIGTERM)
        if not await _exited(process, grace):
            _signal_group(process.pid, signal.SIGKILL)
            await process.wait()
    kill_group(process.pid)
    await wait_group_gone(process.pid, grace)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_group(pgid: int) -> None:
    """SIGKILL every process left in the agent's group (none: nothing happens)."""
    _signal_group(pgid, signal.SIGKILL)


@dataclass(frozen=True)
class AgentCommand:
    """What to run as the agent: ``command`` and ``args``, the environment it gets, where it
    runs, as which OS user, and where its stderr goes.

    ``env_names`` are copied from this process's environment at each start (absent ones
    skipped); ``env`` gives explicit values; ``BUZZ_PRIVATE_KEY`` never reaches the agent,
    whatever is asked.  The agent's stderr goes to ``log_path`` (appended, 0600, no symlink) or
    is discarded, never to a pipe that could fill up.  ``user``: the agent runs as that OS user
    (:mod:`nostr_buzz.io.run_as`).
    """

    command: str
    args: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    cwd: str | Path | None = None
    log_path: Path | None = None
    user: str | None = None

    def child_env(self) -> dict[str, str]:
        """The environment the agent gets on top of the package's trimmed base."""
        env = {name: os.environ[name] for name in self.env_names if name in os.environ}
        env.update(self.env)
        env.pop("BUZZ_PRIVATE_KEY", None)  # the bot's key is never the agent's
        return env

    def argv(self) -> list[str]:
        """The spawn's argv; with ``user``, the launcher's: it enters ``cwd`` itself once it has
        dropped to that user, so the spawn happens in ``/`` (see :mod:`nostr_buzz.io.run_as`)."""
        if self.user is None:
            return [self.command, *self.args]
        cwd = str(self.cwd) if self.cwd is not None else None
        program, launcher_args = launcher_argv(self.user, self.command, self.args, cwd)
        return [program, *launcher_args]

    @property
    def spawn_cwd(self) -> str | Path | None:
        """Where the spawn happens: ``cwd``, or ``/`` for a launcher (see :meth:`argv`)."""
        return self.cwd if self.user is None else "/"


class AgentProcess:
    """One agent command (:class:`AgentCommand`), started and stopped as a process group;
    ``on_spawn`` gets each new group's record before anything is said to the agent."""

    def __init__(
        self,
        spec: AgentCommand,
        *,
        shutdown_timeout: float = 2.0,
        on_spawn: Callable[[GroupRecord], None] | None = None,
    ) -> None:
        self.spec = spec
        self.shutdown_timeout = shutdown_timeout
        self._on_spawn = on_spawn
        self._stack: AsyncExitStack | None = None
        self._log: IO[bytes] | None = None
        self.conn: Connection | None = None
        self.process: asyncio.subprocess.Process | None = None
        self.lost = False  # the connection ended (agent exit) before close()
        self.generation = 0  # one per start

    @property
    def started(self) -> bool:
        return self._stack is not None

    @property
    def alive(self) -> bool:
        """Started, and the subprocess has not exited."""
        process = self.process
        return process is not None and process.returncode is None and not self.lost

    async def spawn(self, handler: Any) -> Connection:
        """Start the agent with ``handler`` answering what it sends; :class:`AgentError` when
        it cannot start or ``on_spawn`` refuses it."""
        spec = self.spec
        program, *arguments = spec.argv()  # first: a refused launcher spawns nothing
        stack = AsyncExitStack()
        stderr: int = subprocess.DEVNULL
        if spec.log_path is not None:
            self._log = stack.enter_context(open_private(spec.log_path))
            stderr = self._log.fileno()
        token = new_token()
        try:
            conn, process = await stack.enter_async_context(
                spawn_group(
                    handler,
                    program,
                    arguments,
                    env={**spec.child_env(), TOKEN_ENV: token},
                    cwd=spec.spawn_cwd,
                    stderr=stderr,
                    shutdown_timeout=self.shutdown_timeout,
                )
            )
        except OSError as exc:
            await stack.aclose()
            self._log = None
            raise AgentError(
                f"cannot start the agent {spec.command!r}: {exc.strerror or exc}; "
                "check the agent command and working directory"
            ) from None
        self._stack, self.conn, self.process = stack, conn, process
        self.generation += 1
        if self._on_spawn is not None:
            try:
                self._on_spawn(GroupRecord(pgid=process.pid, token=token))
            except BuzzError as exc:
                await self.close()
                raise AgentError(f"the agent was stopped: {exc}") from None
        return conn

    async def close(self) -> tuple[bool, int | None]:
        """End the group; (whether an exit is still to be reported, its return code)."""
        stack, self._stack = self._stack, None
        self.conn = None
        process, self.process = self.process, None
        if stack is not None:
            with contextlib.suppress(Exception):
                await stack.aclose()
        self._log = None
        lost, self.lost = self.lost, False
        return (process is not None and not lost), (process.returncode if process else None)

    async def reap(self) -> tuple[bool, int | None]:
        """The connection is gone: wait (bounded) for the exit status and end what the dead
        agent left in its group; (whether that is news, its return code)."""
        process = self.process
        if process is None or self.lost:
            return False, None
        self.lost = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), self.shutdown_timeout)
        kill_group(process.pid)
        await wait_group_gone(process.pid, self.shutdown_timeout)
        return True, process.returncode
