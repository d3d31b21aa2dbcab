"""The NIP-46 client key a bot keeps in its state directory (Nip46Signer itself, against real
bunkers: tests/e2e/io/test_nip46.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from nostr_buzz.errors import ConfigError
from nostr_buzz.io.nip46 import CLIENT_KEY_FILE, Nip46Signer, client_key_in
from nostr_buzz.keys import SecretKey


def test_the_client_key_is_made_once_private_and_kept(tmp_path: Path, common_umask: None) -> None:
    state = tmp_path / "state"
    key = client_key_in(state)
    path = state / CLIENT_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert client_key_in(state) == key


def test_a_damaged_or_linked_client_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / CLIENT_KEY_FILE).write_text("not a key")
    with pytest.raises(ConfigError, match="does not hold a NIP-46 client key: remove it"):
        client_key_in(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "k").write_text(SecretKey.generate().hex)
    (elsewhere / CLIENT_KEY_FILE).symlink_to(elsewhere / "k")
    with pytest.raises(ConfigError, match="symbolic link"):
        client_key_in(elsewhere)


def test_a_signer_shows_no_secret_and_has_no_user_key_before_it_connects() -> None:
    secret = "the-connection-secret"
    remote = SecretKey.generate().public_key.hex
    signer = Nip46Signer(f"bunker://{remote}?relay=wss://r.example&secret={secret}")
    assert secret not in repr(signer) and "not connected" in repr(signer)
    with pytest.raises(Exception, match="not connected yet"):
        _ = signer.public_key
