"""One event on its way to several relays: each relay's verdict as it comes
(:meth:`~nostr_buzz.io.pool.RelayPool.start_publish`).

A :class:`PublishRun` holds one task per relay, each bounded by the pool's timeout.  Its
owner reads what is in once enough relays took the event (:meth:`PublishRun.first`: the turn
goes on after the first acceptance), then either waits for the others
(:meth:`PublishRun.rest`: the outbox's way, so that the slower relays get the event as well)
or abandons them (:meth:`PublishRun.cancel`: a plain :meth:`RelayPool.publish`).  A relay
that is merely slower than another is never a failure: only its own refusal, error or
timeout is (io/connections.py backs off on those alone).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .relay import Verdict

__all__ = ["PublishResult", "PublishRun", "left_verdict"]


@dataclass
class PublishResult:
    """Each relay's verdict; ``ok`` when at least ``min_ok`` relays have the event."""

    event_id: str
    verdicts: dict[str, Verdict]
    min_ok: int = 1

    @property
    def accepted(self) -> list[str]:
        """Relays that accepted the event or already had it."""
        return [url for url, v in self.verdicts.items() if v.ok]

    @property
    def failed(self) -> list[str]:
        return [url for url, v in self.verdicts.items() if not v.ok]

    @property
    def ok(self) -> bool:
        return len(self.accepted) >= self.min_ok


def left_verdict(url: str, event_id: str, grace: float | None) -> Verdict:
    """The verdict of a relay not waited for (a plain publish's grace period ended)."""
    return Verdict(
        url,
        event_id,
        False,
        False,
        "error:",
        f"not waited for: no OK within {grace:g} s of the first",
    )


class PublishRun:
    """The sends of one event, one task per relay (made by ``RelayPool.start_publish``)."""

    def __init__(self, event_id: str, tasks: dict[str, asyncio.Task[Verdict]]) -> None:
        self.event_id = event_id
        self._tasks = tasks
        self._given: set[str] = set()

    @property
    def relays(self) -> list[str]:
        return list(self._tasks)

    @property
    def pending(self) -> list[str]:
        """The relays that have not answered yet."""
        return [url for url, task in self._tasks.items() if not task.done()]

    def _verdict(self, url: str) -> Verdict:
        task = self._tasks[url]
        if task.cancelled():
            return Verdict(url, self.event_id, False, False, "error:", "cancelled")
        if (exc := task.exception()) is not None:
            why = f"send failed: {type(exc).__name__}: {exc}"
            return Verdict(url, self.event_id, False, False, "error:", why)
        return task.result()

    def _take(self) -> dict[str, Verdict]:
        """The verdicts in and not handed out before."""
        done = {u: self._verdict(u) for u, t in self._tasks.items() if t.done()}
        fresh = {u: v for u, v in done.items() if u not in self._given}
        self._given.update(fresh)
        return fresh

    async def first(self, min_ok: int = 1, grace: float | None = 0.0) -> dict[str, Verdict]:
        """The verdicts in once ``min_ok`` relays have the event and ``grace`` more seconds
        passed (``None``: every relay answered), or every relay answered."""
        loop = asyncio.get_running_loop()
        pending = {t for t in self._tasks.values() if not t.done()}
        accepted = sum(self._verdict(u).ok for u, t in self._tasks.items() if t.done())
        grace_end: float | None = None
        while pending:
            if grace is not None and grace_end is None and accepted >= min_ok:
                grace_end = loop.time() + grace
            wait = None if grace_end is None else grace_end - loop.time()
            if wait is not None and wait <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                break
            accepted += sum(self._verdict(u).ok for u, t in self._tasks.items() if t in done)
        return self._take()

    async def rest(self) -> dict[str, Verdict]:
        """Wait for the relays still working (each bounded by the pool's timeout); their
        verdicts."""
        if self._tasks:
            await asyncio.wait(self._tasks.values())
        return self._take()

    async def cancel(self) -> None:
        """Abandon the relays still working."""
        pending = [t for t in self._tasks.values() if not t.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
