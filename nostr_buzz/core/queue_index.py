"""The dispatch queue's index: which channel flushes next and when a held-back one may, in
O(log channels) per wake of the worker instead of a look at every pending event
(docs/queue.md, "Cost at depth").

Pure: no clock, no I/O.  :class:`FlushIndex` keeps every idle channel in one of three lazy
heaps — *ready* (by its wait), *settling* (by the time its settle window ends), *backing off*
(by ``backoff_until``; a channel can be settling and backing off at once) — and in-flight
channels by when their batch was flushed (for expiry).  A channel the queue changes is only
marked dirty (O(1)); the next query classifies the dirty channels at its ``now``.

The heaps answer exactly what a scan of every channel would, under two conditions checked on
each query: ``now`` never goes back between queries with the same ``settle``, and no pending
event was received after ``now``.  Then a channel leaves *settling* or *backing off* only as
``now`` passes its key, so a popped key is the only thing to look at.  A query with an earlier
``now`` than the last, or another ``settle``, rebuilds the heaps at its ``now`` (O(channels ×
log channels)); one earlier than a pending event's arrival (a clock stepped back) is answered
by a scan of every channel (:func:`scan_ready`, :func:`scan_settle`; False from
:meth:`FlushIndex.sync`), and the heaps are rebuilt at the next query that is not.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, Protocol, TypeVar

__all__ = ["FlushIndex", "IndexedChannel", "KeyedHeap", "scan_ready", "scan_settle"]

K = TypeVar("K", float, tuple[float, int])

#: A settling key is a float sum, the hold test float differences: keys this close to ``now``
#: (relative) are checked exactly rather than trusted to one rounding or the other.
_MARGIN = 1e-15


class KeyedHeap(Generic[K]):
    """A min-heap of names, each with at most one live key: setting or discarding a name's
    key is O(log n) amortised.  A replaced key stays in the heap as a stale entry, skipped when
    it reaches the top and swept whenever stale entries outnumber live ones (so the heap holds
    at most about twice the live names)."""

    def __init__(self) -> None:
        self._heap: list[tuple[K, int, str]] = []
        self._live: dict[str, tuple[K, int]] = {}
        self._count = 0  # unique per entry: ties never compare names

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, name: object) -> bool:
        return name in self._live

    def set(self, name: str, key: K) -> None:
        self._count += 1
        self._live[name] = (key, self._count)
        heapq.heappush(self._heap, (key, self._count, name))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [(k, c, n) for n, (k, c) in self._live.items()]
            heapq.heapify(self._heap)

    def discard(self, name: str) -> None:
        self._live.pop(name, None)

    def peek(self) -> tuple[K, str] | None:
        """The live name with the smallest key, and its key (None when empty)."""
        heap, live = self._heap, self._live
        while heap:
            key, count, name = heap[0]
            if live.get(name, (key, -1))[1] == count:
                return key, name
            heapq.heappop(heap)
        return None

    def live_while(self, due: Callable[[K], bool]) -> list[str]:
        """The live names whose key is ``due``, where ``due`` holds for every key below one
        it holds for: only the part of the heap above the first key not due is read."""
        found, todo, heap, live = [], [0], self._heap, self._live
        while todo:
            i = todo.pop()
            if i < len(heap) and due(heap[i][0]):
                key, count, name = heap[i]
                if live.get(name, (key, -1))[1] == count:
                    found.append(name)
                todo += (2 * i + 1, 2 * i + 2)
        return found

    def pop_while(self, due: Callable[[K], bool]) -> Iterator[tuple[K, str]]:
        """Remove and yield the live names, smallest key first, while ``due(key)``."""
        while (top := self.peek()) is not None and due(top[0]):
            del self._live[top[1]]
            yield top

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()


class IndexedChannel(Protocol):
    """What the index reads of a queue channel."""

    @property
    def flushed_at(self) -> float | None:
        """When its batch in flight was flushed (None: not in flight)."""

    @property
    def backoff_until(self) -> float | None: ...

    @property
    def newest(self) -> float:
        """The latest ``received_at`` of its pending events (-inf with none)."""

    def candidate(self) -> bool:
        """Idle (not in flight) with events pending or stored: ``flush_next`` may start it."""

    def wait(self) -> tuple[float, int]: ...

    def quiet_wait(self, now: float, settle: float) -> float:
        """How long it must still wait for quiet (0: not held back by ``settle``)."""

    def release_at(self, settle: float) -> float:
        """When its settle window ends, as a heap key (the hold itself is ``quiet_wait``)."""


C = TypeVar("C", bound=IndexedChannel)


class FlushIndex(Generic[C]):
    """The queue's channels, ordered for :meth:`DispatchQueue.flush_next` and
    :meth:`DispatchQueue.next_settle` (see the module docstring)."""

    def __init__(self, channels: Mapping[str, C]) -> None:
        self._channels = channels
        self._ready: KeyedHeap[tuple[float, int]] = KeyedHeap()
        self._settling: KeyedHeap[float] = KeyedHeap()
        self._backoff: KeyedHeap[float] = KeyedHeap()
        self._flying: KeyedHeap[float] = KeyedHeap()
        self._dirty: dict[str, None] = {}  # insertion-ordered: deterministic
        self._at: float | None = None  # the ``now`` the heaps describe; None: rebuild
        self._settle = 0.0
        #: At least the latest ``received_at`` of any pending event (see ``touch``).
        self.latest = -math.inf

    def touch(self, name: str) -> None:
        """Channel ``name`` changed (or went): classified again at the next query."""
        self._dirty[name] = None
        ch = self._channels.get(name)
        if ch is not None:
            self.latest = max(self.latest, ch.newest)
            if ch.flushed_at is not None:
                self._flying.set(name, ch.flushed_at)

    def overdue(self, now: float, deadline: float) -> list[str]:
        """The channels whose batch has been in flight more than ``deadline`` at ``now``,
        removed from the expiry heap (each is ``touch``-ed again when it changes)."""
        expired: list[str] = []
        renewed: list[tuple[str, float]] = []
        for _, name in self._flying.pop_while(lambda at: now - at > deadline):
            ch = self._channels.get(name)
            if ch is None or ch.flushed_at is None:
                continue
            if now - ch.flushed_at > deadline:
                expired.append(name)
            else:  # a steer moved its flush time on since it was keyed
                renewed.append((name, ch.flushed_at))
        for name, at in renewed:
            self._flying.set(name, at)
        return expired

    def sync(self, now: float, settle: float) -> bool:
        """Bring the heaps to ``now``; False when this query must be answered by a scan."""
        if now < self.latest:
            # Maybe only delivered events were later: the exact bound, once.
            self.latest = max((ch.newest for ch in self._channels.values()), default=-math.inf)
            if now < self.latest:
                self._at = None
                return False
        if self._at is None or now < self._at or settle != self._settle:
            for heap in (self._ready, self._settling, self._backoff):
                heap.clear()
            self._dirty = dict.fromkeys(self._channels)
            self._settle = settle
        self._at = now
        if self._dirty:
            for name in self._dirty:
                self._classify(name, now, settle)
            self._dirty.clear()
        if self._backoff:
            for _, name in list(self._backoff.pop_while(lambda until: not now < until)):
                if name not in self._settling:
                    self._ready.set(name, self._channels[name].wait())
        if not self._settling:
            return True
        held: list[tuple[float, str]] = []
        for key, name in list(self._settling.pop_while(lambda at: _near(at, now))):
            ch = self._channels[name]
            if ch.quiet_wait(now, settle) > 0:
                held.append((key, name))  # a rounding away from its end: still held
            elif name not in self._backoff:
                self._ready.set(name, ch.wait())
        for key, name in held:
            self._settling.set(name, key)
        return True

    def first_ready(self) -> str | None:
        """The ready channel waiting longest (after :meth:`sync`)."""
        top = self._ready.peek()
        return None if top is None else top[1]

    def first_settle(self, now: float, settle: float) -> float | None:
        """The shortest ``quiet_wait`` of a held-back channel (after :meth:`sync`): every
        channel whose key is within rounding of the smallest is asked exactly."""
        top = self._settling.peek()
        if top is None:
            return None
        near = self._settling.live_while(lambda at: _near(at, top[0]))
        return min(self._channels[name].quiet_wait(now, settle) for name in near)

    def _classify(self, name: str, now: float, settle: float) -> None:
        for heap in (self._ready, self._settling, self._backoff):
            heap.discard(name)
        ch = self._channels.get(name)
        if ch is None:
            self._flying.discard(name)
            return
        if ch.flushed_at is None:
            self._flying.discard(name)
        if not ch.candidate():
            return
        held = False
        if ch.quiet_wait(now, settle) > 0:
            self._settling.set(name, ch.release_at(settle))
            held = True
        if ch.backoff_until is not None and now < ch.backoff_until:
            self._backoff.set(name, ch.backoff_until)
            held = True
        if not held:
            self._ready.set(name, ch.wait())


def scan_ready(channels: Iterable[C], now: float, settle: float) -> C | None:
    """The channel :meth:`FlushIndex.first_ready` would name, by a look at every channel: the
    answer when the index cannot give it (a clock stepped back)."""
    best: C | None = None
    for ch in channels:
        if not ch.candidate():
            continue
        if ch.backoff_until is not None and now < ch.backoff_until:
            continue
        if ch.quiet_wait(now, settle) > 0:
            continue
        if best is None or ch.wait() < best.wait():
            best = ch
    return best


def scan_settle(channels: Iterable[IndexedChannel], now: float, settle: float) -> float | None:
    """What :meth:`FlushIndex.first_settle` would answer, by a look at every channel not in
    flight (None: none is held back)."""
    idle = [ch for ch in channels if ch.flushed_at is None]
    waits = [w for ch in idle if (w := ch.quiet_wait(now, settle)) > 0]
    return min(waits) if waits else None


def _near(key: float, bound: float) -> bool:
    """``key`` is at most ``bound``, or above it by no more than a few roundings."""
    return key <= bound + _MARGIN * (abs(key) + abs(bound) + 1)
