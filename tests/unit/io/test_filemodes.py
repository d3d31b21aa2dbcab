"""The state directory's checks: what another user could change is found, symlinks refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nostr_buzz.errors import ConfigError
from nostr_buzz.io.filemodes import make_private, open_private, private_dir, unsafe_path


def _nobody(_: int) -> bool:
    return False


def test_the_first_directory_another_user_could_change_is_named(tmp_path: Path) -> None:
    leaf = tmp_path / "a" / "b" / "file"
    leaf.parent.mkdir(parents=True)
    leaf.write_text("x")
    os.chmod(tmp_path / "a", 0o755)
    assert unsafe_path(str(leaf), _nobody, _nobody) is None
    os.chmod(tmp_path / "a", 0o777)  # anyone may rename b away and put their own in its place
    assert unsafe_path(str(leaf), _nobody, _nobody) == str(tmp_path / "a")
    os.chmod(tmp_path / "a", 0o1777)  # sticky: b can only be renamed by its owner
    assert unsafe_path(str(leaf), _nobody, _nobody) is None
    os.chmod(tmp_path / "a", 0o775)  # group-writable: unsafe when that group is foreign
    assert unsafe_path(str(leaf), _nobody, lambda _gid: True) == str(tmp_path / "a")
    assert unsafe_path(str(leaf), _nobody, _nobody) is None
    mine = os.lstat(leaf).st_uid
    assert unsafe_path(str(leaf), mine.__eq__, _nobody) == str(leaf)  # its owner is foreign
    assert unsafe_path(str(tmp_path / "absent"), _nobody, _nobody) is None


def test_a_symlinked_or_shared_state_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (tmp_path / "state").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="is a symbolic link: refusing it"):
        private_dir(tmp_path / "state")
    assert elsewhere.stat().st_mode & 0o777 == 0o755  # not chmodded through the link
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="is a symbolic link: refusing it"):
        private_dir(tmp_path / "dangling")
    assert not (tmp_path / "nowhere").exists()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match=f"run: chmod 700 {shared}"):
        private_dir(shared)
    # A missing state directory below a shared one is refused before anything is created.
    with pytest.raises(ConfigError, match=f"{shared} above it"):
        private_dir(shared / "new" / "state")
    assert not (shared / "new").exists()
    wide = tmp_path / "wide"
    wide.mkdir()
    wide.chmod(0o755)  # readable, not writable: narrowed, not refused
    assert private_dir(wide) == wide and wide.stat().st_mode & 0o777 == 0o700


def test_a_state_directory_right_in_a_sticky_shared_directory_is_the_bots(tmp_path: Path) -> None:
    """/tmp/buzz-XXXX (tempfile's own): a sticky shared parent lets no one else rename the
    state directory away, so it is accepted, made or existing; without the sticky bit it is
    not."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    assert private_dir(shared / "made") == shared / "made"
    existing = shared / "existing"
    existing.mkdir(mode=0o700)
    assert private_dir(existing) == existing
    assert unsafe_path(str(shared), _nobody, _nobody, below_uid=os.geteuid()) is None
    foreign = os.geteuid() + 1
    assert unsafe_path(str(shared), foreign.__eq__, _nobody, below_uid=foreign) == str(shared)
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match=f"{shared} above it"):
        private_dir(shared / "another")
    with pytest.raises(ConfigError, match=f"{shared} above it"):
        private_dir(existing)


def test_a_state_file_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("someone else's\n")
    target.chmod(0o644)
    state = private_dir(tmp_path / "state")
    for name, open_it in (
        ("db", make_private),
        ("db-wal", lambda _wal: make_private(state / "db")),  # SQLite would follow it
        ("log", open_private),
    ):
        (state / name).symlink_to(target)
        with pytest.raises(ConfigError, match="symbolic link"):
            open_it(state / name)
        (state / name).unlink()
    assert target.read_text() == "someone else's\n" and target.stat().st_mode & 0o777 == 0o644
    with open_private(state / "log") as fh:
        fh.write(b"x")
    assert (state / "log").stat().st_mode & 0o777 == 0o600
