"""Secrets stay secret: never echoed, never accepted in the wrong place, never readable by others
(the cases that reach a relay or start ``buzz run`` are in tests/e2e/cli/test_secrets.py).

- 64 hex characters given anywhere but as an id are never echoed (``buzz keys show <hex>``);
- the config's ``repr`` hides ``[agent] env`` values, and so do the agent driver and its parts;
- the diagnostics file rotates at a size limit;
- the state directory is 0700 and its files 0600, whatever the umask.
"""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nostr_buzz.config import AgentSection, load_config_file
from nostr_buzz.errors import ConfigError
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.outbox import OUTBOX_FILE, Outbox
from nostr_buzz.keys import SecretKey
from tests.support.cli import buzz

SECRET = SecretKey.from_str("7c" * 31 + "7d")


pytestmark = pytest.mark.usefixtures("no_ambient_config", "common_umask")


def leaked(text: str, key: SecretKey) -> bool:
    lowered = text.lower()
    return key.hex in lowered or key.bech32 in lowered or key.hex[:32] in lowered


# --- never echoed, never used in the wrong place -------------------------------------------


def test_keys_show_never_echoes_a_hex_argument(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["keys", "show", SECRET.hex], ["keys", "show", SECRET.hex.upper(), "--json"]):
        code, out, err = buzz(capsys, *argv)
        assert (code, out) == (1, "")
        assert not leaked(err, SECRET), err


def test_config_repr_hides_agent_env_values(tmp_path: Path) -> None:
    path = tmp_path / "buzz.toml"
    path.write_text('[agent]\ncommand = "goose"\nenv = { OPENAI_API_KEY = "sk-live-123456" }\n')
    config = load_config_file(path)
    for text in (repr(config.agent), str(config.agent)):
        assert "sk-live-123456" not in text and "OPENAI_API_KEY" in text
    assert "sk-live" not in repr(AgentSection(env={"X": "sk-live-9"}))


def test_the_agent_driver_shows_no_env_value_and_never_passes_the_bots_key() -> None:
    from nostr_buzz.io.agent_driver import AgentDriver

    env = {"OPENAI_API_KEY": "sk-live-123456", "BUZZ_PRIVATE_KEY": SECRET.hex}
    driver = AgentDriver("goose", ["acp"], env=env)
    spec = driver.agent.spec
    for part in (driver, driver.agent, spec, driver.link, driver.hub, driver.sessions):
        for text in (repr(part), str(part)):
            assert "sk-live" not in text and not leaked(text, SECRET), text
    assert "goose" in repr(spec)  # the command is shown, its environment is not
    assert spec.child_env() == {"OPENAI_API_KEY": "sk-live-123456"}


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
