"""``buzz run``: the agent bot (docs/bot.md).

Every ``buzz.toml`` setting is also a flag and a ``BUZZ_*`` variable (their names come from the
schema, see :data:`nostr_buzz.config.SETTINGS`); flags win over the environment, which wins
over the file.  ``--agent "CMD ARGS"`` gives the agent command and its arguments in one go.

The bot talks on stderr: one line when it starts (the agent's npub, the relays, the agent
command, the gate and the in-flight policy), one line per turn (channel, triggering events,
outcome, tokens, seconds), and a line for agent failures, owner commands and refused replies.
It runs until SIGINT or SIGTERM (or the owner's ``!shutdown``) and exits 0 after a clean stop;
bad configuration exits 1, an agent that cannot be started exits 1 with the reason, and losing
every read relay for good (each gave up reconnecting) exits 2.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import shlex
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, get_args, get_origin

import typer

from nostr_buzz.cli.common import command_words, run, sources
from nostr_buzz.cli.options import ConfigOption, agent_option, option, pass_env_option
from nostr_buzz.cli.output import CliFailure, ExitCode, bad_input, note
from nostr_buzz.config import SETTINGS, SETTINGS_BY_NAME, ConfigSources, Setting, state_directory
from nostr_buzz.errors import AgentError, ConfigError, RelayError
from nostr_buzz.signer import SignerError

if TYPE_CHECKING:
    from nostr_buzz.agent import InProcessAgent
    from nostr_buzz.bot import BuzzPlugin, PluginConfig, Shard
    from nostr_buzz.event import Event
    from nostr_buzz.io.diagnostics import DiagnosticRecord
    from nostr_buzz.nips.nip46 import BunkerUri
    from nostr_buzz.signer import Signer


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


# --- the flags, one per setting ---------------------------------------------------------------

_METAVARS = {
    "secret_key": "KEY",
    "signer.bunker": "URI",
    "key_file": "FILE",
    "key_env": "NAME",
    "owner": "KEY",
    "state_dir": "DIR",
    "agent.command": "CMD",
    "agent.module": "MODULE:ATTR",
    "agent.args": "ARG",
    "agent.env": "NAME=VALUE",
    "agent.pass_env": "NAME",
    "agent.cwd": "DIR",
    "agent.model": "MODEL",
    "subscriptions.channels": "CHANNEL",
    "subscriptions.kinds": "KIND",
    "gate.allowlist": "KEY",
    "gate.agents": "KEY",
    "context.base": "FILE",
    "context.persona": "FILE",
    "context.team_instructions": "FILE",
    "telemetry.endpoint": "URL",
    "telemetry.headers": "NAME=VALUE",
}


#: What a setting's help adds to the rule (flag, variable, file).
_NOTES = {
    "signer.bunker": "The agent's key in a NIP-46 bunker (bunker://…): it holds a secret, so "
    "prefer $BUZZ_BUNKER or buzz.toml, since a command line is readable by every user "
    "(/proc/PID/cmdline).",
    "telemetry.headers": "Credentials of the telemetry back end: prefer $BUZZ_TELEMETRY_HEADERS "
    "or buzz.toml (mode 0600), since a command line is readable by every user.",
}


def _param_name(setting: Setting) -> str:
    return "setting__" + setting.name.replace(".", "__")


def _option(setting: Setting) -> inspect.Parameter:
    """A typer option for one setting: repeatable for lists, --x/--no-x for booleans."""
    base = setting.base
    origin = get_origin(base)
    help_text = f"buzz.toml: {setting.name}; else ${setting.env}."
    if setting.name in _NOTES:
        help_text = f"{_NOTES[setting.name]} {help_text}"
    metavar = _METAVARS.get(setting.name)
    kind: Any
    flags = [setting.flag]
    if origin in (tuple, list, dict):
        element = get_args(base)[0] if origin is not dict else str
        kind = list[int] if _is_int(element) else list[str]
        help_text = "Repeatable. " + help_text
        metavar = metavar or ("URL" if "relay" in setting.name else "VALUE")
    elif base is bool:
        kind = bool
        flags = [f"{setting.flag}/--no-{setting.flag[2:]}"]
    elif get_origin(base) is Literal:
        kind = str
        metavar = "[" + "|".join(map(str, get_args(base))) + "]"
    elif _is_int(base):
        kind, metavar = int, metavar or "N"
    elif base is float:
        kind, metavar = float, metavar or "SECONDS"
    else:
        kind, metavar = str, metavar or "TEXT"
    if setting.default not in (None, (), {}):
        shown = (
            ",".join(map(str, setting.default))
            if isinstance(setting.default, tuple)
            else setting.default
        )
        help_text += f" Default: {str(shown).lower() if isinstance(shown, bool) else shown}."
    option = typer.Option(*flags, metavar=metavar, help=help_text, show_default=False)
    return inspect.Parameter(
        _param_name(setting),
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[kind | None, option],
    )


def _is_int(annotation: Any) -> bool:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation is int


# --- what the bot says on stderr --------------------------------------------------------------


def start_line(settings: PluginConfig, config_file: Path | None) -> str:
    if settings.agent_module is not None or settings.agent_command is None:
        command = f"in-process agent: {settings.agent_module}"
    else:
        command = "agent command: " + shlex.join([settings.agent_command, *settings.agent_args])
    relays = ", ".join(dict.fromkeys([*settings.read_relays, *settings.write_relays]))
    gate = settings.gate + (", mentions required" if settings.mentions_required else "")
    where = f"; config {config_file}" if config_file is not None else ""
    return (
        f"buzz: agent {settings.signer.public_key.bech32} on {relays}; "
        f"{command}; gate: {gate}; in-flight policy: {settings.in_flight}; "
        f"state in {settings.state_dir}{where}"
    )


#: Seconds a turn's stderr line waits, at most, for the turn's metric to be stored.
METRIC_WAIT: Final = 10.0


class TurnReporter:
    """Turns the plugin's diagnostic records into one line per turn (and a few others)."""

    def __init__(
        self, write: Callable[[str], None], state_dir: Path, clock: Callable[[], float]
    ) -> None:
        self._write = write
        self._state_dir = state_dir
        self._clock = clock
        self._started: dict[str, tuple[float, list[str]]] = {}
        #: The token counts of a metric the bot has just stored, by the metric's event id.
        self.tokens_of: Callable[[str], str] = lambda event_id: "tokens unknown"
        self._pending: dict[str, str] = {}  # turn id → its line, until its metric is known
        #: True once the bot is shutting down: the agent's exit is then expected, not news.
        self.stopping: Callable[[], bool] = lambda: False
        #: Seconds a turn's line waits, at most, for its metric (built and signed through the
        #: agent's signer after the turn's end; a signer in a bunker takes round trips more).
        self.metric_wait = METRIC_WAIT

    def __call__(self, record: DiagnosticRecord) -> None:
        kind, payload, turn = record.kind, record.payload, record.turn_id or ""
        if kind == "turn_started":
            ids = [str(i) for i in payload.get("triggeringEventIds", [])]
            self._started[turn] = (self._clock(), ids)
        elif kind == "turn_completed":
            began, ids = self._started.pop(turn, (self._clock(), []))
            shown = ", ".join(i[:12] for i in ids[:3]) + (", …" if len(ids) > 3 else "")
            self._pending[turn] = (
                f"buzz: turn in {record.channel_id or 'a direct channel'} for {shown or '?'}: "
                f"{payload.get('outcome', '?')}, {{tokens}}, {self._clock() - began:.1f} s"
            )
            # The metric (with the token counts) follows once the signer has sealed it: print
            # the line once it is here, or after ``metric_wait`` without it.
            asyncio.get_running_loop().call_later(self.metric_wait, self._flush, turn)
        elif kind == "metric_queued":
            line = self._pending.pop(turn, None)
            if line is not None:
                self._write(line.replace("{tokens}", self.tokens_of(str(payload.get("eventId")))))
        elif kind == "turn_failed":
            self._started.pop(turn, None)
            self._write(
                f"buzz: turn in {record.channel_id} failed, will retry: {payload.get('error')}"
            )
        elif kind in ("agent_exited", "agent_restart_failed") and not self.stopping():
            detail = payload.get("returncode", payload.get("error", ""))
            self._write(
                f"buzz: the agent {'exited' if kind == 'agent_exited' else 'could not restart'} "
                f"({detail}); its stderr is in {self._state_dir / 'agent.log'}"
            )
        elif kind == "owner_command":
            self._write(f"buzz: owner command !{payload.get('command')}")
        elif kind == "permission_asked":
            sent = "asked the owner" if payload.get("sent") else "could not ask the owner"
            self._write(f"buzz: {sent} to approve a {payload.get('toolKind') or 'tool'} call")
        elif kind in ("budget_stopped", "budget_warned") and payload.get("notified"):
            caps = ", ".join(f"{o.get('cap')} {o.get('spent')}" for o in payload.get("over") or [])
            held = "turns wait" if kind == "budget_stopped" else "the owner was told"
            self._write(f"buzz: budget reached ({caps}): {held} until the period ends")
        elif kind == "telemetry_failed":
            self._write(f"buzz: telemetry export failed ({payload.get('error')}); turns go on")
        elif kind == "reply_failed":
            self._write(
                f"buzz: no relay accepted the reply to {str(payload.get('inReplyTo'))[:12]}"
            )

    def _flush(self, turn: str) -> None:
        line = self._pending.pop(turn, None)
        if line is not None:
            self._write(line.replace("{tokens}", "no usage reported"))


