"""Start-up cost and command-line conventions: what each command imports, help text with real
placeholders and listed choices, no colour, shell completion, and the lazy public API."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import nostr_buzz
from nostr_buzz.cli.app import COMMANDS
from nostr_buzz.keys import SecretKey
from tests.support.buzz_process import clean_env, relay_process

HEAVY = ("acp", "pydantic", "pydantic_core", "rich")


#: Runs ``python -m nostr_buzz ARGV…`` and, at exit, writes every module it loaded to the file
#: named by the first argument: ``sys.modules`` sees a module however it was loaded
#: (``-X importtime`` misses the ones ``importlib.import_module`` loads, as the lazy API does).
_RECORDING = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def record():
    with open(out, "w", encoding="utf-8") as f:
        f.write("\\n".join(sorted(sys.modules)))
atexit.register(record)
runpy.run_module("nostr_buzz", run_name="__main__", alter_sys=True)
"""


def imported_by(*argv: str, env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "modules"
        done = subprocess.run(
            [sys.executable, "-c", _RECORDING, str(out), *argv],
            capture_output=True,
            env=clean_env(env),
            timeout=60,
            check=False,
        )
        return done.returncode, set(out.read_text(encoding="utf-8").split("\n"))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_version_imports_neither_acp_nor_pydantic() -> None:
    code, modules = imported_by("--version")
    assert code == 0
    assert "nostr_buzz.cli.app" in modules  # the measurement sees our own imports
    assert heavy_in(modules) == []
    # Nor any command, nor the network or crypto stack.
    assert not [
        m
        for m in modules
        if m.startswith("nostr_buzz.cli.")
        and m
        not in (
            "nostr_buzz.cli.app",
            "nostr_buzz.cli.extras",  # which extra a missing package belongs to: a small table
            "nostr_buzz.cli.kit",
            "nostr_buzz.cli.output",
        )
    ]
    assert "websockets" not in modules and "coincurve" not in modules


def test_help_keys_show_and_messages_raw_stay_light() -> None:
    key = {"BUZZ_PRIVATE_KEY": SecretKey.from_str("5a" * 32).hex}
    for argv, env in ((["--help"], None), (["keys", "show"], key)):
        code, modules = imported_by(*argv, env=env)
        assert code == 0, argv
        assert heavy_in(modules) == [], argv
        assert "websockets" not in modules, argv  # no network code where none is used
    with relay_process() as relay:
        argv = ["messages", "raw", "--event", "ab" * 32, "--relay", relay]
        code, modules = imported_by(*argv)
    assert code == 3  # asked a real relay, which does not have it
    assert "websockets" in modules
    assert heavy_in(modules) == []


def test_import_nostr_buzz_is_lazy_and_every_export_resolves() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, nostr_buzz; print(sorted(sys.modules))"],
        capture_output=True,
        timeout=60,
        check=True,
    )
    loaded = done.stdout.decode()
    for module in ("websockets", "coincurve", "msgspec", "acp", "sqlite3"):
        assert f"'{module}'" not in loaded
    assert sorted(nostr_buzz.__all__) == sorted(nostr_buzz._EXPORTS)  # each name once
    for name in nostr_buzz.__all__:
        assert getattr(nostr_buzz, name) is not None
        assert name in dir(nostr_buzz)
    with pytest.raises(AttributeError):
        _ = nostr_buzz.NoSuchThing  # type: ignore[attr-defined]


def test_no_colour_on_a_pipe_or_with_no_color() -> None:
    for extra in ({}, {"NO_COLOR": "1"}, {"FORCE_COLOR": "1", "TERM": "xterm-256color"}):
        for argv in (["--help"], ["messages", "raw", "--help"], ["nope"]):
            done = subprocess.run(
                [sys.executable, "-m", "nostr_buzz", *argv],
                capture_output=True,
                env=clean_env(extra),
                timeout=60,
                check=False,
            )
            assert b"\x1b[" not in done.stdout + done.stderr, (extra, argv)


def test_install_completion_writes_a_bash_completion(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "SHELL": "/bin/bash"}
    done = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "--install-completion", "bash"],
        capture_output=True,
        env=clean_env(env),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "buzz" in (tmp_path / ".bashrc").read_text(encoding="utf-8")
    # The completion asks buzz itself, which lists its commands without loading them.
    completing = clean_env(
        {"_BUZZ_COMPLETE": "complete_bash", "COMP_WORDS": "buzz mes", "COMP_CWORD": "1"}
    )
    done = subprocess.run(
        [sys.executable, "-c", "from nostr_buzz.cli.app import run; run()"],
        capture_output=True,
        env=completing,
        timeout=60,
        check=False,
    )
    assert done.stdout.split() == [b"messages"], done.stderr


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "demo"])
def test_no_command_but_demo_loads_the_agent_protocol_to_parse_its_options(command: str) -> None:
    # buzz run loads the ACP schema when the bot starts, not to read its flags.
    code, modules = imported_by(command, "--help")
    assert code == 0
    assert [m for m in heavy_in(modules) if not m.startswith("rich")] == [], command
