"""Who a private answer goes to: the whole room only when the owner is in it and it is small;
otherwise the sender alone (a stranger cannot make the agent write to the people it names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nostr_buzz.bot.config import PluginConfig
from nostr_buzz.bot.outputs import private_audience
from nostr_buzz.config import ConfigSources
from nostr_buzz.errors import ConfigError
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17
from tests.support.keys import AGENT, ALICE, BOB, OWNER, STRANGER

NOW = 1_700_000_000
agent, owner = AGENT.public_key.hex, OWNER.public_key.hex
alice, bob, stranger = (k.public_key.hex for k in (ALICE, BOB, STRANGER))
many = [SecretKey.from_str(f"{i + 1:064x}").public_key.hex for i in range(300)]


def test_a_stranger_naming_300_people_is_answered_alone() -> None:
    message = nip17.message(stranger, [agent, *many], "hello everyone", created_at=NOW)
    assert private_audience(agent, owner, message, 10) == ([stranger], "owner_not_in_room")


def test_a_room_without_the_owner_is_answered_to_its_sender_only() -> None:
    message = nip17.message(alice, [agent, bob], "x", created_at=NOW)
    assert private_audience(agent, owner, message, 10) == ([alice], "owner_not_in_room")


def test_a_two_person_conversation_is_not_narrowed() -> None:
    message = nip17.message(stranger, [agent], "x", created_at=NOW)
    assert private_audience(agent, owner, message, 1) == ([stranger], None)


def test_a_room_the_owner_is_in_gets_the_answer_as_sender_or_as_a_p() -> None:
    by_owner = nip17.message(owner, [agent, alice, bob], "x", created_at=NOW)
    assert private_audience(agent, owner, by_owner, 10) == ([owner, alice, bob], None)
    owner_named = nip17.message(alice, [bob, agent, owner], "x", created_at=NOW)
    assert private_audience(agent, owner, owner_named, 3) == ([alice, bob, owner], None)


def test_a_room_over_max_recipients_is_answered_to_its_sender_only() -> None:
    big = nip17.message(alice, [owner, agent, bob, *many[:8]], "x", created_at=NOW)
    assert private_audience(agent, owner, big, 10) == ([alice], "room_too_large")
    assert private_audience(agent, owner, big, 11) == ([alice, owner, bob, *many[:8]], None)


MINIMAL_ENV = {
    "BUZZ_PRIVATE_KEY": AGENT.hex,
    "BUZZ_OWNER": owner,
    "BUZZ_RELAYS": "wss://relay.example",
    "BUZZ_AGENT_COMMAND": "agent",
}


def test_the_settings_reach_the_bot_from_their_variables(tmp_path: Path) -> None:
    environ = dict(MINIMAL_ENV)
    default = PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path))
    assert (default.max_recipients, default.give_up_after) == (10, 7 * 86400)
    environ |= {"BUZZ_PRIVATE_MAX_RECIPIENTS": "4", "BUZZ_OUTBOX_GIVE_UP_AFTER": "3600"}
    chosen = PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path))
    assert (chosen.max_recipients, chosen.give_up_after) == (4, 3600.0)
    flags = ConfigSources(environ=environ, cwd=tmp_path, overrides={"private.max_recipients": 2})
    assert PluginConfig.from_sources(flags).max_recipients == 2
    with pytest.raises(ConfigError, match="BUZZ_PRIVATE_MAX_RECIPIENTS"):
        _ = ConfigSources(environ={"BUZZ_PRIVATE_MAX_RECIPIENTS": "0"}, cwd=tmp_path).file


def test_local_relays_for_relay_lists_come_from_the_outbox_section(tmp_path: Path) -> None:
    environ = dict(MINIMAL_ENV)
    assert (
        PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path)).local_relays == ()
    )
    (tmp_path / "buzz.toml").write_text('[outbox]\nlocal_relays = ["ws://10.0.0.7:7777"]\n')
    chosen = PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path))
    assert chosen.local_relays == ("ws://10.0.0.7:7777",)
    (tmp_path / "buzz.toml").write_text('[outbox]\nlocal_relays = ["http://10.0.0.7"]\n')
    with pytest.raises(ConfigError, match=r"local_relays\[0\]: relay URL must start with ws://"):
        PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path))
