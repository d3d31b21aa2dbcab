"""Private files: only the bot's own user may read the state directory, its files, the key file.

An agent (or anyone else on the machine) running as another OS user must not read what the
bot keeps: the state directory is created ``0700`` and its files ``0600`` whatever the umask,
and widened modes of existing ones are narrowed again.  A key file that group or others may
read or write is refused with the command that fixes it, as ssh refuses a private key file;
so is a config file that holds ``secret_key`` inline.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Final

from nostr_buzz.errors import ConfigError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "check_key_file",
    "check_secret_mode",
    "make_private",
    "open_private",
    "private_dir",
]

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (and missing parents) and leave the directory itself at ``0700``."""
    directory = Path(path)
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if stat.S_IMODE(directory.stat().st_mode) != DIR_MODE:
        directory.chmod(DIR_MODE)
    return directory


def make_private(path: str | Path) -> None:
    """Create ``path`` as an empty ``0600`` file if missing; narrow it to ``0600`` if wider."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, FILE_MODE)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def open_private(path: str | Path, *, append: bool = True) -> IO[bytes]:
    """Open ``path`` for binary appending (or writing), created ``0600`` in a ``0700`` parent."""
    target = Path(path)
    private_dir(target.parent)
    make_private(target)
    return open(target, "ab" if append else "wb")  # the caller closes it


def check_secret_mode(mode: int, path: str | Path, *, subject: str) -> None:
    """Refuse a file holding a secret that group or others may read or write (mode & 0o077).

    ``subject`` names what is exposed and ends the sentence's subject, e.g. ``"x: key_file y"``.
    """
    mode = stat.S_IMODE(mode)
    if mode & 0o077:
        raise ConfigError(
            f"{subject} is accessible by other users (mode {mode:04o}): "
            f"refusing to use it; run: chmod 600 {path}"
        )


def check_key_file(path: str | Path, *, where: str) -> None:
    """Refuse a key file that group or others may read or write (mode & 0o077)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # reading it reports the problem
    check_secret_mode(mode, path, subject=f"{where}: key_file {path}")
