"""Edges: relay client and pool (network I/O around the pure core)."""

from nostr_buzz.io.pool import PoolQueryResult, PublishResult, RelayPool
from nostr_buzz.io.relay import QueryResult, RelayClient, Verdict

__all__ = [
    "PoolQueryResult",
    "PublishResult",
    "QueryResult",
    "RelayClient",
    "RelayPool",
    "Verdict",
]
