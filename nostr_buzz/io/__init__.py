"""Edges: relay client and pool (network I/O around the pure core), outbox, diagnostics, agent.

The names below load on first use: a module of this package that needs no network (file
modes, say) does not pull in the WebSocket stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nostr_buzz._lazy import lazy_getattr as _lazy_getattr

if TYPE_CHECKING:
    from nostr_buzz.io.pool import PoolQueryResult, PublishResult, RelayPool
    from nostr_buzz.io.relay import QueryResult, RelayClient, Verdict

_EXPORTS = {
    **dict.fromkeys(("PoolQueryResult", "PublishResult", "RelayPool"), "nostr_buzz.io.pool"),
    **dict.fromkeys(("QueryResult", "RelayClient", "Verdict"), "nostr_buzz.io.relay"),
}

__all__ = [
    "PoolQueryResult",
    "PublishResult",
    "QueryResult",
    "RelayClient",
    "RelayPool",
    "Verdict",
]


__getattr__ = _lazy_getattr(__name__, _EXPORTS, globals())
