"""The bound on live agent sessions (docs/bot.md, "Live sessions", ``[sessions] max_live``).

A session that must open (a new one, or one continued from its receipt) first takes a slot:
while the sessions open, opening and closing fill ``max_live``, the least recently used idle
one (no turn running in it) is closed — ``session/close`` where the agent advertises it, its
receipt kept, so its next turn continues it as after a restart — and when every open session
is busy the turn waits until one is free.  Closing ones count until the agent has answered, so
the agent never holds more than ``max_live`` sessions of this bot at once.

The sessions themselves stay in the caller's dict, in use order (a used session moves to the
end: :func:`touch`); this module only counts and chooses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

__all__ = ["LiveSessions", "touch"]

S = TypeVar("S")


def touch(sessions: dict[str, S], key: str) -> S | None:
    """``key``'s session, moved to the end of ``sessions`` (the most recently used)."""
    session = sessions.pop(key, None)
    if session is not None:
        sessions[key] = session
    return session


class LiveSessions:
    """Slots for at most ``max_live`` open sessions (see the module docstring)."""

    def __init__(self, max_live: int) -> None:
        self.max_live = max_live
        self._opening = 0
        #: Keys whose session is being closed, and what is set once the agent answered.
        self._closing: dict[str, asyncio.Event] = {}
        self._changed = asyncio.Event()

    def notify(self) -> None:
        """A slot may have freed (a session closed, forgotten or given up opening)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def closed(self, key: str) -> None:
        """Return once no close of ``key``'s session is on the wire (its next open must not
        overtake the close)."""
        done = self._closing.get(key)
        if done is not None:
            await done.wait()

    @contextlib.asynccontextmanager
    async def slot(
        self,
        sessions: dict[str, S],
        busy: Callable[[str], bool],
        close: Callable[[str, S], Awaitable[None]],
    ) -> AsyncIterator[None]:
        """Hold a slot while a session opens (the caller puts it in ``sessions`` before
        leaving); idle sessions (``busy`` False) are closed, least recently used first, to
        make room."""
        while len(sessions) + self._opening + len(self._closing) >= self.max_live:
            victim = next((k for k in sessions if not busy(k)), None)
            if victim is not None:
                await self._close(victim, sessions.pop(victim), close)
                continue
            changed = self._changed
            await changed.wait()
        self._opening += 1
        try:
            yield
        finally:
            self._opening -= 1
            self.notify()

    async def _close(
        self, key: str, session: S, close: Callable[[str, S], Awaitable[None]]
    ) -> None:
        done = self._closing[key] = asyncio.Event()
        try:
            await close(key, session)
        finally:
            del self._closing[key]
            done.set()
            self.notify()
