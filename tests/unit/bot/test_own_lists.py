"""What the bot's own relay lists become (bot/own_lists.py ``merged``): the list found keeps
its tags, gains the bot's relays it does not name, and loses only what the bot added before."""

from __future__ import annotations

import pytest

from nostr_buzz.bot.config import PluginConfig
from nostr_buzz.bot.own_lists import merged
from nostr_buzz.errors import ConfigError
from nostr_buzz.keys import SecretKey

A, B, H = "wss://a.example", "wss://b.example", "wss://host.example"


def test_the_bots_relays_are_added_to_what_the_list_names() -> None:
    found = (("r", H), ("r", A + "/", "read"), ("alt", "kept as it is"))
    tags, added = merged(found, (("r", A), ("r", B, "write")), ())
    assert added == (("r", A, "write"), ("r", B, "write"))  # A is read already: write only
    assert tags == (*found, *added)


def test_what_the_bot_added_before_and_no_longer_serves_is_taken_back_and_only_that() -> None:
    found = (("relay", H), ("relay", A), ("relay", B))
    tags, added = merged(found, (("relay", B),), (("relay", A), ("relay", B)))
    assert tags == (("relay", H), ("relay", B)) and added == (("relay", B),)


def test_a_list_that_names_everything_is_left_unchanged() -> None:
    found = (("r", A), ("r", H, "read"))
    assert merged(found, (("r", A, "read"),), ()) == (found, ())


def test_the_setting_is_checked_as_the_file_would_be() -> None:
    key = SecretKey.generate()
    given = {"agent_secret": key, "owner": key.public_key, "agent_command": "x"}
    relays = {"read_relays": (A,), "write_relays": (A,)}
    assert PluginConfig(**given, **relays).relay_lists == "merge"  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"relay_lists.*merge.*publish.*leave"):
        PluginConfig(**given, **relays, relay_lists="merg")  # type: ignore[arg-type]
