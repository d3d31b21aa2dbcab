"""``buzz demo``: the whole pipeline on loopback in one command (docs/bot.md, "`buzz demo`").

No configuration is read: the demo makes its own relay, keys and state directory and removes
them afterwards.  The report goes to stdout; a failed step exits 1 with the reason on stderr,
the agent's error when it had one, and the agent log's last lines (the log itself is kept).
"""

from __future__ import annotations

from typing import Annotated

from nostr_buzz.cli.common import command_words, run
from nostr_buzz.cli.demo_script import DemoFailure, run_demo
from nostr_buzz.cli.options import agent_option, pass_env_option
from nostr_buzz.cli.output import CliFailure, ExitCode, bad_input, write_stdout
from nostr_buzz.config import parse_env_names
from nostr_buzz.errors import ConfigError

_AGENT_HELP = 'An ACP agent command to use instead of the bundled demo agent, e.g. "goose acp".'
_PASS_ENV_HELP = (
    "Also pass this environment variable to the agent (repeatable); API keys, base URLs, "
    "proxies and CA settings of the usual providers are passed already."
)


def demo_command(
    agent: Annotated[str | None, agent_option(_AGENT_HELP)] = None,
    pass_env: Annotated[list[str] | None, pass_env_option(_PASS_ENV_HELP)] = None,
) -> None:
    """Run the whole pipeline on an embedded relay: mention, burst, second person, steer,
    manifests, metrics read back by the owner, and one raw message."""
    command: list[str] | None = None
    if agent is not None:
        command = command_words(agent, option="--agent", empty="the agent command is empty")
    # Collected and written at the end: on failure stdout stays empty (docs/cli.md).
    report: list[str] = []
    with bad_input(ConfigError):
        names = parse_env_names(pass_env or (), source="--pass-env")
    try:
        run(run_demo(report.append, command, names))
    except DemoFailure as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"demo failed: {exc}") from None
    write_stdout("".join(report))
