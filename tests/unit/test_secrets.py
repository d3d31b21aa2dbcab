"""Secrets stay secret: never echoed, never accepted in the wrong place, never readable by others.

- a secret key (nsec, or the configured key in hex) given where a channel, id or public key is
  expected is refused before anything is sent, and never repeated;
- 64 hex characters given anywhere but as an id are never echoed (``buzz keys show <hex>``);
- the config's ``repr`` hides ``[agent] env`` values;
- the diagnostics file rotates at a size limit;
- a key file that group or others may read is refused at start, with the fix;
- the state directory is 0700 and its files 0600, whatever the umask.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nostr_buzz.cli.app import main
from nostr_buzz.config import AgentSection, ConfigSources, load_config_file
from nostr_buzz.errors import ConfigError
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.outbox import OUTBOX_FILE, Outbox
from nostr_buzz.keys import SecretKey
from tests.support.relays import free_port

SECRET = SecretKey.from_str("7c" * 31 + "7d")
OTHER = SecretKey.from_str("7e" * 32)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("BUZZ_RELAYS", "BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)  # the common default: files 0644 unless made private
    yield
    os.umask(old)


def buzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def leaked(text: str, key: SecretKey) -> bool:
    lowered = text.lower()
    return key.hex in lowered or key.bech32 in lowered or key.hex[:32] in lowered


def dead_relay() -> str:
    return f"ws://127.0.0.1:{free_port()}"


# --- never echoed, never used in the wrong place -------------------------------------------


def test_keys_show_never_echoes_a_hex_argument(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["keys", "show", SECRET.hex], ["keys", "show", SECRET.hex.upper(), "--json"]):
        code, out, err = buzz(capsys, *argv)
        assert (code, out) == (1, "")
        assert not leaked(err, SECRET), err


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
    args = [a.format(**forms) for a in argv] + ["--relay", dead_relay()]
    code, out, err = buzz(capsys, *args)
    # refused as bad input before any relay is asked (a dead relay would give exit 2)
    assert (code, out) == (1, ""), err
    assert "looks like a secret key" in err
    assert not leaked(err, SECRET), err


def test_a_public_key_and_an_event_id_are_still_fine(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", SECRET.bech32)
    code, _, err = buzz(capsys, "messages", "raw", "--event", OTHER.hex, "--relay", dead_relay())
    assert code == 2, err  # the id was used: the relay was asked (and is dead)


def test_a_mistyped_hex_is_not_half_repeated(capsys: pytest.CaptureFixture[str]) -> None:
    mistyped = SECRET.hex[:-1]
    code, out, err = buzz(capsys, "messages", "raw", "--event", mistyped, "--relay", dead_relay())
    assert (code, out) == (1, "")
    assert SECRET.hex[:32] not in err


def test_config_repr_hides_agent_env_values(tmp_path: Path) -> None:
    path = tmp_path / "buzz.toml"
    path.write_text('[agent]\ncommand = "goose"\nenv = { OPENAI_API_KEY = "sk-live-123456" }\n')
    config = load_config_file(path)
    for text in (repr(config.agent), str(config.agent)):
        assert "sk-live-123456" not in text and "OPENAI_API_KEY" in text
    assert "sk-live" not in repr(AgentSection(env={"X": "sk-live-9"}))


# --- the diagnostics file is bounded ---------------------------------------------------------


def test_the_diagnostics_file_rotates_at_its_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "state" / "diagnostics.jsonl"

    def clock() -> datetime:
        return datetime(2026, 12, 3, tzinfo=UTC)

    with DiagnosticsFeed(path, clock=clock, max_bytes=4096) as feed:
        for i in range(500):
            feed.event_rejected("not from the owner", event_id=f"{i:064x}")
    rotated = path.with_name(path.name + ".1")
    assert path.stat().st_size < 4096 + 512 and rotated.stat().st_size < 4096 + 512
    seqs = [json.loads(line)["seq"] for f in (rotated, path) for line in f.read_text().splitlines()]
    assert seqs == list(range(seqs[0], 501))  # monotonic across the rotation, ending at 500
    with DiagnosticsFeed(path, clock=clock, max_bytes=4096) as again:  # a restart goes on
        assert again.event_rejected("x").seq == 501
    for f in (path, rotated):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


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
        [sys.executable, "-m", "nostr_buzz", "run", "--relay", dead_relay()],
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


def test_state_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with Outbox.in_state_dir(state) as outbox:
        assert outbox.path.exists()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for f in state.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f
    # an existing state directory and file left readable by others are narrowed again
    state.chmod(0o755)
    (state / OUTBOX_FILE).chmod(0o644)
    with Outbox.in_state_dir(state):
        pass
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / OUTBOX_FILE).stat().st_mode) == 0o600


# --- the agent never gets the bot's key ------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[agent]\npass_env = ["BUZZ_PRIVATE_KEY"]\n', "BUZZ_PRIVATE_KEY"),
        ('key_env = "BOT_KEY"\n[agent]\npass_env = ["PATH", "BOT_KEY"]\n', "BOT_KEY"),
        (f'[agent]\nenv = {{ K = "{SECRET.bech32}" }}\n', "looks like a secret key"),
        ('[agent]\nuser = "root"\n', "other than root"),
        ('[agent]\nuser = " bob"\n', "OS user"),
        (f'[subscriptions]\nchannels = ["{SECRET.bech32}"]\n', "expected a channel id"),
    ],
)
def test_the_config_never_hands_the_bots_key_to_the_agent(
    tmp_path: Path, toml: str, message: str
) -> None:
    path = tmp_path / "buzz.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=message) as info:
        load_config_file(path)
    assert not leaked(str(info.value), SECRET)


def test_buzz_run_says_when_the_agent_can_read_the_bots_key(tmp_path: Path) -> None:
    key = tmp_path / "agent.nsec"
    key.write_text(SECRET.bech32 + "\n")
    key.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    for user_line, warned in (("", True), ('user = "nobody"\n', False)):
        (tmp_path / "buzz.toml").write_text(
            f'key_file = "agent.nsec"\nowner = "{OTHER.public_key.bech32}"\n'
            f'relays = ["{dead_relay()}"]\nstate_dir = "state"\n'
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


def test_one_redaction_rule_hides_a_secret_key_anywhere_in_the_text() -> None:
    from nostr_buzz.errors import SECRET_HINT, describe_input, looks_secret, redact

    nsec = "nsec1" + "q" * 58
    assert looks_secret(nsec) and looks_secret(f"wss://relay.example/{nsec.upper()}")
    assert not looks_secret("npub1" + "q" * 58)
    assert describe_input(f"wss://x/{nsec}") == SECRET_HINT
    assert describe_input("a" * 90) == repr("a" * 80 + "…")
    assert describe_input("ab" * 16) == repr("ab" * 16)
    assert describe_input("ab" * 16, hex_may_be_secret=True) == SECRET_HINT
    assert redact(f"bad value {nsec} and {nsec.upper()}.") == (
        f"bad value {SECRET_HINT} and {SECRET_HINT}."
    )
