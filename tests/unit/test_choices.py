"""Every enumerated value is checked where it is given, against one table of choices
(nostr_buzz/core/choices.py): ``buzz.toml``, a flag, a ``BUZZ_*`` variable, a ``PluginConfig``
and a ``Gate`` built in Python all refuse a misspelt mode with the same words.  Before, a
``PluginConfig(gate="owner_only")`` or ``Gate(mode="owner_only")`` matched neither refusal of
the gate and admitted everyone."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.acp.profiles import GENERIC, AdapterProfile
from nostr_buzz.bot.config import PluginConfig
from nostr_buzz.config import ConfigSources, load_config_file
from nostr_buzz.core.budget import Caps
from nostr_buzz.core.choices import CHOICES
from nostr_buzz.core.gate import Admit, Gate, Refuse, decide
from nostr_buzz.errors import ConfigError
from nostr_buzz.io.agent_driver import AgentDriver
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER, STRANGER

#: Each enumerated setting: the PluginConfig field that gives it in Python (budget.action is
#: the Caps' own), and a misspelling.
FIELDS: dict[str, tuple[str, str]] = {
    "gate.mode": ("gate", "owner_only"),
    "in_flight": ("in_flight", "stear"),
    "agent.permissions": ("permissions", "Owner"),
    "reply_mode": ("reply_mode", "automatic"),
    "budget.action": ("budget", "halt"),
    "sessions.scope": ("session_scope", "Thread"),
    "relay_lists": ("relay_lists", "replace"),
    "sessions.checkpoint": ("thread_checkpoint", "compactions"),
}


def config(**changes: Any) -> PluginConfig:
    return PluginConfig(
        agent_secret=AGENT,
        owner=OWNER.public_key,
        read_relays=("ws://127.0.0.1:9",),
        write_relays=("ws://127.0.0.1:9",),
        agent_command="true",
        **changes,
    )


def gate(mode: Any) -> Gate:
    return Gate(
        agent=AGENT.public_key.hex,
        owner=OWNER.public_key.hex,
        kinds=frozenset({9}),
        channels=frozenset(),
        mentions_required=True,
        mode=mode,
        allowlist=frozenset(),
    )


def refused(make: Any) -> str:
    with pytest.raises(ConfigError) as info:
        make()
    return str(info.value)


def test_the_table_covers_every_enumerated_setting_of_the_file() -> None:
    assert set(FIELDS) == set(CHOICES)


def test_a_misspelt_gate_mode_in_a_plugin_config_or_a_gate_names_the_choices() -> None:
    said = refused(lambda: config(gate="owner_only"))
    assert said == (
        "PluginConfig gate: expected one of owner-only, allowlist, anyone, got 'owner_only'"
    )
    assert refused(lambda: gate("owner_only")) == (
        "Gate mode: expected one of owner-only, allowlist, anyone, got 'owner_only'"
    )
    assert refused(lambda: gate(None)).endswith("got None")
    # replace() builds anew: a valid config cannot be turned into an open one either
    assert "owner_only" in refused(lambda: replace(config(), gate="owner_only"))
    # the valid modes still decide as before
    mention = chat(STRANGER, 1, content="hi", channel="eng", mention=AGENT)
    assert decide(mention, gate("owner-only"), set()) == Refuse("author_not_owner")
    assert decide(mention, gate("anyone"), set()) == Admit("eng")


@pytest.mark.parametrize("setting", sorted(FIELDS))
def test_every_path_refuses_a_misspelt_value_with_the_same_words(
    setting: str, tmp_path: Path
) -> None:
    field, typo = FIELDS[setting]
    tail = f"expected one of {', '.join(CHOICES[setting])}, got {typo!r}"
    *sections, leaf = setting.split(".")
    toml = tmp_path / "buzz.toml"
    header = f"[{sections[0]}]\n" if sections else ""
    toml.write_text(f'{header}{leaf} = "{typo}"\n', encoding="utf-8")
    assert refused(lambda: load_config_file(toml)) == f"{toml}: {setting}: {tail}"
    env_name = "BUZZ_" + setting.replace(".", "_").upper()
    env = refused(lambda: ConfigSources(environ={env_name: typo}, cwd=tmp_path).env_settings)
    assert env == f"{env_name}: {tail}"
    flag = refused(lambda: ConfigSources(environ={}, overrides={setting: typo}, cwd=tmp_path))
    assert flag.endswith(f": {tail}")
    if field == "budget":
        assert refused(lambda: Caps(action=typo)) == f"Caps action: {tail}"
    else:
        assert refused(lambda: config(**{field: typo})) == f"PluginConfig {field}: {tail}"


def test_every_choice_is_accepted_everywhere(tmp_path: Path) -> None:
    for setting, (field, _) in FIELDS.items():
        for choice in CHOICES[setting]:
            if field == "budget":
                assert config(budget=Caps(action=choice)).budget.action == choice
            elif choice != "allowlist":
                assert getattr(config(**{field: choice}), field) == choice
    allowlisted = config(gate="allowlist", allowlist=frozenset({STRANGER.public_key.hex}))
    assert allowlisted.gate == "allowlist"


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"relay_timeout": 0}, "PluginConfig relay_timeout: Expected `float` > 0.0"),
        ({"relay_grace": -1.0}, "PluginConfig relay_grace: Expected `float` > 0.0"),
        ({"context_message_limit": 0}, "PluginConfig context_message_limit: Expected `int` >= 1"),
        ({"max_recipients": 0}, "PluginConfig max_recipients: Expected `int` >= 1"),
        ({"kinds": (9, 70_000)}, "PluginConfig kinds[1]: expected an integer 0–65535, got 70000"),
        ({"clock_skew": "600"}, "PluginConfig clock_skew: Expected `float`, got `str`"),
        ({"mentions_required": "no"}, "PluginConfig mentions_required: Expected `bool`"),
        (
            {"channels": ("eng", "a b")},
            "PluginConfig channels[1] is not a valid channel id",
        ),
        (
            {"gate": "allowlist"},
            'PluginConfig: gate.mode = "allowlist" needs a non-empty gate.allowlist',
        ),
        (
            {"budget": Caps(daily_usd=-1.0)},
            "PluginConfig budget.daily_usd: Expected `float` >= 0.0",
        ),
    ],
)
def test_other_values_are_checked_as_the_file_checks_them(
    changes: dict[str, Any], said: str
) -> None:
    assert refused(lambda: config(**changes)).startswith(said)


def test_the_agent_edge_checks_its_own_enumerated_values() -> None:
    assert refused(lambda: AdapterProfile("x", standing="gooze")) == (
        "AdapterProfile standing: expected one of goose, claude_meta, system_prompt, legacy, "
        "got 'gooze'"
    )
    assert "AdapterProfile usage" in refused(lambda: replace(GENERIC, usage="cumulative"))
    said = refused(lambda: AgentDriver(sys.executable, permission="rejct"))  # type: ignore[arg-type]
    assert said == "AgentDriver permission: expected one of allow, reject, got 'rejct'"


def test_a_secret_given_as_a_mode_is_never_repeated() -> None:
    nsec = OWNER.bech32
    said = refused(lambda: config(gate=nsec))
    assert nsec not in said and "looks like a secret key" in said
    said = refused(lambda: gate(OWNER.hex))
    assert OWNER.hex not in said
