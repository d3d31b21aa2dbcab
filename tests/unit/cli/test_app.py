"""The `buzz` entry point: exit codes of the parser and secrets in its messages (docs/cli.md)."""

from __future__ import annotations

import pytest

from nostr_buzz.cli.app import main

NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
SECRET_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"


@pytest.mark.parametrize(
    "argv",
    [
        ["keys", "show", NSEC],  # unexpected extra argument
        ["messages", "raw", "--timeout", NSEC, "--event", "ab" * 32],  # bad option value
        ["messages", "raw", "--event", "ab" * 32, NSEC.upper()],
        ["messages", "raw", "--key", SECRET_HEX, "--event", "ab" * 32, "extra"],
        ["messages", "raw", f"--key={SECRET_HEX}", "--event", "ab" * 32, "extra"],
    ],
)
def test_parser_errors_never_repeat_a_secret(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("buzz: ")
    assert NSEC not in err and NSEC.upper() not in err and SECRET_HEX not in err
    assert NSEC[5:20] not in err and SECRET_HEX[:16] not in err


@pytest.mark.parametrize("argv", [[], ["messages"], ["manifest"], ["keys"], ["nope"], ["compile"]])
def test_missing_or_unknown_command_is_bad_usage_with_empty_stdout(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "buzz" in err and "--help" in err


@pytest.mark.parametrize(
    "argv", [["--help"], ["-h"], ["messages", "raw", "--help"], ["compile", "-h"]]
)
def test_help_exits_zero_on_stdout(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    assert "Usage" in out
