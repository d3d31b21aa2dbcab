"""The bot's worker: it flushes the dispatch queue, starts each batch as a turn, and plans its
next look at the queue — at a wake (the queue changed), and by a timer that rings at least
every ``POLL`` seconds (backoffs end without a wake) and when the first settle window ends.  An
admitted event that cannot change what that look does costs no wake of its own
(docs/queue.md, "Cost at depth")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from nostr_buzz.core.queue import Batch, DispatchQueue

__all__ = ["POLL", "Worker"]

#: The worker re-checks the queue at least this often (backoffs end without a wake-up).
POLL: Final = 0.5


class Worker:
    """Looks at the bot's queue and starts its batches (see the module docstring)."""

    def __init__(
        self,
        queue: DispatchQueue,
        window: float,
        clock: Callable[[], float],
        wake: Callable[[], None],
        start: Callable[[Batch], object],
    ) -> None:
        #: The queue, its settle window (``coalesce_window``), and the bot's clock.
        self.queue, self.window, self._clock = queue, window, clock
        #: Wakes the worker; starts a flushed batch as a turn.
        self._wake, self._start = wake, start
        self._look: asyncio.TimerHandle | None = None  # the planned look, while it waits

    async def work(self, stop: asyncio.Event, wake: asyncio.Event) -> None:
        """Flush batches and start each until ``stop``; ``wake`` says the queue changed."""
        window = self.window
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None  # sets ``wake`` when the queue is due a look
        self._look = None
        try:
            while not stop.is_set():
                now = self._clock()
                batch = self.queue.flush_next(now, settle=window)
                if batch is not None:
                    self._start(batch)
                    continue
                # Nothing to run, or a burst may still be arriving (bounded by the window).
                settles = self.queue.next_settle(now, settle=window)
                due = loop.time() + min(POLL, settles or POLL)
                # A timer that rings no later is kept: an early look costs nothing, and a wake
                # per admitted event then arms no timer of its own (docs/queue.md, "Cost at
                # depth").
                if timer is None or timer.when() > due or timer.when() <= loop.time():
                    if timer is not None:
                        timer.cancel()
                    timer = loop.call_at(due, wake.set)
                wake.clear()
                self._look = timer
                await wake.wait()
                self._look = None
        finally:
            self._look = None
            if timer is not None:
                timer.cancel()

    def admitted(self, channel: str, now: float) -> None:
        """An event was queued for ``channel`` at ``now``: wake the worker, unless the look it
        has planned comes before the event could change anything — the channel is running a
        batch (its end wakes the worker), or the push holds it for the settle window at least
        that long (docs/queue.md, "Cost at depth").  A flood then costs no look per event."""
        look = self._look
        if look is not None:
            left = look.when() - asyncio.get_running_loop().time()
            if left > 0 and (
                self.queue.in_flight(channel)
                or self.queue.settle_wait(channel, now, settle=self.window) >= left
            ):
                return
        self._wake()
