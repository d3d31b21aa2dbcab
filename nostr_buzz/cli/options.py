"""The options ``buzz`` commands share, declared once (docs/cli.md describes each).

Every value names a real placeholder (``URL``, ``SECONDS``, ``KEY``…) and an option whose default
is "none" shows no default: :func:`option` and :func:`argument` carry that convention.  The
options of a command that talks to relays reach it as one parameter (:mod:`nostr_buzz.cli.access`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Final

import typer


def option(*names: str, metavar: str, help: str, **more: Any) -> Any:
    """An option with a placeholder and no default shown (its default says "not given")."""
    return typer.Option(*names, metavar=metavar, help=help, show_default=False, **more)


def argument(metavar: str, help: str) -> Any:
    """An argument with a placeholder and no default shown."""
    return typer.Argument(metavar=metavar, help=help, show_default=False)


MAX_TIMEOUT = 86_400.0
DEFAULT_TIMEOUT = 10.0

RelayOption = Annotated[
    list[str] | None,
    option(
        "--relay",
        metavar="URL",
        help="Relay URL (ws:// or wss://); repeat for more. Else $BUZZ_RELAYS, else buzz.toml.",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        min=0.1,
        # Finite, so that every wait has a bound (docs/cli.md): "inf" would let a tarpit hang us.
        max=MAX_TIMEOUT,
        help="Seconds allowed per relay for connecting plus answering.",
    ),
]
ConfigOption = Annotated[
    Path | None,
    option(
        "--config",
        metavar="FILE",
        help="Configuration file (default: $BUZZ_CONFIG, else ./buzz.toml when present).",
        dir_okay=False,
    ),
]
KeyOption = Annotated[
    str | None,
    option(
        "--key",
        metavar="KEY",
        help="Secret key (64-hex or nsec). Else $BUZZ_PRIVATE_KEY, else buzz.toml.",
    ),
]
#: What ``--bunker`` says in every command's help.
BUNKER_HELP: Final = (
    "The key in a NIP-46 bunker (bunker://…) instead of --key. It holds a secret: prefer "
    "$BUZZ_BUNKER or buzz.toml ([signer] bunker), since a command line is readable by every "
    "user (/proc/PID/cmdline)."
)
BunkerOption = Annotated[str | None, option("--bunker", metavar="URI", help=BUNKER_HELP)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
#: ``--json`` beside a ``--format`` that offers json.
JsonFormatOption = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
ChannelOption = Annotated[
    str,
    typer.Option(
        "--channel", metavar="CHANNEL", help="Channel id (the h tag): 1-128 of A-Z a-z 0-9 _ -."
    ),
]


def kind_option(help: str) -> Any:
    """``-k``/``--kind``: an event kind, 0 to 65535 (NIP-01)."""
    return option("-k", "--kind", metavar="KIND", min=0, max=65535, help=help)


def time_option(name: str, help: str) -> Any:
    """An option that takes a TIME: unix seconds, a date or an RFC 3339 date-time."""
    return option(name, metavar="TIME", help=help)


def format_option(choices: str, help: str) -> Any:
    """``--format`` with its ``choices`` (``[table|json]``…), given in any case; no default
    shown (the help names it)."""
    return option("--format", metavar=choices, help=help, case_sensitive=False)


def agent_option(help: str) -> Any:
    """``--agent "CMD ARGS"``: an ACP agent command and its arguments in one go
    (:func:`~nostr_buzz.cli.common.command_words` splits it)."""
    return option("--agent", metavar='"CMD ARGS"', help=help)


def pass_env_option(help: str) -> Any:
    """``--pass-env NAME``, repeatable: one more environment variable for the agent."""
    return option("--pass-env", metavar="NAME", help=help)
