""":class:`PluginTasks`: what a :class:`~nostr_buzz.bot.plugin.BuzzPlugin` runs on the event
loop, and how it all stops.

Its three signals (stop; stop the retry loop; wake the worker), its two loops (the worker and
the retry loop), the tasks it spawns (turns, sends, steers) and the subscription it serves
until stopped.  Closing cancels the worker and the running turns at once (their batches run
again after a restart, from the state database) and gives sends and steers a bounded wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

__all__ = ["PluginTasks"]

#: Names of the tasks that run a turn: cancelled at once on close.
_TURN_PREFIX = "buzz-turn"


class PluginTasks:
    """The plugin's signals and tasks (see the module docstring)."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.delivery_stop = asyncio.Event()
        self.wake = asyncio.Event()
        self._spawned: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of the plugin's (kept until it ends, cancelled on close)."""
        task = asyncio.create_task(coro, name=name)
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)
        return task

    def start_loops(
        self, worker: Coroutine[Any, Any, None], retry: Coroutine[Any, Any, None]
    ) -> None:
        """The worker (turns from the queue) and the retry loop (the outbox)."""
        self._loops = [
            asyncio.create_task(worker, name="buzz-worker"),
            asyncio.create_task(retry, name="buzz-retry"),
        ]

    async def serve(self, listening: Coroutine[Any, Any, None]) -> tuple[bool, Exception | None]:
        """Run ``listening`` until it ends or :attr:`stop` is set.  Whether it ended on its
        own (the subscription was lost), and the error it ended with, if any."""
        subscription = asyncio.create_task(listening, name="buzz-subscription")
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait({subscription, stopper}, return_when=asyncio.FIRST_COMPLETED)
        lost = subscription.done() and not self.stop.is_set()
        for task in (subscription, stopper):
            task.cancel()
        outcomes = await asyncio.gather(subscription, stopper, return_exceptions=True)
        return lost, outcomes[0] if isinstance(outcomes[0], Exception) else None

    async def close(self, relay_timeout: float) -> None:
        """Set every signal; cancel the worker and the running turns; give sends and steers
        (each bounded by its own timeout) a little longer than ``relay_timeout``, then cancel
        them; wait a bounded time for all of it to end."""
        self.stop.set()
        self.delivery_stop.set()
        self.wake.set()
        if self._loops:
            self._loops[0].cancel()
        turns = [t for t in self._spawned if t.get_name().startswith(_TURN_PREFIX)]
        for task in turns:
            task.cancel()
        others = [t for t in self._spawned if t not in turns]
        if others:
            await asyncio.wait(others, timeout=relay_timeout + 3)
            for task in others:
                task.cancel()
        pending = [*self._loops, *self._spawned]
        if pending:
            await asyncio.wait(pending, timeout=relay_timeout + 5)
