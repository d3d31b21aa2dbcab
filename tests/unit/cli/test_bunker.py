"""``--bunker`` on the command line, without a bunker: its help, and the refusals that come
before any relay is asked (the URI's secret never repeated).  Against a real bunker:
tests/e2e/cli/test_bunker.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from nostr_buzz.cli.app import app, main
from nostr_buzz.keys import SecretKey

SECRET = "one-time-connection-secret"
# Port 9 (discard): nothing answers there, and these refusals come before anything is dialled.
URI = f"bunker://{SecretKey.generate().public_key.hex}?relay=ws://127.0.0.1:9&secret={SECRET}"
OWNER = SecretKey.generate().public_key.hex


@pytest.mark.parametrize("command", [["run"], ["event"], ["messages", "send"], ["mem", "set"]])
def test_help_says_the_uri_holds_a_secret_and_shows_no_default(command: list[str]) -> None:
    text = " ".join(CliRunner().invoke(app, [*command, "--help"], prog_name="buzz").output.split())
    assert "--bunker" in text and "BUZZ_BUNKER" in text and "/proc/PID/cmdline" in text


def test_run_refuses_bunker_on_its_command_line_with_an_agent_user(
    no_ambient_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--bunker", URI, "--owner", OWNER, "--relay", "ws://127.0.0.1:9"]
    assert main([*argv, "--agent", "goose acp", "--agent-user", "nobody"]) == 1
    err = capsys.readouterr().err
    assert "--bunker puts the bot's bunker's secret in its command line" in err
    assert SECRET not in err


def test_a_bad_config_is_refused_before_the_bunker_is_asked(
    no_ambient_config: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--bunker", URI, "--owner", OWNER, "--relay", "ws://127.0.0.1:9"]
    assert main(argv) == 1  # no agent command: the bunker's relay is never dialled
    err = capsys.readouterr().err
    assert "no agent command configured" in err and "asking the NIP-46 bunker" not in err
    assert not (tmp_path / ".buzz").exists()  # no client key made either
    assert main([*argv, "--agent", "x", "--key", SecretKey.generate().hex]) == 1
    assert "given twice" in capsys.readouterr().err


def test_key_and_bunker_flags_are_refused_together(
    no_ambient_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["event", "-c", "hi", "--relay", "ws://127.0.0.1:9", "--bunker", URI]
    assert main([*argv, "--key", SecretKey.generate().hex]) == 1
    err = capsys.readouterr().err
    assert "give --key or --bunker, not both" in err and SECRET not in err
