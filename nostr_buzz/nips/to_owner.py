"""Events an agent encrypts to its owner and signs: NIP-AM metrics and NIP-TC checkpoints.

Both are one JSON payload, NIP-44 v2 encrypted from the agent's key to the owner's (either side
of the conversation key reads it), in an event whose tags the caller gives.  Each NIP keeps its
own error type: ``error`` makes the failures of encryption and signing one of its own.

Pure: the only randomness is the NIP-44 nonce and the BIP-340 aux bytes (OS CSPRNG unless
pinned), or whatever the :class:`~nostr_buzz.signer.Signer` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from nostr_buzz.errors import BuzzError, InvalidEvent, InvalidKey, Nip44Error
from nostr_buzz.event import Event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.signer import EventTemplate, Signer, check_signed, sign_template

__all__ = ["MAX_CONTENT_CHARS", "Sealing", "seal_local", "seal_with_signer"]

#: The longest NIP-44 content a plaintext of at most 65,535 bytes can produce (both NIPs' cap):
#: anything longer is refused before decrypting.
MAX_CONTENT_CHARS: Final = 4 * -(-(65 + 2 + nip44.calc_padded_len(65535)) // 3)

#: The unsigned event around a ciphertext: (agent, owner, content) -> template.
Template = Callable[[PublicKey, PublicKey, str], EventTemplate]

P = TypeVar("P")


@dataclass(frozen=True)
class Sealing(Generic[P]):
    """How one NIP seals its payload type ``P`` to the owner: ``encode`` gives the plaintext,
    ``template`` the unsigned event around the ciphertext, ``error`` and ``what`` the NIP's own
    failure and the name it gives what it makes."""

    encode: Callable[[P], bytes]
    template: Callable[[PublicKey, PublicKey, P, str], EventTemplate]
    error: type[BuzzError]
    what: str

    def local(
        self,
        agent: SecretKey,
        owner: PublicKey,
        payload: P,
        *,
        nonce: bytes | None = None,
        aux_rand: bytes | None = None,
    ) -> Event:
        """:func:`seal_local` of ``payload`` (``nonce``/``aux_rand`` pin randomness for tests)."""
        plaintext, around = self._plaintext(payload), self._around(payload)
        return seal_local(
            agent, owner, plaintext, around, self.error, self.what, nonce=nonce, aux_rand=aux_rand
        )

    async def with_signer(self, signer: Signer, owner: PublicKey, payload: P) -> Event:
        """:func:`seal_with_signer` of ``payload``."""
        plaintext = self._plaintext(payload)
        return await seal_with_signer(signer, owner, plaintext, self._around(payload), self.error)

    def _plaintext(self, payload: P) -> str:
        return self.encode(payload).decode("utf-8")

    def _around(self, payload: P) -> Template:
        return lambda agent, owner, content: self.template(agent, owner, payload, content)


def seal_local(
    agent: SecretKey,
    owner: PublicKey,
    plaintext: str,
    template: Template,
    error: type[BuzzError],
    what: str,
    *,
    nonce: bytes | None = None,
    aux_rand: bytes | None = None,
) -> Event:
    """Encrypt ``plaintext`` from ``agent`` to ``owner`` and sign the event ``template`` makes
    of the ciphertext; a failure of either step raises ``error`` naming ``what`` it made."""
    try:
        content = nip44.encrypt(plaintext, nip44.conversation_key(agent, owner), nonce)
    except Nip44Error as exc:
        raise error(f"cannot encrypt the {what}: {exc}") from None
    unsigned = template(agent.public_key, owner, content)
    try:
        return sign_template(agent, unsigned, aux_rand)
    except InvalidEvent as exc:
        raise error(f"cannot sign the {what} event: {exc}") from None


async def seal_with_signer(
    signer: Signer,
    owner: PublicKey,
    plaintext: str,
    template: Template,
    error: type[BuzzError],
) -> Event:
    """:func:`seal_local` through a signer: it encrypts to the owner and signs, and what it
    signed is checked to be what was asked (:func:`~nostr_buzz.signer.check_signed`)."""
    if not isinstance(signer, Signer):
        raise InvalidKey("signer must be a Signer (public_key, sign_event, nip44_encrypt)")
    agent = signer.public_key
    content = await signer.nip44_encrypt(owner, plaintext)
    if not isinstance(content, str) or len(content) > MAX_CONTENT_CHARS:
        raise error("the signer's NIP-44 encryption returned no usable ciphertext")
    unsigned = template(agent, owner, content)
    return check_signed(await signer.sign_event(unsigned), unsigned, agent)
