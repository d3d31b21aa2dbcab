"""NIP-AM metric events: payload wire rules, build/open round trips and rejections."""

from __future__ import annotations

import base64
import calendar
import datetime as dt
import hashlib
import hmac
import json
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nostr_buzz
from nostr_buzz.errors import BuzzError, InvalidKey, MetricError, Nip44Error
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.manifest import Layer, Manifest, layers_hash, manifest_from_layers
from nostr_buzz.nips import nip44
from nostr_buzz.nips.nip_am import (
    KIND,
    MAX_PAYLOAD_BYTES,
    MetricPayload,
    PricingIdentity,
    TokenCounts,
    build_metric_event,
    created_at_of,
    open_metric_event,
)
from tests.support.data import VECTORS, load_json
from tests.support.keys import AGENT, OWNER, STRANGER

TS = "2026-12-02T14:05:09.987Z"
EVENT_ID = "e" * 64

MANIFEST = manifest_from_layers(
    [
        Layer(1, "channel", "channel", "relay", "v3", "owner", "live", 120, False),
        Layer(0, "system", "global", "harness", "v1", "host", "static", 40, True),
    ]
)


def full_payload(**changes: Any) -> MetricPayload:
    base = MetricPayload(
        harness="goose",
        timestamp=TS,
        model="gpt-x",
        channel_id="ch-1",
        session_id="sess-1",
        turn_id="turn-9",
        turn_seq=3,
        turn=TokenCounts(120, 30, 150, 0.25, cache_read_tokens=100, cache_write_tokens=0),
        cumulative=TokenCounts(1200, 300, None, 2.5),
        delta_reliable=True,
        stop_reason="end_turn",
        outcome="success",
        terminal_evidence="prompt_response",
        triggering_event_ids=(EVENT_ID, "f" * 64),
        root_event_id="a" * 64,
        parent_event_id="b" * 64,
        started_at="2026-12-02T14:05:01.001+01:00",
        adapter_session_id="adapter-7",
        native_stop_reason="stop",
        pricing_identity=PricingIdentity("openrouter", "gpt-x", cache_class="ephemeral-5m"),
        context_manifest=MANIFEST,
        context_used_tokens=4_200,
        context_window_tokens=200_000,
    )
    return msgspec.structs.replace(base, **changes)


def minimal_payload() -> MetricPayload:
    return MetricPayload(harness="codex", timestamp=TS)


def sign_raw(plaintext: str, *, tags: Any = None, kind: int = KIND, to: SecretKey = OWNER) -> Event:
    """A hand-made metric event (bypassing build validation) from AGENT to ``to``."""
    content = nip44.encrypt(plaintext, nip44.conversation_key(AGENT, to.public_key))
    if tags is None:
        tags = [["p", to.public_key.hex], ["agent", AGENT.public_key.hex]]
    return sign_event(AGENT, kind=kind, content=content, tags=tags, created_at=1_800_000_000)


def wire(payload: MetricPayload) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(payload.to_json())
    return data


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", [full_payload(), minimal_payload()], ids=["full", "minimal"])
def test_round_trip_equal(payload: MetricPayload) -> None:
    event = build_metric_event(AGENT, OWNER.public_key, payload)
    assert event.kind == KIND
    assert event.pubkey == AGENT.public_key.hex
    assert event.tags == (("p", OWNER.public_key.hex), ("agent", AGENT.public_key.hex))
    opened = open_metric_event(OWNER, event)
    assert opened == payload
    # The event survives the wire too.
    assert open_metric_event(OWNER.hex, Event.from_json(event.to_json())) == payload


def test_created_at_is_the_timestamp_truncated_to_seconds() -> None:
    event = build_metric_event(AGENT, OWNER.public_key.hex, minimal_payload())
    expected = dt.datetime(2026, 12, 2, 14, 5, 9, tzinfo=dt.UTC).timestamp()
    assert event.created_at == int(expected) == created_at_of(TS)


@pytest.mark.parametrize(
    "timestamp",
    ["1970-01-01T00:00:00.000Z", "2000-02-29T23:59:59.999Z", "2100-03-01T00:00:00.500Z"],
)
def test_created_at_matches_the_calendar(timestamp: str) -> None:
    parsed = dt.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    assert created_at_of(timestamp) == int(parsed.timestamp())


def test_deterministic_with_pinned_randomness() -> None:
    a = build_metric_event(
        AGENT, OWNER.public_key, full_payload(), nonce=bytes(32), aux_rand=bytes(32)
    )
    b = build_metric_event(
        AGENT, OWNER.public_key, full_payload(), nonce=bytes(32), aux_rand=bytes(32)
    )
    assert a == b


def test_manifest_hash_mismatch_is_decoded_not_rejected() -> None:
    forged = Manifest(1, "sha256:" + "0" * 64, MANIFEST.layers)
    event = build_metric_event(AGENT, OWNER.public_key, full_payload(context_manifest=forged))
    opened = open_metric_event(OWNER, event)
    assert opened.context_manifest == forged
    assert opened.context_manifest is not None
    assert not opened.context_manifest.hash_matches()
    assert full_payload().context_manifest is not None
    assert open_metric_event(
        OWNER, build_metric_event(AGENT, OWNER.public_key, full_payload())
    ).context_manifest.hash_matches()  # type: ignore[union-attr]


# --- key and tag layout ------------------------------------------------------------------------


def test_other_key_fails() -> None:
    event = build_metric_event(AGENT, OWNER.public_key, full_payload())
    for key in (STRANGER, AGENT):
        with pytest.raises(MetricError):
            open_metric_event(key, event)


def test_other_key_fails_even_when_the_p_tag_names_it() -> None:
    # Encrypted to OWNER but addressed (p tag) to STRANGER: the stranger cannot decrypt.
    plaintext = full_payload().to_json()
    content = nip44.encrypt(plaintext, nip44.conversation_key(AGENT, OWNER.public_key))
    event = sign_event(
        AGENT,
        kind=KIND,
        content=content,
        tags=[["p", STRANGER.public_key.hex], ["agent", AGENT.public_key.hex]],
        created_at=1,
    )
    with pytest.raises(MetricError, match="decrypt"):
        open_metric_event(STRANGER, event)


OWNER_HEX = OWNER.public_key.hex
AGENT_HEX = AGENT.public_key.hex


@pytest.mark.parametrize(
    ("tags", "why"),
    [
        ([["p", OWNER_HEX], ["p", OWNER_HEX], ["agent", AGENT_HEX]], "two p"),
        ([["p", OWNER_HEX], ["p", STRANGER.public_key.hex], ["agent", AGENT_HEX]], "two p"),
        ([["agent", AGENT_HEX]], "no p"),
        ([["p"], ["agent", AGENT_HEX]], "p without value"),
        ([["p", OWNER_HEX]], "missing agent"),
        ([["p", OWNER_HEX], ["agent", AGENT_HEX], ["agent", AGENT_HEX]], "two agent"),
        ([["p", OWNER_HEX], ["agent", STRANGER.public_key.hex]], "agent != pubkey"),
        ([["p", OWNER_HEX], ["agent", AGENT_HEX.upper()]], "agent != pubkey"),
        ([["p", OWNER_HEX], ["agent", AGENT_HEX], ["h", "channel"]], "h tag"),
    ],
)
def test_bad_tag_layouts_rejected(tags: list[list[str]], why: str) -> None:
    event = sign_raw(minimal_payload().to_json(), tags=tags)
    with pytest.raises(MetricError):
        open_metric_event(OWNER, event)


def test_other_tags_and_extra_elements_ignored() -> None:
    tags = [["p", OWNER_HEX, "wss://relay"], ["agent", AGENT_HEX, "x"], ["t", "metrics"], ["x"]]
    event = sign_raw(minimal_payload().to_json(), tags=tags)
    assert open_metric_event(OWNER, event) == minimal_payload()


def test_wrong_kind_rejected() -> None:
    with pytest.raises(MetricError, match="kind"):
        open_metric_event(OWNER, sign_raw(minimal_payload().to_json(), kind=1))


def test_undecryptable_content_rejected() -> None:
    event = sign_event(
        AGENT,
        kind=KIND,
        content="not a nip44 payload",
        tags=[["p", OWNER_HEX], ["agent", AGENT_HEX]],
        created_at=1,
    )
    with pytest.raises(MetricError):
        open_metric_event(OWNER, event)


# --- numeric validation, both directions -------------------------------------------------------

