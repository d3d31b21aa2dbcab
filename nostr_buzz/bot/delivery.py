"""Delivery: the signed events a turn leaves (metric, reply) reach the write relays; a private
message's answer goes as gift wraps to each addressee's DM relays.

Every metric is committed to the outbox table of the bot's state database before its first
send; the send runs in the background and never blocks a turn; what no relay accepted yet is
re-sent with backoff by the retry loop, also by a later process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.private import dm_relays_of, send_private
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.nips import nip10, nip17
from nostr_buzz.nips.nip59 import PrivateEvent, Rumor
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event

from .config import PluginConfig
from .outputs import TurnIds, build_private_reply, build_reply
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
        self._diagnostics = diagnostics
        self._spawn = spawn
        self._clock = clock
        self._ids: dict[str, TurnIds] = {}
        self._store_problems: dict[str, str] = {}
        self.publisher = MetricPublisher(
            config.agent_secret,
            config.owner,
            store.outbox,
            list(config.write_relays),
            timeout=config.relay_timeout,
            on_report=self._on_report,
        )
        self.write_pool = RelayPool(
            config.write_relays, secret=config.agent_secret, timeout=config.relay_timeout
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Re-send what is due until ``stop`` is set."""
        await self.publisher.run(stop, idle=max(1.0, self.config.relay_timeout))

    # -- metrics ----------------------------------------------------------------------------

    def store_metric(self, payload: MetricPayload, ids: TurnIds) -> Event | None:
        """Sign the metric and commit it to the outbox (inside the caller's transaction, if
        any); None when the payload is invalid (reported as ``metric_invalid``)."""
        try:
            event = build_metric_event(self.config.agent_secret, self.config.owner, payload)
        except BuzzError as exc:
            self._diagnostics.emit("metric_invalid", **ids.as_kwargs(), payload={"error": str(exc)})
            return None
        self._ids[event.id] = ids
        problem = self.publisher.store(event)
        if problem is not None:
            self._store_problems[event.id] = problem
            self._diagnostics.emit(
                "metric_store_failed", **ids.as_kwargs(), payload={"error": problem}
            )
        self._diagnostics.metric_queued(event.id, **ids.as_kwargs())
        return event

    def send_metric(self, event: Event) -> None:
        """One background attempt to send a stored metric."""
        problem = self._store_problems.pop(event.id, None)
        self._spawn(self.publisher.send_stored(event, problem), "buzz-metric")

    def _on_report(self, report: PublishReport) -> None:
        event_id = report.event_id
        if event_id is None or not report.delivered:
            return
        ids = self._ids.pop(event_id, None)
        accepted = [url for url, v in report.verdicts.items() if v.ok]
        kwargs = ids.as_kwargs() if ids is not None else {}
        self._diagnostics.metric_published(event_id, accepted, **kwargs)

    # -- replies ----------------------------------------------------------------------------

    def send_reply(self, target: Event, text: str) -> None:
        """Sign the reply to ``target`` and send it in the background (a private message is
        answered privately: see :meth:`_send_private_reply`)."""
        if isinstance(target, PrivateEvent):
            rumor = build_private_reply(
                self.config.agent_secret.public_key.hex, target, text, int(self._clock())
            )
            self._spawn(self._send_private_reply(rumor, target), "buzz-reply")
            return
        reply = build_reply(self.config.agent_secret, target, text, int(self._clock()))
        self._spawn(self._publish_reply(reply, target), "buzz-reply")

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

    async def _publish_reply(self, reply: Event, target: Event) -> None:
        result = await self.write_pool.publish(reply)
        self._diagnostics.emit(
            "reply_published" if result.ok else "reply_failed",
            channel_id=nip10.channel(target),
            payload={"eventId": reply.id, "inReplyTo": target.id, "relays": result.accepted},
        )
