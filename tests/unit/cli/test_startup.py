"""Command-line conventions in process: help text with real placeholders and listed choices, and
errors that say what to do (start-up imports, measured in fresh processes, are in
tests/e2e/cli/test_startup.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nostr_buzz.cli.app import COMMANDS, _load, main


def all_help_paths() -> list[list[str]]:
    paths: list[list[str]] = [[]]
    for name in COMMANDS:
        command = _load(name)
        paths.append([name])
        for sub in command.list_commands(None) if hasattr(command, "list_commands") else ():
            paths.append([name, sub])
    return paths


@pytest.mark.parametrize("path", all_help_paths(), ids=lambda p: " ".join(p) or "buzz")
def test_help_has_real_placeholders_and_lists_choices(
    path: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: buzz" in out
    assert not re.search(r"<(str|bool|int|float|path|file|list\[\w+\])[^>]*>", out), out
    assert "\x1b[" not in out
    for line in out.splitlines():
        if line.strip().startswith("--format"):
            assert re.search(r"--format \[\w+(\|\w+)+\]", line), line


def test_errors_say_what_to_do(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("BUZZ_RELAYS", "BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["req", "-k", "1"]) == 1
    err = capsys.readouterr().err
    assert "--relay" in err and "BUZZ_RELAYS" in err
    assert main(["messages", "rwa"]) == 1
    err = capsys.readouterr().err
    assert "--help" in err
