"""The README's pure Python example runs as written, its library list names every export and its
command table matches ``buzz --help`` (the examples that need a relay are in
tests/e2e/test_readme.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import nostr_buzz
from nostr_buzz import SecretKey, sign_event
from nostr_buzz.cli.app import COMMANDS, main
from tests.support.readme import README, readme_block


def test_the_pure_core_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    ns: dict[str, Any] = {}
    exec(readme_block("def next_turn"), ns)
    secret = SecretKey.from_str("07" * 32)
    good = sign_event(secret, kind=9, content="hi", tags=[["h", "engineering"]], created_at=5)
    ns["on_relay_frame"](good.to_json(), 1.0)
    ns["on_relay_frame"](good.to_json().replace('"hi"', '"ho"'), 1.0)
    assert "dropped: bad_id" in capsys.readouterr().out
    ns["next_turn"](2.0)
    snapshot = ns["ledger"].snapshot()
    assert snapshot is not None and snapshot.hash_matches()
    assert [layer.layer for layer in snapshot.layers][-2:] == [
        "current_instruction",
        "delivery_contract",
    ]


def test_the_library_list_names_every_export() -> None:
    section = README.split("## The library", 1)[1].split("### Plugging it into a bot", 1)[0]
    listed = set(re.findall(r"`(\w+)`", section)) - {"nostr_buzz"}
    assert listed == set(nostr_buzz.__all__)


def test_the_command_table_matches_buzz_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    commands = capsys.readouterr().out.split("Commands:", 1)[1]
    helped = {
        line.split()[0]
        for line in commands.splitlines()
        if line.startswith("  ") and line[2] != " "
    }
    table = README.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    documented = set(re.findall(r"^\| `buzz (\w+)", table, re.M))
    documented |= set(re.findall(r" / `buzz (\w+)", table))
    assert documented == helped == set(COMMANDS)
