"""A hostile signer for the tests that play one: it holds the key it claims, but signs what its
``forge`` makes of the template it is asked to sign."""

from __future__ import annotations

from collections.abc import Callable

from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import LocalSigner
from nostr_buzz.signer import EventTemplate


class Forger(LocalSigner):
    """Signs ``forge(asked)`` in place of ``asked``; ``forged`` counts the times they differ."""

    def __init__(self, secret: SecretKey, forge: Callable[[EventTemplate], EventTemplate]) -> None:
        super().__init__(secret)
        self.forge = forge
        self.forged = 0

    async def sign_event(self, unsigned: EventTemplate) -> Event:
        chosen = self.forge(unsigned)
        self.forged += chosen != unsigned
        return await super().sign_event(chosen)
