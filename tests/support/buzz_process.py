"""Helpers for tests that run ``buzz`` as real processes: a ``buzz relay`` subprocess and a
runner that starts ``buzz`` with a clean environment (no BUZZ_* from the machine)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

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
