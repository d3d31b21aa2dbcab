"""One relay over WebSocket (NIP-01, NIP-42): publish, query, live subscriptions.

The edge around the pure codec in :mod:`nostr_buzz.nips.nip01`.  A relay is never trusted:
every ``EVENT`` frame is verified with :meth:`Event.from_dict` and checked against the filters
that asked for it; failures are dropped and reported on the result, never passed on.  Network
failures are data (``QueryResult.error``, a ``Verdict`` with prefix ``error:``), not exceptions,
so that a pool and the CLI can apply their precedence.  Every wait has a deadline, buffers are
bounded, and :meth:`RelayClient.close` leaves no task running.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.proxy import get_proxy
from websockets.uri import parse_uri

from nostr_buzz.core.backoff import backoff_base
from nostr_buzz.errors import BuzzError, InvalidEvent
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import signer_of
from nostr_buzz.nips import nip01, nip42
from nostr_buzz.nips.nip01 import Filter, FilterLike
from nostr_buzz.nips.relay_url import check_relay_url
from nostr_buzz.signer import Signer, signed

from .addresses import first_to_connect, resolve

#: Largest frame accepted from a relay; LocalRelay refuses events over 64 KiB, so 1 MiB is ample.
MAX_FRAME_BYTES: Final = 1 << 20
#: Events buffered by one query before it stops and reports ``too many events``.
MAX_QUERY_EVENTS: Final = 10_000
#: Bytes of ``EVENT`` frames one query accepts from a relay (rejected events count too); past
#: it the relay is cut off (the connection dropped) and named in the result's error.
MAX_QUERY_BYTES: Final = 32 << 20
#: Tags in the events of one query; past it the relay is cut off, as for bytes.
MAX_QUERY_TAGS: Final = 200_000
#: Tags one event may carry; an event with more is refused before it is verified (the events
#: this project reads carry a handful).
MAX_EVENT_TAGS: Final = 2_500
#: Events buffered for a live subscription whose consumer is slow; past it the subscription is
#: closed and re-opened from the last event seen, so nothing is lost and memory stays bounded.
MAX_LIVE_BUFFER: Final = 1_000
#: Bytes of events buffered for a live subscription, bounded as the count above.
MAX_LIVE_BUFFER_BYTES: Final = 16 << 20
#: Verification failure texts kept per result (the total is counted separately).
MAX_REJECTED_KEPT: Final = 100
#: Ids remembered by a live subscription for de-duplication across reconnects.
MAX_SEEN_IDS: Final = 50_000
#: How long to wait for the ``OK`` of an ``AUTH`` (some relays never send one).
AUTH_OK_TIMEOUT: Final = 1.0
#: Bound on a graceful WebSocket close before the transport is dropped.
CLOSE_TIMEOUT: Final = 0.5

#: A live connection that lasted this long (seconds) counts as working for the backoff.
_WORKING_CONNECTION: Final = 60.0

_counter = itertools.count(1)


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


@dataclass
class QueryResult:
    """What one relay returned for a query.

    ``events``: valid, matching, de-duplicated by id, in arrival order.  ``finished``: the relay
    reached ``EOSE`` or a normal ``CLOSED``.  ``error``: why it did not finish or failed
    (``timeout``, ``connect failed: …``, ``closed: auth-required: …``, ``connection lost: …``,
    ``too many events: …``).  ``rejected``: verification failures (``bad_id``,
    ``bad_signature``, ``does not match filter``, …), at most ``MAX_REJECTED_KEPT`` texts;
    ``rejected_count`` counts them all.  ``malformed_frames``: frames that were not relay
    messages for this query.
    """

    relay: str
    events: list[Event] = field(default_factory=list)
    finished: bool = False
    error: str | None = None
    rejected: list[str] = field(default_factory=list)
    rejected_count: int = 0
    malformed_frames: int = 0
    #: NIP-67: True when the relay's ``EOSE`` said ``finish`` (it sent every stored event
    #: that matches), False when it said ``more``, None when it said neither.
    complete: bool | None = None


@dataclass(frozen=True)
class _Ok:
    accepted: bool
    message: str


@dataclass(frozen=True)
class _Lost:
    reason: str


@dataclass(frozen=True)
class Budget:
    """What one query (or one live subscription's buffer) may take from a relay."""

    events: int = MAX_QUERY_EVENTS
    bytes: int = MAX_QUERY_BYTES
    tags: int = MAX_QUERY_TAGS


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


class SharedBudget:
    """One :class:`Budget` drawn on by every relay of one pool query (io/pool.py): each relay
    keeps its own budget, and what they all send together is bounded too, so that many
    relays (hints from a stranger's nevent) cannot multiply the memory a query holds."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.events = 0
        self.bytes = 0
        self.tags = 0

    def take(self, size: int, tags: int) -> str | None:
        """Charge one ``EVENT`` frame; ``None``, or what the relays together would pass."""
        total = self.budget
        if self.events + 1 > total.events:
            return f"more than its share of {total.events} events (all relays together)"
        if self.bytes + size > total.bytes:
            return f"more than its share of {_mib(total.bytes)} of events (all relays together)"
        if self.tags + tags > total.tags:
            return f"more than its share of {total.tags} tags (all relays together)"
        self.events += 1
        self.bytes += size
        self.tags += tags
        return None


class _Subscription:
    """State of one ``REQ``: filled by the reader task, drained by query/subscribe.

    A query charges every ``EVENT`` frame's bytes and tags against its budget; a live
    subscription charges what it buffers and is credited as the consumer drains it.
    """

    def __init__(
        self,
        sub_id: str,
        filters: list[Filter],
        *,
        live: bool,
        budget: Budget,
        shared: SharedBudget | None = None,
    ) -> None:
        self.id = sub_id
        self.filters = filters
        self.live = live
        self.cap = budget.events
        self.budget = budget
        self.shared = shared  # queries only: a live buffer is credited back, a total is not
        self.bytes = 0
        self.tags = 0
        self.sizes: deque[int] = deque()
        self.events: deque[Event] = deque()
        self.seen: set[str] = set()  # query only; live de-duplication is done by the caller
        self.rejected: list[str] = []
        self.rejected_count = 0
        self.end: tuple[str, str] | None = None  # (eose|closed|lost|overflow, detail)
        self.wake = asyncio.Event()
        #: A live subscription's caller, told when the relay has sent its stored events.
        self.on_eose: Callable[[], None] | None = None

    def finish(self, how: str, detail: str = "") -> None:
        if self.end is None:
            self.end = (how, detail)
        self.wake.set()

    def reject(self, reason: str) -> None:
        self.rejected_count += 1
        if len(self.rejected) < MAX_REJECTED_KEPT:
            self.rejected.append(reason)

    def charge(self, size: int, tags: int) -> bool:
        """Count one frame of ``size`` bytes and ``tags`` tags; False (and the end) when it
        would pass the budget."""
        if self.end is not None:
            return False
        if self.bytes + size > self.budget.bytes:
            self.finish("cut off", f"more than {_mib(self.budget.bytes)} of events")
            return False
        if self.tags + tags > self.budget.tags:
            self.finish("cut off", f"more than {self.budget.tags} tags")
            return False
        if self.shared is not None and (beyond := self.shared.take(size, tags)) is not None:
            self.finish("cut off", beyond)
            return False
        self.bytes += size
        self.tags += tags
        return True

    def refund(self, size: int, tags: int) -> None:
        """A live subscription's consumer took an event: its bytes and tags are free again."""
        if self.live:
            self.bytes -= size
            self.tags -= tags

    def receive(self, raw: object, size: int) -> str | None:
        """One ``EVENT`` frame of ``size`` bytes for this ``REQ``: charged, then verified and
        matched against the filters; returns why it was rejected (counted here), or ``None``."""
        if self.end is not None:
            return None
        raw_tags = raw.get("tags") if isinstance(raw, dict) else None
        tags = len(raw_tags) if isinstance(raw_tags, list) else 0
        if not self.charge(size, tags):
            return None
        if tags > MAX_EVENT_TAGS:  # refused before the costly verification
            return self._refuse(size, tags, f"more than {MAX_EVENT_TAGS} tags")
        try:
            event = Event.from_dict(raw)
        except InvalidEvent as exc:
            return self._refuse(size, tags, exc.reason)
        if not nip01.matches_any(self.filters, event):
            return self._refuse(size, tags, "does not match filter")
        self.offer(event, size)
        return None

    def _refuse(self, size: int, tags: int, reason: str) -> str:
        self.refund(size, tags)
        self.reject(reason)
        return reason

    def offer(self, event: Event, size: int = 0) -> None:
        if self.end is not None:
            self.refund(size, len(event.tags))
            return
        if not self.live:
            if event.id in self.seen:
                return
            self.seen.add(event.id)
        self.events.append(event)
        self.sizes.append(size)
        self.wake.set()
        if len(self.events) >= self.cap:
            self.finish("overflow", f"stopped after {self.cap} events")

    async def next(self, timeout: float) -> Event | None:
        """Next buffered event; ``None`` once ended and drained; raises TimeoutError."""
        async with asyncio.timeout(timeout):
            while True:
                if self.events:
                    event = self.events.popleft()
                    self.refund(self.sizes.popleft(), len(event.tags))
                    return event
                if self.end is not None:
                    return None
                self.wake.clear()
                await self.wake.wait()


class _Flooding(Exception):
    """A relay went on sending events for a ``REQ`` this client closed past its budget."""


class _Ended:
    """The subscriptions this client closed lately: frames still in flight for them are dropped,
    but charged to the budget the ``REQ`` had, so that a relay that goes on sending after
    ``CLOSE`` is cut off as if it were open (a kept connection would read it for ever)."""

    def __init__(self) -> None:
        self._used: OrderedDict[str, tuple[Budget, int, int]] = OrderedDict()

    def add(self, sub: _Subscription) -> None:
        self._used[sub.id] = (sub.budget, sub.bytes, sub.tags)
        if len(self._used) > 64:
            self._used.popitem(last=False)

    def __contains__(self, sub_id: str) -> bool:
        return sub_id in self._used

    def charge(self, msg: nip01.EventMessage, size: int) -> str | None:
        """Count a late ``EVENT`` frame; what it passes, or ``None`` (also when its ``REQ`` is
        not one of ours: a malformed frame, counted elsewhere)."""
        used = self._used.get(msg.subscription_id)
        if used is None:
            return None
        budget, used_bytes, used_tags = used
        raw_tags = msg.event.get("tags") if isinstance(msg.event, dict) else None
        used_bytes += size
        used_tags += len(raw_tags) if isinstance(raw_tags, list) else 0
        self._used[msg.subscription_id] = (budget, used_bytes, used_tags)
        if used_bytes > budget.bytes:
            return f"more than {_mib(budget.bytes)} of events"
        return f"more than {budget.tags} tags" if used_tags > budget.tags else None


class _AuthRetry:
    """NIP-42: a ``CLOSED`` with ``auth-required:`` is answered once per query or subscription
    (AUTH, then the same ``REQ`` again); a second such refusal is the relay's answer."""

    def __init__(self) -> None:
        self.used = False

    def wanted(self, reason: str) -> bool:
        prefix, _ = nip01.split_prefix(reason)
        if prefix != "auth-required:" or self.used:
            return False
        self.used = True
        return True


class _Query:
    """One query's ``REQ`` until ``EOSE`` or ``CLOSED``, perhaps sent twice (see
    :class:`_AuthRetry`): the result it fills, and the ids that end it early."""

    def __init__(
        self, relay: str, filters: list[Filter], max_events: int, end_when_ids_served: bool
    ) -> None:
        self.filters = filters
        self.max_events = max_events
        self.result = QueryResult(relay=relay)
        self.seen: set[str] = set()  # across both REQs
        self.auth = _AuthRetry()
        self.wanted: set[str] | None = None
        if end_when_ids_served and all(f.ids is not None for f in filters):
            self.wanted = {i for f in filters for i in f.ids or ()}

    async def until_end(self, sub: _Subscription, deadline: float) -> bool:
        """Wait for ``sub``'s end (or, with ``wanted``, for every id); True when timed out."""
        try:
            async with asyncio.timeout(max(0.0, deadline - _now())):
                while sub.end is None:
                    if self.wanted is not None and self.wanted <= sub.seen:
                        sub.finish("eose")  # all there: the relay's EOSE may come late
                        break
                    sub.wake.clear()
                    await sub.wake.wait()
        except TimeoutError:
            return True
        return False

    def take(self, sub: _Subscription) -> None:
        """Add ``sub``'s events (once each, at most ``max_events``) and rejections."""
        result = self.result
        for ev in sub.events:
            if ev.id not in self.seen and len(result.events) < self.max_events:
                self.seen.add(ev.id)
                result.events.append(ev)
        result.rejected.extend(sub.rejected[: MAX_REJECTED_KEPT - len(result.rejected)])
        result.rejected_count += sub.rejected_count

    def ended(self, how: str, detail: str, *, timed_out: bool) -> None:
        """Record how the ``REQ`` ended: finished at ``EOSE`` or a plain ``CLOSED``, else why."""
        result = self.result
        if timed_out:
            result.error = "timeout"
        elif how == "eose" or (how == "closed" and not detail):
            result.finished = True
            result.complete = _COMPLETE.get(detail) if how == "eose" else None
        elif how == "closed":
            result.error = f"closed: {detail}"
        elif how == "overflow":
            result.error = f"too many events: {detail}"
        elif how == "cut off":
            result.error = f"cut off: the relay sent {detail} for one query"
        else:
            result.error = f"connection lost: {detail}"


class _Live:
    """One live subscription across its connections: the ids it yielded (a re-opened ``REQ``
    serves some again), the newest ``created_at`` (the next ``since``), and the consecutive
    failures that space out its reconnects."""

    def __init__(
        self, filters: list[Filter], *, base: float, cap: float, max_failures: int
    ) -> None:
        self.filters = filters
        self.base = base
        self.cap = cap
        self.max_failures = max_failures
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.last_seen: int | None = None
        self.opened = False
        self.opened_at = 0.0
        self.progressed = False
        self.failures = 0
        self.auth = _AuthRetry()

    def next_filters(self, resume_since: Callable[[], int] | None) -> list[Filter]:
        resume = resume_since() if resume_since is not None and self.opened else self.last_seen
        return self.filters if resume is None else [f.with_since(resume) for f in self.filters]

    def open(self) -> None:
        self.opened = True
        self.opened_at = _now()
        self.progressed = False

    def fresh(self, event: Event) -> bool:
        """True the first time ``event`` is seen (remembering it), False for a re-served one."""
        if event.id in self.seen:
            return False
        self.progressed = True
        self.seen[event.id] = None
        if len(self.seen) > MAX_SEEN_IDS:
            self.seen.popitem(last=False)
        last = self.last_seen
        self.last_seen = event.created_at if last is None else max(last, event.created_at)
        return True

    def worked(self) -> bool:
        # A connection that brought new events or lasted was working: count afresh.  Re-served
        # duplicates are no progress, so a relay that drops every connection after replaying
        # old events still runs out of attempts.
        return self.progressed or _now() - self.opened_at >= _WORKING_CONNECTION

    def give_up(self, *, afresh: bool = False) -> bool:
        """Count one failed attempt (the first, when ``afresh``); True past ``max_failures``."""
        self.failures = 1 if afresh else self.failures + 1
        return self.failures > self.max_failures

    async def back_off(self) -> None:
        await asyncio.sleep(backoff_base(self.failures, base=self.base, cap=self.cap))


class _Nip42:
    """NIP-42 on one connection: the relay's latest challenge, and whether it acknowledged our
    ``AUTH``.  A challenge is good on its own connection only, so each one starts afresh."""

    def __init__(self) -> None:
        self.challenge: str | None = None
        self.challenge_seen = asyncio.Event()
        self.authenticated = False
        self.lock = asyncio.Lock()  # one AUTH at a time; the others then find it done

    def challenged(self, challenge: str) -> None:
        self.challenge = challenge
        self.challenge_seen.set()

    async def challenge_by(self, deadline: float) -> bool:
        """True once a challenge is here, waiting a moment (until ``deadline``) for a late one:
        it usually precedes the refusal that sends us to authenticate."""
        if self.challenge is not None:
            return True
        try:
            async with asyncio.timeout(max(0.0, min(AUTH_OK_TIMEOUT, deadline - _now()))):
                await self.challenge_seen.wait()
        except TimeoutError:
            return False
        return True

    async def answer(
        self,
        signer: Signer,
        url: str,
        request_ok: Callable[[str, str, float], Awaitable[_Ok | _Lost]],
        deadline: float,
    ) -> str | None:
        """Sign and send the ``AUTH`` for this connection's challenge (``request_ok`` sends a
        frame and waits for its ``OK``); ``None`` once done, else what went wrong."""
        async with self.lock:
            if self.authenticated:
                return None
            if not await self.challenge_by(deadline):
                return "relay sent no AUTH challenge"
            assert self.challenge is not None
            event = await _auth_event(signer, url, self.challenge, deadline)
            if isinstance(event, str):
                return event
            limit = min(deadline, _now() + AUTH_OK_TIMEOUT)
            answer = await request_ok(event.id, nip01.encode_auth(event), limit)
            if isinstance(answer, _Ok) and not answer.accepted:
                return f"AUTH refused: {answer.message or 'no reason given'}"
            # No OK at all: some relays never acknowledge AUTH; proceed, let the retry tell.
            self.authenticated = isinstance(answer, _Ok)
            return None


class _OkWaiters:
    """``EVENT`` and ``AUTH`` frames waiting for their ``OK`` (NIP-01), by event id."""

    def __init__(self) -> None:
        self._futures: OrderedDict[str, asyncio.Future[_Ok | _Lost]] = OrderedDict()

    def add(self, event_id: str) -> tuple[str, asyncio.Future[_Ok | _Lost]]:
        """A future for ``event_id``'s ``OK`` and the key to :meth:`remove` it by."""
        future: asyncio.Future[_Ok | _Lost] = asyncio.get_running_loop().create_future()
        # A second publish of the same id waits behind the first; keying by id keeps it simple.
        key = event_id
        while key in self._futures:
            key += "+"
        self._futures[key] = future
        return key, future

    def remove(self, key: str) -> None:
        self._futures.pop(key, None)

    def resolve(self, msg: nip01.OkMessage) -> None:
        answer = _Ok(msg.accepted, msg.message)
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
                future.set_result(_Lost(f"connection lost: {reason}"))


def _describe(exc: BaseException) -> str:
    """A short human reason for a connection failure."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, websockets.exceptions.InvalidStatus):
        return f"HTTP status {exc.response.status_code}"
    if isinstance(exc, websockets.exceptions.ConnectionClosed):
        rcvd, sent = exc.rcvd, exc.sent
        if (rcvd is not None and rcvd.code == 1009) or (sent is not None and sent.code == 1009):
            return "frame too large"
        return "closed by relay" if rcvd is not None else "connection dropped"
    text = str(exc) or type(exc).__name__
    return text[:200]


#: What opening a connection may raise (a local address refused: ``LocalAddressError``).
_DIAL_ERRORS: Final = (OSError, TimeoutError, ValueError, websockets.exceptions.WebSocketException)


async def _dial(
    url: str, timeout: float, max_frame_bytes: int, *, allow_local: bool = True
) -> ClientConnection:
    """Open the WebSocket within ``timeout``: frames bounded, a short incoming queue, pings on.

    The host is resolved here, once (io/addresses.py: unless ``allow_local``, a local name or
    address raises :class:`~nostr_buzz.errors.LocalAddressError`), and the connection goes to
    one of the addresses checked, in order; the URL's name stays the TLS server name and the
    ``Host``.  Through a proxy of the environment, the proxy connects by name."""
    ws_uri = parse_uri(url)
    async with asyncio.timeout(timeout):
        addresses = await resolve(
            urlsplit(url).hostname or "", ws_uri.port, allow_local=allow_local
        )
        options: dict[str, Any] = {
            "open_timeout": timeout,
            "max_size": max_frame_bytes,
            "max_queue": 16,
            "close_timeout": CLOSE_TIMEOUT,
            "ping_interval": 20,
            "ping_timeout": 20,
            "compression": None,
        }
        if get_proxy(ws_uri) is not None:
            return await connect(url, **options)
        return await first_to_connect(
            addresses, lambda address: connect(url, host=address, port=ws_uri.port, **options)
        )


def _verdict(url: str, event_id: str, answer: _Ok) -> Verdict:
    """A relay's ``OK`` as a :class:`Verdict`."""
    prefix, _ = nip01.split_prefix(answer.message)
    return Verdict(url, event_id, answer.accepted, prefix == "duplicate:", prefix, answer.message)


async def _send_frame(ws: ClientConnection | None, text: str, remaining: float) -> str | None:
    """Send one frame on ``ws`` within ``remaining`` seconds; why it failed, or ``None``."""
    if ws is None:
        return "not connected"
    try:
        async with asyncio.timeout(max(0.0, remaining)):
            await ws.send(text)
    except (TimeoutError, websockets.exceptions.WebSocketException, OSError) as exc:
        return _describe(exc)
    return None


async def _hang_up(ws: ClientConnection, *, polite: bool) -> None:
    """Close ``ws`` (with the close handshake when ``polite``) and abort its transport."""
    keepalive = ws.keepalive_task  # websockets cancels it on close but never awaits it
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT * 2 if polite else 0):
            await ws.close()
    except (TimeoutError, OSError, websockets.exceptions.WebSocketException):
        pass
    finally:
        ws.transport.abort()
    if keepalive is not None:
        keepalive.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await keepalive


