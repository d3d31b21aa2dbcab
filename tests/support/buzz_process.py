"""Helpers for tests that run ``buzz`` as real processes: a ``buzz relay`` subprocess, a
runner that starts ``buzz`` with a clean environment (no BUZZ_* from the machine), and a
``buzz run`` bot whose stderr is read line by line."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from nostr_buzz.keys import SecretKey

START_TIMEOUT = 30.0
BUZZ = [sys.executable, "-m", "nostr_buzz"]
_URL = re.compile(r"ws://127\.0\.0\.1:\d+")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env.update(extra or {})
    return env


def c_locale_env() -> dict[str, str]:
    """The C locale with Python's UTF-8 mode and locale coercion off: stdout is ASCII."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIO"))}
    env.update(LANG="C", LC_ALL="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    return env


def buzz(
    *argv: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | Path | None = None,
    timeout: float = 60.0,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``buzz ARGV`` as a process; ``stdin``: its input (a file is redirected, as ``< FILE``)."""
    with contextlib.ExitStack() as stack:
        redirected = (
            {"stdin": stack.enter_context(stdin.open("rb"))}
            if isinstance(stdin, Path)
            else {"input": stdin if stdin is not None else b""}
        )
        return subprocess.run(
            [*BUZZ, *argv],
            capture_output=True,
            env=clean_env(env),
            timeout=timeout,
            check=False,
            cwd=cwd,
            **redirected,  # type: ignore[arg-type]
        )


@contextmanager
def relay_process() -> Iterator[str]:
    """A ``buzz relay`` subprocess on a free port; yields its ws:// URL."""
    proc = subprocess.Popen(
        [*BUZZ, "relay", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()  # printed once it listens
        assert _URL.fullmatch(line), line
        yield line
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Lines:
    """stderr of a process, line by line, each wait bounded.

    Read from the pipe's descriptor into a buffer of its own: a buffered ``readline`` after
    ``select`` could take two lines from the pipe and return one, and the next ``select`` would
    then wait for output that already came (a bot that printed its start line and went quiet)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.seen: list[str] = []
        self._pending = b""
        self._ended = False

    def _next_line(self, deadline: float) -> str | None:
        """The next whole line (the rest when the process ended), None at the deadline."""
        while b"\n" not in self._pending and not self._ended:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.stream], [], [], left)[0]:
                return None
            chunk = os.read(self.stream.fileno(), 65536)
            self._pending += chunk
            self._ended = not chunk
        line, sep, self._pending = self._pending.partition(b"\n")
        return (line + sep).decode() if line or sep else None

    def until(self, fragment: str, timeout: float = START_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while (line := self._next_line(deadline)) is not None:
            self.seen.append(line)
            if fragment in line:
                return line
        raise AssertionError(f"no line with {fragment!r} in {self.seen}")

    def rest(self, proc: subprocess.Popen[bytes], timeout: float) -> bytes:
        """What the process writes until it ends, after the lines :meth:`until` returned."""
        _, more = proc.communicate(timeout=timeout)
        rest, self._pending = self._pending + (more or b""), b""
        return rest


def run_bot(
    relay: str,
    agent_command: str,
    state_dir: Path,
    *,
    agent: SecretKey,
    owner: SecretKey,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``buzz run`` with ``agent``'s key for ``owner`` on ``relay`` (stdout and stderr piped,
    unbuffered; ``env``: more ``BUZZ_*`` settings); the caller ends it."""
    return subprocess.Popen(
        [*BUZZ, "run", "--agent", agent_command, "--state-dir", str(state_dir)],
        bufsize=0,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=clean_env(
            {
                "BUZZ_RELAYS": relay,
                "BUZZ_PRIVATE_KEY": agent.hex,
                "BUZZ_OWNER": owner.public_key.bech32,
                **(env or {}),
            }
        ),
        cwd=cwd,
    )
