"""A nostr-sdk signer as a :class:`~nostr_buzz.signer.Signer`: ``nostr_sdk.Keys``,
``nostr_sdk.NostrConnect`` (NIP-46) or any ``AsyncNostrSigner`` / ``NostrSigner`` of the
Python bindings (``pip install 'nostr-buzz[relay]'``).

Nothing the other library returns is trusted: every event it signs is decoded and verified
again here, then checked to be the one asked for (:func:`~nostr_buzz.signer.check_signed`).
Its errors become :class:`~nostr_buzz.signer.SignerError`, with secret keys taken out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from nostr_buzz.errors import BuzzError, redact
from nostr_buzz.event import Event
from nostr_buzz.keys import PublicKey
from nostr_buzz.signer import EventTemplate, SignerError, check_signed

__all__ = ["SdkSigner"]


def _sdk() -> Any:
    try:
        import nostr_sdk
    except ImportError:
        raise SignerError(
            "a nostr-sdk signer needs the nostr-sdk package: pip install 'nostr-buzz[relay]'"
        ) from None
    return nostr_sdk


async def _call(signer: object, name: str, *args: Any) -> Any:
    """``signer.<name>_async(*args)`` (Keys, NostrConnect, AsyncNostrSigner), else the
    blocking ``signer.<name>(*args)`` of a ``NostrSigner`` in a worker thread."""
    try:
        method = getattr(signer, f"{name}_async", None)
        if method is not None:
            # The bindings resolve their futures on the loop they were given: this one.
            _sdk().uniffi_set_event_loop(asyncio.get_running_loop())
            return await method(*args)
        method = getattr(signer, name, None)
        if method is None:
            raise SignerError(f"{type(signer).__name__} is not a nostr-sdk signer (no {name})")
        return await asyncio.to_thread(method, *args)
    except (SignerError, asyncio.CancelledError):
        raise
    except Exception as exc:
        raise SignerError(f"the nostr-sdk signer failed to {name}: {redact(str(exc))}") from None


class SdkSigner:
    """A :class:`~nostr_buzz.signer.Signer` over a nostr-sdk signer.

    Make it with ``await SdkSigner.connect(sdk_signer)``, which asks the signer for its public
    key (a NIP-46 bunker answers over relays); ``SdkSigner(sdk_signer, public_key)`` when the
    key is already known.
    """

    __slots__ = ("_public", "_signer")

    def __init__(self, signer: object, public_key: PublicKey) -> None:
        self._signer = signer
        self._public = public_key

    @classmethod
    async def connect(cls, signer: object) -> SdkSigner:
        """The adapter for ``signer``, with the public key it reports."""
        answer = await _call(signer, "get_public_key")
        try:
            return cls(signer, PublicKey.from_str(answer.to_hex()))
        except (AttributeError, BuzzError):
            raise SignerError("the nostr-sdk signer reported no valid public key") from None

    def __repr__(self) -> str:
        return f"SdkSigner({type(self._signer).__name__}, {self._public.bech32})"

    @property
    def public_key(self) -> PublicKey:
        return self._public

    async def sign_event(self, unsigned: EventTemplate) -> Event:
        sdk = _sdk()
        fields = msgspec.structs.asdict(unsigned)
        wire = msgspec.json.encode({"pubkey": self._public.hex, **fields}).decode()
        try:
            asked = sdk.UnsignedEvent.from_json(wire)
        except Exception:
            raise SignerError("nostr-sdk refused the event template") from None
        answer = await _call(self._signer, "sign_event", asked)
        try:
            event = Event.from_json(answer.as_json())  # verified again: id and signature
        except (AttributeError, BuzzError) as exc:
            raise SignerError(f"the nostr-sdk signer returned no valid event: {exc}") from None
        return check_signed(event, unsigned, self._public)

    async def nip44_encrypt(self, peer: PublicKey, plaintext: str) -> str:
        key = _sdk().PublicKey.parse(peer.hex)
        return str(await _call(self._signer, "nip44_encrypt", key, plaintext))

    async def nip44_decrypt(self, peer: PublicKey, payload: str) -> str:
        key = _sdk().PublicKey.parse(peer.hex)
        return str(await _call(self._signer, "nip44_decrypt", key, payload))
