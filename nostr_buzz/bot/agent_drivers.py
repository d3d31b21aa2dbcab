"""The bot's agent driver (:class:`~.supervisor.AgentSupervisor` holds it): an ACP agent's
process (the ``acp`` extra imported only for one) or an in-process agent (a Python object), both
on the bot's clock and timeouts; the metric's ``harness`` name; and the record of the agent's
process group in the state directory.

On start, a process group that a previous run left behind when it was killed outright is
ended first (:mod:`nostr_buzz.io.agent_group`); each agent start records its group, and a
graceful close removes the record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from nostr_buzz.agent import AgentFunction, AgentTool, InProcessAgent
from nostr_buzz.errors import ConfigError
from nostr_buzz.io.agent_group import (
    GroupRecord,
    clear_record,
    end_orphan_group,
    read_record,
    write_record,
)
from nostr_buzz.io.diagnostics import DiagnosticCallback, DiagnosticsFeed
from nostr_buzz.io.inprocess import InProcessDriver

from .config import PluginConfig

if TYPE_CHECKING:  # the acp extra: imported only for an ACP agent (acp_driver)
    from nostr_buzz.acp.permission import PermissionPolicy
    from nostr_buzz.io.agent_driver import AgentDriver

__all__ = ["AGENT_LOG", "AgentGroup", "acp_driver", "harness_name", "inprocess_driver"]

AGENT_LOG: Final = "agent.log"
_KNOWN_HARNESSES: Final = ("goose", "codex", "claude")


def harness_name(command: str | None, args: Sequence[str], agent_name: str | None) -> str:
    """The metric's ``harness``: goose/codex/claude when the command, its arguments or the
    agent's name say so, else the agent's reported name, else the command's file name."""
    command = command or ""
    words = " ".join([command, *args, agent_name or ""]).lower()
    for known in _KNOWN_HARNESSES:
        if known in words:
            return known
    if agent_name:
        return agent_name
    return Path(command).name or command


def _utc(clock: Callable[[], float]) -> Callable[[], datetime]:
    """The bot's clock as the driver reads it: one clock for the metric's ``startedAt`` (taken
    by the bot) and its ``timestamp`` (the driver's)."""
    return lambda: datetime.fromtimestamp(clock(), UTC)


def inprocess_driver(
    agent: InProcessAgent | AgentFunction,
    config: PluginConfig,
    clock: Callable[[], float],
    *,
    on_diagnostic: DiagnosticCallback,
    channel_of: Callable[[str], str | None],
    tools_of: Callable[[str], tuple[AgentTool, ...]],
) -> InProcessDriver:
    """The driver of a Python object instead of the ACP subprocess; ``channel_of`` and
    ``tools_of``: a session's channel and its tools, by session id."""
    return InProcessDriver(
        agent,
        idle_timeout=config.idle_timeout,
        hard_timeout=config.hard_timeout,
        on_diagnostic=on_diagnostic,
        clock=_utc(clock),
        channel_of=channel_of,
        max_reply_bytes=config.max_reply_bytes,
        tools_of=tools_of,
    )


def acp_driver(
    config: PluginConfig,
    clock: Callable[[], float],
    *,
    on_diagnostic: DiagnosticCallback,
    permission: PermissionPolicy | None,
    on_spawn: Callable[[GroupRecord], None],
) -> AgentDriver:
    """The ACP agent's driver (``permission`` None: every request rejected); the ``acp`` extra
    is imported only here."""
    if config.agent_command is None:
        raise ConfigError(
            "no agent: give PluginConfig agent_command (an ACP agent) or agent_module, or "
            "an in-process agent as BuzzPlugin(config, agent=…)"
        )
    try:
        from nostr_buzz.io.agent_driver import AgentDriver, reject_always
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"an ACP agent needs the acp extra (pip install 'nostr-buzz[acp]'): {exc}"
        ) from None
    return AgentDriver(
        config.agent_command,
        config.agent_args,
        env_names=config.agent_pass_env,
        env=config.agent_env,
        cwd=config.agent_cwd,
        user=config.agent_user,
        log_path=config.state_dir / AGENT_LOG,
        idle_timeout=config.idle_timeout,
        hard_timeout=config.hard_timeout,
        on_diagnostic=on_diagnostic,
        permission=permission if permission is not None else reject_always,
        on_spawn=on_spawn,
        max_reply_bytes=config.max_reply_bytes,
        clock=_utc(clock),
    )


class AgentGroup:
    """The record of this bot's agent process group in ``state_dir`` (see the module
    docstring); what it does is said on ``diagnostics``."""

    def __init__(self, state_dir: Path, diagnostics: DiagnosticsFeed) -> None:
        self.state_dir = state_dir
        self._diagnostics = diagnostics
        self._recorded = False  # an agent group of this run is recorded in the state directory

    def remember(self, record: GroupRecord) -> None:
        """An agent started (the driver's ``on_spawn``): its group is recorded."""
        write_record(self.state_dir, record)
        self._recorded = True

    async def end_orphans(self) -> None:
        """End the agent group a previous run of this bot left behind (it was killed outright),
        if its processes still carry that run's token; say what was done."""
        record = read_record(self.state_dir)
        if record is None:
            return
        sweep = await end_orphan_group(record)
        if sweep.outcome == "killed":
            self._diagnostics.emit("agent_group_ended", payload=sweep.payload())
        elif sweep.outcome != "none":
            self._diagnostics.emit("agent_group_spared", payload=sweep.payload())
        clear_record(self.state_dir)

    def closed(self) -> None:
        """The agent was closed gracefully, its group ended with it: the record goes."""
        if self._recorded:
            clear_record(self.state_dir)
