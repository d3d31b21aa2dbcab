"""``buzz demo``: the whole pipeline on loopback in one command (docs/bot.md, "`buzz demo`").

No configuration is read: the demo makes its own relay, keys and state directory and removes
them afterwards.  The report goes to stdout; a failed step exits 1 with the reason on stderr,
the agent's error when it had one, and the agent log's last lines (the log itself is kept).
"""

from __future__ import annotations

import shlex
from typing import Annotated

import typer

from nostr_buzz.cli.common import run
from nostr_buzz.cli.demo_script import DemoFailure, run_demo
from nostr_buzz.cli.output import CliFailure, ExitCode, write_stdout
from nostr_buzz.config import parse_env_names
from nostr_buzz.errors import ConfigError


def demo_command(
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar='"CMD ARGS"',
            help='An ACP agent command to use instead of the bundled demo agent, e.g. "goose acp".',
            show_default=False,
        ),
    ] = None,
    pass_env: Annotated[
        list[str] | None,
        typer.Option(
            "--pass-env",
            metavar="NAME",
            help="Also pass this environment variable to the agent (repeatable); API keys, "
            "base URLs, proxies and CA settings of the usual providers are passed already.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the whole pipeline on an embedded relay: mention, burst, second person, steer,
    manifests, metrics read back by the owner, and one raw message."""
    command: list[str] | None = None
    if agent is not None:
        try:
            command = shlex.split(agent)
        except ValueError as exc:
            raise CliFailure(ExitCode.BAD_INPUT, f"--agent: {exc}") from None
        if not command:
            raise CliFailure(ExitCode.BAD_INPUT, "--agent: the agent command is empty")
    # Collected and written at the end: on failure stdout stays empty (docs/cli.md).
    report: list[str] = []
    try:
        names = parse_env_names(pass_env or (), source="--pass-env")
    except ConfigError as exc:
        raise CliFailure(ExitCode.BAD_INPUT, str(exc)) from None
    try:
        run(run_demo(report.append, command, names))
    except DemoFailure as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"demo failed: {exc}") from None
    write_stdout("".join(report))
