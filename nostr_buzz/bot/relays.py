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
    ``reads``); a read of state that a relay which should have answered did not confirm
    (``state_unconfirmed``).  It trusts the configured relays (:func:`trust_configured`) and
    no one else's (``guard_local``)."""
    pool = RelayPool(
        config.read_relays,
        signer=config.signer,
        timeout=config.relay_timeout,
        grace=config.relay_grace,
        guard_local=True,
    )
    trust_configured(pool, config)

    def cut_off(url: str, why: str) -> None:
        diagnostics.emit("relay_cut_off", payload={"relay": url, "reason": why})

    def backing_off(url: str, why: str, seconds: float) -> None:
        scope = "reads" if why.startswith(LEFT_BEHIND) else "all"
        payload = {"relay": url, "reason": why, "retryIn": round(seconds, 3), "scope": scope}
        diagnostics.emit("relay_backing_off", payload=payload)

    def unconfirmed(kinds: list[int], relays: dict[str, str]) -> None:
        diagnostics.emit("state_unconfirmed", payload={"kinds": kinds, "relays": relays})

    pool.on_cut_off = cut_off
    pool.on_backoff = backing_off
    pool.on_unconfirmed = unconfirmed
    return pool


def trust_configured(pool: RelayPool, config: PluginConfig) -> None:
    """What the bot's configuration vouches for: its read and write relays (answered NIP-42,
    allowed on a local address) and ``[outbox] local_relays`` (allowed on a local address
    only: a relay there that someone's list names is still someone else's relay, docs/bot.md
    "Addresses, not spellings").  The owner's and the agent's listed relays are added to the
    NIP-42 ones as they are looked up (io/relay_lists.py, bot/delivery.py)."""
    pool.trust([*config.read_relays, *config.write_relays])
    pool.trust_local(config.local_relays)
