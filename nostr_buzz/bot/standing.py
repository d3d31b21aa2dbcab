"""The standing context a new agent session starts with, frozen for the session's life.

Base, persona and team instructions come from the configuration's files.  For a channel (never
a private conversation) the relays are asked, within 3 seconds, as a read of state (the newest
version counts: the read waits for each relay that serves and for the authors' NIP-65 write
relays, ``io/pool.py``), for the channel's canvas and
huddle guidelines by a trusted author — the owner, the agent itself and ``[gate] trusted`` keys,
never a key a relay announces (NIP-11): that one counts only for the channel metadata the same
relay serves (``bot/context.py``) — and for the agent's own core memory.  What
they answer is frozen into the session: a canvas published later reaches the channel's next
session (after a cancel, an agent restart or a bot restart), never the running one.
"""

from __future__ import annotations

import msgspec

from nostr_buzz.core.compiler import standing_text
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.io.standing import fetch_standing

from .config import PluginConfig

__all__ = ["SessionStanding"]


class SessionStanding:
    """Freezes the standing context of each new session (see the module docstring)."""

    def __init__(self, config: PluginConfig, pool: RelayPool, diagnostics: DiagnosticsFeed):
        self.config = config
        self.pool = pool
        self.diagnostics = diagnostics
        #: People's relay lists (NIP-65): the trusted authors' write relays are asked too
        #: (None: the read relays and the agent's write relays only).
        self.directory: RelayDirectory | None = None

    async def write_relays(self) -> tuple[str, ...]:
        """Where the standing documents' authors publish: the agent's write relays, then
        the trusted authors' NIP-65 write relays."""
        theirs = self.trusted() - {self.config.signer.public_key.hex}
        listed = await self.directory.write_relays_of(sorted(theirs)) if self.directory else ()
        return tuple(dict.fromkeys([*self.config.write_relays, *listed]))

    def trusted(self) -> frozenset[str]:
        """Whose canvases, huddle guidelines and channel metadata count, whichever relay
        served them (hex public keys)."""
        cfg = self.config
        return frozenset({cfg.owner.hex, cfg.signer.public_key.hex, *cfg.trusted})

    async def freeze(self, channel_id: str | None) -> Standing:
        """The standing context of a new session for ``channel_id`` (None: a private
        conversation, which gets the configured files only)."""
        cfg = self.config
        # <workspace> is a standing section: frozen with the others for the session's life.
        configured = msgspec.structs.replace(cfg.standing, workspace=cfg.agent_cwd)
        if channel_id is None:
            return configured
        fetched = await fetch_standing(
            self.pool,
            cfg.signer,
            channel=channel_id,
            trusted=self.trusted(),
            write_relays=await self.write_relays(),
        )
        standing = fetched.apply(configured)
        payload = fetched.describe()
        if self.diagnostics.include_prompt_text:  # asked for: the text the session starts with
            payload["standingText"] = standing_text(standing)
        self.diagnostics.emit("standing_context_frozen", channel_id=channel_id, payload=payload)
        return standing
