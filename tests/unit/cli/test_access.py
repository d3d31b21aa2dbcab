"""A command that talks to relays takes its relay options as one parameter: spread into the same
options, in the same order, for every command, and read back as what the user gave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer.main

from nostr_buzz.cli.access import RelayAccess, Relays, SigningRelays, relay_command
from nostr_buzz.cli.kit import sub_app
from nostr_buzz.cli.options import JsonOption
from nostr_buzz.errors import ConfigError

RELAY_FLAGS = ["--relay", "--timeout", "--key", "--config"]


def _app(seen: list[Any]) -> Any:
    app = sub_app("probe")

    @app.command("read")
    @relay_command
    def read(name: str, *, access: Relays, json_output: JsonOption = False) -> None:
        seen.append((name, access, json_output))

    @app.command("sign")
    @relay_command
    def sign(*, access: SigningRelays) -> None:
        seen.append(access)

    return typer.main.get_group(app)


def _flags(command: Any) -> list[str]:
    return [p.opts[0] for p in command.params if p.opts[0].startswith("--")]


def test_the_options_stand_where_the_parameter_does_and_only_a_signer_gets_bunker() -> None:
    group = _app([])
    assert _flags(group.commands["read"]) == [*RELAY_FLAGS, "--json"]
    assert _flags(group.commands["sign"]) == [
        "--relay",
        "--timeout",
        "--key",
        "--bunker",
        "--config",
    ]


def test_the_command_receives_what_was_given(tmp_path: Path) -> None:
    seen: list[Any] = []
    group = _app(seen)
    config = tmp_path / "buzz.toml"
    argv = ["read", "x", "--relay", "ws://a", "--relay", "ws://b", "--timeout", "2.5", "--json"]
    group.main([*argv, "--config", str(config)], standalone_mode=False)
    name, access, json_output = seen.pop()
    assert (name, json_output) == ("x", True)
    assert isinstance(access, RelayAccess)
    assert access.relay == ("ws://a", "ws://b")
    assert (access.timeout, access.key, access.bunker, access.config) == (2.5, None, None, config)
    group.main(["sign", "--bunker", "bunker://b"], standalone_mode=False)
    assert seen.pop().bunker == "bunker://b"


def test_the_configuration_is_read_only_when_asked_for(tmp_path: Path) -> None:
    # The command checks its own arguments first: a missing --config file is not yet an error.
    access = RelayAccess(["ws://a"], 1.0, None, tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not found"):
        access.relays("read")


def test_a_command_without_the_parameter_is_refused() -> None:
    def plain(name: str) -> None:
        del name

    with pytest.raises(TypeError, match="no Relays or SigningRelays parameter"):
        relay_command(plain)
