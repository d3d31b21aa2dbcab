"""What the commands read before they send: secret keys in text and JSON, stdin's JSON lines."""

from __future__ import annotations

import pytest

from nostr_buzz.cli.common import json_lines, json_strings, refuse_secrets
from nostr_buzz.cli.output import CliFailure, ExitCode
from tests.support.keys import ALICE, NIP19_SECRET

NSEC = NIP19_SECRET.bech32


@pytest.mark.parametrize(
    "text",
    [
        NSEC,
        f"my key is {NSEC.upper()}, keep it",
        f"key={ALICE.hex}",
        ALICE.hex.upper(),
        ALICE.bech32,
    ],
)
def test_a_secret_key_in_text_is_refused_without_being_repeated(text: str) -> None:
    with pytest.raises(CliFailure) as caught:
        refuse_secrets(["harmless", text], ALICE, where="the canvas")
    assert caught.value.code == ExitCode.BAD_INPUT
    message = caught.value.message
    assert message.startswith("the canvas: ") and "nothing was sent" in message
    assert text not in message and ALICE.hex not in message.lower()


def test_any_nsec_is_refused_even_without_a_configured_key() -> None:
    with pytest.raises(CliFailure):
        refuse_secrets([f"x {NSEC}"], None, where="the filter")


@pytest.mark.parametrize(
    "text",
    [
        "how to decode an nsec1 string",  # a word, not a key
        ALICE.public_key.hex,  # a public key, an id: hex that is not the configured key
        NIP19_SECRET.hex,  # someone else's raw key cannot be told from an event id
    ],
)
def test_text_that_is_no_secret_key_passes(text: str) -> None:
    refuse_secrets([text], ALICE, where="the message text")


def test_every_string_of_a_json_document_is_seen() -> None:
    doc = {"kind": 1, "tags": [["p", "a"], ["x", {"deep": ["b"]}]], "c": None, "n": "v"}
    assert sorted(json_strings(doc)) == sorted(
        ["kind", "tags", "p", "a", "x", "deep", "b", "c", "n", "v"]
    )


def test_stdin_json_is_one_document_or_one_per_line() -> None:
    assert json_lines(["{", ' "kinds": [1]', "}"]) == [("stdin", {"kinds": [1]})]
    assert json_lines(['{"a": 1}', '{"b": 2}']) == [
        ("stdin line 1", {"a": 1}),
        ("stdin line 2", {"b": 2}),
    ]
    with pytest.raises(CliFailure) as caught:
        json_lines(['{"a": 1}', f'{{"b": "{NSEC}"'])
    assert caught.value.message.startswith("stdin line 2: not JSON")
    assert NSEC not in caught.value.message
