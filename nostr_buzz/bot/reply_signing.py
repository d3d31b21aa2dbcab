"""What a turn leaves, signed before any transaction opens (a signer may answer over the
network) and routed: the reply, in parts that fit every relay it goes to (NIP-11 limits; a
relay that cannot hold a part of ``PART_FLOOR`` bytes is skipped for it, ``reply_relay_skipped``);
a private message's answer, sealed and gift-wrapped to each addressee (NIP-17; a narrowed room
is a ``private_room_narrowed`` diagnostic); the turn's metric.  Each event goes to the write
relays and the read relays of the people it is for (NIP-65), a wrap to its addressee's DM
relays.  :class:`~.delivery.Delivery` stores and sends what is signed here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nostr_buzz.core.reply import reply_form
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.nips import nip10, nip17, nip27
from nostr_buzz.nips.nip59 import PrivateEvent
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event_async
from nostr_buzz.signer import EventTemplate, signed

from .config import PluginConfig
from .outputs import PART_FLOOR, TurnIds, fitted_parts, private_parts, too_small
from .private_routes import PrivateRoutes

__all__ = ["ReplySigner", "Signed"]

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


class ReplySigner:
    """Signs a bot's replies, private answers and metrics through the agent's signer, and
    routes them (see the module docstring)."""

    def __init__(
        self,
        config: PluginConfig,
        pool: RelayPool,
        diagnostics: DiagnosticsFeed,
        clock: Callable[[], float],  # a reply's created_at; how old a cached relay list is
    ) -> None:
        self.config = config
        self.signer = config.signer
        self.agent = config.signer.public_key.hex
        #: People's relay lists (NIP-65) and relays' limits (NIP-11), cached, read through
        #: ``pool`` (the bot's kept connections).
        self.directory = RelayDirectory(
            config.read_relays,
            [*config.write_relays, *config.local_relays],
            signer=config.signer,
            timeout=config.relay_timeout,
            clock=clock,
            pool=pool,
            own=(config.owner.hex, self.agent),
        )
        #: Where private answers go: who is in a conversation and their DM relays.
        self.private = PrivateRoutes(config, pool, self.directory)
        self._diagnostics = diagnostics
        self._clock = clock

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
        events = await self.sign_all(parts)
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

    async def sign_all(self, templates: Iterable[EventTemplate]) -> list[Event]:
        return [await signed(self.signer, unsigned) for unsigned in templates]

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
