"""Start the agent as another OS user: ``python -m nostr_buzz.io.run_as USER -- COMMAND ARGS…``.

The ACP driver puts this launcher in front of the agent's command when ``[agent] user`` is set.
It drops every privilege of the bot's user — supplementary groups, group, user, in that order —
to ``USER`` and its primary group, sets ``HOME``, ``USER`` and ``LOGNAME`` to that user's (the
rest of the environment, ``BUZZ_AGENT_TOKEN`` included, is kept), and replaces itself with
the agent (same process id, same stdio), so the agent can read neither the bot's key file, nor
its state files, nor ``/proc/<bot pid>/environ``.

Switching users needs the privilege to do so: ``buzz run`` started as root (it keeps root only
for itself and its relays; the agent never has it).  Without that privilege the launcher exits
with status 126 and says why on stderr, which the driver reports as an agent start failure.
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Sequence
from typing import Final

__all__ = ["launcher_argv", "main"]

#: The exit status of a launcher that could not become the user (as a shell's "cannot execute").
CANNOT_SWITCH: Final = 126


def launcher_argv(user: str, command: str, args: Sequence[str]) -> tuple[str, list[str]]:
    """(program, arguments) that run ``command args`` as ``user`` through this launcher."""
    return sys.executable, ["-m", "nostr_buzz.io.run_as", user, "--", command, *args]


def _fail(message: str) -> int:
    print(f"buzz: cannot start the agent as another user: {message}", file=sys.stderr, flush=True)
    return CANNOT_SWITCH


def main(argv: Sequence[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        return _fail("usage: python -m nostr_buzz.io.run_as USER -- COMMAND [ARGS…]")
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
    os.environ.update(HOME=entry.pw_dir, USER=name, LOGNAME=name)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        return _fail(f"{command[0]!r}: {exc.strerror or exc}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
