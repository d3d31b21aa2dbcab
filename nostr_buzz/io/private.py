"""NIP-17 private messages over relays: DM relay lists, sending wraps, reading an inbox.

A private message is wrapped once per receiver and once for the sender's own copy; each wrap
goes to the DM relays (kind 10050) its addressee published — the first three, and for the
bot, which answers strangers, a local address only when it is one of its relays
(:func:`~nostr_buzz.nips.nip17.dm_relays_to_use`) — else to the sender's write relays.
Reading opens every gift wrap addressed to a key and checks every layer
(:func:`~nostr_buzz.nips.nip59.open_gift_wrap`); what fails is counted by reason, never shown.

Each function takes the key's :class:`~nostr_buzz.signer.Signer` (or the secret key itself):
seals are encrypted and signed, wraps opened and NIP-42 answered through it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from nostr_buzz.errors import Nip17Error, Nip59Error
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import as_signer
from nostr_buzz.nips import nip01, nip17, nip59
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.nips.nip59 import Opened, PrivateEvent, Randomness, Rumor
from nostr_buzz.signer import Signer

from .pool import PoolQueryResult, PublishResult, RelayPool

#: Relays serve at most this many events per query (LocalRelay measured at 500).
MAX_QUERY_LIMIT: Final = 500


def _pool_of(relays: Sequence[str] | RelayPool, signer: Signer | None, timeout: float) -> RelayPool:
    """``relays`` as a pool: a :class:`RelayPool` given (its kept connections, signer and
    timeout) as it is, else a one-shot pool of the URLs."""
    if isinstance(relays, RelayPool):
        return relays
    return RelayPool(relays, signer=signer, timeout=timeout)


async def dm_relays_of(
    pubkeys: Iterable[str],
    relays: Sequence[str] | RelayPool,
    *,
    secret: SecretKey | Signer | None,
    timeout: float,
    configured: Iterable[str] | None = None,
    write_relays: Sequence[str] = (),
) -> dict[str, tuple[str, ...]]:
    """Each person's newest kind 10050 relay list found on ``relays`` (a read of state,
    :meth:`RelayPool.query_state`: it waits for each relay that serves, and for
    ``write_relays``, the people's NIP-65 write relays, asked too), as the relays to send to
    (:func:`usable_dm_relays`; when ``configured`` is given, a loopback or private address only
    when it is in ``relays`` or ``configured``) — ``secret``'s own list as it is
    (``secret``: a secret key or a signer, which also answers NIP-42); people without one, or
    whose list names no usable relay, are left out."""
    people = list(dict.fromkeys(pubkeys))
    signer = None if secret is None else as_signer(secret)
    pool = _pool_of(relays, signer, timeout)
    if not people or not pool.urls:
        return {}
    result = await pool.query_state(
        dm_relays_filter(people), write_relays=write_relays, timeout=timeout
    )
    known = None if configured is None else [*pool.urls, *configured]
    me = signer.public_key.hex if signer is not None else None
    return usable_dm_relays(result.events, people, me, known)


def dm_relays_filter(people: Sequence[str]) -> Filter:
    """The kind 10050 lists of ``people``."""
    return Filter(authors=tuple(people), kinds=(nip17.DM_RELAYS_KIND,))


def usable_dm_relays(
    events: Iterable[Event], people: Sequence[str], me: str | None, known: Iterable[str] | None
) -> dict[str, tuple[str, ...]]:
    """Each of ``people``'s newest kind 10050 among ``events`` (a replaceable event: the
    newest wins, the lower id on a tie, NIP-01), as the relays to send to
    (:func:`~nostr_buzz.nips.nip17.dm_relays_to_use`: at most three; with ``known``, a
    loopback or private address only when it is one of them) — ``me``'s own list as it is,
    since only that key can sign it; people without one, or whose list names no usable
    relay, are left out."""
    wanted = set(people)
    newest: dict[str, Event] = {}
    for event in events:
        if event.kind != nip17.DM_RELAYS_KIND or event.pubkey not in wanted:
            continue
        held = newest.get(event.pubkey)
        if held is None or nip01.is_newer(event, held):
            newest[event.pubkey] = event
    known = None if known is None else list(known)
    out: dict[str, tuple[str, ...]] = {}
    for pubkey, event in newest.items():
        urls = nip17.dm_relays(event)
        if pubkey != me:
            urls = nip17.dm_relays_to_use(urls, known)
        if urls:
            out[pubkey] = urls
    return out


@dataclass
class Delivery:
    """Where one wrap of a private message went, and what the relays said."""

    addressee: str
    wrap: Event
    relays: tuple[str, ...]
    to_dm_relays: bool
    result: PublishResult


async def send_private(
    sender: SecretKey | Signer,
    rumor: Rumor,
    *,
    write_relays: Sequence[str],
    dm_relays: dict[str, tuple[str, ...]],
    now: int,
    timeout: float,
    randbelow: Randomness | None = None,
) -> list[Delivery]:
    """Wrap ``rumor`` for each receiver and for the sender, and publish every wrap to its
    addressee's DM relays when known, else to ``write_relays`` (concurrently)."""
    signer = as_signer(sender)
    if randbelow is None:
        wraps = await nip17.wrap_for_room_with(signer, rumor, now=now)
    else:
        wraps = await nip17.wrap_for_room_with(signer, rumor, now=now, randbelow=randbelow)
    plans: list[tuple[str, Event, tuple[str, ...], bool]] = []
    for addressee, wrap in wraps:
        known = dm_relays.get(addressee)
        targets = known if known else tuple(write_relays)
        if not targets:
            raise Nip17Error("no relay to send the private message to")
        plans.append((addressee, wrap, targets, bool(known)))

    async def one(targets: tuple[str, ...], wrap: Event) -> PublishResult:
        return await RelayPool(targets, signer=signer, timeout=timeout).publish(wrap)

    results = await asyncio.gather(*(one(targets, wrap) for _, wrap, targets, _ in plans))
    return [
        Delivery(addressee, wrap, targets, known, result)
        for (addressee, wrap, targets, known), result in zip(plans, results, strict=True)
    ]