def _token_summary(settings: PluginConfig, event: Event | None) -> str:
    """The turn's token counts, read back from the metric the bot has just sealed for the owner
    (NIP-44 is symmetric: the agent's key opens what it encrypted)."""
    from nostr_buzz.nips import nip44

    if event is not None and settings.agent_secret is None:
        return "tokens in the metric"  # sealed by a signer elsewhere: buzz metrics reads them
    if event is None or settings.agent_secret is None:
        return "tokens unknown"
    try:
        key = nip44.conversation_key(settings.agent_secret, settings.owner)
        turn = json.loads(nip44.decrypt(event.content, key)).get("turn") or {}
    except Exception:  # a summary line must never break the bot
        return "tokens unknown"
    total, given, taken = (turn.get(k) for k in ("totalTokens", "inputTokens", "outputTokens"))
    if total is None:
        return "tokens unknown"
    counts = ["?" if n is None else str(n) for n in (given, taken)]
    return f"{total} tokens ({counts[0]} in, {counts[1]} out)"


def _stored_metric(plugin: BuzzPlugin, event_id: str) -> Event | None:
    """A metric from the bot's outbox, where it is committed before its diagnostic is sent."""
    if plugin.store is None:  # not started
        return None
    try:
        entry = plugin.store.outbox.get(event_id)
    except Exception:  # the outbox is the bot's: trouble there is reported by the bot itself
        return None
    return entry.event if entry is not None else None


