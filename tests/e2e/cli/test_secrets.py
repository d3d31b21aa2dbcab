"""Secrets stay secret where ``buzz`` reaches a relay or starts an agent.

- a secret key (nsec, or the configured key in hex) given where a channel, id or public key is
  expected is refused before anything is sent, and never repeated;
- a key file that group or others may read is refused at start, with the fix;
- ``buzz run`` says when the agent can read the bot's key.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nostr_buzz.config import ConfigSources
from nostr_buzz.errors import ConfigError
from nostr_buzz.keys import SecretKey
from tests.support.cli import buzz, dead_url

SECRET = SecretKey.from_str("7c" * 31 + "7d")
OTHER = SecretKey.from_str("7e" * 32)


pytestmark = pytest.mark.usefixtures("no_ambient_config", "common_umask")


def leaked(text: str, key: SecretKey) -> bool:
    lowered = text.lower()
    return key.hex in lowered or key.bech32 in lowered or key.hex[:32] in lowered


# --- never echoed, never used in the wrong place -------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["messages", "send", "--channel", "{nsec}", "hello"],
        ["messages", "send", "--channel", "{hex}", "hello"],
        ["messages", "get", "--channel={hex}"],
        ["messages", "raw", "--event", "{hex}"],
        ["messages", "thread", "--channel", "eng", "--event", "{HEX}"],
        ["messages", "send", "--channel", "eng", "--reply-to", "{hex}", "hi"],
        ["messages", "send", "--channel", "eng", "my key is {nsec}"],
        ["metrics", "--agent", "{hex}"],
        ["messages", "dm", "--to", "{hex}", "hello"],
        ["run", "--owner", "{hex}"],
    ],
)
def test_the_configured_secret_key_is_refused_where_an_id_goes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", SECRET.bech32)
    forms = {"nsec": SECRET.bech32, "hex": SECRET.hex, "HEX": SECRET.hex.upper()}
    args = [a.format(**forms) for a in argv] + ["--relay", dead_url()]
    code, out, err = buzz(capsys, *args)
    # refused as bad input before any relay is asked (a dead relay would give exit 2)
    assert (code, out) == (1, ""), err
    assert "looks like a secret key" in err
    assert not leaked(err, SECRET), err


def test_a_public_key_and_an_event_id_are_still_fine(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", SECRET.bech32)
    code, _, err = buzz(capsys, "messages", "raw", "--event", OTHER.hex, "--relay", dead_url())
    assert code == 2, err  # the id was used: the relay was asked (and is dead)


def test_a_mistyped_hex_is_not_half_repeated(capsys: pytest.CaptureFixture[str]) -> None:
    mistyped = SECRET.hex[:-1]
    code, out, err = buzz(capsys, "messages", "raw", "--event", mistyped, "--relay", dead_url())
    assert (code, out) == (1, "")
    assert SECRET.hex[:32] not in err


# --- files only the bot's user may read ------------------------------------------------------


def test_a_key_file_others_can_read_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "agent.nsec"
    key.write_text(SECRET.bech32 + "\n")
    key.chmod(0o644)
    (tmp_path / "buzz.toml").write_text('key_file = "agent.nsec"\n')
    with pytest.raises(ConfigError, match=r"mode 0644.*chmod 600"):
        ConfigSources(environ={}, cwd=tmp_path).secret_key()
    code, out, err = buzz(capsys, "keys", "show")
    assert (code, out) == (1, "")
    assert "chmod 600" in err and not leaked(err, SECRET)
    # buzz run refuses it at start, as a real process
    proc = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "run", "--relay", dead_url()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")},
        check=False,
    )
    assert proc.returncode == 1 and "chmod 600" in proc.stderr, proc.stderr
    key.chmod(0o600)
    assert buzz(capsys, "keys", "show")[0] == 0


# --- the agent never gets the bot's key ------------------------------------------------------


def test_buzz_run_says_when_the_agent_can_read_the_bots_key(tmp_path: Path) -> None:
    key = tmp_path / "agent.nsec"
    key.write_text(SECRET.bech32 + "\n")
    key.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    for user_line, warned in (("", True), ('user = "nobody"\n', False)):
        (tmp_path / "buzz.toml").write_text(
            f'key_file = "agent.nsec"\nowner = "{OTHER.public_key.bech32}"\n'
            f'relays = ["{dead_url()}"]\nstate_dir = "state"\n'
            f'[agent]\ncommand = "/nonexistent/agent"\n{user_line}'
        )
        proc = subprocess.run(
            [sys.executable, "-m", "nostr_buzz", "run"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
            check=False,
        )
        assert proc.returncode == 1, proc.stderr  # the agent cannot start: exit 1
        assert (
            "the agent runs as this same OS user and can read the bot's key" in proc.stderr
        ) is warned