@dataclass
class Inbox:
    """Opened private messages (oldest first, one per rumor id) and what was refused."""

    messages: list[Opened] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    query: PoolQueryResult = field(default_factory=PoolQueryResult)


async def open_all(
    recipient: SecretKey | Signer, wraps: Iterable[Event], kinds: Iterable[int] = (14,)
) -> Inbox:
    """Open every wrap (through the recipient's signer); keep the rumors of ``kinds``, one per
    rumor id (a message and the sender's own copy are one message), oldest first.  Refusals
    are counted by reason."""
    signer = as_signer(recipient)
    wanted = set(kinds)
    inbox = Inbox()
    seen: set[str] = set()
    for wrap in wraps:
        try:
            opened = await nip59.open_gift_wrap_with(signer, wrap)
        except Nip59Error as exc:
            inbox.refused[exc.reason] += 1
            continue
        if opened.rumor.kind not in wanted:
            inbox.refused[f"kind {opened.rumor.kind} not read"] += 1
            continue
        if opened.rumor.id in seen:
            continue
        seen.add(opened.rumor.id)
        inbox.messages.append(opened)
    inbox.messages.sort(key=lambda o: (o.rumor.created_at, o.rumor.id))
    return inbox


async def read_inbox(
    recipient: SecretKey | Signer,
    relays: Sequence[str],
    *,
    timeout: float,
    since: int | None = None,
    limit: int = MAX_QUERY_LIMIT,
) -> Inbox:
    """The private messages addressed to ``recipient``'s key on ``relays`` and on the DM relays
    the key has published there.  ``since`` is when the messages were sent: wraps are searched
    from two days earlier, then the rumors older than ``since`` are dropped."""
    signer = as_signer(recipient)
    me = signer.public_key.hex
    own = await dm_relays_of([me], relays, secret=signer, timeout=timeout)
    urls = list(dict.fromkeys([*relays, *own.get(me, ())]))
    flt = _wraps_to(me, limit)
    if since is not None:
        flt = flt.with_since(since)  # wraps dated up to two days before they were sent
    result = await RelayPool(urls, signer=signer, timeout=timeout).query(flt, timeout=timeout)
    inbox = await open_all(signer, result.events)
    if since is not None:
        inbox.messages = [o for o in inbox.messages if o.rumor.created_at >= since]
    inbox.query = result
    return inbox


def _wraps_to(me: str, limit: int) -> Filter:
    """The gift wraps addressed to ``me``."""
    kinds = (nip59.GIFT_WRAP_KIND, nip59.EPHEMERAL_GIFT_WRAP_KIND)
    return Filter(kinds=kinds, limit=limit, tags={"p": (me,)})


def in_conversation(opened: Opened, me: str, peer: str) -> bool:
    """True for a message of the two-person room of ``me`` and ``peer`` (either way)."""
    return nip17.room(opened.rumor) == frozenset((me, peer)) and opened.sender in (me, peer)


async def conversation(
    recipient: SecretKey | Signer,
    relays: Sequence[str] | RelayPool,
    peer: str,
    *,
    limit: int,
    timeout: float,
) -> tuple[list[PrivateEvent], bool]:
    """The newest ``limit`` private messages between ``recipient``'s key and ``peer``, oldest
    first, from the wraps addressed to the key (its own copies included), and whether older
    ones were left out.  Wraps are dated at random, so more of them are asked for than kept."""
    signer = as_signer(recipient)
    me = signer.public_key.hex
    flt = _wraps_to(me, MAX_QUERY_LIMIT)
    result = await _pool_of(relays, signer, timeout).query(flt, timeout=timeout)
    inbox = await open_all(signer, result.events)
    mine = [o for o in inbox.messages if in_conversation(o, me, peer)]
    return [o.as_event() for o in mine[-limit:]], len(mine) > limit
