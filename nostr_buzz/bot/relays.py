"""The bot's one relay pool: its read relays, the connections it keeps from the bot's start to
its close (shared by the subscription, context queries, replies and metrics: io/connections.py),
and the diagnostics its relays' trouble produces."""

from __future__ import annotations

from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool

from .config import PluginConfig


def bot_pool(config: PluginConfig, diagnostics: DiagnosticsFeed) -> RelayPool:
    """The pool of ``config``'s read relays (NIP-42 through its signer), reporting a relay cut
    off (``relay_cut_off``), one that refused, timed out or was left behind by a query's
    grace period and is skipped for a while (``relay_backing_off``), and a read of state
    that a relay which should have answered did not confirm (``state_unconfirmed``)."""
    pool = RelayPool(
        config.read_relays,
        signer=config.signer,
        timeout=config.relay_timeout,
        grace=config.relay_grace,
    )

    def cut_off(url: str, why: str) -> None:
        diagnostics.emit("relay_cut_off", payload={"relay": url, "reason": why})

    def backing_off(url: str, why: str, seconds: float) -> None:
        payload = {"relay": url, "reason": why, "retryIn": round(seconds, 3)}
        diagnostics.emit("relay_backing_off", payload=payload)

    def unconfirmed(kinds: list[int], relays: dict[str, str]) -> None:
        diagnostics.emit("state_unconfirmed", payload={"kinds": kinds, "relays": relays})

    pool.on_cut_off = cut_off
    pool.on_backoff = backing_off
    pool.on_unconfirmed = unconfirmed
    return pool
