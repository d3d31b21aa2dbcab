"""Delivery: the signed events a turn leaves (its metric, its reply) reach the write relays;
a private message's answer goes as gift wraps to each addressee's DM relays.

Replies are durable like metrics.  Both are signed once and committed to the outbox table of
the bot's state database by the caller's transaction — the same one that records the turn's
outcome in the queue — and only then sent, in the background, to every write relay.  What no
relay accepted yet stays in the outbox and is re-sent with backoff by the retry loop, also by a
later process after a crash; a re-send is the same signed event (same id), so a relay that
already has it answers ``duplicate:`` and nothing is ever published twice.

A reply that no relay accepted because it is too large (the relay's refusal says so) is
replaced, in one transaction, by ordered parts that fit (:func:`.outputs.reply_parts`).  Every
refusal reason reaches the ``reply_failed`` diagnostic.

A private message (NIP-17) is answered privately: the kind 14 answer is sealed and wrapped to
each member of the room and to the agent, and each wrap is sent to its addressee's DM relays
(kind 10050) when known, else to the write relays — sent after the turn's commit like the rest,
but not kept in the outbox (its relays are looked up at send time).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.private import dm_relays_of, send_private
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.nips import nip10, nip17
from nostr_buzz.nips.nip59 import PrivateEvent, Rumor
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event

from .config import PluginConfig
from .outputs import TurnIds, build_private_reply, reply_parts, tagged_parts, too_large
from .state import BotStore

__all__ = ["Delivery"]

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class Delivery:
    """Stores and sends a bot's metrics and replies (see the module docstring)."""

    def __init__(
        self,
        config: PluginConfig,
        store: BotStore,
        diagnostics: DiagnosticsFeed,
        spawn: Spawn,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.store = store
        self._diagnostics = diagnostics
        self._spawn = spawn
        self._clock = clock
        self._ids: dict[str, TurnIds] = {}
        self.publisher = MetricPublisher(
            config.agent_secret,
            config.owner,
            store.outbox,
            list(config.write_relays),
            timeout=config.relay_timeout,
            clock=clock,
            on_report=self._on_report,
        )
        self.write_pool = RelayPool(
            config.write_relays, secret=config.agent_secret, timeout=config.relay_timeout
        )
        #: Private answers built by the current commit, sent by the next :meth:`send`.
        self._private: list[tuple[Rumor, PrivateEvent]] = []

    async def run(self, stop: asyncio.Event) -> None:
        """Re-send what is due (also what an earlier process left) until ``stop`` is set."""
        await self.publisher.run(stop, idle=max(1.0, self.config.relay_timeout))

    def _add(self, event: Event) -> None:
        """Commit ``event`` to the outbox (joins the caller's transaction)."""
        self.store.outbox.add(event, now=self._clock())

    def store_metric(self, payload: MetricPayload, ids: TurnIds) -> Event | None:
        """Sign the metric and add it to the outbox; None when the payload is invalid
        (reported as ``metric_invalid``)."""
        try:
            event = build_metric_event(self.config.agent_secret, self.config.owner, payload)
        except BuzzError as exc:
            self._diagnostics.emit("metric_invalid", **ids.as_kwargs(), payload={"error": str(exc)})
            return None
        self._add(event)
        self._ids[event.id] = ids
        self._diagnostics.metric_queued(event.id, **ids.as_kwargs())
        return event

    def store_reply(self, target: Event, text: str, ids: TurnIds | None = None) -> list[Event]:
        """Sign the reply to ``target`` and add it to the outbox (a private message's answer
        is built now and wrapped and sent by the next :meth:`send`)."""
        created_at = int(self._clock())
        if isinstance(target, PrivateEvent):
            agent = self.config.agent_secret.public_key.hex
            self._private.append((build_private_reply(agent, target, text, created_at), target))
            return []
        events = reply_parts(self.config.agent_secret, target, text, created_at, 1 << 30)
        for event in events:
            self._add(event)
            if ids is not None:
                self._ids[event.id] = ids
        return events

    def send(self, events: Iterable[Event]) -> None:
        """Send stored events in the background, one after the other, in order (and the
        private answers built since the last call)."""
        listed = list(events)
        if listed:
            self._spawn(self._send_in_order(listed), "buzz-send")
        private, self._private = self._private, []
        for rumor, target in private:
            self._spawn(self._send_private_reply(rumor, target), "buzz-reply")

    async def _send_in_order(self, events: list[Event]) -> None:
        for event in events:
            await self.publisher.send_stored(event, None)

    # -- reports ----------------------------------------------------------------------------

    def _on_report(self, report: PublishReport) -> None:
        event = report.event
        if event is None:
            return
        if event.kind == METRIC_KIND:
            if report.delivered:
                ids = self._ids.pop(event.id, None)
                accepted = [url for url, v in report.verdicts.items() if v.ok]
                kwargs = ids.as_kwargs() if ids is not None else {}
                self._diagnostics.metric_published(event.id, accepted, **kwargs)
            return
        self._reply_report(event, report)

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
        refusals = {
            url: v.message or v.prefix or "refused"
            for url, v in report.verdicts.items()
            if not v.ok
        }
        payload.update(error=report.error, refusals=refusals, attempts=report.attempts)
        self._diagnostics.emit("reply_failed", **kwargs, payload=payload)
        sizes = [size for r in refusals.values() if (size := too_large(r)) is not None]
        if sizes and report.stored:
            self._split(event, min(sizes), ids)

    def _split(self, event: Event, max_bytes: int, ids: TurnIds | None) -> None:
        """Replace a reply too large for the relays by ordered parts that fit (same tags)."""
        if len(event.content.encode("utf-8")) <= max_bytes:
            return
        tags = [list(tag) for tag in event.tags]
        secret = self.config.agent_secret
        content, created_at = event.content, event.created_at
        parts = tagged_parts(secret, event.kind, tags, content, created_at, max_bytes)
        with self.store.transaction(durable=True):
            self.store.outbox.remove(event.id)
            for part in parts:
                self._add(part)
                if ids is not None:
                    self._ids[part.id] = ids
        self._ids.pop(event.id, None)
        self._diagnostics.emit(
            "reply_split",
            channel_id=nip10.channel(event),
            payload={"eventId": event.id, "parts": [p.id for p in parts]},
        )
        self.send(parts)

    # -- private answers -------------------------------------------------------------------

    async def _send_private_reply(self, rumor: Rumor, target: PrivateEvent) -> None:
        """Seal and wrap the answer to each member of the room and to the agent itself, and
        send each wrap to its addressee's DM relays (kind 10050) when known, else to the write
        relays.  The diagnostic names ids and relays, never the text."""
        agent = self.config.agent_secret.public_key.hex
        people = [*nip17.receivers(rumor), agent]
        try:
            known = await dm_relays_of(
                people,
                self.config.read_relays,
                secret=self.config.agent_secret,
                timeout=self.config.relay_timeout,
            )
            deliveries = await send_private(
                self.config.agent_secret,
                rumor,
                write_relays=self.config.write_relays,
                dm_relays=known,
                now=int(self._clock()),
                timeout=self.config.relay_timeout,
            )
        except BuzzError as exc:
            self._diagnostics.emit(
                "reply_failed",
                payload={"eventId": rumor.id, "inReplyTo": target.id, "error": str(exc)},
            )
            return
        to_them = [d for d in deliveries if d.addressee != agent]
        ok = all(d.result.ok for d in to_them)
        self._diagnostics.emit(
            "reply_published" if ok else "reply_failed",
            payload={
                "eventId": rumor.id,
                "inReplyTo": target.id,
                "private": True,
                "wraps": {d.addressee: d.wrap.id for d in deliveries},
                "relays": sorted({url for d in to_them for url in d.result.accepted}),
            },
        )

    async def publish_dm_relays(self) -> None:
        """Publish the agent's kind 10050: its read relays are where it reads private
        messages."""
        event = nip17.dm_relay_list(
            self.config.agent_secret, self.config.read_relays, created_at=int(self._clock())
        )
        result = await self.write_pool.publish(event)
        self._diagnostics.emit(
            "dm_relays_published" if result.ok else "dm_relays_failed",
            payload={"eventId": event.id, "relays": result.accepted},
        )
