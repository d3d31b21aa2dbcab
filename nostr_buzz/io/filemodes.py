"""Private files: only the bot's own user may read the state directory, its files, the key file.

An agent (or anyone else on the machine) running as another OS user must not read what the
bot keeps: the state directory is created ``0700`` and its files ``0600`` whatever the umask,
and widened modes of existing ones are narrowed again.  A key file that group or others may
read or write is refused with the command that fixes it, as ssh refuses a private key file;
so is a config file that holds ``secret_key`` inline.

Nor may another user choose where the bot writes, as ssh's ``StrictModes``: a state directory
that is a symbolic link, that another user owns or that group or others may write is refused
(:class:`~nostr_buzz.errors.ConfigError` with the fix), and so is every directory above it up to
``/`` (both as written and with symlinks resolved) that neither the bot's user nor root owns or
that group or others may write — except a sticky one like ``/tmp`` whose entry below is the
bot's or root's.  Files in it are opened without following a symbolic link (``O_NOFOLLOW``)
and must be regular files of the bot's user.  POSIX ACLs are not read.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Final

from nostr_buzz.errors import ConfigError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "check_key_file",
    "check_private_dir",
    "check_secret_mode",
    "make_private",
    "open_private",
    "private_dir",
    "read_private",
    "unsafe_path",
]

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600


def unsafe_path(
    path: str,
    foreign_owner: Callable[[int], bool],
    foreign_group: Callable[[int], bool],
    *,
    below_uid: int | None = None,
) -> str | None:
    """``path`` or the first directory above it up to ``/`` that someone other than the
    trusted users could change, or ``None``; ``path`` absolute, absent ones pass.

    A file or directory is changeable when ``foreign_owner(its uid)``, when others may write
    it, or when its group may and ``foreign_group(its gid)``.  A sticky directory (``/tmp``) is
    safe when neither it nor the entry below it has a foreign owner: nobody else can rename or
    remove that entry.  Symbolic links are not followed (their own directory is checked).
    ``below_uid``: ``path`` is a directory judged as the one holding an entry of that owner
    (one about to be created, or checked on its own), so a sticky ``path`` passes as ``/tmp``
    does."""
    try:
        st = os.lstat(path)
    except OSError:
        return None  # absent: nothing is read from it or written to it
    if below_uid is None:
        if not stat.S_ISLNK(st.st_mode) and _changeable(st, foreign_owner, foreign_group):
            return path
        below_uid, directory = st.st_uid, os.path.dirname(path)
        if directory == path:
            return None
    else:
        directory = path
    while True:
        st = os.lstat(directory)
        if _changeable(st, foreign_owner, foreign_group):
            sticky = bool(st.st_mode & stat.S_ISVTX)
            if not sticky or foreign_owner(st.st_uid) or foreign_owner(below_uid):
                return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        below_uid, directory = st.st_uid, parent


def _changeable(
    st: os.stat_result, foreign_owner: Callable[[int], bool], foreign_group: Callable[[int], bool]
) -> bool:
    if foreign_owner(st.st_uid) or st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and foreign_group(st.st_gid)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _owner_name(uid: int) -> str:
    return f"{_user_name(uid)!r} (uid {uid})"


def _check_parents(directory: Path) -> None:
    """Refuse ``directory`` when a directory above it is another user's to change."""
    me = os.geteuid()

    def foreign(uid: int) -> bool:
        return uid not in (me, 0)

    for candidate in dict.fromkeys((str(directory), os.path.realpath(directory))):
        parent = os.path.dirname(candidate)
        while not os.path.lexists(parent):  # what is missing will be created below the rest
            parent = os.path.dirname(parent)
        # the entry below ``parent`` is the state directory: the bot's own (checked below), or
        # about to be made by it; so a sticky ``parent`` (a state directory in /tmp) passes
        unsafe = unsafe_path(parent, foreign, lambda _gid: True, below_uid=me)
        if unsafe is not None:
            st = os.lstat(unsafe)
            raise ConfigError(
                f"state directory {directory}: {unsafe} above it is owned by "
                f"{_owner_name(st.st_uid)} with mode {stat.S_IMODE(st.st_mode):04o}, so another "
                f"user could replace the bot's state; make it the bot's user's or root's and not "
                f"writable by group or others (chown {_user_name(me)} {unsafe} && "
                f"chmod go-w {unsafe}), or set state_dir elsewhere"
            )


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (and missing parents) and leave the directory itself at ``0700``.

    Refused (:class:`ConfigError` with the fix): a directory above it another user could change
    (see the module docstring), or ``path`` itself a symbolic link, another user's, or writable
    by group or others; :class:`OSError` when it cannot be created or is not a directory."""
    directory = Path(path).absolute()
    _check_parents(directory)
    if not os.path.lexists(directory):  # a dangling symlink is refused below, not created
        directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        _check_parents(directory)  # the directories just created, as they are now
    if _check_dir(directory) != DIR_MODE:
        directory.chmod(DIR_MODE)
    return directory


def check_private_dir(path: str | Path) -> Path:
    """The refusals of :func:`private_dir` for an existing directory, changing nothing (for a
    reader of the bot's state: ``buzz watch``); :class:`FileNotFoundError` when it is absent.
    A mode narrower than writable by group or others passes: the bot narrows it itself."""
    directory = Path(path).absolute()
    if not os.path.lexists(directory):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(directory))
    _check_parents(directory)
    _check_dir(directory)
    return directory


def _check_dir(directory: Path) -> int:
    """Refuse ``directory`` unless it is a directory of this user that group and others may
    not write; its mode."""
    st = os.lstat(directory)
    fix = "remove it or set state_dir to a directory of the bot's own"
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"state directory {directory} is a symbolic link: refusing it; {fix}")
    if not stat.S_ISDIR(st.st_mode):  # as mkdir would say: each caller reports its OSError
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(directory))
    if st.st_uid != os.geteuid():
        raise ConfigError(
            f"state directory {directory} is owned by {_owner_name(st.st_uid)}, not by the bot's "
            f"user {_owner_name(os.geteuid())}: refusing it; {fix}"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise ConfigError(
            f"state directory {directory} may be written by group or others (mode {mode:04o}), "
            f"who could have replaced its files: refusing it; check its files, then run: "
            f"chmod 700 {directory}"
        )
    return mode


def _open_nofollow(path: str | Path, flags: int) -> int:
    """An fd on ``path``, never through a symbolic link; :class:`ConfigError` unless it is a
    regular file of this user (the fd is closed then)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(
                f"{path} is a symbolic link: refusing to follow it out of the state directory; "
                "remove it"
            ) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise ConfigError(
            f"{path} is not a regular file of the bot's user (owner {_owner_name(st.st_uid)}): "
            "refusing it; remove it"
        )
    return fd


def make_private(path: str | Path) -> None:
    """Create ``path`` as an empty ``0600`` file if missing; narrow it to ``0600`` if wider.

    Never through a symbolic link; SQLite's ``-wal`` and ``-shm`` files next to it are checked
    the same way when present (SQLite itself would follow them)."""
    fd = _open_nofollow(path, os.O_CREAT | os.O_RDWR)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    for suffix in ("-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.close(_open_nofollow(f"{path}{suffix}", os.O_RDONLY))


def open_private(path: str | Path, *, append: bool = True) -> IO[bytes]:
    """Open ``path`` for binary appending (or writing), created ``0600`` in a ``0700`` parent,
    never through a symbolic link."""
    target = Path(path)
    private_dir(target.parent)
    flags = os.O_CREAT | os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
    fd = _open_nofollow(target, flags)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, "ab" if append else "wb")  # the caller closes it
    except BaseException:
        os.close(fd)
        raise


def read_private(path: str | Path) -> IO[bytes]:
    """Open ``path`` of the state directory for binary reading, never through a symbolic link
    (:class:`ConfigError`); :class:`OSError` as :func:`open` when it cannot be opened."""
    return os.fdopen(_open_nofollow(path, os.O_RDONLY), "rb")


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
