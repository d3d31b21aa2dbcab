"""Start the agent as another OS user: ``python -I -S …/run_as.py USER [--cwd DIR] -- COMMAND…``.

The ACP driver puts this launcher in front of the agent's command when ``[agent] user`` is set.
It drops every privilege of the bot's user — supplementary groups, group, user, in that order —
to ``USER`` and its primary group, only then enters the agent's working directory ``DIR``,
sets ``HOME``, ``USER`` and ``LOGNAME`` to that user's (the rest of the environment,
``BUZZ_AGENT_TOKEN`` included, is kept), and replaces itself with the agent (same process id,
same stdio), so the agent can read neither the bot's key file, nor its state files, nor
``/proc/<bot pid>/environ``.

The launcher starts with the bot's privileges (root), so nothing the agent can write may run in
it: the driver runs this file by its absolute path with the base interpreter in isolated mode
without ``site`` (``-I -S``: no working directory, script directory, ``PYTHON*`` variable,
site-packages or ``.pth`` file on the import path), the process starts in ``/`` and this file
imports the standard library only.  Before each spawn, :func:`launcher_argv` refuses (an
:class:`~nostr_buzz.errors.AgentError` saying which path and the fix) when the agent user could
write this file, the interpreter, the standard library the launcher imports, or a directory
above any of them.

Switching users needs the privilege to do so: ``buzz run`` started as root (it keeps root only
for itself and its relays; the agent never has it).  Without that privilege the launcher exits
with status 126 and says why on stderr, which the driver reports as an agent start failure.
"""

from __future__ import annotations

import os
import pwd
import sys

__all__ = ["CANNOT_SWITCH", "LAUNCHER", "launcher_argv", "main", "writable_code"]

#: The exit status of a launcher that could not become the user (as a shell's "cannot execute").
CANNOT_SWITCH = 126
#: This file, run by path (never ``-m``, which would put the working directory on the path).
LAUNCHER = os.path.abspath(__file__)
#: Standard-library packages an ``-I -S`` interpreter imports at start (encodings) besides the
#: top-level modules (os, stat, codecs, io, …); their directories are checked with their files.
_STARTUP_PACKAGES = ("encodings",)


def launcher_argv(
    user: str, command: str, args: list[str] | tuple[str, ...], cwd: str | None
) -> tuple[str, list[str]]:
    """(program, arguments) that run ``command args`` as ``user`` in ``cwd`` (``None``: this
    process's working directory) through this launcher; spawn them in ``/``.

    Raises :class:`~nostr_buzz.errors.AgentError` when ``user`` does not exist or could write
    code the launcher runs with the bot's privileges (see :func:`writable_code`)."""
    from nostr_buzz.errors import AgentError  # here: this file runs with the stdlib alone

    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise AgentError(
            f"[agent] user: no OS user named {user!r}; create it or fix the name"
        ) from None
    interpreter = _interpreter()
    unsafe = writable_code(entry, interpreter)
    if unsafe is not None:
        raise AgentError(
            f"refusing to start the agent as {user!r}: it could write {unsafe}, which the "
            f"launcher runs as {_me()} before switching users; make it (and every directory "
            f"above it) owned by root and not writable by group or others, e.g. "
            f"chown root {unsafe} && chmod go-w {unsafe}, or install nostr-buzz where "
            f"{user!r} cannot write"
        )
    where = ["--cwd", os.path.abspath(cwd if cwd is not None else os.getcwd())]
    return interpreter, ["-I", "-S", LAUNCHER, user, *where, "--", command, *args]


def _me() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # pragma: no cover - a uid without a name
        return f"uid {os.geteuid()}"


def _interpreter() -> str:
    """The base interpreter (not a virtualenv's, whose ``pyvenv.cfg`` would choose the stdlib)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


def _groups_of(entry: pwd.struct_passwd) -> set[int]:
    import grp

    return {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem}


def writable_code(entry: pwd.struct_passwd, interpreter: str) -> str | None:
    """The first path of the launcher's code that the user ``entry`` could change, or ``None``.

    Checked: this file, ``interpreter``, the shared ``libpython`` next to it, the standard
    library directories an ``-I -S`` interpreter imports from (with their files and
    ``__pycache__``), and every directory above any of them up to ``/`` — both as written and
    with symlinks resolved.  A directory the user may write but that is sticky (``/tmp``) is
    safe when the user owns neither it nor the entry below it.  POSIX ACLs are not read."""
    import sysconfig

    from nostr_buzz.io.filemodes import unsafe_path  # here: this file runs with the stdlib alone

    uid, gids = entry.pw_uid, _groups_of(entry)
    stdlib = sysconfig.get_path("stdlib")
    dirs = [stdlib, os.path.join(stdlib, "lib-dynload"), sysconfig.get_path("platstdlib")]
    dirs += [os.path.join(stdlib, name) for name in _STARTUP_PACKAGES]
    dirs += [os.path.join(d, "__pycache__") for d in list(dirs)]
    files = [LAUNCHER, interpreter]
    libpython = sysconfig.get_config_var("LDLIBRARY")
    libdir = sysconfig.get_config_var("LIBDIR")
    if isinstance(libpython, str) and isinstance(libdir, str):
        files.append(os.path.join(libdir, libpython))
    for directory in dirs:
        try:
            with os.scandir(directory) as entries:
                files += [e.path for e in entries if not e.is_dir(follow_symlinks=False)]
        except OSError:
            continue  # absent: nothing is imported from it
        files.append(directory)
    for path in dict.fromkeys(files):
        for candidate in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            unsafe = unsafe_path(candidate, uid.__eq__, gids.__contains__)
            if unsafe is not None:
                return unsafe
    return None


def _fail(message: str) -> int:
    print(f"buzz: cannot start the agent as another user: {message}", file=sys.stderr, flush=True)
    return CANNOT_SWITCH


def main(argv: list[str]) -> int:
    cwd = None
    if len(argv) >= 3 and argv[1] == "--cwd":
        cwd, argv = argv[2], [argv[0], *argv[3:]]
    if len(argv) < 3 or argv[1] != "--":
        return _fail("usage: python -I -S run_as.py USER [--cwd DIR] -- COMMAND [ARGS…]")
    name, command = argv[0], list(argv[2:])
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return _fail(f"no OS user named {name!r}")
    if entry.pw_uid == 0:
        return _fail("[agent] user must not be root")
    try:
        os.setgroups([])
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)
    except PermissionError:
        return _fail(
            f"switching to {name!r} needs buzz run to start as root (it drops to {name!r} "
            "for the agent only)"
        )
    if os.getuid() != entry.pw_uid or os.geteuid() != entry.pw_uid:  # never run half-dropped
        return _fail("the user switch did not take effect")
    if os.getgroups() not in ([], [entry.pw_gid]) or os.getegid() != entry.pw_gid:
        return _fail("the group switch did not take effect")
    if cwd is not None:
        try:
            os.chdir(cwd)  # only now: the agent's directory is entered with its rights
        except OSError as exc:
            return _fail(
                f"cannot enter the working directory {cwd!r}: {exc.strerror or exc}; set "
                f"[agent] cwd to a directory {name!r} may enter"
            )
    os.environ.update(HOME=entry.pw_dir, USER=name, LOGNAME=name)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        return _fail(f"{command[0]!r}: {exc.strerror or exc}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
