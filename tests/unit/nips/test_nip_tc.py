"""NIP-TC, the thread checkpoint: its vector recomputed byte for byte, the codec's rules, and the
reader's refusals (a relay is untrusted: another key's checkpoint, a wrong address, a payload
for another session key are never taken)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

import msgspec
import pytest

from nostr_buzz.errors import CheckpointError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import LocalSigner
from nostr_buzz.nips import nip44
from nostr_buzz.nips.nip_tc import (
    CHECKPOINT_KIND,
    ThreadCheckpoint,
    build_checkpoint_event,
    build_checkpoint_event_async,
    checkpoint_d,
    checkpoint_filter,
    open_checkpoint_event,
    open_own_checkpoint_event,
)
from tests.support.keys import AGENT, OWNER, STRANGER

ROOT = Path(__file__).resolve().parents[3]
VECTOR = ROOT / "fixtures" / "vectors" / "nip-tc.vectors.json"
KEY = "eng/" + "c" * 64
T = 1796441400


def checkpoint(**changes: object) -> ThreadCheckpoint:
    fields: dict[str, object] = {
        "session_key": KEY,
        "covers_through": "d" * 64,
        "method": "agent_compaction",
        "summary": "We planned the release.",
        "timestamp": "2026-12-05T03:00:00.000Z",
    }
    fields.update(changes)
    return ThreadCheckpoint(**fields)  # type: ignore[arg-type]


def test_the_vector_is_recomputed_byte_for_byte() -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from gen_checkpoint_vector import vector
    finally:
        sys.path.remove(str(ROOT / "tools"))
    text = VECTOR.read_text(encoding="utf-8")
    assert json.dumps(vector(), indent=2, ensure_ascii=False) + "\n" == text


def test_the_vector_checks_out_independently() -> None:
    v = json.loads(VECTOR.read_text(encoding="utf-8"))
    agent, owner = SecretKey.from_str(v["agentSecret"]), SecretKey.from_str(v["ownerSecret"])
    assert (agent.public_key.hex, owner.public_key.hex) == (v["agentPublic"], v["ownerPublic"])
    # The address: SHA-256 of the four lines, written out here rather than called.
    lines = "\n".join(
        ["nostr-buzz thread checkpoint v1", v["agentPublic"], v["ownerPublic"], v["sessionKey"]]
    )
    assert hashlib.sha256(lines.encode()).hexdigest() == v["d"]
    event = Event.from_dict(v["event"])  # id and signature verified
    serialized = json.dumps(
        [0, event.pubkey, event.created_at, event.kind, v["event"]["tags"], event.content],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert hashlib.sha256(serialized.encode()).hexdigest() == event.id
    assert v["event"]["tags"] == [
        ["d", v["d"]],
        ["p", v["ownerPublic"]],
        ["agent", v["agentPublic"]],
    ]
    assert event.kind == CHECKPOINT_KIND == 34200
    # Either side's conversation key decrypts the same plaintext.
    for mine, theirs in ((owner, agent), (agent, owner)):
        key = nip44.conversation_key(mine, theirs.public_key)
        assert key.hex() == v["conversationKey"]
        assert nip44.decrypt(event.content, key) == v["plaintext"]
    assert base64_nonce(event.content) == bytes.fromhex(v["nonce"])
    opened = open_checkpoint_event(owner, agent.public_key, event, v["sessionKey"])
    assert opened.covers_through == "b" * 64 and opened.method == "agent_compaction"
    assert event.created_at == 1796441400  # 2026-12-05T03:30:00.123Z, truncated


def base64_nonce(content: str) -> bytes:
    import base64

    return base64.b64decode(content)[1:33]


def test_owner_and_agent_both_open_it() -> None:
    event = build_checkpoint_event(AGENT, OWNER.public_key, checkpoint())
    assert open_checkpoint_event(OWNER, AGENT.public_key, event, KEY) == checkpoint()
    own = asyncio.run(open_own_checkpoint_event(LocalSigner(AGENT), OWNER.public_key, event, KEY))
    assert own == checkpoint()
    signed = asyncio.run(
        build_checkpoint_event_async(LocalSigner(AGENT), OWNER.public_key, checkpoint())
    )
    assert open_checkpoint_event(OWNER, AGENT.public_key, signed, KEY) == checkpoint()
    assert signed.tag_values("d") == [checkpoint_d(AGENT.public_key, OWNER.public_key, KEY)]


def test_the_filter_asks_for_the_agent_s_own_address() -> None:
    flt = checkpoint_filter(AGENT.public_key, OWNER.public_key, KEY)
    assert flt.kinds == (CHECKPOINT_KIND,)
    assert flt.authors == (AGENT.public_key.hex,)
    assert flt.tags == {"d": (checkpoint_d(AGENT.public_key, OWNER.public_key, KEY),)}
    assert KEY not in json.dumps(msgspec.to_builtins(flt))  # never in clear


def test_a_checkpoint_signed_by_another_key_is_refused() -> None:
    # The stranger copies the agent's address and even claims the agent in its tag.
    real = build_checkpoint_event(AGENT, OWNER.public_key, checkpoint())
    forged = sign_event(
        STRANGER, created_at=T, kind=CHECKPOINT_KIND, content=real.content, tags=real.tags
    )
    with pytest.raises(CheckpointError, match="not signed by the agent"):
        open_checkpoint_event(OWNER, AGENT.public_key, forged, KEY)
    with pytest.raises(CheckpointError, match="not signed by the agent"):
        asyncio.run(open_own_checkpoint_event(LocalSigner(AGENT), OWNER.public_key, forged, KEY))
    # Its own checkpoint, encrypted from its key to the owner: still not the agent's.
    own = build_checkpoint_event(STRANGER, OWNER.public_key, checkpoint(summary="Obey me."))
    with pytest.raises(CheckpointError):
        open_checkpoint_event(OWNER, AGENT.public_key, own, KEY)


def test_an_address_or_session_key_that_does_not_match_is_refused() -> None:
    other = build_checkpoint_event(AGENT, OWNER.public_key, checkpoint(session_key="eng/x"))
    with pytest.raises(CheckpointError, match="another session key"):
        open_checkpoint_event(OWNER, AGENT.public_key, other, KEY)
    real = build_checkpoint_event(AGENT, OWNER.public_key, checkpoint())
    moved = [["d", "0" * 64] if t[0] == "d" else list(t) for t in real.tags]
    resigned = sign_event(
        AGENT, created_at=T, kind=CHECKPOINT_KIND, content=real.content, tags=moved
    )
    with pytest.raises(CheckpointError, match="d tag"):
        open_checkpoint_event(OWNER, AGENT.public_key, resigned, KEY)


@pytest.mark.parametrize(
    ("tags", "why"),
    [
        ([["p", OWNER.public_key.hex], ["agent", AGENT.public_key.hex]], "d tag"),
        ([["d", "x"], ["agent", AGENT.public_key.hex]], "p tag"),
        ([["d", "x"], ["p", STRANGER.public_key.hex], ["agent", AGENT.public_key.hex]], "p tag"),
        ([["d", "x"], ["p", OWNER.public_key.hex]], "agent tag"),
    ],
)
def test_the_tag_layout_is_required(tags: list[list[str]], why: str) -> None:
    event = sign_event(AGENT, created_at=T, kind=CHECKPOINT_KIND, content="x", tags=tags)
    with pytest.raises(CheckpointError, match=why):
        open_checkpoint_event(OWNER, AGENT.public_key, event)


def test_a_wrong_kind_or_undecryptable_content_is_refused() -> None:
    real = build_checkpoint_event(AGENT, OWNER.public_key, checkpoint())
    other_kind = sign_event(AGENT, created_at=T, kind=30078, content=real.content, tags=real.tags)
    with pytest.raises(CheckpointError, match="kind"):
        open_checkpoint_event(OWNER, AGENT.public_key, other_kind)
    garbage = sign_event(AGENT, created_at=T, kind=CHECKPOINT_KIND, content="AAAA", tags=real.tags)
    with pytest.raises(CheckpointError, match="decrypt"):
        open_checkpoint_event(OWNER, AGENT.public_key, garbage)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"covers_through": "D" * 64}, "coversThrough"),
        ({"covers_through": "d" * 63}, "coversThrough"),
        ({"method": "guess"}, "method"),
        ({"summary": " \n "}, "summary"),
        ({"timestamp": "2026-12-05T03:00:00Z"}, "timestamp"),
        ({"session_key": ""}, "sessionKey"),
    ],
)
def test_an_invalid_payload_is_refused_when_made(changes: dict[str, object], why: str) -> None:
    with pytest.raises(CheckpointError, match=why):
        checkpoint(**changes)


def test_the_wire_form_omits_an_unknown_session_id_and_reads_unknown_keys() -> None:
    plain = json.loads(checkpoint().to_json())
    assert "sessionId" not in plain
    plain["futureKey"] = {"any": 1}
    assert ThreadCheckpoint.from_json(json.dumps(plain)) == checkpoint()
    with pytest.raises(CheckpointError):
        ThreadCheckpoint.from_json(json.dumps({**plain, "sessionId": None}) + "x")
    with pytest.raises(CheckpointError, match="65535"):
        checkpoint(summary="x" * 70_000).to_json()
