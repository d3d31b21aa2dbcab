"""Which relays answer: what a read of replaceable or addressable state waits for
(:meth:`~nostr_buzz.io.pool.RelayPool.query_state`), and which of its answers came late.

A relay serves such a read unless its last definite answer to a query was a failure (it timed
out or refused the connection): one that finished (``EOSE``) serves, and so does one never
asked, or only ever left behind by a grace period (slow is not dead).  So a silent or dead
relay costs a read of state its timeout once, not every time, and an honest relay that is
merely slower than a lying one is still waited for.  One record per pool (the root pool's),
bounded: hint relays come from strangers' lists.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from nostr_buzz.nips.relay_url import normalize_relay_url

from .relay import QueryResult

#: Relays whose last answer is remembered, the oldest forgotten first.
MAX_REMEMBERED_RELAYS: Final = 1_024


def _is_failure(error: str | None) -> bool:
    """A query's error that says the relay is not serving (as the pool's health record)."""
    return error is not None and (error == "timeout" or error.startswith("connect failed"))


class AnswerRecord:
    """Relay → whether its last definite answer to a query was one (see the module)."""

    def __init__(self, size: int = MAX_REMEMBERED_RELAYS) -> None:
        self.size = size
        self._answered: OrderedDict[str, bool] = OrderedDict()

    def note(self, url: str, result: QueryResult) -> None:
        """``url``'s result of one query: finished, failed, or (cut off, refused by NIP-42,
        left behind) nothing that tells whether it serves."""
        if result.finished:
            answered = True
        elif _is_failure(result.error):
            answered = False
        else:
            return
        key = normalize_relay_url(url)
        self._answered.pop(key, None)
        self._answered[key] = answered
        while len(self._answered) > self.size:
            self._answered.popitem(last=False)

    def serves(self, url: str, *, unknown: bool = True) -> bool:
        """Whether a read of state waits for ``url``: unless its last answer was a failure;
        a relay never heard to the end counts as ``unknown`` says (False for a relay a
        stranger named: it is waited for only once it has answered a query)."""
        answered = self._answered.get(normalize_relay_url(url))
        return unknown if answered is None else answered


class Lateness:
    """When the first relay of one read finished; an answer more than ``grace`` seconds after
    it is one the grace period would not have waited for (``grace`` None: never late)."""

    def __init__(self, grace: float | None) -> None:
        self.grace = grace
        self._first: float | None = None

    def late(self, result: QueryResult, now: float) -> bool:
        """Whether ``result``, finished at ``now``, came late (the first one never does)."""
        if not result.finished:
            return False
        if self._first is None:
            self._first = now
            return False
        return self.grace is not None and now > self._first + self.grace

    def why(self) -> str:
        """The health record's reason for a late answer."""
        grace = f"{self.grace:g}"
        return f"left behind: answered a read of state later than {grace} s after the first EOSE"
