"""``buzz keys generate`` / ``buzz keys show``: the only printed secret is the one asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nostr_buzz.keys import PublicKey, SecretKey
from tests.support.cli import buzz

NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
SECRET_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
PUB_HEX = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"

pytestmark = pytest.mark.usefixtures("no_ambient_config")


def test_generate_prints_a_consistent_new_pair(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = buzz(capsys, "keys", "generate")
    assert code == 0
    lines = dict(line.split(": ", 1) for line in out.splitlines())
    assert set(lines) == {"nsec", "npub", "hex"}
    secret = SecretKey.from_str(lines["nsec"])
    assert secret.public_key == PublicKey.from_str(lines["npub"])
    assert secret.public_key.hex == lines["hex"]
    assert lines["nsec"] not in err
    code, out2, _ = buzz(capsys, "keys", "generate")
    assert out2 != out  # a fresh key every time


def test_generate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = buzz(capsys, "keys", "generate", "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"nsec", "npub", "hex"}
    public = SecretKey.from_str(doc["nsec"]).public_key
    assert (public.bech32, public.hex) == (doc["npub"], doc["hex"])


def test_show_from_flag_env_and_file_never_prints_the_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    expected = f"npub: {NPUB}\nhex: {PUB_HEX}\n"
    other = SecretKey.generate()
    # File only: key_file relative to the config file.
    (tmp_path / "agent.key").write_text(NSEC + "\n", encoding="utf-8")
    (tmp_path / "agent.key").chmod(0o600)
    (tmp_path / "buzz.toml").write_text('key_file = "agent.key"\n', encoding="utf-8")
    results = [buzz(capsys, "keys", "show")]
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", SECRET_HEX.upper())
    (tmp_path / "buzz.toml").write_text(f'secret_key = "{other.hex}"\n', encoding="utf-8")
    (tmp_path / "buzz.toml").chmod(0o600)  # it holds secret_key inline
    results.append(buzz(capsys, "keys", "show"))  # env beats file
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", other.hex)
    results.append(buzz(capsys, "keys", "show", "--key", NSEC))  # flag beats env
    for code, out, err in results:
        assert (code, out) == (0, expected), err
        assert NSEC not in out + err and SECRET_HEX not in (out + err).lower()
    code, out, _ = buzz(capsys, "keys", "show", "--key", NSEC, "--json")
    assert json.loads(out) == {"npub": NPUB, "hex": PUB_HEX}


def test_show_without_a_key_names_the_sources(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = buzz(capsys, "keys", "show")
    assert (code, out) == (1, "")
    for source in ("--key", "BUZZ_PRIVATE_KEY", "buzz.toml"):
        assert source in err


@pytest.mark.parametrize(
    "bad",
    [
        NSEC[:-1] + "6",  # checksum
        SECRET_HEX[:-2],
        NPUB,  # a public key where a secret is expected
        "ff" * 32,  # out of range for secp256k1
    ],
)
def test_show_bad_key_exits_1_without_repeating_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    for argv in (["--key", bad], []):
        if not argv:
            monkeypatch.setenv("BUZZ_PRIVATE_KEY", bad)
        code, out, err = buzz(capsys, "keys", "show", *argv)
        assert (code, out) == (1, "")
        assert bad not in err and bad[:20] not in err


def test_keys_subprocess() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env["BUZZ_PRIVATE_KEY"] = NSEC
    done = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "keys", "show"],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, f"npub: {NPUB}\nhex: {PUB_HEX}\n".encode())
    done = subprocess.run(
        [sys.executable, "-m", "nostr_buzz", "keys", "--help"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert b"generate" in done.stdout
