"""Memory the network keeps: whether the bot answered an event already, asked of its relays.

An event dated before the run's start may have been answered by an earlier run whose state
directory is gone (wiped, emptied, lost); the relays still hold the answer.  Before such an
event is queued the bot looks for its own answer to it (docs/bot.md, "Memory the network
keeps"):

* a public event: a reply signed by the agent, in any kind :mod:`nostr_buzz.core.reply` answers
  with (9, 1, 1111), whose parent is the event (NIP-10's ``reply`` mark, else its ``root``
  when it answers the root itself: a reply to a later message of a thread does not answer the
  thread's root); or the agent's metric (kind 44200, encrypted to the owner, which the
  agent's key opens too) of a turn that succeeded and took the event: a reply names only its
  batch's newest event;
* a private message: the agent's own copy of its answer — NIP-17's sender copy, a gift wrap
  addressed to the agent itself (``bot/delivery.py`` sends one with every private answer) —
  a kind 14 by the agent whose ``e`` tag names the message.  Copies are found by opening the
  gift wraps addressed to the agent, which a replay fetches anyway.

A replay asks once per page of events (:meth:`Recall.look_up`: one query, whose filters name the
page's ids) after opening the replay's gift wraps once (:meth:`Recall.open_wraps`, kept for the
replay's handling: nothing is opened twice).  A live event dated before the start waits for a
replay under way (which looks it up with its page), then asks alone.  Events dated after the
start are never looked up: the hot path costs nothing.  What is known is bounded (the newest
:data:`REMEMBERED` ids).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from nostr_buzz.errors import InvalidEvent, MetricError, Nip59Error
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip10, nip17, nip22, nip59, nip_am
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip29 import CHAT_KIND
from nostr_buzz.nips.nip59 import PrivateEvent
from nostr_buzz.signer import Signer, SignerError

from .config import PluginConfig

__all__ = ["REMEMBERED", "REPLY_KINDS", "Recall"]

#: The kinds of the agent's public replies (``core/reply.py``: chat, note, comment).
REPLY_KINDS: Final = (CHAT_KIND, nip10.TEXT_NOTE_KIND, nip22.COMMENT_KIND)
#: Event ids whose answer is known (answered or not), the newest kept.
REMEMBERED: Final = 10_000
_HEX64: Final = re.compile(r"[0-9a-f]{64}")
#: Ids named by one filter of a look-up (relays bound a filter's size).
IDS_PER_FILTER: Final = 100


class Recall:
    """Whether the agent answered an event dated before ``start`` (see the module docstring).

    ``pool``: the relays asked (the bot's read and write relays); ``owner``: whom the metrics
    are for (hex); ``page``: events looked up per query, and gift wraps read per look-up of a
    private message alone; ``skew``: how far before an event its metric may be dated (an
    author's clock running ahead)."""

    def __init__(
        self,
        pool: RelayPool,
        signer: Signer,
        owner: str,
        start: int,
        *,
        page: int,
        skew: int = 0,
    ) -> None:
        self.pool = pool
        self.signer = signer
        self.agent = signer.public_key.hex
        self.owner = owner
        self.start = start
        self.page = page
        self.skew = skew
        self._metrics: dict[str, None] = {}  # metric ids opened already (bounded)
        self._known: dict[str, bool] = {}  # event id → answered, oldest first
        self._opened: dict[str, PrivateEvent] = {}  # wrap id → its message, for one replay
        self._quiet = asyncio.Event()  # no replay asked for nor running
        self._quiet.set()
        #: Wrap ids not to open (refused before: the state database's memory).
        self.skip: Callable[[str], bool] = _nothing

    @classmethod
    def of(cls, config: PluginConfig, pool: RelayPool, start: int, *, page: int) -> Recall:
        """The recall of a bot: its answers are asked of its read and write relays (the bot
        points :attr:`pool` at its kept connections once they are open)."""
        relays = dict.fromkeys([*config.read_relays, *config.write_relays])
        owner = config.owner.hex
        skew = int(config.clock_skew)
        return cls(pool.using(relays), config.signer, owner, start, page=page, skew=skew)

    # -- replays --------------------------------------------------------------------------

    def expect_replay(self) -> None:
        """A replay was asked for: live events dated before the start wait for it."""
        self._quiet.clear()

    def replays_done(self) -> None:
        """No replay is asked for nor running any more; what a replay opened is dropped."""
        self._opened.clear()
        self._quiet.set()

    async def settled(self) -> None:
        """Returns once no replay is asked for nor running."""
        await self._quiet.wait()

    def is_old(self, event: Event) -> bool:
        """Dated before the run's start (a private message: by its own date, once opened)."""
        return event.created_at < self.start

    def known(self, event_id: str) -> bool | None:
        """Whether the event was answered: True, False, or None when not looked up (yet)."""
        return self._known.get(event_id)

    def opened(self, wrap_id: str) -> PrivateEvent | None:
        """The message of a wrap this replay opened (once), else None."""
        return self._opened.pop(wrap_id, None)

    # -- looking up -----------------------------------------------------------------------

    async def open_wraps(self, events: Iterable[Event]) -> None:
        """Open the gift wraps among ``events`` (but those :attr:`skip` names: refused before),
        keep each message for the replay's handling, and learn from the agent's own copies
        which private messages it answered."""
        answered: list[str] = []
        for wrap in events:
            if wrap.kind not in nip59.WRAP_KINDS or wrap.id in self._opened or self.skip(wrap.id):
                continue
            try:
                message = (await nip59.open_gift_wrap_with(self.signer, wrap)).as_event()
            except (Nip59Error, SignerError):
                continue  # opened again when handled, and reported then
            if message.pubkey == self.agent:
                answered += _answered_by_copy(message)
            self._opened[wrap.id] = message
        for message in self._opened.values():
            if message.pubkey != self.agent and self.is_old(message):
                self._learn(message.id, False)
        for event_id in answered:
            self._learn(event_id, True)

    async def look_up(self, events: Sequence[Event]) -> None:
        """Ask the relays once for the agent's replies to, and metrics of, the public events
        among ``events`` dated before the start and not known yet."""
        wanted = [
            e
            for e in events
            if e.kind not in nip59.WRAP_KINDS
            and not isinstance(e, PrivateEvent)
            and self.is_old(e)
            and e.id not in self._known
        ]
        if not wanted:
            return
        # No ``since`` for replies: an author whose clock runs ahead dates its event after the
        # reply.  A metric is dated at its turn's end, after the event arrived.
        ids = sorted({e.id for e in wanted})
        filters = [
            Filter(
                kinds=REPLY_KINDS,
                authors=(self.agent,),
                tags={"e": tuple(ids[i : i + IDS_PER_FILTER])},
            )
            for i in range(0, len(ids), IDS_PER_FILTER)
        ]
        since = min(e.created_at for e in wanted) - self.skew
        metrics = Filter(
            kinds=(nip_am.KIND,),
            authors=(self.agent,),
            tags={"p": (self.owner,)},
            since=since,
            limit=self.page,
        )
        found = await self.pool.query([*filters, metrics])
        if not any(r.error is None for r in found.per_relay.values()):
            return  # nobody answered: not known (looked up again when handled alone)
        mine = [event for event in found.events if event.pubkey == self.agent]
        answered = {_parent(e) for e in mine if e.kind in REPLY_KINDS} - {None}
        answered |= await self._triggered([e for e in mine if e.kind == nip_am.KIND])
        for event_id in ids:
            self._learn(event_id, event_id in answered)

    async def _triggered(self, metrics: list[Event]) -> set[str]:
        """The events that started (or steered) a turn which succeeded, by the agent's
        metrics (each opened once)."""
        triggered: set[str] = set()
        for metric in metrics:
            if metric.id in self._metrics:
                continue
            try:
                payload = await nip_am.open_own_metric_event(self.signer, self.owner, metric)
            except (MetricError, SignerError):
                continue
            self._metrics[metric.id] = None
            if len(self._metrics) > REMEMBERED:
                del self._metrics[next(iter(self._metrics))]
            if payload.outcome == "success":
                for event_id in _answered_by_metric(payload):
                    triggered.add(event_id)
                    self._learn(event_id, True)
        return triggered

    async def answered(self, event: Event) -> bool:
        """Whether the agent answered ``event`` (dated before the start): known from a replay,
        else asked now, alone."""
        known = self._known.get(event.id)
        if known is not None:
            return known
        if isinstance(event, PrivateEvent):
            await self._look_up_private(event)
        else:
            await self.look_up([event])
        return self._known.get(event.id, False)

    async def _look_up_private(self, message: PrivateEvent) -> None:
        """The newest gift wraps addressed to the agent since two days before ``message``
        (NIP-59 dates wraps up to two days back), at most a page of them, opened for the
        agent's own copy of an answer to it."""
        wraps = Filter(kinds=(nip59.GIFT_WRAP_KIND,), tags={"p": (self.agent,)}, limit=self.page)
        found = await self.pool.query(wraps.with_since(message.created_at))
        answered = False
        for wrap in found.events:
            try:
                copy = (await nip59.open_gift_wrap_with(self.signer, wrap)).as_event()
            except (Nip59Error, SignerError):
                continue
            if copy.pubkey == self.agent and message.id in _answered_by_copy(copy):
                answered = True
                break
        if answered or any(r.error is None for r in found.per_relay.values()):
            self._learn(message.id, answered)

    def _learn(self, event_id: str, answered: bool) -> None:
        answered = self._known.pop(event_id, False) or answered  # newest last
        self._known[event_id] = answered
        while len(self._known) > REMEMBERED:
            del self._known[next(iter(self._known))]


def _parent(reply: Event) -> str | None:
    """The event a reply answers: its parent (NIP-10's ``reply`` mark, else the root it
    answers; NIP-22's ``e``), never the thread's root when it answers a later message."""
    with contextlib.suppress(InvalidEvent):
        return nip10.thread_ref(reply).parent
    return None


def _answered_by_metric(payload: nip_am.MetricPayload) -> list[str]:
    """The events a turn answered: its triggering events, and the steer it took last (the
    manifest's ``current_instruction`` layer is versioned by that event's id)."""
    ids = list(payload.triggering_event_ids)
    manifest = payload.context_manifest
    for layer in manifest.layers if manifest is not None else ():
        if layer.layer == "current_instruction" and _HEX64.fullmatch(layer.version):
            ids.append(layer.version)
    return ids


def _nothing(_: str) -> bool:
    return False


def _answered_by_copy(copy: PrivateEvent) -> list[str]:
    """The message the agent's own copy of a private answer answers (its ``e`` tag)."""
    if copy.kind != nip17.PRIVATE_MESSAGE_KIND:
        return []
    replied = nip17.replied_to(copy.rumor())
    return [replied] if replied is not None else []
