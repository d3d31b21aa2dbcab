"""Generate fixtures/vectors/nip-tc.vectors.json: the thread checkpoint of nips/NIP-TC.md built
from fixed keys, nonce and BIP-340 aux bytes, so another implementation can check its bytes.

Usage: python tools/gen_checkpoint_vector.py > fixtures/vectors/nip-tc.vectors.json

The unit test ``tests/unit/nips/test_nip_tc.py`` recomputes every field from the inputs.
"""

from __future__ import annotations

import json

from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip44
from nostr_buzz.nips.nip_tc import ThreadCheckpoint, build_checkpoint_event, checkpoint_d

AGENT_SECRET = "0000000000000000000000000000000000000000000000000000000000000003"
OWNER_SECRET = "0000000000000000000000000000000000000000000000000000000000000002"
NONCE = "f" * 64
AUX_RAND = "0" * 64
SESSION_KEY = "eng/" + "a" * 64


def vector() -> dict[str, object]:
    agent, owner = SecretKey.from_str(AGENT_SECRET), SecretKey.from_str(OWNER_SECRET)
    checkpoint = ThreadCheckpoint(
        session_key=SESSION_KEY,
        covers_through="b" * 64,
        method="agent_compaction",
        summary="Morgan asked for the release date; we agreed on <Friday> & a changelog.",
        timestamp="2026-12-05T03:30:00.123Z",
        session_id="5f1c0d4e2b7a4c1e9d3f6a8b0c2e4f60",
    )
    event = build_checkpoint_event(
        agent,
        owner.public_key,
        checkpoint,
        nonce=bytes.fromhex(NONCE),
        aux_rand=bytes.fromhex(AUX_RAND),
    )
    key = nip44.conversation_key(agent, owner.public_key)
    return {
        "description": "nips/NIP-TC.md: one thread checkpoint from fixed keys, nonce and aux",
        "agentSecret": AGENT_SECRET,
        "ownerSecret": OWNER_SECRET,
        "agentPublic": agent.public_key.hex,
        "ownerPublic": owner.public_key.hex,
        "conversationKey": key.hex(),
        "nonce": NONCE,
        "auxRand": AUX_RAND,
        "sessionKey": SESSION_KEY,
        "d": checkpoint_d(agent.public_key, owner.public_key, SESSION_KEY),
        "plaintext": checkpoint.to_json(),
        "event": event.to_dict(),
    }


if __name__ == "__main__":
    print(json.dumps(vector(), indent=2, ensure_ascii=False))
