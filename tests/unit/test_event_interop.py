"""nostr-sdk (rust-nostr's Python bindings) as an independent oracle for ids and signatures."""

from __future__ import annotations

import json
from typing import Any

import nostr_sdk as sdk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nostr_buzz.event import Event, compute_id, sign_event
from nostr_buzz.keys import SecretKey
from tests.support.data import VECTORS, load_json

OUR_SECRET = SecretKey(bytes.fromhex("5a" * 32))
SDK_KEYS = sdk.Keys.parse("6b" * 32)

# Characters the serializations most often disagree on, mixed into ordinary random text.
TRICKY = (
    [chr(c) for c in range(0x20)]
    + ["\x7f", "\u0085", "\u00a0", "\u2028", "\u2029", "\ufeff", "\ufffd", "\uffff"]
    + list("<>&\"\\/'")
    + ["\U0001f600", "\U0001f469", "\u200d", "\U0001f4bb", "\U00010348", "\U0010ffff", "é", "中"]
)
# Any Unicode scalar value: surrogates are not encodable as UTF-8 and are tested elsewhere.
scalar_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
texts = scalar_text | st.text(st.sampled_from(TRICKY), max_size=40)
tags = st.lists(st.lists(texts, min_size=1, max_size=5), max_size=6)
kinds = st.integers(min_value=0, max_value=65535)
timestamps = st.integers(min_value=0, max_value=2**63 - 1) | st.integers(0, 2_000_000_000)

PROPERTY = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _sdk_id(pubkey_hex: str, created_at: int, kind: int, tag_list: Any, content: str) -> str:
    return sdk.EventId.compute(
        sdk.PublicKey.parse(pubkey_hex),
        sdk.Timestamp.from_secs(created_at),
        sdk.Kind(kind),
        [sdk.Tag.parse(list(t)) for t in tag_list],
        content,
    ).to_hex()


@PROPERTY
@given(content=texts, tag_list=tags, kind=kinds, created_at=timestamps)
def test_our_id_equals_sdk_id_and_sdk_verifies_our_signature(
    content: str, tag_list: list[list[str]], kind: int, created_at: int
) -> None:
    ours = sign_event(OUR_SECRET, kind=kind, content=content, tags=tag_list, created_at=created_at)
    assert ours.id == _sdk_id(ours.pubkey, created_at, kind, tag_list, content)
    theirs = sdk.Event.from_json(ours.to_json())
    assert theirs.id().to_hex() == ours.id
    assert theirs.verify_id()
    assert theirs.verify_signature()
    # Same canonical bytes both ways.
    assert theirs.as_json() == ours.to_json()


@PROPERTY
@given(content=texts, tag_list=tags, kind=kinds, created_at=timestamps)
def test_sdk_signed_events_verify_with_ours(
    content: str, tag_list: list[list[str]], kind: int, created_at: int
) -> None:
    theirs = (
        sdk.EventBuilder(sdk.Kind(kind), content)
        .tags([sdk.Tag.parse(t) for t in tag_list])
        .custom_created_at(sdk.Timestamp.from_secs(created_at))
        .finalize(SDK_KEYS)
    )
    ours = Event.from_json(theirs.as_json())
    assert ours.id == theirs.id().to_hex()
    assert ours.pubkey == SDK_KEYS.public_key().to_hex()
    assert (ours.kind, ours.created_at, ours.content) == (kind, created_at, content)
    assert [list(t) for t in ours.tags] == tag_list
    # The JSON-escaped spelling (\uXXXX for everything non-ASCII) verifies too.
    assert Event.from_json(json.dumps(json.loads(theirs.as_json()), ensure_ascii=True)) == ours


@settings(max_examples=200, deadline=None)
@given(content=texts, tag_list=tags, kind=kinds, created_at=timestamps)
def test_compute_id_alone_matches_sdk(
    content: str, tag_list: list[list[str]], kind: int, created_at: int
) -> None:
    pubkey = SDK_KEYS.public_key().to_hex()
    assert compute_id(pubkey, created_at, kind, tag_list, content) == _sdk_id(
        pubkey, created_at, kind, tag_list, content
    )


def test_sdk_agrees_on_every_real_event() -> None:
    for raw in load_json(VECTORS / "nip01-events.json"):
        ours = Event.from_json(json.dumps(raw))
        theirs = sdk.Event.from_json(json.dumps(raw))
        assert theirs.verify()
        assert theirs.id().to_hex() == ours.id
        assert theirs.as_json() == ours.to_json()


def test_sdk_rejects_what_we_call_tampered() -> None:
    ours = sign_event(OUR_SECRET, kind=1, content="x", created_at=1)
    d = ours.to_dict() | {"content": "y"}
    theirs = sdk.Event.from_json(json.dumps(d))
    assert not theirs.verify_id()
