"""Delivery: the signed events a turn leaves (its metric, its reply, a thread checkpoint) reach
the write relays;
a private message's answer goes as gift wraps to each addressee's DM relays.

Replies are durable like metrics.  Both are signed once, through the agent's signer and before
any transaction opens (a signer may answer over the network: :meth:`Delivery.sign_reply`,
:meth:`Delivery.sign_metric`), then committed to the outbox table of the bot's state database
by the caller's transaction — the same one that records the turn's outcome in the queue — and
only then sent, in the background, to every relay it is meant for, with a record per relay in
the outbox (core/delivery_state.py).  The turn goes on at the first acceptance; the slower
relays are waited for in the background, and a relay that has not accepted yet is re-sent the
event on its own backoff by the retry loop, also by a later process after a crash, until it
accepts or ``[outbox] give_up_after`` passes.  A re-send is the same signed event (same id),
so a relay that already has it answers ``duplicate:`` and nothing is ever published twice.

A reply that no relay accepted because it is too large (the relay's refusal says so, or the
relay dropped the connection while a reply larger than a part was sent) is replaced, in one
transaction, by ordered parts that fit (:func:`.outputs.tagged_parts`).  A relay whose NIP-11
limits cannot hold a part of ``PART_FLOOR`` bytes is skipped for the reply
(:func:`.outputs.too_small`).  Every refusal reason reaches the ``reply_failed`` diagnostic.

A private message (NIP-17) is answered privately: the kind 14 answer (ordered ``[k/n]`` parts
when it is long, :func:`.outputs.private_parts`) is sealed and wrapped to its sender — to each
member of the room only when the owner is in the room and it has at most ``[private]
max_recipients`` members besides the agent (:func:`.outputs.private_audience`; a narrowed room
is a ``private_room_narrowed`` diagnostic) — and to the agent itself.  Each wrap
goes to its addressee's DM relays (kind 10050, looked up before the commit: the first three,
a loopback or private address only when it is one of the bot's relays) when known, else to the
write relays.  The wraps are stored in the outbox with those relays, in the same transaction,
and retried like any reply.

Nothing is retried for ever: an outbox entry that no relay took within ``[outbox]
give_up_after`` (7 days by default) is removed and reported as ``outbox_given_up``.

A stored event is due for its first retry only after the time its first send may take, so that
the retry loop never sends an event whose first send is still on the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nostr_buzz.core.reply import reply_form
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticKind, DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.nips import nip10, nip17, nip27, nip59
from nostr_buzz.nips.nip59 import PrivateEvent
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event_async
from nostr_buzz.nips.nip_tc import CHECKPOINT_KIND
from nostr_buzz.signer import EventTemplate, signed

from .config import PluginConfig
from .outputs import (
    PART_FLOOR,
    TurnIds,
    fitted_parts,
    private_parts,
    tagged_parts,
    too_large,
    too_small,
)
from .own_lists import publish_relay_lists
from .private_routes import PrivateRoutes
from .relays import trust_configured
from .state import BotStore

__all__ = ["Delivery"]

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]
T = TypeVar("T")


@dataclass(frozen=True)
class Signed:
    """Events signed ahead of the transaction that stores them (:meth:`Delivery.store_signed`)."""

    events: list[Event]
    ids: TurnIds | None = None
    #: Event id → the relays it goes to, when not the write relays (a wrap's DM relays; the
    #: write relays and the read relays of the people a reply or metric is for).
    relays: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Wrap id → (answer id, message answered, addressee) for a private answer's reports.
    wraps: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    metric: bool = False
    #: The metric's turn cost (USD), for its ``metric_queued`` diagnostic.
    cost_usd: float | None = None


class Delivery:
    """Stores and sends a bot's metrics and replies (see the module docstring)."""

    def __init__(
        self,
        config: PluginConfig,
        store: BotStore,
        diagnostics: DiagnosticsFeed,
        spawn: Spawn,
        clock: Callable[[], float],
        pool: RelayPool | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self._diagnostics = diagnostics
        self._spawn = spawn
        self._clock = clock
        self._ids: dict[str, TurnIds] = {}
        self.signer = config.signer
        self.agent = config.signer.public_key.hex
        #: The bot's one pool (its kept connections), read relays; a one-shot one when None.
        self.pool = (
            pool
            if pool is not None
            else RelayPool(
                config.read_relays,
                signer=self.signer,
                timeout=config.relay_timeout,
                guard_local=True,
            )
        )
        trust_configured(self.pool, config)
        self.write_pool = self.pool.using(config.write_relays)
        # MetricPublisher keeps and sends every stored event, answering NIP-42 through the signer.
        self.publisher = MetricPublisher(
            self.signer,
            config.owner,
            store.outbox,
            list(config.write_relays),
            timeout=config.relay_timeout,
            clock=clock,
            on_report=self._on_report,
            give_up_after=config.give_up_after,
            pool=self.pool,
        )
        #: People's relay lists (NIP-65) and relays' limits (NIP-11), cached.
        self.directory = RelayDirectory(
            config.read_relays,
            [*config.write_relays, *config.local_relays],
            signer=self.signer,
            timeout=config.relay_timeout,
            clock=clock,
            pool=self.pool,
            own=(config.owner.hex, self.agent),
        )
        #: Where private answers go: who is in a conversation and their DM relays.
        self.private = PrivateRoutes(config, self.pool, self.directory)
        #: Where stored events go when not to the write relays (until their first send).
        self._relays: dict[str, tuple[str, ...]] = {}
        #: What each private answer's wrap carries: (answer id, message answered, addressee).
        self._wraps: dict[str, tuple[str, str, str]] = {}
        #: The wraps of the agent's own messages to the owner (:meth:`tell_owner`): their
        #: callers report them (``permission_asked``, ``budget_warned``), not as replies.
        self._notes: set[str] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Re-send what is due (also what an earlier process left) until ``stop`` is set; then
        stop waiting for the slower relays: what they owe stays in the outbox for the next run."""
        try:
            await self.publisher.run(stop, idle=max(1.0, self.config.relay_timeout))
        finally:
            await self.publisher.abandon()

    async def publish_relay_lists(self) -> None:
        """The agent's own relay lists (:mod:`.own_lists`), on the write relays."""
        await publish_relay_lists(
            self.config, self.write_pool, self._diagnostics, self._clock, self.store.own_lists
        )

    def _add(self, event: Event, relays: tuple[str, ...] = ()) -> None:
        """Commit ``event`` to the outbox (joins the caller's transaction) with every relay it
        is meant for (the write relays when ``relays`` is empty): one record each."""
        now = self._clock()
        first_send = self.config.relay_timeout + 5.0  # the retry loop leaves it to send()
        targets = relays or tuple(self.config.write_relays)
        self.store.outbox.add(event, now=now, relays=targets, due=now + first_send)
        if relays:
            self._relays[event.id] = relays

    async def sign_metric(self, payload: MetricPayload, ids: TurnIds) -> Signed | None:
        """The turn's metric, signed; None when the payload is invalid or the signer failed
        (reported as ``metric_invalid``)."""
        try:
            event = await build_metric_event_async(self.signer, self.config.owner, payload)
        except BuzzError as exc:
            self._diagnostics.emit("metric_invalid", **ids.as_kwargs(), payload={"error": str(exc)})
            return None
        cost = payload.turn.cost_usd if payload.turn is not None else None
        routed = await self.to_owner(event, ids)
        return Signed(routed.events, ids, routed.relays, metric=True, cost_usd=cost)

    async def to_owner(self, event: Event, ids: TurnIds | None) -> Signed:
        """An event for the owner (a metric, a thread checkpoint) and where it goes: the write
        relays and the owner's read relays."""
        relays = await self._outbox_relays([self.config.owner.hex])
        return Signed([event], ids, self._routes([event], relays))

    async def sign_reply(
        self,
        target: Event,
        text: str,
        ids: TurnIds | None = None,
        dm_relays: Mapping[str, tuple[str, ...]] | None = None,
    ) -> Signed:
        """The reply to ``target``, signed; a private message's answer as one gift wrap per
        addressee, each with its relays (``dm_relays``: see :meth:`.PrivateRoutes.relays`)."""
        created_at = int(self._clock())
        if isinstance(target, PrivateEvent):
            return await self._sign_private(target, text, created_at, ids, dm_relays or {})
        kind, tags = reply_form(self.agent, target)
        # NIP-65: the author answered and the people the reply tags (also those its text
        # references: NIP-27) read on their read relays.
        named = [*tags, *nip27.references(text)[1]]
        people = [target.pubkey, *(t[1] for t in named if len(t) >= 2 and t[0] == "p")]
        relays = await self._outbox_relays(people)
        parts, relays = await self._parts(kind, tags, text, created_at, relays)
        events = await self._sign_all(parts)
        return Signed(events, ids, self._routes(events, relays))

    async def _outbox_relays(self, people: Iterable[str]) -> tuple[str, ...]:
        """Where an event for ``people`` goes: the write relays, then the read relays of each
        of them but the agent (NIP-65: where they look for what is addressed to them)."""
        write = tuple(self.config.write_relays)
        others = [p for p in people if p != self.agent]
        extra = await self.directory.read_relays_of(others) if others else ()
        return tuple(dict.fromkeys([*write, *extra]))

    def _routes(self, events: list[Event], relays: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """The ``relays`` entry of :class:`Signed`: nothing when it is the write relays alone."""
        if relays == tuple(self.config.write_relays):
            return {}
        return {event.id: relays for event in events}

    async def _parts(
        self,
        kind: int,
        tags: list[list[str]],
        text: str,
        created_at: int,
        relays: tuple[str, ...],
    ) -> tuple[list[EventTemplate], tuple[str, ...]]:
        """The reply as parts that fit every relay it goes to (NIP-11 ``limitation``), and
        those relays: one whose limits cannot hold a part of ``PART_FLOOR`` bytes is skipped
        for this reply (``reply_relay_skipped``), unless no other relay is left."""
        found = await self.directory.limits(relays)
        small = too_small(found, kind, tags, created_at)
        if small and len(small) < len(relays):
            relays = tuple(url for url in relays if url not in small)
            payload = {"relays": small, "partFloor": PART_FLOOR}
            channel = nip10.channel_from_tags(kind, tags)
            self._diagnostics.emit("reply_relay_skipped", channel_id=channel, payload=payload)
        limits = [found[url] for url in relays]
        messages = [m for lim in limits if (m := lim.max_message_length) is not None]
        contents = [c for lim in limits if (c := lim.max_content_length) is not None]
        parts = fitted_parts(
            kind,
            tags,
            text,
            created_at,
            max_message=min(messages, default=None),
            max_content=min(contents, default=None),
        )
        return parts, relays

    async def sign_or_report(
        self, signing: Awaitable[T], target: Event, payload: dict[str, Any]
    ) -> T | None:
        """What ``signing`` gives; None when the signer failed, reported as ``reply_failed``
        in ``target``'s channel (with ``payload``)."""
        try:
            return await signing
        except BuzzError as exc:
            payload = {**payload, "error": f"cannot sign: {exc}"}
            self._diagnostics.emit(
                "reply_failed", channel_id=nip10.channel(target), payload=payload
            )
            return None

    async def _sign_all(self, templates: Iterable[EventTemplate]) -> list[Event]:
        return [await signed(self.signer, unsigned) for unsigned in templates]

    def store_signed(self, signed_events: Signed) -> list[Event]:
        """Commit signed events to the outbox (joins the caller's transaction)."""
        ids = signed_events.ids
        for event in signed_events.events:
            self._add(event, signed_events.relays.get(event.id, ()))
            if ids is not None:
                self._ids[event.id] = ids
            if event.id in signed_events.wraps:
                self._wraps[event.id] = signed_events.wraps[event.id]
            if signed_events.metric:
                cost = signed_events.cost_usd
                kwargs = ids.as_kwargs() if ids else {}
                self._diagnostics.metric_queued(event.id, cost_usd=cost, **kwargs)
        return list(signed_events.events)

    async def _sign_private(
        self,
        target: PrivateEvent,
        text: str,
        created_at: int,
        ids: TurnIds | None,
        dm_relays: Mapping[str, tuple[str, ...]],
    ) -> Signed:
        audience, narrowed = self.private.audience(target)
        if narrowed is not None:
            self._diagnostics.emit(
                "private_room_narrowed",
                **(ids.as_kwargs() if ids else {}),
                payload={
                    "inReplyTo": target.id,
                    "reason": narrowed,
                    "room": len(nip17.room(target.rumor())),
                    "maxRecipients": self.config.max_recipients,
                },
            )
        wraps: list[tuple[str, str, Event]] = []  # (answer id, addressee, wrap)
        for answer in private_parts(self.agent, target, text, created_at, audience):
            room = await nip17.wrap_for_room_with(self.signer, answer, now=created_at)
            wraps += [(answer.id, to, wrap) for to, wrap in room]
        write = tuple(self.config.write_relays)
        return Signed(
            [wrap for _, _, wrap in wraps],
            ids,
            relays={wrap.id: dm_relays.get(to) or write for _, to, wrap in wraps},
            wraps={wrap.id: (answer, target.id, to) for answer, to, wrap in wraps},
        )

    async def tell_owner(self, text: str) -> bool:
        """A private message from the agent to the owner (an approval question, a budget
        warning), delivered like a private answer: wrapped to the owner and to the agent,
        each wrap stored in the outbox with its addressee's DM relays (else the write relays)
        and sent to every one of them, the slower ones in the background and again until each
        accepts.  True when a relay took the owner's copy (at the first acceptance)."""
        now = int(self._clock())
        owner = self.config.owner.hex
        try:
            rumor = nip17.message(self.agent, [owner], text, created_at=now)
            relays = await self.private.relays_of([owner, self.agent], fresh=True)
            wraps = await nip17.wrap_for_room_with(self.signer, rumor, now=now)
        except BuzzError:
            return False
        write = tuple(self.config.write_relays)
        routes = {wrap.id: relays.get(to) or write for to, wrap in wraps}
        with self.store.transaction(durable=True):
            for _, wrap in wraps:
                self._add(wrap, routes[wrap.id])
                self._notes.add(wrap.id)
        reports = await asyncio.gather(
            *(self.publisher.send_stored(wrap, None, routes[wrap.id]) for _, wrap in wraps)
        )
        told = any(to == owner and r.delivered for (to, _), r in zip(wraps, reports, strict=True))
        if not told:  # the caller gives up on it (a question unsent is rejected): not later
            with self.store.transaction(durable=True):
                for _, wrap in wraps:
                    self.store.outbox.remove(wrap.id)
        return told

    def nudge(self) -> None:
        """A relay connection came back: what waits in the outbox is sent now, not when its
        backoff ends (an outage would otherwise delay it by up to the last backoff)."""
        try:
            waiting = self.store.outbox.make_due(self._clock())
        except BuzzError:
            return
        if waiting:
            self._diagnostics.emit("outbox_nudged", payload={"waiting": waiting})
            self._spawn(self.publisher.flush(), "buzz-send")

    async def notify(self, target: Event, text: str) -> None:
        """Sign, store and send a notice in ``target``'s thread (a signer that fails is
        reported; the notice is then not sent)."""
        signing = self.sign_reply(target, text)
        notice = await self.sign_or_report(signing, target, {"inReplyTo": target.id})
        if notice is None:
            return
        with self.store.transaction(durable=True):
            self.send(self.store_signed(notice))

    def send(self, events: Iterable[Event]) -> None:
        """Send stored events in the background, one after the other, in order."""
        listed = list(events)
        if listed:
            self._spawn(self._send_in_order(listed), "buzz-send")

    async def _send_in_order(self, events: list[Event]) -> None:
        for event in events:
            relays = self._relays.pop(event.id, ())
            await self.publisher.send_stored(event, None, relays)

    # -- reports ----------------------------------------------------------------------------

    def _on_report(self, report: PublishReport) -> None:
        event = report.event
        if event is None:
            return
        if report.given_up:
            self._given_up(event, report)
            return
        if report.earlier:  # delivered and said so before: this was for the slower relays
            return
        if event.kind in (METRIC_KIND, CHECKPOINT_KIND):
            if report.delivered:
                ids = self._ids.pop(event.id, None)
                accepted = [url for url, v in report.verdicts.items() if v.ok]
                kwargs = ids.as_kwargs() if ids is not None else {}
                kind: DiagnosticKind = "metric_published"
                if event.kind == CHECKPOINT_KIND:
                    kind = "thread_checkpoint_published"
                self._diagnostics.metric_published(event.id, accepted, kind=kind, **kwargs)
            return
        if event.id in self._notes:
            if report.delivered or report.given_up:
                self._notes.discard(event.id)
            return
        if event.kind == nip59.GIFT_WRAP_KIND:
            self._private_report(event, report)
            return
        self._reply_report(event, report)

    def _given_up(self, event: Event, report: PublishReport) -> None:
        """An entry no relay took in time has left the outbox for good: said once, with what
        went wrong (ids and relay refusals, never the text)."""
        ids = self._ids.pop(event.id, None)
        self._wraps.pop(event.id, None)
        self._relays.pop(event.id, None)
        kwargs = ids.as_kwargs() if ids is not None else {}
        payload = {
            "eventId": event.id,
            "kind": event.kind,
            "attempts": report.attempts,
            "error": report.error,
            "giveUpAfter": self.config.give_up_after,
            "delivered": report.delivered,
            "missing": list(report.waiting),
        }
        self._diagnostics.emit("outbox_given_up", **kwargs, payload=payload)

    def _private_report(self, wrap: Event, report: PublishReport) -> None:
        """Each wrap of a private answer: published (to its addressee; the agent's own copy
        is not reported when it succeeds) or failed, with ids and relays, never the text."""
        # After a restart only the wrap itself is known: its p tag names the addressee.
        addressee = next((t[1] for t in wrap.tags if len(t) >= 2 and t[0] == "p"), None)
        answer, answered, addressee = self._wraps.get(wrap.id, (None, None, addressee))
        ids = self._ids.get(wrap.id)
        own_copy = addressee == self.agent
        if report.delivered:
            self._ids.pop(wrap.id, None)
            self._wraps.pop(wrap.id, None)
            if own_copy:
                return
        payload: dict[str, Any] = {
            "eventId": answer or wrap.id,
            "inReplyTo": answered,
            "private": True,
            "wrap": wrap.id,
            "relays": [url for url, v in report.verdicts.items() if v.ok],
        }
        if not report.delivered:
            payload.update(error=report.error, attempts=report.attempts, ownCopy=own_copy)
        kind: DiagnosticKind = "reply_published" if report.delivered else "reply_failed"
        self._diagnostics.emit(kind, **(ids.as_kwargs() if ids else {}), payload=payload)

    def _reply_report(self, event: Event, report: PublishReport) -> None:
        ids = self._ids.get(event.id)
        kwargs = ids.as_kwargs() if ids is not None else {"channel_id": nip10.channel(event)}
        payload: dict[str, Any] = {
            "eventId": event.id,
            "inReplyTo": nip10.thread_ref(event).parent,
            "relays": [url for url, v in report.verdicts.items() if v.ok],
        }
        if report.delivered:
            self._ids.pop(event.id, None)
            self._diagnostics.emit("reply_published", **kwargs, payload=payload)
            return
        refusals = {url: v.reason for url, v in report.verdicts.items() if not v.ok}
        payload.update(error=report.error, refusals=refusals, attempts=report.attempts)
        self._diagnostics.emit("reply_failed", **kwargs, payload=payload)
        content = len(event.content.encode("utf-8"))
        sizes = [s for r in refusals.values() if (s := too_large(r, content)) is not None]
        if sizes and report.stored:
            self._spawn(self._split(event, min(sizes), ids), "buzz-split")

    async def _split(self, event: Event, max_bytes: int, ids: TurnIds | None) -> None:
        """Replace a reply too large for the relays by ordered parts that fit (same tags),
        signed before the transaction that swaps them in."""
        if len(event.content.encode("utf-8")) <= max_bytes:
            return
        content, created_at = event.content, event.created_at
        unsigned = tagged_parts(event.kind, event.tags, content, created_at, max_bytes)
        parts = await self.sign_or_report(self._sign_all(unsigned), event, {"eventId": event.id})
        if parts is None:  # the whole reply stays in the outbox
            return
        entry = self.store.outbox.get(event.id)
        relays = entry.relays if entry is not None else ()
        with self.store.transaction(durable=True):
            self.store.outbox.remove(event.id)
            for part in parts:
                self._add(part, relays)
                if ids is not None:
                    self._ids[part.id] = ids
        self._ids.pop(event.id, None)
        self._diagnostics.emit(
            "reply_split",
            channel_id=nip10.channel(event),
            payload={"eventId": event.id, "parts": [p.id for p in parts]},
        )
        self.send(parts)
