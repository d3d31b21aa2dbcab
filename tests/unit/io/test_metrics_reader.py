"""read_metrics takes the owner's key as a SecretKey or its text, like every entry point; a bad
one is InvalidKey before any relay is asked (the reader itself: tests/e2e/io/)."""

from __future__ import annotations

import asyncio

import pytest

from nostr_buzz.errors import InvalidKey
from nostr_buzz.io.metrics_reader import fetch_metrics, read_metrics
from tests.support.keys import OWNER


@pytest.mark.parametrize("key", ["nsec1notakey", OWNER.public_key.bech32, None])
def test_a_bad_owner_key_is_invalid_key_and_never_shown(key: object) -> None:
    for reader in (read_metrics, fetch_metrics):
        with pytest.raises(InvalidKey, match="owner's secret key") as info:
            asyncio.run(reader(key, ["ws://127.0.0.1:9"]))  # type: ignore[arg-type]
        assert "nsec1notakey" not in str(info.value)


def test_the_owner_key_as_text_is_accepted() -> None:
    for key in (OWNER.bech32, OWNER.hex):
        report, fetch = asyncio.run(read_metrics(key, []))  # no relay: nothing is asked
        assert report.turns == () and fetch.relays == {}
