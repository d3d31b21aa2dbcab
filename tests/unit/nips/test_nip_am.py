"""NIP-AM metric events: payload wire rules, build/open round trips and rejections."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.core.manifest import Layer, Manifest, manifest_from_layers
from nostr_buzz.errors import MetricError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
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

AGENT = SecretKey.from_str("a1" * 32)
OWNER = SecretKey.from_str("b2" * 32)
STRANGER = SecretKey.from_str("c3" * 32)
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
