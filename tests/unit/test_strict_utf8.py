"""Invalid UTF-8 anywhere in a JSON document is bad input, even inside members we ignore.

msgspec validates the UTF-8 of the strings it decodes but skips ignored members unchecked, so
each reader checks the whole document.
"""

from __future__ import annotations

import json

import pytest

from nostr_buzz import Event, InvalidEvent, ManifestError, SecretKey, TurnInputError, sign_event
from nostr_buzz.core.turn_input import TurnInput
from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers

BAD_BYTES = [b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82"]


def _event() -> Event:
    return sign_event(
        SecretKey.from_str("01" * 32), kind=9, content="hi", tags=[["h", "eng"]], created_at=1
    )


def _with_extra(doc: bytes, bad: bytes) -> bytes:
    assert doc.endswith(b"}")
    return doc[:-1] + b',"extra":"' + bad + b'"}'


@pytest.mark.parametrize("bad", BAD_BYTES)
def test_event_with_invalid_utf8_in_an_ignored_member_is_malformed(bad: bytes) -> None:
    good = _event().to_json().encode()
    assert Event.from_json(_with_extra(good, b"ok")).id == _event().id
    with pytest.raises(InvalidEvent) as info:
        Event.from_json(_with_extra(good, bad))
    assert info.value.reason == "malformed"


@pytest.mark.parametrize("bad", BAD_BYTES)
def test_turn_input_with_invalid_utf8_in_an_ignored_member_is_invalid(bad: bytes) -> None:
    doc = json.dumps({"events": [{"event": _event().to_dict()}]}).encode()
    assert TurnInput.from_json(_with_extra(doc, b"ok")).channel_id == "eng"
    with pytest.raises(TurnInputError, match="UTF-8"):
        TurnInput.from_json(_with_extra(doc, bad))


@pytest.mark.parametrize("bad", BAD_BYTES)
def test_manifest_with_invalid_utf8_in_an_ignored_member_is_invalid(bad: bytes) -> None:
    layer = Layer(
        7, "current_instruction", "turn", "nostr_event", "v", "authoritative", "current", 1, False
    )
    doc = manifest_from_layers([layer]).to_json().encode()
    assert Manifest.from_json(_with_extra(doc, b"ok")).hash_matches()
    with pytest.raises(ManifestError):
        Manifest.from_json(_with_extra(doc, bad))
