"""The agent's own relay lists, published at the bot's start: its kind 10002 (NIP-65: where it
writes and reads) and, when it reads private messages, its kind 10050 (NIP-17: where to send
them), each reported as a diagnostic (docs/bot.md, "Replies reach people where they read")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from nostr_buzz.errors import BuzzError
from nostr_buzz.io.diagnostics import DiagnosticKind, DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip17, nip65
from nostr_buzz.signer import EventTemplate, signed

from .config import PluginConfig

__all__ = ["publish_relay_lists"]


async def publish_relay_lists(
    config: PluginConfig,
    write_pool: RelayPool,
    diagnostics: DiagnosticsFeed,
    clock: Callable[[], float],
) -> None:
    """Publish the agent's kind 10002 and, when it reads private messages, its kind 10050
    (concurrently) to ``write_pool``."""
    now = int(clock())
    # Its write relays are where its replies are found; its read relays where it is addressed.
    relay_list = nip65.relay_list_template(config.read_relays, config.write_relays, created_at=now)
    lists = [
        _publish_own(
            config,
            write_pool,
            diagnostics,
            relay_list,
            ("relay_list_published", "relay_list_failed"),
        )
    ]
    if nip17.PRIVATE_MESSAGE_KIND in config.kinds:
        # Its read relays are where it reads private messages.
        dm_list = nip17.dm_relay_list_template(config.read_relays, created_at=now)
        report: tuple[DiagnosticKind, DiagnosticKind] = ("dm_relays_published", "dm_relays_failed")
        lists.append(_publish_own(config, write_pool, diagnostics, dm_list, report))
    await asyncio.gather(*lists)


async def _publish_own(
    config: PluginConfig,
    write_pool: RelayPool,
    diagnostics: DiagnosticsFeed,
    unsigned: EventTemplate,
    report: tuple[DiagnosticKind, DiagnosticKind],
) -> None:
    """Sign and publish one of the agent's own lists, reported as ``report``'s first
    diagnostic (published) or second (failed)."""
    published, failed = report
    try:
        event = await signed(config.signer, unsigned)
    except BuzzError as exc:
        diagnostics.emit(failed, payload={"error": str(exc)})
        return
    result = await write_pool.publish(event)
    diagnostics.emit(
        published if result.ok else failed,
        payload={"eventId": event.id, "relays": result.accepted},
    )