# --- the command ------------------------------------------------------------------------------


def _run(
    config: Path | None,
    shard: str | None,
    agent: str | None,
    values: dict[str, Any],
    pass_env: list[str] | None = None,
) -> None:
    from nostr_buzz.bot import parse_shard
    from nostr_buzz.keys import SecretKey
    from nostr_buzz.local_signer import LocalSigner

    overrides = {s.name: values.get(_param_name(s)) for s in SETTINGS}
    if agent is not None:
        overrides["agent.command"], overrides["agent.args"] = _agent_words(agent, overrides)
    with bad_input(ConfigError):
        parsed_shard = parse_shard(shard) if shard is not None else None
        cfg: ConfigSources = sources(config, overrides)
        bunker = cfg.bunker()
        state = state_directory(cfg)

    def resolve(signer: Signer | None) -> tuple[PluginConfig, InProcessAgent | None]:
        return _resolve(cfg, parsed_shard, pass_env or (), signer)

    # With a bunker the configuration is resolved once it has told the agent's key, and checked
    # before it is asked (with a stand-in key, which signs nothing): a mistake in buzz.toml
    # must not use up the bunker URI's one-time secret.
    resolved = resolve(None) if bunker is None else None
    if bunker is not None:
        resolve(LocalSigner(SecretKey.generate()))
    _check_command_line(cfg.file.agent.user, overrides)
    _warn_about_the_agent(cfg.file.agent.module, cfg.file.agent.user, bunker is not None)
    reporter = TurnReporter(note, state, time.monotonic)
    if bunker is not None:
        reporter.metric_wait = METRIC_WAIT + cfg.file.signer.timeout
    _serve_until_stopped(lambda signer: resolved or resolve(signer), cfg, bunker, reporter, state)


def _resolve(
    cfg: ConfigSources, shard: Shard | None, pass_env: Sequence[str], signer: Signer | None
) -> tuple[PluginConfig, InProcessAgent | None]:
    """The bot's settings (``signer``: the agent's key, when it is not held here) and the
    in-process agent they name, if any."""
    from nostr_buzz.bot import PluginConfig
    from nostr_buzz.io.inprocess import load_agent

    with bad_input(ConfigError):
        settings = PluginConfig.from_sources(cfg, shard=shard, pass_env=pass_env, signer=signer)
        # Imported before anything starts, so a bad spec is a configuration error.
        agent_object = load_agent(settings.agent_module) if settings.agent_module else None
    return settings, agent_object


