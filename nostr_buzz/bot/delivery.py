"""Delivery: the signed events a turn leaves (its metric, its reply, a thread checkpoint) reach
the write relays;
a private message's answer goes as gift wraps to each addressee's DM relays.

Replies are durable like metrics.  Both are signed once, through the agent's signer and before
any transaction opens (a signer may answer over the network: :meth:`ReplySigner.sign_reply`,
:meth:`ReplySigner.sign_metric`), then committed to the outbox table of the bot's state database
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

Signing and routing what a turn leaves is :mod:`.reply_signing` (:class:`Delivery` holds its
:class:`~.reply_signing.ReplySigner`); where a private answer goes, :mod:`.private_routes`; what
the publisher's reports become (the diagnostics, the split of a reply too large),
:mod:`.delivery_reports`; storing, sending and retrying, here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.nips import nip10, nip17

from .config import PluginConfig
from .delivery_reports import DeliveryReports
from .outputs import TurnIds, tagged_parts
from .own_lists import publish_relay_lists
from .relays import trust_configured
from .reply_signing import ReplySigner, Signed
from .state import BotStore

__all__ = ["Delivery", "Signed"]

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class Delivery:
    """Stores and sends a bot's metrics and replies (see the module docstring), signed as
    ``signing`` signs them (:mod:`.reply_signing`), reported as :mod:`.delivery_reports` says."""

    def __init__(
        self,
        config: PluginConfig,
        store: BotStore,
        diagnostics: DiagnosticsFeed,
        spawn: Spawn,
        clock: Callable[[], float],
        pool: RelayPool | None = None,
    ) -> None:
        #: The bot's one pool (its kept connections), read relays; a one-shot one when None.
        self.pool = (
            pool
            if pool is not None
            else RelayPool(
                config.read_relays,
                signer=config.signer,
                timeout=config.relay_timeout,
                guard_local=True,
            )
        )
        trust_configured(self.pool, config)
        self.write_pool = self.pool.using(config.write_relays)
        self.config, self.signer, self.agent = config, config.signer, config.signer.public_key.hex
        self._diagnostics, self._clock = diagnostics, clock
        #: Signs and routes what a turn leaves: replies, private answers, metrics, checkpoints.
        self.signing = ReplySigner(config, self.pool, diagnostics, clock)
        self.store = store
        self._spawn = spawn
        self.reports = DeliveryReports(
            self.agent, config.give_up_after, diagnostics, self._split_later
        )
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
        #: Where stored events go when not to the write relays (until their first send).
        self._relays: dict[str, tuple[str, ...]] = {}

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

    def store_signed(self, signed_events: Signed) -> list[Event]:
        """Commit signed events to the outbox (joins the caller's transaction)."""
        ids = signed_events.ids
        for event in signed_events.events:
            self._add(event, signed_events.relays.get(event.id, ()))
            if ids is not None:
                self.reports.ids[event.id] = ids
            if event.id in signed_events.wraps:
                self.reports.wraps[event.id] = signed_events.wraps[event.id]
            if signed_events.metric:
                cost = signed_events.cost_usd
                kwargs = ids.as_kwargs() if ids else {}
                self._diagnostics.metric_queued(event.id, cost_usd=cost, **kwargs)
        return list(signed_events.events)

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
            relays = await self.signing.private.relays_of([owner, self.agent], fresh=True)
            wraps = await nip17.wrap_for_room_with(self.signer, rumor, now=now)
        except BuzzError:
            return False
        write = tuple(self.config.write_relays)
        routes = {wrap.id: relays.get(to) or write for to, wrap in wraps}
        with self.store.transaction(durable=True):
            for _, wrap in wraps:
                self._add(wrap, routes[wrap.id])
                self.reports.notes.add(wrap.id)
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
        signing = self.signing.sign_reply(target, text)
        notice = await self.signing.sign_or_report(signing, target, {"inReplyTo": target.id})
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
        if report.given_up and report.event is not None:  # left the outbox: never sent again
            self._relays.pop(report.event.id, None)
        self.reports.on_report(report)

    def _split_later(self, event: Event, max_bytes: int, ids: TurnIds | None) -> None:
        self._spawn(self._split(event, max_bytes, ids), "buzz-split")

    async def _split(self, event: Event, max_bytes: int, ids: TurnIds | None) -> None:
        """Replace a reply too large for the relays by ordered parts that fit (same tags),
        signed before the transaction that swaps them in."""
        if len(event.content.encode("utf-8")) <= max_bytes:
            return
        content, created_at = event.content, event.created_at
        unsigned = tagged_parts(event.kind, event.tags, content, created_at, max_bytes)
        parts = await self.signing.sign_or_report(
            self.signing.sign_all(unsigned), event, {"eventId": event.id}
        )
        if parts is None:  # the whole reply stays in the outbox
            return
        entry = self.store.outbox.get(event.id)
        relays = entry.relays if entry is not None else ()
        with self.store.transaction(durable=True):
            self.store.outbox.remove(event.id)
            for part in parts:
                self._add(part, relays)
                if ids is not None:
                    self.reports.ids[part.id] = ids
        self.reports.ids.pop(event.id, None)
        self._diagnostics.emit(
            "reply_split",
            channel_id=nip10.channel(event),
            payload={"eventId": event.id, "parts": [p.id for p in parts]},
        )
        self.send(parts)