BAD_COUNTS = [
    TokenCounts(1, 1, 2, -0.01),
    TokenCounts(1, 1, 2, math.nan),
    TokenCounts(1, 1, 2, math.inf),
    TokenCounts(-1, 1, 2, 0.0),
    TokenCounts(1, -5, 2, 0.0),
    TokenCounts(1, 1, -2, 0.0),
    TokenCounts(1, 1, 2, 0.0, cache_read_tokens=-1),
    TokenCounts(1.5, 1, 2, 0.0),  # type: ignore[arg-type]
    TokenCounts(True, 1, 2, 0.0),
    TokenCounts(1, 1, 2, "0.1"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("counts", BAD_COUNTS)
def test_build_rejects_bad_numbers(counts: TokenCounts) -> None:
    with pytest.raises(MetricError):
        build_metric_event(AGENT, OWNER.public_key, full_payload(turn=counts))
    with pytest.raises(MetricError):
        build_metric_event(AGENT, OWNER.public_key, full_payload(cumulative=counts))


@pytest.mark.parametrize(
    "counts",
    [
        {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2, "costUsd": -0.5},
        {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2, "costUsd": 1e400},  # inf
        {"inputTokens": -1, "outputTokens": 1, "totalTokens": 2, "costUsd": 0},
        {"inputTokens": 1.0, "outputTokens": 1, "totalTokens": 2, "costUsd": 0},
        {"inputTokens": 1, "outputTokens": "1", "totalTokens": 2, "costUsd": 0},
        {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2, "costUsd": True},
        {
            "inputTokens": 1,
            "outputTokens": 1,
            "totalTokens": 2,
            "costUsd": 0,
            "cacheReadTokens": -3,
        },
    ],
)
def test_open_rejects_bad_numbers(counts: dict[str, Any]) -> None:
    for field in ("turn", "cumulative"):
        body = wire(full_payload())
        body[field] = counts
        text = json.dumps(body).replace("Infinity", "1e400")
        with pytest.raises(MetricError):
            open_metric_event(OWNER, sign_raw(text))


def test_open_rejects_nan_cost_text() -> None:
    body = wire(minimal_payload())
    body["turn"] = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2, "costUsd": math.nan}
    text = json.dumps(body)  # Python writes NaN, which is not JSON
    assert "NaN" in text
    with pytest.raises(MetricError):
        open_metric_event(OWNER, sign_raw(text))


def test_integral_cost_is_a_float() -> None:
    counts = TokenCounts(1, 2, 3, 0)
    assert counts.cost_usd == 0.0 and isinstance(counts.cost_usd, float)
    payload = full_payload(turn=counts)
    assert open_metric_event(OWNER, build_metric_event(AGENT, OWNER.public_key, payload)) == payload


@pytest.mark.parametrize(
    "changes",
    [
        {"turn_seq": 0},
        {"turn_seq": -1},
        {"turn_seq": None},  # cumulative is set: turn_seq required
        {"session_id": None},  # cumulative is set: session_id required
        {"harness": ""},
        {"timestamp": "2026-12-02T14:05:09Z"},  # no milliseconds
        {"timestamp": "2026-12-02T14:05:09.123456Z"},
        {"timestamp": "2026-12-02T14:05:09.123+00:00"},
        {"timestamp": "2026-12-02 14:05:09.123Z"},
        {"timestamp": "2026-02-30T14:05:09.123Z"},
        {"timestamp": "2026-12-02T24:00:00.000Z"},
        {"timestamp": "2026-12-02t14:05:09.123z"},
        {"started_at": "yesterday"},
        {"started_at": "2026-13-02T14:05:09Z"},
        {"triggering_event_ids": ("E" * 64,)},
        {"root_event_id": "abc"},
        {"model": 5},
        {"delta_reliable": "yes"},
        {"context_manifest": Manifest(2, MANIFEST.hash, MANIFEST.layers)},
        {"context_used_tokens": -1},
        {"context_window_tokens": 1.5},
        {"context_window_tokens": True},
    ],
)
def test_build_rejects_invalid_fields(changes: dict[str, Any]) -> None:
    with pytest.raises(MetricError):
        build_metric_event(AGENT, OWNER.public_key, full_payload(**changes))


def test_turn_seq_optional_without_cumulative() -> None:
    payload = full_payload(cumulative=None, turn_seq=None, session_id=None)
    assert open_metric_event(OWNER, build_metric_event(AGENT, OWNER.public_key, payload)) == payload


@pytest.mark.parametrize(
    "changes",
    [
        {"turnSeq": 0},
        {"turnSeq": None},
        {"sessionId": None},
        {"timestamp": "2026-12-02T14:05:09Z"},
        {"timestamp": None},
        {"harness": None},
        {"deltaReliable": None},
        {"triggeringEventIds": ["nothex"]},
        {"contextManifest": {"schemaVersion": 2, "hash": MANIFEST.hash, "layers": []}},
        {"contextManifest": {"schemaVersion": 1, "hash": MANIFEST.hash, "layers": [{"order": 1}]}},
        {"contextManifest": {"schemaVersion": "1", "hash": MANIFEST.hash, "layers": []}},
    ],
)
def test_open_rejects_invalid_fields(changes: dict[str, Any]) -> None:
    body = wire(full_payload())
    body.update(changes)
    with pytest.raises(MetricError):
        open_metric_event(OWNER, sign_raw(json.dumps(body)))


@pytest.mark.parametrize("missing", ["harness", "timestamp"])
def test_open_rejects_missing_required(missing: str) -> None:
    body = wire(full_payload())
    del body[missing]
    with pytest.raises(MetricError):
        open_metric_event(OWNER, sign_raw(json.dumps(body)))


@pytest.mark.parametrize("text", ["not json", "[]", "null", '"x"', "{}"])
def test_open_rejects_non_payload_json(text: str) -> None:
    with pytest.raises(MetricError):
        open_metric_event(OWNER, sign_raw(text))


# --- size cap ----------------------------------------------------------------------------------


def _payload_of_size(size: int) -> str:
    body = wire(minimal_payload())
    body["padding"] = ""
    base = len(json.dumps(body, separators=(",", ":")).encode())
    body["padding"] = "x" * (size - base)
    text = json.dumps(body, separators=(",", ":"))
    assert len(text.encode()) == size
    return text


def test_plaintext_cap_on_open() -> None:
    at_cap = sign_raw(_payload_of_size(MAX_PAYLOAD_BYTES))
    assert open_metric_event(OWNER, at_cap) == minimal_payload()  # unknown field ignored
    with pytest.raises(MetricError, match="65535"):
        open_metric_event(OWNER, sign_raw(_payload_of_size(MAX_PAYLOAD_BYTES + 1)))


def test_plaintext_cap_on_build() -> None:
    many = tuple(
        Layer(i, f"layer-{i}", "global", "s" * 40, "v1", "host", "static", 1, False)
        for i in range(600)
    )
    big = manifest_from_layers(many)
    assert len(big.to_json()) > MAX_PAYLOAD_BYTES
    with pytest.raises(MetricError, match="65535"):
        build_metric_event(AGENT, OWNER.public_key, full_payload(context_manifest=big))


# --- wire rules --------------------------------------------------------------------------------

NULLABLE = ["model", "channelId", "sessionId", "turnId", "turnSeq", "turn", "cumulative"]
OMITTABLE = [
    "stopReason",
    "outcome",
    "terminalEvidence",
    "triggeringEventIds",
    "rootEventId",
    "parentEventId",
    "startedAt",
    "adapterSessionId",
    "nativeStopReason",
    "pricingIdentity",
    "contextManifest",
    "contextUsedTokens",
    "contextWindowTokens",
]


def test_minimal_wire_bytes() -> None:
    assert minimal_payload().to_json() == (
        '{"harness":"codex","timestamp":"2026-12-02T14:05:09.987Z","model":null,'
        '"channelId":null,"sessionId":null,"turnId":null,"turnSeq":null,"turn":null,'
        '"cumulative":null,"deltaReliable":true}'
    )


def test_full_wire_has_every_field_in_camel_case() -> None:
    body = wire(full_payload())
    assert set(body) == {"harness", "timestamp", "deltaReliable", *NULLABLE, *OMITTABLE}
    assert body["turn"] == {
        "inputTokens": 120,
        "outputTokens": 30,
        "totalTokens": 150,
        "costUsd": 0.25,
        "cacheReadTokens": 100,
        "cacheWriteTokens": 0,
    }
    # Core counters are always written, null when unknown; cache fields omitted when unknown.
    assert body["cumulative"] == {
        "inputTokens": 1200,
        "outputTokens": 300,
        "totalTokens": None,
        "costUsd": 2.5,
    }
    assert body["pricingIdentity"] == {
        "authority": "openrouter",
        "model": "gpt-x",
        "cacheClass": "ephemeral-5m",
    }
    assert body["contextManifest"] == json.loads(MANIFEST.to_json())
    no_class = wire(full_payload(pricing_identity=PricingIdentity("a", "m")))
    assert no_class["pricingIdentity"] == {"authority": "a", "model": "m"}


def test_unknown_usage_with_context_occupancy() -> None:
    """A turn whose agent reported no tokens: every counter null, occupancy alongside."""
    payload = minimal_payload()
    payload = msgspec.structs.replace(
        payload,
        turn=TokenCounts(None, None, None, None),
        context_used_tokens=9_000,
        context_window_tokens=272_000,
    )
    body = wire(payload)
    assert body["turn"] == {
        "inputTokens": None,
        "outputTokens": None,
        "totalTokens": None,
        "costUsd": None,
    }
    assert (body["contextUsedTokens"], body["contextWindowTokens"]) == (9_000, 272_000)
    assert MetricPayload.from_json(payload.to_json()) == payload


def test_empty_triggering_ids_are_omitted() -> None:
    assert "triggeringEventIds" not in wire(full_payload(triggering_event_ids=()))
    payload = full_payload(triggering_event_ids=[EVENT_ID])
    assert payload.triggering_event_ids == (EVENT_ID,)


@pytest.mark.parametrize("field", NULLABLE)
def test_missing_nullable_decodes_as_null(field: str) -> None:
    body = wire(full_payload(cumulative=None))
    del body[field]
    opened = open_metric_event(OWNER, sign_raw(json.dumps(body)))
    snake = {"channelId": "channel_id", "sessionId": "session_id", "turnId": "turn_id"}
    name = snake.get(field, "turn_seq" if field == "turnSeq" else field)
    assert getattr(opened, name) is None


def test_missing_core_counter_decodes_as_null() -> None:
    body = wire(full_payload())
    del body["turn"]["costUsd"]
    opened = open_metric_event(OWNER, sign_raw(json.dumps(body)))
    assert opened.turn is not None and opened.turn.cost_usd is None


@pytest.mark.parametrize("field", OMITTABLE)
def test_null_in_omittable_field_rejected(field: str) -> None:
    body = wire(full_payload())
    body[field] = None
    with pytest.raises(MetricError, match=field):
        open_metric_event(OWNER, sign_raw(json.dumps(body)))


@pytest.mark.parametrize(
    ("outer", "field"), [("turn", "cacheReadTokens"), ("pricingIdentity", "cacheClass")]
)
def test_null_in_nested_omittable_rejected(outer: str, field: str) -> None:
    body = wire(full_payload())
    body[outer][field] = None
    with pytest.raises(MetricError):
        open_metric_event(OWNER, sign_raw(json.dumps(body)))


def test_missing_delta_reliable_is_true_and_false_survives() -> None:
    body = wire(full_payload(delta_reliable=False))
    assert body["deltaReliable"] is False
    assert open_metric_event(OWNER, sign_raw(json.dumps(body))).delta_reliable is False
    del body["deltaReliable"]
    assert open_metric_event(OWNER, sign_raw(json.dumps(body))).delta_reliable is True


@pytest.mark.parametrize(
    ("field", "attr"),
    [
        ("stopReason", "stop_reason"),
        ("outcome", "outcome"),
        ("terminalEvidence", "terminal_evidence"),
    ],
)
def test_unknown_enum_values_decode_as_unknown(field: str, attr: str) -> None:
    body = wire(full_payload())
    body[field] = "exploded_differently"
    opened = open_metric_event(OWNER, sign_raw(json.dumps(body)))
    assert getattr(opened, attr) == "unknown"
    # And a non-string value is still an error.
    body[field] = 7
    with pytest.raises(MetricError):
        open_metric_event(OWNER, sign_raw(json.dumps(body)))


def test_unknown_fields_ignored_everywhere() -> None:
    body = wire(full_payload())
    body["futureField"] = {"nested": [1, 2]}
    body["turn"]["reasoningTokens"] = 9
    body["pricingIdentity"]["region"] = "eu"
    body["contextManifest"]["note"] = "x"
    assert open_metric_event(OWNER, sign_raw(json.dumps(body))) == full_payload()


@settings(max_examples=60, deadline=None)
@given(
    st.builds(
        TokenCounts,
        st.none() | st.integers(0, 2**40),
        st.none() | st.integers(0, 2**40),
        st.none() | st.integers(0, 2**40),
        st.none() | st.floats(0, 1e6, allow_nan=False),
        st.none() | st.integers(0, 2**40),
        st.none() | st.integers(0, 2**40),
    ),
    st.booleans(),
    st.none() | st.sampled_from(["end_turn", "max_tokens", "cancelled", "error", "unknown"]),
    st.text(min_size=1, max_size=20),
)
def test_payload_json_round_trip(
    counts: TokenCounts, reliable: bool, stop: str | None, harness: str
) -> None:
    payload = MetricPayload(
        harness=harness,
        timestamp=TS,
        session_id="s",
        turn_seq=1,
        turn=counts,
        cumulative=counts,
        delta_reliable=reliable,
        stop_reason=stop,
    )
    assert MetricPayload.from_json(payload.to_json()) == payload


# =================================================================================================
# Conformance: NIP-44 v2 and the NIP-AM event and payload checked against nips/NIP-AM.md, with
# expected values computed by hand or by the tiny independent reference below (pure Python over the
# cryptography package), never by asking the code under test.
# =================================================================================================


WIRE_TS = "2026-12-02T10:00:00.123Z"
CAP = 65_535
MAX_PLAINTEXT = 16 * 1024 * 1024


# ---------------------------------------------------------------------------------------------
# An independent NIP-44 v2 (only what the tests need to forge payloads and check outputs)

CURVE_P = 2**256 - 2**32 - 977
CURVE_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def ref_conversation_key(secret_hex: str, public_hex: str) -> bytes:
    priv = ec.derive_private_key(int(secret_hex, 16), ec.SECP256K1())
    pub = ec.EllipticCurvePublicKey.from_encoded_point(
        ec.SECP256K1(), b"\x02" + bytes.fromhex(public_hex)
    )
    shared_x = priv.exchange(ec.ECDH(), pub)
    return hmac.new(b"nip44-v2", shared_x, hashlib.sha256).digest()


def ref_padded_len(n: int) -> int:
    if n <= 32:
        return 32
    next_power = 1 << ((n - 1).bit_length())
    chunk = 32 if next_power <= 256 else next_power // 8
    return chunk * ((n - 1) // chunk + 1)


def ref_encrypt_raw(padded: bytes, key: bytes, nonce: bytes, version: int = 2) -> str:
    """Encrypt already padded bytes (lets tests forge bad padding / bad UTF-8)."""
    keys = HKDFExpand(algorithm=hashes.SHA256(), length=76, info=nonce).derive(key)
    chacha_key, chacha_nonce, hmac_key = keys[:32], keys[32:44], keys[44:76]
    enc = Cipher(algorithms.ChaCha20(chacha_key, b"\x00" * 4 + chacha_nonce), mode=None)
    ct = enc.encryptor().update(padded)
    mac = hmac.new(hmac_key, nonce + ct, hashlib.sha256).digest()
    return base64.b64encode(bytes([version]) + nonce + ct + mac).decode("ascii")


def ref_pad(data: bytes) -> bytes:
    n = len(data)
    prefix = n.to_bytes(2, "big") if n < 65536 else b"\x00\x00" + n.to_bytes(4, "big")
    return prefix + data + b"\x00" * (ref_padded_len(n) - n)


def ref_encrypt(text: str | bytes, key: bytes, nonce: bytes = b"\x11" * 32) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return ref_encrypt_raw(ref_pad(data), key, nonce)


CONV_AGENT_OWNER = ref_conversation_key(AGENT.hex, OWNER_HEX)


# ---------------------------------------------------------------------------------------------
# NIP-44: conversation key


def test_conversation_key_accepts_objects_and_hex_in_every_combination() -> None:
    expected = ref_conversation_key(AGENT.hex, OWNER_HEX)
    for secret in (AGENT, AGENT.hex):
        for public in (OWNER.public_key, OWNER_HEX):
            assert nip44.conversation_key(secret, public) == expected  # type: ignore[arg-type]
    # symmetric
    assert nip44.conversation_key(OWNER, AGENT.public_key) == expected


def test_conversation_key_official_vectors_as_hex_and_objects() -> None:
    vectors = load_json(VECTORS / "nip44.vectors.json")["v2"]["valid"]["get_conversation_key"]
    for v in vectors[:8]:
        want = bytes.fromhex(v["conversation_key"])
        assert nip44.conversation_key(v["sec1"], v["pub2"]) == want
        assert (
            nip44.conversation_key(SecretKey.from_str(v["sec1"]), PublicKey.from_str(v["pub2"]))
            == want
        )


BAD_SECRETS: list[Any] = [
    "00" * 32,
    f"{CURVE_N:064x}",
    "ff" * 32,
    "7" * 63,
    "7" * 65,
    "zz" * 32,
    "",
    7,
    None,
    b"\x07" * 32,
    3.5,
    ["7" * 64],
]


BAD_PUBLICS: list[Any] = [
    "00" * 32,  # x = 0: no point on secp256k1
    f"{CURVE_P:064x}",  # x = p: not a field element
    "ff" * 32,
    "1" * 63,
    "zz" * 32,
    "",
    7,
    None,
    bytes.fromhex(OWNER_HEX),
    OWNER,  # a secret key is not a public key
]


@pytest.mark.parametrize("secret", BAD_SECRETS, ids=repr)
def test_conversation_key_bad_secret_raises_nip44error(secret: Any) -> None:
    with pytest.raises(Nip44Error):
        nip44.conversation_key(secret, OWNER_HEX)


@pytest.mark.parametrize("public", BAD_PUBLICS, ids=lambda p: repr(p)[:40])
def test_conversation_key_bad_public_raises_nip44error(public: Any) -> None:
    with pytest.raises(Nip44Error):
        nip44.conversation_key(AGENT, public)


def test_conversation_key_official_invalid_vectors() -> None:
    vectors = load_json(VECTORS / "nip44.vectors.json")["v2"]["invalid"]["get_conversation_key"]
    for v in vectors:
        with pytest.raises(Nip44Error):
            nip44.conversation_key(v["sec1"], v["pub2"])


def test_nip44_error_is_buzz_and_value_error() -> None:
    assert issubclass(Nip44Error, BuzzError)
    assert issubclass(Nip44Error, ValueError)
    assert issubclass(MetricError, BuzzError)
    assert issubclass(MetricError, ValueError)


# ---------------------------------------------------------------------------------------------
# NIP-44: padding, encrypt, decrypt


def test_max_plaintext_is_16_mib() -> None:
    assert nip44.MAX_PLAINTEXT == MAX_PLAINTEXT


@pytest.mark.parametrize(
    "n",
    [
        1,
        2,
        31,
        32,
        33,
        37,
        64,
        65,
        100,
        255,
        256,
        257,
        320,
        383,
        1000,
        65535,
        65536,
        65537,
        100_000,
        1 << 20,
        MAX_PLAINTEXT - 1,
        MAX_PLAINTEXT,
    ],
)
def test_calc_padded_len_matches_hand_rule(n: int) -> None:
    assert nip44.calc_padded_len(n) == ref_padded_len(n)


@pytest.mark.parametrize("n", [0, -1, MAX_PLAINTEXT + 1, 2**32])
def test_calc_padded_len_out_of_range(n: int) -> None:
    with pytest.raises(Nip44Error):
        nip44.calc_padded_len(n)


def test_encrypt_matches_independent_implementation() -> None:
    nonce = bytes(range(32))
    for text in ("a", "é" * 40, "x" * 65535, "y" * 65536):
        assert nip44.encrypt(text, CONV_AGENT_OWNER, nonce) == ref_encrypt(
            text, CONV_AGENT_OWNER, nonce
        )


def test_encrypt_keyword_nonce_and_random_nonce() -> None:
    a = nip44.encrypt("hi", CONV_AGENT_OWNER, nonce=b"\x01" * 32)
    assert a == ref_encrypt("hi", CONV_AGENT_OWNER, b"\x01" * 32)
    r1 = nip44.encrypt("hi", CONV_AGENT_OWNER)
    r2 = nip44.encrypt("hi", CONV_AGENT_OWNER)
    assert r1 != r2
    assert nip44.decrypt(r1, CONV_AGENT_OWNER) == "hi"


def test_encrypt_empty_and_oversize_raise() -> None:
    with pytest.raises(Nip44Error):
        nip44.encrypt("", CONV_AGENT_OWNER)
    # the limit is in UTF-8 bytes, not characters
    too_long = "é" * (MAX_PLAINTEXT // 2) + "a"
    assert len(too_long) < MAX_PLAINTEXT
    with pytest.raises(Nip44Error):
        nip44.encrypt(too_long, CONV_AGENT_OWNER)


def test_encrypt_max_plaintext_round_trip() -> None:
    text = "z" * MAX_PLAINTEXT
    payload = nip44.encrypt(text, CONV_AGENT_OWNER, b"\x02" * 32)
    assert len(payload) == 4 * math.ceil((65 + 6 + MAX_PLAINTEXT) / 3)
    assert nip44.decrypt(payload, CONV_AGENT_OWNER) == text


@pytest.mark.parametrize(
    ("key", "nonce"),
    [(b"\x00" * 31, None), (b"\x00" * 33, None), (CONV_AGENT_OWNER, b"\x00" * 31)],
)
def test_encrypt_bad_key_or_nonce_length(key: bytes, nonce: bytes | None) -> None:
    with pytest.raises(Nip44Error):
        nip44.encrypt("hello", key, nonce)


def test_decrypt_round_trip_of_independent_payload() -> None:
    text = "hello 🐝 world"
    assert nip44.decrypt(ref_encrypt(text, CONV_AGENT_OWNER), CONV_AGENT_OWNER) == text
    big = "q" * 70_000  # 6-byte prefix
    assert nip44.decrypt(ref_encrypt(big, CONV_AGENT_OWNER), CONV_AGENT_OWNER) == big


MAX_PAYLOAD_CHARS = 4 * math.ceil((65 + 6 + ref_padded_len(MAX_PLAINTEXT)) / 3)


def _flip_last_base64_bits(p: str) -> str:
    """Set an unused low bit of the last data character (a non-canonical encoding)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    at = len(p.rstrip("=")) - 1
    assert at < len(p) - 1, "payload has no padding"
    return p[:at] + alphabet[alphabet.index(p[at]) | 1] + p[at + 1 :]


GOOD = ref_encrypt("hello", CONV_AGENT_OWNER)  # 99 bytes: no "=" padding
PADDED = ref_encrypt("a" * 40, CONV_AGENT_OWNER)  # 131 bytes: one "="
PADDED2 = ref_encrypt("a" * 70, CONV_AGENT_OWNER)  # 163 bytes: "=="


def _bad_payloads() -> list[tuple[str, Any]]:
    raw = base64.b64decode(GOOD)
    cases: list[tuple[str, Any]] = [
        ("empty", ""),
        ("hash-version", "#" + GOOD[1:]),
        ("hash-short", "#"),
        ("131 chars", GOOD[:131]),
        ("132 chars, 97 bytes", "A" * 128 + "AA=="),
        ("too long", "A" * (MAX_PAYLOAD_CHARS + 4)),
        ("no padding", PADDED.rstrip("=")),
        ("whitespace", GOOD[:50] + "\n" + GOOD[50:]),
        ("space", GOOD[:50] + " " + GOOD[51:]),
        ("urlsafe", GOOD.replace("+", "-").replace("/", "_")),
        ("non-ascii", "é" * 200),
        ("version 1", base64.b64encode(b"\x01" + raw[1:]).decode()),
        ("version 3", base64.b64encode(b"\x03" + raw[1:]).decode()),
        ("bad mac", base64.b64encode(raw[:-1] + bytes([raw[-1] ^ 1])).decode()),
        ("bad ciphertext", base64.b64encode(raw[:40] + bytes([raw[40] ^ 1]) + raw[41:]).decode()),
        ("truncated", base64.b64encode(raw[:-3]).decode()),
        ("wrong key", ref_encrypt("hello", b"\x09" * 32)),
        ("bad utf-8", ref_encrypt(b"\xff\xfe", CONV_AGENT_OWNER)),
        ("lone surrogate bytes", ref_encrypt(b"\xed\xa0\x80", CONV_AGENT_OWNER)),
        (
            "zero length",
            ref_encrypt_raw(b"\x00\x00" + b"\x00" * 32, CONV_AGENT_OWNER, b"\x11" * 32),
        ),
        (
            "u32 below 65536",
            ref_encrypt_raw(
                b"\x00\x00\x00\x00\x00\x05" + b"hello" + b"\x00" * 27,
                CONV_AGENT_OWNER,
                b"\x11" * 32,
            ),
        ),
        (
            "padding too long",
            ref_encrypt_raw(b"\x00\x05hello" + b"\x00" * 59, CONV_AGENT_OWNER, b"\x11" * 32),
        ),
        (
            "padding too short",
            ref_encrypt_raw(b"\x00\x05hello" + b"\x00" * 26, CONV_AGENT_OWNER, b"\x11" * 32),
        ),
        ("none", None),
        ("bytes", GOOD.encode()),
        ("int", 5),
    ]
    return cases


@pytest.mark.parametrize(("name", "payload"), _bad_payloads(), ids=[c[0] for c in _bad_payloads()])
def test_decrypt_rejects_with_nip44error_only(name: str, payload: Any) -> None:
    with pytest.raises(Nip44Error):
        nip44.decrypt(payload, CONV_AGENT_OWNER)


def test_decrypt_non_canonical_base64() -> None:
    assert PADDED.endswith("=") and not PADDED.endswith("==")
    assert PADDED2.endswith("==")
    for good in (PADDED, PADDED2):
        assert nip44.decrypt(good, CONV_AGENT_OWNER).startswith("a")
        bad = _flip_last_base64_bits(good)
        assert base64.b64decode(bad) == base64.b64decode(good)  # lenient decoders agree
        with pytest.raises(Nip44Error):
            nip44.decrypt(bad, CONV_AGENT_OWNER)


def test_padding_byte_values_are_not_checked() -> None:
    payload = ref_encrypt_raw(b"\x00\x05hello" + b"\xaa" * 27, CONV_AGENT_OWNER, b"\x11" * 32)
    assert nip44.decrypt(payload, CONV_AGENT_OWNER) == "hello"


@pytest.mark.parametrize("key", [b"", b"\x00" * 31, None, "00" * 32])
def test_decrypt_bad_key_raises_nip44error(key: Any) -> None:
    with pytest.raises(Nip44Error):
        nip44.decrypt(GOOD, key)


def test_decrypt_official_invalid_vectors() -> None:
    for v in load_json(VECTORS / "nip44.vectors.json")["v2"]["invalid"]["decrypt"]:
        with pytest.raises(Nip44Error):
            nip44.decrypt(v["payload"], bytes.fromhex(v["conversation_key"]))


# ---------------------------------------------------------------------------------------------
# NIP-AM: Python names


def test_payload_constructible_with_harness_and_timestamp_only() -> None:
    p = MetricPayload(harness="goose", timestamp=WIRE_TS)
    assert p.harness == "goose" and p.timestamp == WIRE_TS
    for name in ("model", "channel_id", "session_id", "turn_id", "turn_seq", "turn", "cumulative"):
        assert getattr(p, name) is None, name
    assert p.delta_reliable is True
    for name in (
        "stop_reason",
        "outcome",
        "terminal_evidence",
        "root_event_id",
        "parent_event_id",
        "started_at",
        "adapter_session_id",
        "native_stop_reason",
        "pricing_identity",
        "context_manifest",
    ):
        assert getattr(p, name) is None, name
    assert not p.triggering_event_ids


def test_struct_field_names_are_snake_case_of_wire_names() -> None:
    fields = set(MetricPayload.__struct_fields__)
    assert fields >= {
        "harness",
        "timestamp",
        "model",
        "channel_id",
        "session_id",
        "turn_id",
        "turn_seq",
        "turn",
        "cumulative",
        "delta_reliable",
        "stop_reason",
        "outcome",
        "terminal_evidence",
        "triggering_event_ids",
        "root_event_id",
        "parent_event_id",
        "started_at",
        "adapter_session_id",
        "native_stop_reason",
        "pricing_identity",
        "context_manifest",
    }
    assert set(TokenCounts.__struct_fields__) >= {
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cost_usd",
        "cache_read_tokens",
        "cache_write_tokens",
    }
    assert set(PricingIdentity.__struct_fields__) >= {"authority", "model", "cache_class"}
    for cls in (MetricPayload, TokenCounts, PricingIdentity):
        assert issubclass(cls, msgspec.Struct)


def test_token_counts_takes_four_core_counters() -> None:
    t = TokenCounts(input_tokens=1, output_tokens=2, total_tokens=3, cost_usd=0.5)
    assert (t.input_tokens, t.output_tokens, t.total_tokens, t.cost_usd) == (1, 2, 3, 0.5)
    assert t.cache_read_tokens is None and t.cache_write_tokens is None
    t2 = TokenCounts(input_tokens=None, output_tokens=None, total_tokens=None, cost_usd=None)
    assert t2.input_tokens is None
    pi = PricingIdentity(authority="openrouter", model="m")
    assert pi.cache_class is None


def test_public_names_are_re_exported_from_package_root() -> None:
    import nostr_buzz

    assert nostr_buzz.UsageTracker is not None
    assert nostr_buzz.Nip44Error is Nip44Error
    assert nostr_buzz.MetricError is MetricError


# ---------------------------------------------------------------------------------------------
# NIP-AM: encoding rules (build_metric_event, decrypted independently)


def _plaintext_of(event: Event) -> dict[str, Any]:
    conv = ref_conversation_key(OWNER.hex, event.pubkey)
    obj = json.loads(nip44.decrypt(event.content, conv))
    assert isinstance(obj, dict)
    return obj


def test_minimal_payload_writes_nullables_and_omits_omittables() -> None:
    ev = build_metric_event(
        AGENT, OWNER.public_key, MetricPayload(harness="goose", timestamp=WIRE_TS)
    )
    obj = _plaintext_of(ev)
    assert obj == {
        "harness": "goose",
        "timestamp": WIRE_TS,
        "model": None,
        "channelId": None,
        "sessionId": None,
        "turnId": None,
        "turnSeq": None,
        "turn": None,
        "cumulative": None,
        "deltaReliable": True,
    }


def test_unreliable_delta_is_written_false() -> None:
    p = MetricPayload(harness="goose", timestamp=WIRE_TS, delta_reliable=False)
    assert _plaintext_of(build_metric_event(AGENT, OWNER.public_key, p))["deltaReliable"] is False


def test_token_counts_core_always_written_cache_omitted_when_unknown() -> None:
    p = MetricPayload(
        harness="codex",
        timestamp=WIRE_TS,
        session_id="s1",
        turn_seq=1,
        turn=TokenCounts(input_tokens=5, output_tokens=None, total_tokens=None, cost_usd=None),
        cumulative=TokenCounts(
            input_tokens=50,
            output_tokens=7,
            total_tokens=57,
            cost_usd=0.25,
            cache_read_tokens=10,
            cache_write_tokens=0,
        ),
    )
    obj = _plaintext_of(build_metric_event(AGENT, OWNER.public_key, p))
    assert obj["turn"] == {
        "inputTokens": 5,
        "outputTokens": None,
        "totalTokens": None,
        "costUsd": None,
    }
    assert obj["cumulative"] == {
        "inputTokens": 50,
        "outputTokens": 7,
        "totalTokens": 57,
        "costUsd": 0.25,
        "cacheReadTokens": 10,
        "cacheWriteTokens": 0,
    }


def _layer(order: int = 7) -> Layer:
    return Layer(
        order=order,
        layer="current_instruction",
        scope="turn",
        source="nostr_event",
        version="event-1",
        authority="authoritative",
        freshness="current",
        estimated_tokens=1,
        truncated=False,
    )


ONE_LAYER_MANIFEST = Manifest(schema_version=1, hash=layers_hash([_layer()]), layers=(_layer(),))
REF_EVENT_ID = "ab" * 32


def _full_payload() -> MetricPayload:
    return MetricPayload(
        harness="claude",
        timestamp=WIRE_TS,
        model="claude-x",
        channel_id="chan",
        session_id="sess",
        turn_id="turn-1",
        turn_seq=3,
        turn=TokenCounts(input_tokens=10, output_tokens=2, total_tokens=12, cost_usd=0.0),
        cumulative=TokenCounts(
            input_tokens=100,
            output_tokens=20,
            total_tokens=120,
            cost_usd=1.5,
            cache_read_tokens=40,
        ),
        delta_reliable=True,
        stop_reason="max_tokens",
        outcome="success",
        terminal_evidence="prompt_response",
        triggering_event_ids=[REF_EVENT_ID, "cd" * 32],
        root_event_id="ef" * 32,
        parent_event_id=REF_EVENT_ID,
        started_at="2026-12-02T09:59:58.000Z",
        adapter_session_id="adapter-1",
        native_stop_reason="max_output",
        pricing_identity=PricingIdentity(authority="anthropic", model="claude-x"),
        context_manifest=ONE_LAYER_MANIFEST,
    )


def test_full_payload_wire_names_and_round_trip() -> None:
    payload = _full_payload()
    ev = build_metric_event(AGENT, OWNER.public_key, payload)
    obj = _plaintext_of(ev)
    assert set(obj) == {
        "harness",
        "timestamp",
        "model",
        "channelId",
        "sessionId",
        "turnId",
        "turnSeq",
        "turn",
        "cumulative",
        "deltaReliable",
        "stopReason",
        "outcome",
        "terminalEvidence",
        "triggeringEventIds",
        "rootEventId",
        "parentEventId",
        "startedAt",
        "adapterSessionId",
        "nativeStopReason",
        "pricingIdentity",
        "contextManifest",
    }
    assert obj["pricingIdentity"] == {"authority": "anthropic", "model": "claude-x"}
    assert obj["triggeringEventIds"] == [REF_EVENT_ID, "cd" * 32]
    assert obj["contextManifest"] == json.loads(ONE_LAYER_MANIFEST.to_json())
    back = open_metric_event(OWNER, ev)
    assert back == payload
    assert back.context_manifest is not None and back.context_manifest.hash_matches()


# ---------------------------------------------------------------------------------------------
# NIP-AM: the event


def _epoch(ts: str) -> int:
    return calendar.timegm(
        (
            int(ts[0:4]),
            int(ts[5:7]),
            int(ts[8:10]),
            int(ts[11:13]),
            int(ts[14:16]),
            int(ts[17:19]),
            0,
            0,
            0,
        )
    )


def test_event_shape() -> None:
    ts = "2026-12-02T10:00:00.999Z"
    ev = build_metric_event(AGENT, OWNER.public_key, MetricPayload(harness="goose", timestamp=ts))
    assert isinstance(ev, Event)
    assert ev.kind == 44200
    assert ev.pubkey == AGENT_HEX
    assert [list(t) for t in ev.tags] == [["p", OWNER_HEX], ["agent", AGENT_HEX]]
    assert ev.created_at == _epoch(ts) == 1796205600
    Event.from_json(ev.to_json())  # verifies


def test_build_accepts_hex_keys() -> None:
    ev = build_metric_event(AGENT.hex, OWNER_HEX, MetricPayload(harness="goose", timestamp=WIRE_TS))
    assert ev.pubkey == AGENT_HEX
    assert open_metric_event(OWNER, ev).harness == "goose"
    assert open_metric_event(OWNER.hex, ev).harness == "goose"


def _forge(
    plaintext: str | bytes | None = None,
    *,
    obj: dict[str, Any] | None = None,
    kind: int = 44200,
    tags: list[list[str]] | None = None,
    signer: SecretKey = AGENT,
    to: str = OWNER_HEX,
    content: str | None = None,
    created_at: int = 1796205600,
) -> Event:
    if content is None:
        if plaintext is None:
            plaintext = json.dumps(
                obj if obj is not None else {"harness": "goose", "timestamp": WIRE_TS},
                ensure_ascii=False,
            )
        content = ref_encrypt(plaintext, ref_conversation_key(signer.hex, to))
    if tags is None:
        tags = [["p", OWNER_HEX], ["agent", signer.public_key.hex]]
    return sign_event(signer, kind=kind, content=content, tags=tags, created_at=created_at)


def test_open_forged_valid_event_and_created_at_not_compared() -> None:
    p = open_metric_event(OWNER, _forge(created_at=5))
    assert p.harness == "goose" and p.timestamp == WIRE_TS


A = AGENT_HEX
OW = OWNER_HEX
S = STRANGER.public_key.hex


BAD_EVENTS: list[tuple[str, Callable[[], Event]]] = [
    ("kind 1", lambda: _forge(kind=1)),
    ("kind 44201", lambda: _forge(kind=44201)),
    ("no p", lambda: _forge(tags=[["agent", A]])),
    ("two p same", lambda: _forge(tags=[["p", OW], ["p", OW], ["agent", A]])),
    ("two p", lambda: _forge(tags=[["p", OW], ["p", S], ["agent", A]])),
    ("p stranger", lambda: _forge(tags=[["p", S], ["agent", A]])),
    ("p no value", lambda: _forge(tags=[["p"], ["agent", A]])),
    ("p uppercase", lambda: _forge(tags=[["p", OW.upper()], ["agent", A]])),
    ("no agent", lambda: _forge(tags=[["p", OW]])),
    ("two agent", lambda: _forge(tags=[["p", OW], ["agent", A], ["agent", A]])),
    ("agent other", lambda: _forge(tags=[["p", OW], ["agent", S]])),
    ("agent no value", lambda: _forge(tags=[["p", OW], ["agent"]])),
    ("h tag", lambda: _forge(tags=[["p", OW], ["agent", A], ["h", "chan"]])),
    ("h tag no value", lambda: _forge(tags=[["p", OW], ["agent", A], ["h"]])),
    ("plain content", lambda: _forge(content="hello")),
    ("empty content", lambda: _forge(content="")),
    ("to stranger", lambda: _forge(to=S)),
    ("not json", lambda: _forge("not json")),
    ("json array", lambda: _forge("[]")),
    ("json null", lambda: _forge("null")),
    ("missing harness", lambda: _forge(obj={"timestamp": WIRE_TS})),
    ("oversize", lambda: _forge(obj=_sized_obj(CAP + 1))),
    ("oversize utf8", lambda: _forge(obj=_sized_obj(CAP + 1, "é"))),
]


def _sized_obj(size: int, fill: str = "a") -> dict[str, Any]:
    """A valid payload whose compact JSON is exactly ``size`` UTF-8 bytes."""
    obj: dict[str, Any] = {"harness": "goose", "timestamp": WIRE_TS, "nativeStopReason": ""}
    base = len(json.dumps(obj, ensure_ascii=False).encode())
    room = size - base
    unit = len(fill.encode())
    obj["nativeStopReason"] = fill * (room // unit) + "a" * (room % unit)
    assert len(json.dumps(obj, ensure_ascii=False).encode()) == size
    return obj


@pytest.mark.parametrize(("name", "make"), BAD_EVENTS, ids=[b[0] for b in BAD_EVENTS])
def test_open_rejects_with_metric_error(name: str, make: Callable[[], Event]) -> None:
    ev = make()
    with pytest.raises(MetricError):
        open_metric_event(OWNER, ev)


def test_open_with_wrong_owner_secret_is_metric_error() -> None:
    with pytest.raises(MetricError):
        open_metric_event(STRANGER, _forge())


def test_plaintext_cap_boundary_in_utf8_bytes() -> None:
    ok = _sized_obj(CAP, "é")
    assert open_metric_event(OWNER, _forge(obj=ok)).native_stop_reason == ok["nativeStopReason"]
    # character count below the cap but bytes over it
    over = _sized_obj(CAP + 1, "é")
    assert len(json.dumps(over, ensure_ascii=False)) < CAP
    # encoding side too
    p = MetricPayload(
        harness="goose", timestamp=WIRE_TS, native_stop_reason=over["nativeStopReason"]
    )
    with pytest.raises(MetricError):
        build_metric_event(AGENT, OWNER.public_key, p)
    p_ok = MetricPayload(harness="goose", timestamp=WIRE_TS, native_stop_reason="é" * 30_000)
    build_metric_event(AGENT, OWNER.public_key, p_ok)


def test_malformed_manifest_is_metric_error() -> None:
    obj = {"harness": "goose", "timestamp": WIRE_TS, "contextManifest": {"schemaVersion": 1}}
    with pytest.raises(MetricError):
        open_metric_event(OWNER, _forge(obj=obj))


# ---------------------------------------------------------------------------------------------
# NIP-AM: decoding rules


def _open(obj: dict[str, Any]) -> MetricPayload:
    return open_metric_event(OWNER, _forge(obj=obj))


def _open_text(text: str) -> MetricPayload:
    return open_metric_event(OWNER, _forge(text))


BASE: dict[str, Any] = {"harness": "goose", "timestamp": WIRE_TS}


def test_missing_nullables_decode_as_null_and_delta_reliable_defaults_true() -> None:
    p = _open(dict(BASE))
    assert p == MetricPayload(harness="goose", timestamp=WIRE_TS)
    assert p.delta_reliable is True
    assert _open({**BASE, "deltaReliable": False}).delta_reliable is False


def test_explicit_nulls_in_nullable_fields_accepted() -> None:
    obj = {
        **BASE,
        "model": None,
        "channelId": None,
        "sessionId": None,
        "turnId": None,
        "turnSeq": None,
        "turn": None,
        "cumulative": None,
    }
    assert _open(obj) == MetricPayload(harness="goose", timestamp=WIRE_TS)


@pytest.mark.parametrize("field", ["cacheReadTokens", "cacheWriteTokens"])
def test_null_cache_field_rejected(field: str) -> None:
    turn = {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2, "costUsd": None, field: None}
    with pytest.raises(MetricError):
        _open({**BASE, "turn": turn})


def test_null_cache_class_rejected_and_absent_cache_class_fine() -> None:
    assert _open(
        {**BASE, "pricingIdentity": {"authority": "a", "model": "m"}}
    ).pricing_identity == (PricingIdentity(authority="a", model="m"))
    with pytest.raises(MetricError):
        _open({**BASE, "pricingIdentity": {"authority": "a", "model": "m", "cacheClass": None}})


@pytest.mark.parametrize(
    "bad",
    [
        {"harness": None},
        {"timestamp": None},
        {"harness": 5},
        {"deltaReliable": None},
        {"deltaReliable": 1},
        {"deltaReliable": "true"},
        {"model": 5},
        {"sessionId": 5},
        {"triggeringEventIds": "ab"},
        {"triggeringEventIds": [1]},
        {"turn": [1, 2, 3, 4]},
    ],
    ids=repr,
)
def test_wrong_types_rejected(bad: dict[str, Any]) -> None:
    obj = {**BASE, **bad}
    with pytest.raises(MetricError):
        _open(obj)


def test_missing_timestamp_rejected() -> None:
    with pytest.raises(MetricError):
        _open({"harness": "goose"})


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("stopReason", ["end_turn", "max_tokens", "cancelled", "error", "unknown"]),
        ("outcome", ["success", "cancelled", "failed"]),
        (
            "terminalEvidence",
            ["prompt_response", "cancel_response", "agent_exit", "timeout", "error"],
        ),
    ],
)
def test_enums_known_kept_unknown_mapped(field: str, values: list[str]) -> None:
    attr = {
        "stopReason": "stop_reason",
        "outcome": "outcome",
        "terminalEvidence": "terminal_evidence",
    }[field]
    for v in values:
        assert getattr(_open({**BASE, field: v}), attr) == v
    for other in ("refusal", "END_TURN", "", "success " if field != "outcome" else "timeout"):
        assert getattr(_open({**BASE, field: other}), attr) == "unknown"


def _counts(**over: Any) -> str:
    base = {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5}
    base.update(over)
    return json.dumps(base)


@pytest.mark.parametrize(
    "counts",
    [
        '{"inputTokens": -1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5}',
        '{"inputTokens": 1.5, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5}',
        '{"inputTokens": true, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5}',
        '{"inputTokens": "1", "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5}',
        '{"inputTokens": 1, "outputTokens": false, "totalTokens": 3, "costUsd": 0.5}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": -3, "costUsd": 0.5}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5, '
        '"cacheReadTokens": -1}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5, '
        '"cacheWriteTokens": true}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5, '
        '"cacheReadTokens": 2.5}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5, '
        '"cacheWriteTokens": "1"}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": -0.01}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 1e400}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": -1e400}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": NaN}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": Infinity}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": true}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": "0.5"}',
        # counters above 2^53 and absurd costs are forged or broken metrics
        '{"inputTokens": 9007199254740993, "outputTokens": 2, "totalTokens": 3, "costUsd": 0}',
        '{"inputTokens": 1, "outputTokens": 9223372036854775807, "totalTokens": 3, "costUsd": 0}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 1.7e308}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 1e10}',
        '{"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0, '
        '"cacheReadTokens": 9007199254740993}',
    ],
)
@pytest.mark.parametrize("where", ["turn", "cumulative"])
def test_bad_numbers_rejected(counts: str, where: str) -> None:
    extra = ', "sessionId": "s", "turnSeq": 1' if where == "cumulative" else ""
    text = f'{{"harness": "goose", "timestamp": "{WIRE_TS}", "{where}": {counts}{extra}}}'
    with pytest.raises(MetricError):
        _open_text(text)


def test_valid_numbers_accepted() -> None:
    text = (
        f'{{"harness": "goose", "timestamp": "{WIRE_TS}", "turn": '
        '{"inputTokens": 0, "outputTokens": 9007199254740992, "totalTokens": null, '
        '"costUsd": -0.0, "cacheReadTokens": 0}}'
    )
    p = _open_text(text)
    assert p.turn is not None
    assert p.turn.input_tokens == 0
    assert p.turn.output_tokens == 2**53  # the largest valid counter
    assert p.turn.cost_usd == 0.0
    assert p.turn.cache_read_tokens == 0
    # an integer cost is a number
    p2 = _open_text(f'{{"harness": "g", "timestamp": "{WIRE_TS}", "turn": {_counts(costUsd=2)}}}')
    assert p2.turn is not None and p2.turn.cost_usd == 2
    # a turn costs at most 10^6 USD; above it is invalid
    p3 = _open_text(f'{{"harness": "g", "timestamp": "{WIRE_TS}", "turn": {_counts(costUsd=1e6)}}}')
    assert p3.turn is not None and p3.turn.cost_usd == 1e6
    with pytest.raises(MetricError):
        _open_text(
            f'{{"harness": "g", "timestamp": "{WIRE_TS}", "turn": {_counts(costUsd=1000000.5)}}}'
        )


@pytest.mark.parametrize(
    "counts",
    [
        TokenCounts(input_tokens=-1, output_tokens=0, total_tokens=0, cost_usd=0.0),
        TokenCounts(input_tokens=0, output_tokens=0, total_tokens=0, cost_usd=-1.0),
        TokenCounts(input_tokens=0, output_tokens=0, total_tokens=0, cost_usd=float("nan")),
        TokenCounts(input_tokens=0, output_tokens=0, total_tokens=0, cost_usd=float("inf")),
        TokenCounts(input_tokens=True, output_tokens=0, total_tokens=0, cost_usd=0.0),
        TokenCounts(input_tokens=1.5, output_tokens=0, total_tokens=0, cost_usd=0.0),  # type: ignore[arg-type]
        TokenCounts(input_tokens=0, output_tokens=0, total_tokens=0, cost_usd=True),
        TokenCounts(
            input_tokens=0, output_tokens=0, total_tokens=0, cost_usd=0.0, cache_read_tokens=-2
        ),
    ],
    ids=repr,
)
def test_bad_numbers_rejected_when_encrypting(counts: TokenCounts) -> None:
    with pytest.raises(MetricError, match="turn"):  # when the payload is made
        MetricPayload(harness="goose", timestamp=WIRE_TS, turn=counts)


@pytest.mark.parametrize(
    "extra",
    [
        {"turnSeq": 0},
        {"turnSeq": -1},
        {"turnSeq": 1.5},
        {"turnSeq": True},
        {"turnSeq": "1"},
    ],
    ids=repr,
)
def test_bad_turn_seq_rejected(extra: dict[str, Any]) -> None:
    with pytest.raises(MetricError):
        _open({**BASE, "sessionId": "s", **extra})


CUM = {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3, "costUsd": 0.5}


@pytest.mark.parametrize(
    "extra",
    [
        {"cumulative": CUM},
        {"cumulative": CUM, "sessionId": "s"},
        {"cumulative": CUM, "turnSeq": 1},
        {"cumulative": CUM, "sessionId": None, "turnSeq": 1},
        {"cumulative": CUM, "sessionId": "s", "turnSeq": None},
    ],
    ids=repr,
)
def test_cumulative_requires_session_and_turn_seq(extra: dict[str, Any]) -> None:
    with pytest.raises(MetricError):
        _open({**BASE, **extra})


def test_cumulative_with_session_and_turn_seq_ok_and_turn_seq_alone_ok() -> None:
    p = _open({**BASE, "cumulative": CUM, "sessionId": "s", "turnSeq": 1})
    assert p.turn_seq == 1 and p.session_id == "s"
    assert _open({**BASE, "turnSeq": 4}).turn_seq == 4


def test_cumulative_rules_checked_when_encrypting() -> None:
    cum = TokenCounts(input_tokens=1, output_tokens=1, total_tokens=2, cost_usd=None)
    for kw in ({}, {"session_id": "s"}, {"turn_seq": 1}):
        with pytest.raises(MetricError):
            build_metric_event(
                AGENT,
                OWNER.public_key,
                MetricPayload(harness="g", timestamp=WIRE_TS, cumulative=cum, **kw),
            )
    with pytest.raises(MetricError):
        build_metric_event(
            AGENT,
            OWNER.public_key,
            MetricPayload(harness="g", timestamp=WIRE_TS, session_id="s", turn_seq=0),
        )


@pytest.mark.parametrize(
    "ts",
    [
        "2026-12-02T10:00:00Z",
        "2026-12-02T10:00:00.1Z",
        "2026-12-02T10:00:00.1234Z",
        "2026-12-02T10:00:00.123+00:00",
        "2026-12-02T10:00:00.123",
        "2026-12-02 10:00:00.123Z",
        "2026-13-02T10:00:00.123Z",
        "2026-02-30T10:00:00.123Z",
        "2026-12-02T24:00:00.123Z",
        "2026-12-02T10:00:00.123Z ",
        "yesterday",
        "",
        "2026-12-02T10:00:00.12aZ",
        "２０２６-12-02T10:00:00.123Z",
    ],
)
def test_bad_timestamp_rejected_both_ways(ts: str) -> None:
    with pytest.raises(MetricError):
        _open({**BASE, "timestamp": ts})
    with pytest.raises(MetricError):
        build_metric_event(AGENT, OWNER.public_key, MetricPayload(harness="goose", timestamp=ts))


@pytest.mark.parametrize(
    "ts", ["1970-01-01T00:00:00.000Z", "2024-02-29T23:59:59.999Z", "2026-12-02T10:00:00.000Z"]
)
def test_good_timestamps(ts: str) -> None:
    assert _open({**BASE, "timestamp": ts}).timestamp == ts
    ev = build_metric_event(AGENT, OWNER.public_key, MetricPayload(harness="goose", timestamp=ts))
    assert ev.created_at == _epoch(ts)


@pytest.mark.parametrize(
    "started", ["2026-12-02T09:59:59Z", "2026-12-02T09:59:59.5+01:00", WIRE_TS]
)
def test_started_at_is_rfc3339(started: str) -> None:
    assert _open({**BASE, "startedAt": started}).started_at == started


@pytest.mark.parametrize("started", ["", "soon", "2026-12-02", "2026-12-02T09:59:59"])
def test_started_at_garbage_rejected(started: str) -> None:
    with pytest.raises(MetricError):
        _open({**BASE, "startedAt": started})


@pytest.mark.parametrize(
    "text",
    [
        '{"harness": "goose", "timestamp": "' + WIRE_TS + '", "turnSeq": {"a": [[[[]]]]}}',
        "{" * 10_000,
        "[" * 10_000,
        '{"harness": "\\ud800", "timestamp": "' + WIRE_TS + '"}',
        '{"harness": "goose", "timestamp": "' + WIRE_TS + '"} trailing',
        "",
    ],
    ids=["nested", "deep objects", "deep arrays", "lone surrogate", "trailing", "empty"],
)
def test_hostile_plaintexts_raise_metric_error_only(text: str) -> None:
    with pytest.raises(MetricError):
        _open_text(text) if text else open_metric_event(OWNER, _forge(content=""))


def test_payload_errors_do_not_leak_secret_keys() -> None:
    with pytest.raises(MetricError) as info:
        open_metric_event(STRANGER, _forge())
    assert STRANGER.hex not in str(info.value)
    assert OWNER.hex not in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        b'{"x": "\xff", "harness": "goose", "timestamp": "' + WIRE_TS.encode() + b'"}',
        b'{"harness": "\xed\xa0\x80", "timestamp": "' + WIRE_TS.encode() + b'"}',
        '{"harness": "\ud800", "timestamp": "' + WIRE_TS + '"}',
        5,
        None,
    ],
    ids=["bad utf-8 in ignored member", "encoded surrogate", "str surrogate", "int", "none"],
)
def test_from_json_rejects_non_utf8_with_metric_error(text: Any) -> None:
    with pytest.raises(MetricError):
        MetricPayload.from_json(text)


def test_negative_zero_cost_is_written_as_zero() -> None:
    p = MetricPayload(
        harness="goose",
        timestamp=WIRE_TS,
        turn=TokenCounts(input_tokens=0, output_tokens=0, total_tokens=0, cost_usd=-0.0),
    )
    text = p.to_json()
    assert '"costUsd":0.0' in text and '"costUsd":-0' not in text
    back = MetricPayload.from_json(text.replace('"costUsd":0.0', '"costUsd":-0.0'))
    assert back.turn is not None and math.copysign(1.0, back.turn.cost_usd or 0.0) == 1.0


def test_long_hostile_content_rejected_as_metric_error() -> None:
    # a 1 MiB plaintext: valid NIP-44 but far over the NIP-AM cap
    ev = _forge(obj=_sized_obj(1 << 20))
    with pytest.raises(MetricError):
        open_metric_event(OWNER, ev)


def test_api_signatures_and_keyword_names() -> None:
    import inspect

    def params(f: Callable[..., Any]) -> list[str]:
        return list(inspect.signature(f).parameters)

    assert params(nip44.conversation_key)[:2] == ["secret", "public"]
    assert params(nip44.encrypt)[:3] == ["plaintext", "key", "nonce"]
    assert inspect.signature(nip44.encrypt).parameters["nonce"].default is None
    assert params(nip44.decrypt)[:2] == ["payload", "key"]
    assert params(nip44.calc_padded_len)[:1] == ["n"]
    assert params(build_metric_event)[:3] == ["agent_secret", "owner_public", "payload"]
    assert params(open_metric_event)[:2] == ["owner_secret", "event"]
    assert nip44.Nip44Error is Nip44Error
    from nostr_buzz.nips import nip_am

    assert nip_am.MetricError is MetricError
    key = nip44.conversation_key(secret=AGENT, public=OWNER_HEX)
    payload = nip44.encrypt(plaintext="kw", key=key, nonce=b"\x03" * 32)
    assert nip44.decrypt(payload=payload, key=key) == "kw"
    ev = build_metric_event(
        agent_secret=AGENT,
        owner_public=OWNER.public_key,
        payload=MetricPayload(harness="goose", timestamp=WIRE_TS),
    )
    assert open_metric_event(owner_secret=OWNER, event=ev).harness == "goose"


@pytest.mark.parametrize("plaintext", [b"bytes", None, 5, "lone \ud800 surrogate"], ids=repr)
def test_encrypt_bad_plaintext_raises_nip44error(plaintext: Any) -> None:
    with pytest.raises(Nip44Error):
        nip44.encrypt(plaintext, CONV_AGENT_OWNER)


@pytest.mark.parametrize("n", [1.0, "32", None, True], ids=repr)
def test_calc_padded_len_non_int_raises_nip44error(n: Any) -> None:
    with pytest.raises(Nip44Error):
        nip44.calc_padded_len(n)


st_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)


st_tokens = st.none() | st.integers(min_value=0, max_value=2**53)


st_cost = st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


st_ids = st.lists(st.binary(min_size=32, max_size=32).map(bytes.hex), max_size=3)


st_counts = st.builds(
    TokenCounts,
    input_tokens=st_tokens,
    output_tokens=st_tokens,
    total_tokens=st_tokens,
    cost_usd=st_cost,
    cache_read_tokens=st_tokens,
    cache_write_tokens=st_tokens,
)


st_ts = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 31)).map(
    lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"
)


@st.composite
def _payloads(draw: st.DrawFn) -> MetricPayload:
    cumulative = draw(st.none() | st_counts)
    session = draw(st_text) if cumulative is not None else draw(st.none() | st_text)
    seq = (
        draw(st.integers(1, 2**40))
        if cumulative is not None
        else draw(st.none() | st.integers(1, 99))
    )
    maybe = lambda s: draw(st.none() | s)  # noqa: E731
    return MetricPayload(
        harness=draw(st.text(min_size=1, max_size=8)),
        timestamp=draw(st_ts),
        model=maybe(st_text),
        channel_id=maybe(st_text),
        session_id=session,
        turn_id=maybe(st_text),
        turn_seq=seq,
        turn=maybe(st_counts),
        cumulative=cumulative,
        delta_reliable=draw(st.booleans()),
        stop_reason=maybe(st.sampled_from(["end_turn", "max_tokens", "cancelled", "error"])),
        outcome=maybe(st.sampled_from(["success", "cancelled", "failed"])),
        terminal_evidence=maybe(st.sampled_from(["prompt_response", "timeout", "agent_exit"])),
        triggering_event_ids=tuple(draw(st_ids)),
        root_event_id=maybe(st.binary(min_size=32, max_size=32).map(bytes.hex)),
        native_stop_reason=maybe(st_text),
        pricing_identity=maybe(st.builds(PricingIdentity, st_text, st_text, st.none() | st_text)),
        context_manifest=maybe(st.just(ONE_LAYER_MANIFEST)),
    )


NULLABLE_KEYS = {"model", "channelId", "sessionId", "turnId", "turnSeq", "turn", "cumulative"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_payloads())
def test_round_trip_property(payload: MetricPayload) -> None:
    ev = build_metric_event(AGENT, OWNER.public_key, payload)
    obj = _plaintext_of(ev)
    assert set(obj) >= NULLABLE_KEYS and "deltaReliable" in obj
    assert all(v is not None for k, v in obj.items() if k not in NULLABLE_KEYS)
    for where in ("turn", "cumulative"):
        counts = obj[where]
        if counts is not None:
            assert {"inputTokens", "outputTokens", "totalTokens", "costUsd"} <= set(counts)
            assert None not in (counts.get("cacheReadTokens", 0), counts.get("cacheWriteTokens", 0))
    assert ev.created_at == _epoch(payload.timestamp)
    assert open_metric_event(OWNER, ev) == payload


# --- a metric a bot cannot lose silently ----------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"timestamp": "2026-12-02T14:05:09.987654+00:00"}, "timestamp"),  # isoformat()
        ({"timestamp": "2026-12-02 14:05:09"}, "timestamp"),
        ({"harness": ""}, "harness"),
        ({"turn_seq": 0}, "turn_seq"),
        ({"turn": TokenCounts(input_tokens=-1)}, "turn.input_tokens"),
        ({"cumulative": TokenCounts(output_tokens=1)}, "cumulative"),  # no session_id, turn_seq
        ({"root_event_id": "not an id"}, "root_event_id"),
        ({"started_at": "yesterday"}, "started_at"),
    ],
)
def test_an_invalid_payload_raises_when_it_is_made(fields: dict[str, Any], named: str) -> None:
    values: dict[str, Any] = {"harness": "goose", "timestamp": TS, **fields}
    with pytest.raises(MetricError, match=named.replace(".", r"\.")):
        MetricPayload(**values)


def test_the_timestamp_error_points_to_the_helper() -> None:
    moment = datetime(2026, 12, 2, 14, 5, 9, 987654, tzinfo=dt.UTC)
    with pytest.raises(MetricError, match="metric_timestamp"):
        MetricPayload(harness="goose", timestamp=moment.isoformat())
    p = MetricPayload(harness="goose", timestamp=nostr_buzz.metric_timestamp(moment))
    assert p.timestamp == TS


def test_metric_timestamp_from_a_datetime_in_any_zone_or_unix_seconds() -> None:
    from nostr_buzz.timestamps import metric_timestamp

    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert metric_timestamp(datetime(2026, 12, 2, 16, 5, 9, 987999, tzinfo=plus_two)) == TS
    assert metric_timestamp(1_796_220_309.5) == "2026-12-02T14:05:09.500Z"
    assert metric_timestamp(0) == "1970-01-01T00:00:00.000Z"
    assert metric_timestamp(datetime(999, 1, 2, tzinfo=dt.UTC)) == "0999-01-02T00:00:00.000Z"
    for bad in (datetime(2026, 12, 2), "2026-12-02", True, math.nan, 1e30):
        with pytest.raises(MetricError, match="timestamp"):
            metric_timestamp(bad)  # type: ignore[arg-type]


def test_token_counts_default_to_unknown_and_keep_the_wire_bytes() -> None:
    counts = TokenCounts(input_tokens=1, output_tokens=2)
    assert counts == TokenCounts(1, 2, None, None, None, None)
    p = MetricPayload(harness="goose", timestamp=TS, turn=counts)
    wire = json.loads(p.to_json())["turn"]
    # The four core counters are always written (null when unknown); cache ones omitted.
    assert wire == {"inputTokens": 1, "outputTokens": 2, "totalTokens": None, "costUsd": None}
    assert TokenCounts() == TokenCounts(None, None, None, None)


async def test_a_signer_builds_the_same_metric_the_secret_key_does() -> None:
    from nostr_buzz.local_signer import LocalSigner
    from nostr_buzz.nips.nip_am import build_metric_event_async

    p = MetricPayload(harness="goose", timestamp=TS, turn=TokenCounts(1, 2, 3, 0.5))
    event = await build_metric_event_async(LocalSigner(AGENT), OWNER.public_key.bech32, p)
    local = build_metric_event(AGENT, OWNER.public_key, p)
    assert (event.pubkey, event.kind, event.tags, event.created_at) == (
        local.pubkey,
        local.kind,
        local.tags,
        local.created_at,
    )
    assert open_metric_event(OWNER, event) == open_metric_event(OWNER, local) == p
    with pytest.raises(InvalidKey):
        await build_metric_event_async(AGENT, OWNER.public_key, p)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["nsec1notakey", "12" * 31, 7])
def test_every_key_problem_is_invalid_key(key: Any) -> None:
    p = MetricPayload(harness="goose", timestamp=TS)
    with pytest.raises(InvalidKey, match="agent secret key"):
        build_metric_event(key, OWNER.public_key, p)
    with pytest.raises(InvalidKey, match="owner public key"):
        build_metric_event(AGENT, key, p)
    with pytest.raises(InvalidKey, match="owner secret key"):
        open_metric_event(key, build_metric_event(AGENT, OWNER.public_key, p))


async def test_the_agent_opens_its_own_metrics_and_no_one_elses() -> None:
    from nostr_buzz.local_signer import LocalSigner
    from nostr_buzz.nips.nip_am import open_own_metric_event

    p = MetricPayload(harness="goose", timestamp=TS, turn=TokenCounts(1, 2, 3, 0.5))
    own = build_metric_event(AGENT, OWNER.public_key, p)
    assert await open_own_metric_event(LocalSigner(AGENT), OWNER.public_key, own) == p
    # Another key's metric (a stranger posing as a shard of this agent) is refused.
    forged = build_metric_event(STRANGER, OWNER.public_key, p)
    with pytest.raises(MetricError, match="not sent by this signer"):
        await open_own_metric_event(LocalSigner(AGENT), OWNER.public_key, forged)
    # A metric to another owner does not name this owner.
    with pytest.raises(MetricError, match="p tag"):
        await open_own_metric_event(LocalSigner(AGENT), STRANGER.public_key, own)