def _serve_until_stopped(
    resolve: Callable[[Signer | None], tuple[PluginConfig, InProcessAgent | None]],
    cfg: ConfigSources,
    bunker: BunkerUri | None,
    reporter: TurnReporter,
    state: Path,
) -> None:
    """The bot, serving until it is stopped (the bunker asked first when the agent's key is
    in one): an agent that cannot be started exits 1; relays or the bunker lost, 2."""
    from nostr_buzz.bot import BuzzPlugin
    from nostr_buzz.cli.signing import connect_bunker

    async def body() -> None:
        signer = None if bunker is None else await connect_bunker(bunker, cfg)
        try:
            settings, agent_object = resolve(signer)
            with bad_input(ConfigError):  # an ACP agent without the acp extra, say
                plugin = BuzzPlugin(settings, on_diagnostic=reporter, agent=agent_object)
            reporter.stopping = lambda: plugin.stopping
            reporter.tokens_of = lambda event_id: _token_summary(
                settings, _stored_metric(plugin, event_id)
            )
            note(start_line(settings, cfg.path))
            await serve(plugin)
        finally:
            if signer is not None:
                await signer.close()

    try:
        run(body())
    except AgentError as exc:
        raise CliFailure(
            ExitCode.BAD_INPUT,
            f"the agent could not be started: {exc}; check --agent (or [agent] command in "
            f"buzz.toml) and {state / 'agent.log'}",
        ) from None
    except (RelayError, SignerError) as exc:
        raise CliFailure(ExitCode.NETWORK, str(exc)) from None
    note("buzz: stopped")


def _agent_words(agent: str, overrides: dict[str, Any]) -> tuple[str, list[str]]:
    """``--agent``'s command line as the command and its arguments."""
    if overrides["agent.command"] is not None or overrides["agent.args"]:
        raise CliFailure(
            ExitCode.BAD_INPUT, "give --agent, or --agent-command with --agent-arg, not both"
        )
    words = command_words(agent, option="--agent", empty='the command is empty (e.g. "goose acp")')
    return words[0], words[1:]


def _check_command_line(agent_user: str | None, overrides: dict[str, Any]) -> None:
    """The command line of a process is world-readable (/proc/PID/cmdline): with [agent] user,
    the agent's user would read there what running it as another user keeps from it."""
    if agent_user is None:
        return
    for name, what in (
        ("secret_key", "secret key"),
        ("signer.bunker", "bunker's secret"),
        ("telemetry.headers", "telemetry credentials"),
    ):
        setting = SETTINGS_BY_NAME[name]
        if overrides[name] is not None:
            raise CliFailure(
                ExitCode.BAD_INPUT,
                f"{setting.flag} puts the bot's {what} in its command line, which the agent's "
                f"user {agent_user!r} can read (/proc/PID/cmdline): refusing it with "
                f"[agent] user; give it in buzz.toml (mode 0600) or ${setting.env}"
                + (", or as --key-file FILE / --key-env NAME" if name == "secret_key" else ""),
            )


def _warn_about_the_agent(module: str | None, user: str | None, bunker: bool) -> None:
    what = "its NIP-46 client key (so ask the bunker to sign)" if bunker else "its key"
    if module is not None:
        note(
            f"buzz: warning: the in-process agent runs inside the bot and can read {what} and "
            "state; run an agent you do not fully trust as an ACP command with [agent] user"
        )
    elif user is None:
        note(
            f"buzz: warning: the agent runs as this same OS user and can read the bot's "
            f"{'NIP-46 client key (so ask the bunker to sign)' if bunker else 'key'} and state; "
            'set [agent] user = "NAME" (or --agent-user NAME) to run it as another user'
        )


_AGENT_HELP = (
    'The ACP agent command and its arguments, e.g. "goose acp" (else --agent-command and '
    "--agent-arg, else buzz.toml [agent])."
)
_PASS_ENV_HELP = (
    "Repeatable. Also pass this environment variable to the agent, on top of [agent] pass_env "
    "(which --agent-pass-env replaces)."
)


def run_command(
    config: ConfigOption = None,
    shard: Annotated[
        str | None,
        option(
            "--shard",
            metavar="I/N",
            help="Serve only destinations whose stable hash mod N is I (e.g. 0/2).",
        ),
    ] = None,
    agent: Annotated[str | None, agent_option(_AGENT_HELP)] = None,
    pass_env: Annotated[list[str] | None, pass_env_option(_PASS_ENV_HELP)] = None,
    **values: Any,
) -> None:
    """Run the agent bot: answer mentions with the configured ACP agent until stopped."""
    _run(config, shard, agent, values, pass_env)


# typer reads the options from the signature: the fixed ones above, then one per setting.
_fixed = [
    p
    for p in inspect.signature(run_command, eval_str=True).parameters.values()
    if p.kind != p.VAR_KEYWORD
]
run_command.__signature__ = inspect.Signature([*_fixed, *map(_option, SETTINGS)])  # type: ignore[attr-defined]
