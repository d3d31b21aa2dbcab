"""The bot's one relay pool: its read relays, the connections it keeps from the bot's start to
its close (shared by the subscription, context queries, replies and metrics: io/connections.py),
and the diagnostics its relays' trouble produces."""

from __future__ import annotations

from nostr_buzz.io.connections import LEFT_BEHIND
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool

from .config import PluginConfig


def bot_pool(config: PluginConfig, diagnostics: DiagnosticsFeed) -> RelayPool:
    """The pool of ``config``'s read relays (NIP-42 through its signer), reporting a relay cut
    off (``relay_cut_off``) and one that refused or timed out and is skipped for a while
    (``relay_backing_off``, ``scope`` ``all``), or was left behind by a query's grace period and
    is skipped by such reads for a while, still sent every reply and metric (``scope``
    ``reads``)."""
    pool = RelayPool(
        config.read_relays,
        signer=config.signer,
        timeout=config.relay_timeout,
        grace=config.relay_grace,
    )

    def cut_off(url: str, why: str) -> None:
        diagnostics.emit("relay_cut_off", payload={"relay": url, "reason": why})

    def backing_off(url: str, why: str, seconds: float) -> None:
        scope = "reads" if why.startswith(LEFT_BEHIND) else "all"
        payload = {"relay": url, "reason": why, "retryIn": round(seconds, 3), "scope": scope}
        diagnostics.emit("relay_backing_off", payload=payload)

    pool.on_cut_off = cut_off
    pool.on_backoff = backing_off
    return pool
