"""Which relays answer: what a read of replaceable or addressable state waits for
(:meth:`~nostr_buzz.io.pool.RelayPool.query_state`).

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

    def serves(self, url: str) -> bool:
        """Whether a read of state waits for ``url``: unless its last answer was a failure."""
        return self._answered.get(normalize_relay_url(url)) is not False
