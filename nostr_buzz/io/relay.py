"""One relay over WebSocket (NIP-01, NIP-42): publish, query, live subscriptions.

The edge around the pure codec in :mod:`nostr_buzz.nips.nip01`.  A relay is never trusted:
every ``EVENT`` frame is verified with :meth:`Event.from_dict` and checked against the filters
that asked for it; failures are dropped and reported on the result, never passed on.  Network
failures are data (``QueryResult.error``, a ``Verdict`` with prefix ``error:``), not exceptions,
so that a pool and the CLI can apply their precedence.  Every wait has a deadline, buffers are
bounded, and :meth:`RelayClient.close` leaves no task running.

:class:`RelayClient` runs the operations and decides when to reconnect and authenticate; its
parts, each in its own module: the connection (io/relay_wire.py), the routing of what the
relay sends (io/relay_inbox.py), the ``REQ`` buffers and their budgets (io/relay_subs.py), the
``OK`` awaited by a publish (io/relay_ok.py), NIP-42 (io/relay_auth.py), and the account of a
query or live subscription across its ``REQ``s (io/relay_reads.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from functools import partial

from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import signer_of
from nostr_buzz.nips import nip01
from nostr_buzz.nips.nip01 import FilterLike
from nostr_buzz.nips.relay_url import check_relay_url
from nostr_buzz.signer import Signer

from .relay_auth import AUTH_OK_TIMEOUT
from .relay_inbox import RelayInbox
from .relay_ok import SILENT, Lost, Ok, Verdict, verdict_of
from .relay_reads import MAX_SEEN_IDS, Live, Query, QueryResult
from .relay_subs import (
    MAX_EVENT_TAGS,
    MAX_LIVE_BUFFER,
    MAX_LIVE_BUFFER_BYTES,
    MAX_QUERY_BYTES,
    MAX_QUERY_EVENTS,
    MAX_QUERY_TAGS,
    MAX_REJECTED_KEPT,
    Budget,
    SharedBudget,
    Subscription,
)
from .relay_wire import CLOSE_TIMEOUT, MAX_FRAME_BYTES, RelayConnection, now

__all__ = [
    "AUTH_OK_TIMEOUT",
    "CLOSE_TIMEOUT",
    "MAX_EVENT_TAGS",
    "MAX_FRAME_BYTES",
    "MAX_LIVE_BUFFER",
    "MAX_LIVE_BUFFER_BYTES",
    "MAX_QUERY_BYTES",
    "MAX_QUERY_EVENTS",
    "MAX_QUERY_TAGS",
    "MAX_REJECTED_KEPT",
    "MAX_SEEN_IDS",
    "Budget",
    "QueryResult",
    "RelayClient",
    "SharedBudget",
    "Verdict",
]


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
        self._inbox = RelayInbox()
        self._link = RelayConnection(
            self.url,
            max_frame_bytes=max_frame_bytes,
            allow_local=allow_local,
            on_open=self._opened,
            on_frame=self._frame,
            on_lost=self._inbox.fail_all,
        )
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> RelayClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self, timeout: float | None = None) -> str | None:
        """Connect if not connected; returns ``None`` or why it failed (also ``last_error``)."""
        return await self._ensure_connected(self._deadline(timeout))

    async def close(self) -> None:
        """Close the connection and stop the reader; safe to call twice."""
        self._closed = True
        await self._link.drop("client closed")

    @property
    def connected(self) -> bool:
        return self._link.connected

    @property
    def authenticated(self) -> bool:
        """The relay acknowledged our NIP-42 AUTH on the current connection."""
        return self._inbox.nip42.authenticated

    # -- operations ------------------------------------------------------------------------

    async def publish(self, event: Event, *, timeout: float | None = None) -> Verdict:
        """Send ``event`` and return the relay's verdict (one AUTH retry on ``auth-required:``)."""
        deadline = self._deadline(timeout)
        verdict = await self._publish_once(event, deadline)
        if verdict.prefix == "auth-required:" and not verdict.accepted:
            problem = await self._authenticate(deadline)
            if problem is not None:
                return replace(verdict, message=f"{verdict.message} ({problem})")
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
        query = Query(self.url, flts, self.max_events, end_when_ids_served)
        result = query.result
        problem = await self._ensure_connected(deadline)
        if problem is not None:
            result.error = f"connect failed: {problem}"
            return result
        malformed_before = self.malformed_frames
        while True:
            sub = self._inbox.open(flts, live=False, budget=self.query_budget, shared=shared)
            await self._req(sub, deadline)
            try:
                timed_out = await query.until_end(sub, deadline)
            except asyncio.CancelledError:  # abandoned (a pool's grace): free the REQ
                await self._close_sub(sub)
                raise
            if timed_out:
                self._link.unresponsive = True
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
                self._link.unresponsive = True
                await self._link.drop(f"cut off: {detail}")
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
        live = Live(
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
            sub = self._inbox.open(current, live=True, budget=self.live_budget, on_eose=on_eose)
            await self._req(sub, None)
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

    async def _reopen(self, sub: Subscription, live: Live) -> bool:
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
            self._link.unresponsive = True
            await self._link.drop(self.last_error)
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
        return now() + (self.timeout if timeout is None else float(timeout))

    def _opened(self) -> None:
        """A new connection: counted, and NIP-42 starts afresh on it."""
        self.connections += 1
        self._inbox.connected()

    def _frame(self, frame: str | bytes) -> str | None:
        """One frame from the relay, routed by the inbox; what it leaves is counted here.
        Returns why to cut the relay off, or ``None``."""
        heard = self._inbox.feed(frame)
        if heard is None:
            return None
        if heard.kind == "malformed":
            self.malformed_frames += 1
        elif heard.kind == "rejected":
            self.rejected_count += 1
            self.recent_rejections.append(heard.text)
        elif heard.kind == "notice":
            self.notices.append(heard.text)
        else:
            self._report_cut_off(heard.text)
            return heard.text
        return None

    async def _ensure_connected(self, deadline: float) -> str | None:
        if self._link.connected:
            return None
        if self._closed:
            return "client closed"
        problem = await self._link.open(deadline)
        if problem is not None:
            self.last_error = problem
        return problem

    async def _send(self, text: str, deadline: float | None) -> str | None:
        """Send one frame; returns why it failed, or ``None``."""
        remaining = self.timeout if deadline is None else deadline - now()
        return await self._link.send(text, remaining)

    async def _req(self, sub: Subscription, deadline: float | None) -> None:
        """Send ``sub``'s ``REQ``, opened in the inbox; a failure to send ends it."""
        problem = await self._send(nip01.encode_req(sub.id, sub.filters), deadline)
        if problem is not None:
            sub.finish("lost", problem)

    async def _close_sub(self, sub: Subscription) -> None:
        """Forget ``sub`` and tell the relay, unless the relay already closed it."""
        if self._inbox.forget(sub) and self._link.connected:
            await self._send(nip01.encode_close(sub.id), now() + CLOSE_TIMEOUT)

    async def _publish_once(self, event: Event, deadline: float) -> Verdict:
        problem = await self._ensure_connected(deadline)
        if problem is not None:
            return verdict_of(self.url, event.id, Lost(f"connect failed: {problem}"))
        answer = await self._request_ok(event.id, nip01.encode_event(event), deadline)
        return verdict_of(self.url, event.id, answer)

    async def _request_ok(self, event_id: str, frame: str, deadline: float) -> Ok | Lost:
        """Send an EVENT or AUTH frame and wait for its ``OK`` until ``deadline``."""
        send = partial(self._send, frame, deadline)
        answer = await self._inbox.pending.request(event_id, send, deadline)
        if answer is SILENT:
            self._link.unresponsive = True
        return answer

    async def _authenticate(self, deadline: float) -> str | None:
        """Answer the relay's NIP-42 challenge, once per connection (requests refused together
        share one AUTH); ``None`` on success, else what went wrong."""
        if not self.auth:
            return "authentication disabled for this relay"
        if self.signer is None or not self._link.connected:
            return "not connected" if self.signer else "no key configured to authenticate"
        return await self._inbox.nip42.answer(self.signer, self.url, self._request_ok, deadline)