class RelayClient:
    """A client for one relay; use as ``async with RelayClient(url) as relay: ...``.

    ``secret`` or ``signer`` (at most one) and ``auth``: NIP-42 answers challenges only with
    this key (a :class:`~nostr_buzz.signer.Signer` signs the AUTH event), and only when
    ``auth`` is true (pass ``auth=False`` for relays the user did not list, e.g. nevent hints).
    ``allow_local``: the relay may be on this host or its networks; pass ``False`` for a relay
    someone else named, which is then connected to only at an address checked public
    (io/addresses.py), else the connection fails with the reason.
    ``timeout`` bounds connecting plus each operation.  A bad URL raises
    :class:`~nostr_buzz.errors.RelayError`; network trouble never raises.
    """

    def __init__(
        self,
        url: str,
        *,
        secret: SecretKey | None = None,
        signer: Signer | None = None,
        timeout: float = 10.0,
        auth: bool = True,
        allow_local: bool = True,
        max_events: int = MAX_QUERY_EVENTS,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        max_query_bytes: int = MAX_QUERY_BYTES,
        max_query_tags: int = MAX_QUERY_TAGS,
        on_cut_off: Callable[[str, str], None] | None = None,
    ) -> None:
        self.url = check_relay_url(url)
        self.signer = signer_of(secret, signer)
        self.timeout = float(timeout)
        self.auth = auth
        self.allow_local = allow_local
        self.max_events = max_events
        self.max_frame_bytes = max_frame_bytes
        self.query_budget = Budget(max_events, max_query_bytes, max_query_tags)
        self._on_cut_off = on_cut_off
        self.live_budget = Budget(MAX_LIVE_BUFFER, MAX_LIVE_BUFFER_BYTES, MAX_QUERY_TAGS)
        self.notices: deque[str] = deque(maxlen=20)
        self.malformed_frames = 0
        #: Verification failures on this connection (all operations), and the latest texts.
        self.rejected_count = 0
        self.recent_rejections: deque[str] = deque(maxlen=MAX_REJECTED_KEPT)
        self.last_error: str | None = None
        #: WebSocket connections opened so far (reconnects included).
        self.connections = 0
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()
        self._subs: dict[str, _Subscription] = {}
        self._ended_subs = _Ended()
        self._pending = _OkWaiters()
        self._nip42 = _Nip42()
        self._closed = False
        self._unresponsive = False

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> RelayClient:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        return self._ws is not None

    @property
    def authenticated(self) -> bool:
        """The relay acknowledged our NIP-42 AUTH on the current connection."""
        return self._nip42.authenticated

    async def connect(self, timeout: float | None = None) -> str | None:
        """Connect if not connected; returns ``None`` or why it failed (also ``last_error``)."""
        return await self._ensure_connected(self._deadline(timeout))

    async def close(self) -> None:
        """Close the connection and stop the reader; safe to call twice."""
        self._closed = True
        await self._drop("client closed")

    # -- operations ------------------------------------------------------------------------

    async def publish(self, event: Event, *, timeout: float | None = None) -> Verdict:
        """Send ``event`` and return the relay's verdict (one AUTH retry on ``auth-required:``)."""
        deadline = self._deadline(timeout)
        verdict = await self._publish_once(event, deadline)
        if verdict.prefix == "auth-required:" and not verdict.accepted:
            problem = await self._authenticate(deadline)
            if problem is not None:
                return Verdict(
                    self.url,
                    event.id,
                    False,
                    False,
                    verdict.prefix,
                    f"{verdict.message} ({problem})",
                )
            verdict = await self._publish_once(event, deadline)
        return verdict

    async def query(
        self,
        filters: FilterLike | Iterable[FilterLike],
        *,
        timeout: float | None = None,
        end_when_ids_served: bool = False,
        shared: SharedBudget | None = None,
    ) -> QueryResult:
        """Stored events matching ``filters``; ends at EOSE, CLOSED or the timeout.

        ``end_when_ids_served``: when every filter names its ids, end (as finished) as soon as
        each of them has arrived, valid and matching, without waiting for the relay's EOSE
        (some relays send it tens of milliseconds late).  ``shared``: a total this query draws
        on with other relays' queries, besides this client's own budget; a frame that would
        pass it cuts this relay off as its own budget would.
        """
        flts = nip01.as_filters(filters)
        deadline = self._deadline(timeout)
        query = _Query(self.url, flts, self.max_events, end_when_ids_served)
        result = query.result
        problem = await self._ensure_connected(deadline)
        if problem is not None:
            result.error = f"connect failed: {problem}"
            return result
        malformed_before = self.malformed_frames
        while True:
            sub = await self._open(
                flts, live=False, budget=self.query_budget, deadline=deadline, shared=shared
            )
            try:
                timed_out = await query.until_end(sub, deadline)
            except asyncio.CancelledError:  # abandoned (a pool's grace): free the REQ
                await self._close_sub(sub)
                raise
            if timed_out:
                self._unresponsive = True
            end = sub.end  # read before closing, which marks it ended by the client
            await self._close_sub(sub)
            query.take(sub)
            how, detail = end or ("timeout", "")
            if how == "closed" and query.auth.wanted(detail):
                auth_problem = await self._authenticate(deadline)
                if auth_problem is None:
                    continue
                detail = f"{detail} ({auth_problem})"
            query.ended(how, detail, timed_out=timed_out and end is None)
            if how == "cut off" and result.error is not None:
                self._report_cut_off(result.error)
                # It would go on sending: drop the connection rather than read the rest.
                self._unresponsive = True
                await self._drop(f"cut off: {detail}")
            break
        result.malformed_frames = self.malformed_frames - malformed_before
        if result.error is not None:
            self.last_error = result.error
        return result

    async def subscribe(
        self,
        filters: FilterLike | Iterable[FilterLike],
        *,
        reconnect_delay: float = 0.25,
        max_reconnect_delay: float = 10.0,
        max_failures: int = 100,
        resume_since: Callable[[], int] | None = None,
        on_reopen: Callable[[], None] | None = None,
        on_eose: Callable[[], None] | None = None,
    ) -> AsyncIterator[Event]:
        """Live events matching ``filters``, surviving disconnects.

        After a drop the client reconnects with exponential backoff and re-opens the
        subscription with ``since`` = the last ``created_at`` seen, or ``resume_since()`` when
        given (a caller that knows better: the last seen date may lie in the future); events
        are de-duplicated by id, so each is yielded once.  ``on_reopen()`` is called each time
        the subscription is opened again (after a drop or an overflow), so that a caller can
        look for what was missed meanwhile.  ``on_eose()`` is called each time the relay has
        sent the stored events of the (re)opened ``REQ``: from then on, new events reach it
        (after a NIP-42 refusal, only once the ``REQ`` sent after AUTH is live).
        Ends (see ``last_error``) after ``max_failures``
        consecutive failed reconnects, or when the relay closes the subscription.
        """
        live = _Live(
            nip01.as_filters(filters),
            base=reconnect_delay,
            cap=max_reconnect_delay,
            max_failures=max_failures,
        )
        while not self._closed:
            problem = await self._ensure_connected(self._deadline(None))
            if problem is not None:
                if live.give_up():
                    self.last_error = f"gave up after {max_failures} reconnects: {problem}"
                    return
                await live.back_off()
                continue
            current = live.next_filters(resume_since)
            sub = await self._open(
                current, live=True, budget=self.live_budget, deadline=None, on_eose=on_eose
            )
            if live.opened and on_reopen is not None:
                on_reopen()
            live.open()
            try:
                while True:
                    try:
                        event = await sub.next(self.timeout)
                    except TimeoutError:
                        continue  # the connection's pings detect a dead relay
                    if event is None:
                        break
                    if live.fresh(event):
                        yield event
            finally:
                await self._close_sub(sub)
            if not await self._reopen(sub, live):
                return

    async def _reopen(self, sub: _Subscription, live: _Live) -> bool:
        """After a live ``REQ`` ended: True to open it again (after any backoff), else False."""
        how, detail = sub.end or ("lost", "")
        if how == "closed":
            if live.auth.wanted(detail):
                auth_problem = await self._authenticate(self._deadline(None))
                if auth_problem is None:
                    return True
                detail = f"{detail} ({auth_problem})"
            self.last_error = f"closed: {detail}" if detail else None
            return False
        if how == "lost":
            if self._closed:
                return False
            if live.give_up(afresh=live.worked()):
                self.last_error = f"gave up after {live.max_failures} reconnects: {detail}"
                return False
            await live.back_off()
        if how == "cut off":
            # More bytes or tags than the buffer holds: drop the connection rather than read
            # the rest, and come back later (backing off: a relay that floods every connection
            # is never progress) from the last event seen.
            self.last_error = f"cut off: the relay sent {detail} faster than they were used"
            self._report_cut_off(self.last_error)
            self._unresponsive = True
            await self._drop(self.last_error)
            if live.give_up():
                return False
            await live.back_off()
        # "overflow" (too many events buffered): re-open at once from the last event seen
        return True

    # -- internals -------------------------------------------------------------------------

    def _report_cut_off(self, why: str) -> None:
        if self._on_cut_off is not None:
            self._on_cut_off(self.url, why)

    def _deadline(self, timeout: float | None) -> float:
        return _now() + (self.timeout if timeout is None else float(timeout))

    async def _ensure_connected(self, deadline: float) -> str | None:
        if self._ws is not None:
            return None
        if self._closed:
            return "client closed"
        async with self._connect_lock:
            if self._ws is not None:
                return None
            remaining = deadline - _now()
            if remaining <= 0:
                self.last_error = "timeout"
                return "timeout"
            try:
                ws = await _dial(
                    self.url, remaining, self.max_frame_bytes, allow_local=self.allow_local
                )
            except (
                OSError,
                TimeoutError,
                ValueError,
                websockets.exceptions.WebSocketException,
            ) as exc:
                self.last_error = _describe(exc)
                return self.last_error
            self._ws = ws
            self._unresponsive = False
            self.connections += 1
            self._nip42 = _Nip42()
            self._reader = asyncio.create_task(self._read(ws), name=f"relay-reader {self.url}")
            return None

    async def _send(self, text: str, deadline: float | None) -> str | None:
        """Send one frame; returns why it failed, or ``None``."""
        remaining = self.timeout if deadline is None else deadline - _now()
        return await _send_frame(self._ws, text, remaining)

    async def _open(
        self,
        filters: list[Filter],
        *,
        live: bool,
        budget: Budget,
        deadline: float | None,
        shared: SharedBudget | None = None,
        on_eose: Callable[[], None] | None = None,
    ) -> _Subscription:
        sub_id = f"buzz{next(_counter)}"
        sub = _Subscription(sub_id, filters, live=live, budget=budget, shared=shared)
        sub.on_eose = on_eose  # before the REQ goes: its EOSE may come back at once
        self._subs[sub_id] = sub
        problem = await self._send(nip01.encode_req(sub_id, filters), deadline)
        if problem is not None:
            sub.finish("lost", problem)
        return sub

    async def _close_sub(self, sub: _Subscription) -> None:
        """Forget ``sub`` and tell the relay, unless the relay already closed it."""
        if self._subs.pop(sub.id, None) is None:
            return
        self._ended_subs.add(sub)
        relay_ended = sub.end is not None and sub.end[0] in ("closed", "lost")
        sub.finish("lost", "closed by client")
        if not relay_ended and self._ws is not None:
            await self._send(nip01.encode_close(sub.id), _now() + CLOSE_TIMEOUT)

    async def _publish_once(self, event: Event, deadline: float) -> Verdict:
        problem = await self._ensure_connected(deadline)
        if problem is not None:
            return Verdict(self.url, event.id, False, False, "error:", f"connect failed: {problem}")
        answer = await self._request_ok(event.id, nip01.encode_event(event), deadline)
        if isinstance(answer, _Lost):
            return Verdict(self.url, event.id, False, False, "error:", answer.reason)
        return _verdict(self.url, event.id, answer)

    async def _request_ok(self, event_id: str, frame: str, deadline: float) -> _Ok | _Lost:
        """Send an EVENT or AUTH frame and wait for its ``OK`` until ``deadline``."""
        key, future = self._pending.add(event_id)
        try:
            problem = await self._send(frame, deadline)
            if problem is not None:
                return _Lost(problem)
            try:
                async with asyncio.timeout(max(0.0, deadline - _now())):
                    return await future
            except TimeoutError:
                self._unresponsive = True
                return _Lost("timeout: no OK from relay")
        finally:
            self._pending.remove(key)

    async def _authenticate(self, deadline: float) -> str | None:
        """Answer the relay's NIP-42 challenge, once per connection (requests refused together
        share one AUTH); ``None`` on success, else what went wrong."""
        if not self.auth:
            return "authentication disabled for this relay"
        if self.signer is None or self._ws is None:
            return "not connected" if self.signer else "no key configured to authenticate"
        return await self._nip42.answer(self.signer, self.url, self._request_ok, deadline)

    async def _read(self, ws: ClientConnection) -> None:
        reason = "connection dropped"
        try:
            async for frame in ws:
                try:
                    self._dispatch(nip01.parse_relay_message(frame), len(frame))
                except _Flooding as exc:  # a kept connection would read it for ever
                    reason = f"cut off: the relay sent {exc} for a REQ it was told to CLOSE"
                    self._report_cut_off(reason)
                    ws.transport.abort()
                    return
                except Exception:  # a frame must never kill the reader; count it and go on
                    self.malformed_frames += 1
        except websockets.exceptions.ConnectionClosed as exc:
            reason = _describe(exc)
        except (OSError, websockets.exceptions.WebSocketException) as exc:
            reason = _describe(exc)
        else:
            reason = _describe_close(ws)
        finally:
            if self._ws is ws:
                self._ws = None
            self._fail_all(reason)

    def _dispatch(self, msg: nip01.RelayMessage, size: int = 0) -> None:
        if isinstance(msg, nip01.EventMessage):
            sub = self._sub_for(msg.subscription_id)
            if sub is None and (beyond := self._ended_subs.charge(msg, size)) is not None:
                raise _Flooding(beyond)
            if sub is not None and (reason := sub.receive(msg.event, size)) is not None:
                self.rejected_count += 1
                self.recent_rejections.append(reason)
        elif isinstance(msg, nip01.OkMessage):
            self._pending.resolve(msg)
        elif isinstance(msg, (nip01.EoseMessage, nip01.ClosedMessage)):
            sub = self._sub_for(msg.subscription_id)
            if sub is None:
                return
            if isinstance(msg, nip01.ClosedMessage):
                sub.finish("closed", msg.message)
            elif not sub.live:
                sub.finish("eose", _eose_detail(msg))
            elif sub.on_eose is not None:
                sub.on_eose()
        elif isinstance(msg, nip01.AuthMessage):
            self._nip42.challenged(msg.challenge)
        elif isinstance(msg, nip01.NoticeMessage):
            self.notices.append(msg.message[:500])
        else:
            self.malformed_frames += 1

    def _sub_for(self, sub_id: str) -> _Subscription | None:
        """The open ``REQ`` a frame names; one for a ``REQ`` we never opened is malformed (one we
        closed may still have frames in flight)."""
        sub = self._subs.get(sub_id)
        if sub is None and sub_id not in self._ended_subs:
            self.malformed_frames += 1
        return sub

    def _fail_all(self, reason: str) -> None:
        for sub in list(self._subs.values()):
            sub.finish("lost", reason)
        self._pending.fail(reason)

    async def _drop(self, reason: str) -> None:
        ws, reader = self._ws, self._reader
        self._ws = None
        self._reader = None
        if ws is not None:
            # A relay that already let a request time out gets no polite close handshake:
            # waiting for its answer would push the caller past its timeout.
            await _hang_up(ws, polite=not self._unresponsive)
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        self._fail_all(reason)


async def _auth_event(signer: Signer, url: str, challenge: str, deadline: float) -> Event | str:
    """The AUTH event for ``challenge`` signed by ``signer`` before ``deadline`` (a remote
    signer answers over the network), or why there is none."""
    unsigned = nip42.auth_template(relay_url=url, challenge=challenge, created_at=int(time.time()))
    try:
        async with asyncio.timeout(max(0.0, deadline - _now())):
            return await signed(signer, unsigned)
    except TimeoutError:
        return "the signer did not sign the AUTH event in time"
    except BuzzError as exc:  # SignerError, or an event that fails verification
        return f"the signer did not sign the AUTH event: {exc}"


#: What an ``EOSE``'s NIP-67 hint (kept as its detail) says about completeness.
_COMPLETE: Final = {"finish": True, "more": False}


def _eose_detail(msg: nip01.EoseMessage) -> str:
    complete = msg.complete
    return "" if complete is None else "finish" if complete else "more"


def _describe_close(ws: ClientConnection) -> str:
    try:
        return _describe(ws.close_exc)
    except Exception:  # close_exc is only defined once the connection is closed
        return "connection dropped"


def _now() -> float:
    return asyncio.get_running_loop().time()
