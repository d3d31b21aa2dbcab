"""NIP-42 on one relay: the relay's challenge, our signed ``AUTH`` and when to send it.

:class:`Nip42` is one connection's state (a challenge is good on its own connection only);
:class:`AuthRetry` is one query's or live subscription's (a ``CLOSED`` saying
``auth-required:`` is answered once, then the same ``REQ`` is sent again).  The relay client
decides whether it may authenticate at all (a key, and ``auth`` for this relay); this module
signs the ``AUTH`` event and sends it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final

from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.nips import nip01, nip42
from nostr_buzz.signer import Signer, signed

from .relay_ok import Lost, Ok
from .relay_wire import now

#: How long to wait for the ``OK`` of an ``AUTH`` (some relays never send one).
AUTH_OK_TIMEOUT: Final = 1.0


class AuthRetry:
    """NIP-42: a ``CLOSED`` with ``auth-required:`` is answered once per query or subscription
    (AUTH, then the same ``REQ`` again); a second such refusal is the relay's answer."""

    def __init__(self) -> None:
        self.used = False

    def wanted(self, reason: str) -> bool:
        prefix, _ = nip01.split_prefix(reason)
        if prefix != "auth-required:" or self.used:
            return False
        self.used = True
        return True


class Nip42:
    """NIP-42 on one connection: the relay's latest challenge, and whether it acknowledged our
    ``AUTH``.  A challenge is good on its own connection only, so each one starts afresh."""

    def __init__(self) -> None:
        self.challenge: str | None = None
        self.challenge_seen = asyncio.Event()
        self.authenticated = False
        self.lock = asyncio.Lock()  # one AUTH at a time; the others then find it done

    def challenged(self, challenge: str) -> None:
        self.challenge = challenge
        self.challenge_seen.set()

    async def challenge_by(self, deadline: float) -> bool:
        """True once a challenge is here, waiting a moment (until ``deadline``) for a late one:
        it usually precedes the refusal that sends us to authenticate."""
        if self.challenge is not None:
            return True
        try:
            async with asyncio.timeout(max(0.0, min(AUTH_OK_TIMEOUT, deadline - now()))):
                await self.challenge_seen.wait()
        except TimeoutError:
            return False
        return True

    async def answer(
        self,
        signer: Signer,
        url: str,
        request_ok: Callable[[str, str, float], Awaitable[Ok | Lost]],
        deadline: float,
    ) -> str | None:
        """Sign and send the ``AUTH`` for this connection's challenge (``request_ok`` sends a
        frame and waits for its ``OK``); ``None`` once done, else what went wrong."""
        async with self.lock:
            if self.authenticated:
                return None
            if not await self.challenge_by(deadline):
                return "relay sent no AUTH challenge"
            assert self.challenge is not None
            event = await auth_event(signer, url, self.challenge, deadline)
            if isinstance(event, str):
                return event
            limit = min(deadline, now() + AUTH_OK_TIMEOUT)
            answer = await request_ok(event.id, nip01.encode_auth(event), limit)
            if isinstance(answer, Ok) and not answer.accepted:
                return f"AUTH refused: {answer.message or 'no reason given'}"
            # No OK at all: some relays never acknowledge AUTH; proceed, let the retry tell.
            self.authenticated = isinstance(answer, Ok)
            return None


async def auth_event(signer: Signer, url: str, challenge: str, deadline: float) -> Event | str:
    """The AUTH event for ``challenge`` signed by ``signer`` before ``deadline`` (a remote
    signer answers over the network), or why there is none."""
    unsigned = nip42.auth_template(relay_url=url, challenge=challenge, created_at=int(time.time()))
    try:
        async with asyncio.timeout(max(0.0, deadline - now())):
            return await signed(signer, unsigned)
    except TimeoutError:
        return "the signer did not sign the AUTH event in time"
    except BuzzError as exc:  # SignerError, or an event that fails verification
        return f"the signer did not sign the AUTH event: {exc}"
