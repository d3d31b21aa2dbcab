"""How a relay pool reaches its relays: which ones it answers NIP-42 or reaches at a local
address, and the connections it keeps (the base of :class:`~nostr_buzz.io.pool.RelayPool`,
which adds the operations: publish, queries, reads of state, live subscriptions).

A relay is answered NIP-42 and reached at a local address only as far as the pool trusts it:
its own ``urls`` and those given to :meth:`RelayAccess.trust` (or
:meth:`~RelayAccess.answer_auth` / :meth:`~RelayAccess.trust_local`), never a relay someone
else named.  Every pool :meth:`RelayAccess.using` makes shares the trust, the kept connections
and each relay's health (io/connections.py) of the pool it was made from.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Self

from nostr_buzz.errors import RelayError
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import signer_of
from nostr_buzz.nips.relay_address import is_local_url
from nostr_buzz.nips.relay_url import check_relay_url, normalize_relay_url
from nostr_buzz.signer import Signer

from .connections import RelayConnections
from .relay import RelayClient

__all__ = ["RelayAccess", "is_usable_url", "unique_urls"]


def unique_urls(urls: Iterable[str]) -> list[str]:
    """Checked URLs in order, without repeats of the same relay (bad ones raise
    :class:`~nostr_buzz.errors.RelayError`)."""
    if isinstance(urls, str):  # one URL, not an iterable of its characters
        urls = [urls]
    out: list[str] = []
    seen: set[str] = set()
    for url in urls:
        checked = check_relay_url(url)
        key = normalize_relay_url(checked)
        if key not in seen:
            seen.add(key)
            out.append(checked)
    return out


def is_usable_url(url: str) -> bool:
    """A relay URL a query can use (ws:// or wss://, well formed)."""
    try:
        check_relay_url(url)
    except RelayError:
        return False
    return True


class RelayAccess:
    """The relays of a pool and how each is reached.  Bad URLs raise
    :class:`~nostr_buzz.errors.RelayError` here.

    NIP-42: the configured relays are answered with ``secret`` or through ``signer`` (at most
    one; a :class:`~nostr_buzz.signer.Signer` keeps the key out of this process).  The pool's
    own ``urls`` and those given to :meth:`trust` or :meth:`answer_auth` are answered; the
    relays of a pool :meth:`using` makes (someone else's list) and hints are not.

    ``guard_local``: a relay neither in ``urls`` nor given to :meth:`trust` or
    :meth:`trust_local` is never contacted on this host or its networks: a hint whose host is
    spelt as a local one is skipped (:func:`~nostr_buzz.nips.relay_address.is_local_url`), and
    every such connection goes only to an address checked when it is made
    (``io/addresses.py``), so a name that resolves to ``127.0.0.1`` fails to connect.

    Used as ``async with pool:``, the pool keeps one connection per relay (io/connections.py),
    shared by its queries, publishes and subscriptions and by the pools :meth:`using` makes;
    each is closed after ``idle_timeout`` seconds unused, and a relay that failed is skipped
    until its backoff ends.  Outside a context manager each call opens and closes its own
    connections, each bounded by ``timeout``.
    """

    def __init__(
        self,
        urls: Iterable[str],
        secret: SecretKey | None,
        signer: Signer | None,
        guard_local: bool,
        timeout: float,
        idle_timeout: float,
    ) -> None:
        self.urls = unique_urls(urls)
        #: Relays outside :meth:`trust` never reached at a local address (see the class).
        self.guard_local = guard_local
        keys = {normalize_relay_url(u) for u in self.urls}
        self._auth_relays: set[str] = set(keys)
        self._local_relays: set[str] = set(keys)
        self.signer = signer_of(secret, signer)
        self.timeout = float(timeout)
        self.idle_timeout = float(idle_timeout)
        #: Told ``(url, why)`` whenever a relay is cut off for sending more than its bounds.
        self.on_cut_off: Callable[[str, str], None] | None = None
        #: Told ``(url, why, seconds)`` whenever a relay starts backing off (kept connections).
        self.on_backoff: Callable[[str, str, float], None] | None = None
        self._connections: RelayConnections | None = None
        #: The pool :meth:`using` made this one from (None: this one is its own).
        self._origin: Self | None = None

    @property
    def _root(self) -> Self:
        """The pool whose trust, answers and callbacks count (itself, unless :meth:`using`
        made this one)."""
        return self if self._origin is None else self._origin

    # -- kept connections ----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def open(self) -> None:
        """Keep connections from now on (what ``async with`` does on entry)."""
        if self._connections is None:
            self._connections = RelayConnections(
                signer=self.signer,
                timeout=self.timeout,
                idle_timeout=self.idle_timeout,
                on_cut_off=self._cut_off,
                on_backoff=self._backoff,
            )

    async def close(self) -> None:
        """Close the kept connections (of the pools :meth:`using` made, too)."""
        if self._root is self and self._connections is not None:
            connections, self._connections = self._connections, None
            await connections.close()

    def using(self, urls: Iterable[str]) -> Self:
        """A pool of ``urls`` sharing this pool's kept connections, health, signer, timeout,
        grace and trust (a one-shot pool when this one keeps none): ``urls`` are answered
        NIP-42, or reached at a local address, only as far as this pool trusts them."""
        checked = unique_urls(urls)
        # Everything else is this pool's; what is trusted is asked of the root alone.
        pool = copy.copy(self)
        pool.urls = checked
        pool._origin = self._root
        return pool

    @property
    def open_relays(self) -> list[str]:
        """Relays with a kept connection open now (none outside a context manager)."""
        return [] if self._connections is None else self._connections.open_urls

    def _cut_off(self, url: str, why: str) -> None:
        callback = self._root.on_cut_off
        if callback is not None:
            callback(url, why)

    def _backoff(self, url: str, why: str, seconds: float) -> None:
        callback = self._root.on_backoff
        if callback is not None:
            callback(url, why, seconds)

    @contextlib.asynccontextmanager
    async def _client(
        self, url: str, *, auth: bool, limit: float, req: bool = False
    ) -> AsyncIterator[RelayClient]:
        """A client for ``url``: the kept one, else one of its own closed afterwards
        (``auth``: may answer NIP-42, when the pool trusts ``url`` for it)."""
        auth = auth and self._answers_auth(url)
        local = self._allows_local(url)
        if self._connections is not None:
            async with self._connections.use(url, auth=auth, allow_local=local, req=req) as client:
                yield client
            return
        client = RelayClient(
            url,
            signer=self.signer if auth else None,
            timeout=limit,
            auth=auth,
            allow_local=local,
            on_cut_off=self._cut_off,
        )
        try:
            yield client
        finally:
            await client.close()

    # -- health ----------------------------------------------------------------------------

    def _skipped(self, url: str, *, delivery: bool = False) -> str | None:
        """Why ``url`` is not asked now (backing off), or ``None``; ``delivery``: for a
        publish, which only a failure skips, never having been left behind by a read."""
        if self._connections is None:
            return None
        why = self._connections.backing_off(url, delivery=delivery)
        return None if why is None else f"skipped: {why}"

    def _record(self, url: str, problem: str | None, *, delivery: bool = False) -> None:
        if self._connections is not None:
            self._connections.record(url, problem, delivery=delivery)

    # -- trust -----------------------------------------------------------------------------

    def trust(self, urls: Iterable[str]) -> None:
        """Relays configured with this pool's own (a bot's write relays): answered NIP-42 and
        allowed at a local address, in every pool :meth:`using` makes."""
        self.answer_auth(urls)
        self.trust_local(urls)

    def trust_local(self, urls: Iterable[str]) -> None:
        """Relays allowed at a local address (a bot's ``local_relays``), never answered NIP-42
        for that."""
        self._root._local_relays.update(normalize_relay_url(u) for u in unique_urls(urls))

    def answer_auth(self, urls: Iterable[str]) -> None:
        """Relays whose NIP-42 challenges are answered (the owner's and the bot's own listed
        relays), in every pool :meth:`using` makes."""
        self._root._auth_relays.update(normalize_relay_url(u) for u in unique_urls(urls))

    def _answers_auth(self, url: str) -> bool:
        return normalize_relay_url(url) in self._root._auth_relays

    def _allows_local(self, url: str) -> bool:
        root = self._root
        return not root.guard_local or normalize_relay_url(url) in root._local_relays

    def _may_ask(self, hint: str) -> bool:
        """False for a hint spelt as a local host that this pool may not reach there."""
        return self._allows_local(hint) or not is_local_url(hint)
