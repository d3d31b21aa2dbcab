"""NIP-11 ``limitation``: what a relay's document announces, read strictly."""

from __future__ import annotations

from nostr_buzz.io.relay_info import RelayLimits, limits_of


def test_the_limitation_object_is_read() -> None:
    document = {
        "name": "x",
        "limitation": {
            "max_message_length": 16384,
            "max_content_length": 8196,
            "max_subscriptions": 20,
            "auth_required": True,
        },
    }
    assert limits_of(document) == RelayLimits(16384, 8196, 20, True)


def test_values_that_are_not_positive_integers_or_true_are_ignored() -> None:
    document = {
        "limitation": {
            "max_message_length": "16384",
            "max_content_length": -1,
            "max_subscriptions": True,
            "auth_required": "yes",
        }
    }
    assert limits_of(document) == RelayLimits()
    assert limits_of(None) == RelayLimits()
    assert limits_of({"limitation": [1]}) == RelayLimits()
