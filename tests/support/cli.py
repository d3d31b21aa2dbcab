"""``buzz`` in process: ``main(argv)`` with its output captured, and relays kept on a background
loop while it runs (``main`` runs its own event loop, so the relays live in another thread)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import pytest

from nostr_buzz.cli.app import main
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from tests.support.hostile_relay import tarpit
from tests.support.relays import free_port
from tests.support.scripted_relay import ScriptedRelay, scripted_relay

T = TypeVar("T")
WAIT = 15.0  # bound on any call into the background loop


class BackgroundLoop:
    """An asyncio loop in a daemon thread, for relays that sync tests talk to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self._exits: list[AbstractAsyncContextManager[Any]] = []

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT)

    def enter(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Enter ``manager`` on the loop; it is exited by ``close``."""
        value = self.call(manager.__aenter__())
        self._exits.append(manager)
        return value

    def relay(self, script: Any, on_connect: Any = None) -> ScriptedRelay:
        """A scripted relay (tests/support/scripted_relay.py) living on this loop."""
        return self.enter(scripted_relay(script, on_connect))

    def tarpit(self) -> str:
        """A relay that accepts connections and never answers, living on this loop."""
        return self.enter(tarpit())

    def close(self) -> None:
        while self._exits:
            self.call(self._exits.pop().__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


def buzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``buzz ARGV`` in process: exit code, stdout, stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def dead_url() -> str:
    """A relay URL on 127.0.0.1 where nothing listens."""
    return f"ws://127.0.0.1:{free_port()}"


def publish(bg: BackgroundLoop, url: str, event: Event) -> None:
    """Publish ``event`` to the relay at ``url`` from the background loop; the relay accepts it."""
    result = bg.call(RelayPool([url], timeout=5).publish(event))
    assert result.ok, result.verdicts
