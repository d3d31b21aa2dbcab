"""The fast loop: tests under tests/unit start no process and open no socket.

Every test here runs with ``socket.connect``/``bind`` and ``subprocess.Popen`` refused, so a
test that needs a relay or a ``buzz`` process fails at once with a message saying where it
belongs (tests/e2e).  Socket pairs (the event loop's self-pipe) are still allowed.
"""

from __future__ import annotations

import socket
import subprocess
from typing import NoReturn

import pytest


def _refuse(*_args: object, **_kwargs: object) -> NoReturn:
    raise AssertionError(
        "a unit test started a process or opened a network socket: it belongs in tests/e2e"
    )


@pytest.fixture(autouse=True)
def _no_processes_or_network(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, name, _refuse)
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse)
