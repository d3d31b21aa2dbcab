"""Publishing to one relay: the ``OK`` each ``EVENT`` and ``AUTH`` frame waits for (NIP-01).

:class:`OkWaiters` keeps a future per frame sent, by event id, and resolves it with the relay's
answer (:class:`Ok`) or with why none will come (:class:`Lost`); :class:`Verdict` is that
answer as the client returns it for a published event.  No I/O happens here: the relay client
sends the frames, the inbox (io/relay_inbox.py) hands each ``OK`` on.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

from nostr_buzz.nips import nip01

from .relay_wire import now


@dataclass(frozen=True)
class Verdict:
    """One relay's answer to one published event.

    ``accepted`` is the relay's ``OK`` boolean; ``duplicate`` is true for a ``duplicate:``
    prefix (the relay already has it).  Network failures and a missing ``OK`` give
    ``accepted=False, prefix="error:"`` with the reason in ``message``.
    """

    relay: str
    event_id: str
    accepted: bool
    duplicate: bool = False
    prefix: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        """The relay has the event (accepted now or already)."""
        return self.accepted or self.duplicate

    @property
    def reason(self) -> str:
        """Why the relay refused: its message, else its machine-readable prefix, else
        ``refused``."""
        return self.message or self.prefix or "refused"


class Ok(NamedTuple):
    """The relay's ``OK`` for a frame: its boolean and its message."""

    accepted: bool
    message: str


class Lost(NamedTuple):
    """No ``OK`` will come for a frame: the send failed, the wait timed out or the connection
    ended."""

    reason: str


#: The answer to a frame whose ``OK`` did not come by its deadline.
SILENT: Final = Lost("timeout: no OK from relay")


def verdict_of(url: str, event_id: str, answer: Ok | Lost) -> Verdict:
    """The verdict of ``url`` on ``event_id``: its ``OK``, or ``error:`` and why none came."""
    if isinstance(answer, Lost):
        return Verdict(url, event_id, False, False, "error:", answer.reason)
    prefix, _ = nip01.split_prefix(answer.message)
    return Verdict(url, event_id, answer.accepted, prefix == "duplicate:", prefix, answer.message)


class OkWaiters:
    """``EVENT`` and ``AUTH`` frames waiting for their ``OK`` (NIP-01), by event id."""

    def __init__(self) -> None:
        self._futures: OrderedDict[str, asyncio.Future[Ok | Lost]] = OrderedDict()

    def add(self, event_id: str) -> tuple[str, asyncio.Future[Ok | Lost]]:
        """A future for ``event_id``'s ``OK`` and the key to :meth:`remove` it by."""
        future: asyncio.Future[Ok | Lost] = asyncio.get_running_loop().create_future()
        # A second publish of the same id waits behind the first; keying by id keeps it simple.
        key = event_id
        while key in self._futures:
            key += "+"
        self._futures[key] = future
        return key, future

    def remove(self, key: str) -> None:
        self._futures.pop(key, None)

    async def request(
        self, event_id: str, send: Callable[[], Awaitable[str | None]], deadline: float
    ) -> Ok | Lost:
        """Send a frame for ``event_id`` (``send()`` says why it failed, or ``None``) and wait
        for its ``OK`` until ``deadline``: the answer, else why none came (:data:`SILENT`)."""
        key, future = self.add(event_id)
        try:
            problem = await send()
            if problem is not None:
                return Lost(problem)
            try:
                async with asyncio.timeout(max(0.0, deadline - now())):
                    return await future
            except TimeoutError:
                return SILENT
        finally:
            self.remove(key)

    def resolve(self, msg: nip01.OkMessage) -> None:
        answer = Ok(msg.accepted, msg.message)
        if msg.event_id:
            future = self._futures.get(msg.event_id)
        else:
            # Some relays refuse with an empty id: it belongs to the oldest pending request.
            future = next((f for f in self._futures.values() if not f.done()), None)
        if future is not None and not future.done():
            future.set_result(answer)

    def fail(self, reason: str) -> None:
        for future in self._futures.values():
            if not future.done():
                future.set_result(Lost(f"connection lost: {reason}"))
