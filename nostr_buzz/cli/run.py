"""``buzz run``: the agent bot (spec 06, "The bot plugin").

Configuration comes from flags, then ``BUZZ_*`` environment, then ``buzz.toml``.  The bot runs
until SIGINT or SIGTERM (or the owner's ``!shutdown``) and exits 0 after a clean stop; bad
configuration exits 1, an agent that cannot be started exits 1 with the reason, and losing
every read relay for good (each gave up reconnecting) exits 2.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer

from nostr_buzz.bot import BuzzPlugin, PluginConfig, parse_shard
from nostr_buzz.cli.common import ConfigOption, KeyOption, RelayOption, progress, run, sources
from nostr_buzz.cli.output import CliFailure, ExitCode, note
from nostr_buzz.errors import AgentError, ConfigError, RelayError


async def serve(plugin: BuzzPlugin) -> None:
    """Run ``plugin`` until SIGINT/SIGTERM or ``!shutdown``; signals stop it cleanly."""
    loop = asyncio.get_running_loop()
    handled = (signal.SIGINT, signal.SIGTERM)
    for signum in handled:
        loop.add_signal_handler(signum, plugin.stop)
    try:
        await plugin.run()
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)


def run_command(
    config: ConfigOption = None,
    shard: Annotated[
        str | None,
        typer.Option(
            "--shard",
            help="Serve only destinations whose stable hash mod N is I (I/N, e.g. 0/2).",
            show_default=False,
        ),
    ] = None,
    relay: RelayOption = None,
    key: KeyOption = None,
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            help="The owner's public key (hex or npub). Else $BUZZ_OWNER, else buzz.toml.",
            show_default=False,
        ),
    ] = None,
    state_dir: Annotated[
        str | None,
        typer.Option(
            "--state-dir",
            help="Where the state database, diagnostics and agent log live (else buzz.toml).",
            show_default=False,
        ),
    ] = None,
    clock_skew: Annotated[
        float | None,
        typer.Option(
            "--clock-skew",
            help="Seconds replay reaches back before the last handled message, for senders "
            "whose clocks run behind. Else $BUZZ_CLOCK_SKEW, else buzz.toml [subscriptions] "
            "clock_skew, else 600.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the agent bot: answer mentions with the configured ACP agent until stopped."""
    try:
        parsed_shard = parse_shard(shard) if shard is not None else None
        config_sources = sources(config)
        settings = PluginConfig.from_sources(
            config_sources,
            key=key,
            owner=owner,
            relays=relay or (),
            shard=parsed_shard,
            state_dir=state_dir,
            clock_skew=clock_skew,
        )
    except ConfigError as exc:
        raise CliFailure(ExitCode.BAD_INPUT, str(exc)) from None

    if config_sources.file.agent.user is None:
        note(
            "buzz: warning: the agent runs as this same OS user and can read the bot's key and "
            'state; set [agent] user = "NAME" to run it as another user'
        )

    async def body() -> None:
        plugin = BuzzPlugin(settings)
        progress(
            f"buzz: agent {settings.agent_secret.public_key.bech32} serving "
            f"{len(settings.read_relays)} relay(s); state in {settings.state_dir}"
        )
        await serve(plugin)

    try:
        run(body())
    except AgentError as exc:
        raise CliFailure(ExitCode.BAD_INPUT, f"the agent could not be started: {exc}") from None
    except RelayError as exc:
        raise CliFailure(ExitCode.NETWORK, str(exc)) from None
    note("buzz: stopped")
