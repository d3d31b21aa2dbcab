"""What the bot needs, resolved: :class:`PluginConfig` (from ``buzz.toml``, the environment and
flags) and the ``--shard i/n`` split of destinations between processes."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

import msgspec

from nostr_buzz.config import (
    DEFAULT_MAX_LIVE,
    DEFAULT_REPLY_BYTES,
    ConfigSources,
    TelemetrySection,
    check_channels,
    check_gate_allowlist,
    check_given,
    state_directory,
)
from nostr_buzz.core import choices
from nostr_buzz.core.budget import CAP_NAMES, Caps
from nostr_buzz.core.gate import Shard, shard_of
from nostr_buzz.core.given import (
    given_ints,
    given_key,
    given_key_set,
    given_relays,
    given_strings,
    shown,
)
from nostr_buzz.core.turn_input import BUZZ_RETRIEVAL, Retrieval, Standing
from nostr_buzz.errors import ConfigError, InvalidKey
from nostr_buzz.keys import PublicKey, SecretKey, as_secret_key
from nostr_buzz.local_signer import LocalSigner
from nostr_buzz.nips.nip17 import PRIVATE_MESSAGE_KIND
from nostr_buzz.nips.nip29 import CHAT_KIND
from nostr_buzz.signer import Signer

if TYPE_CHECKING:  # the telemetry module loads where telemetry is given
    from nostr_buzz.core.telemetry import Telemetry

__all__ = ["PluginConfig", "Shard", "parse_shard", "shard_of"]

#: The bot's bound on the channels strangers (any actor but the owner) hold events in at once
#: (the queue's ``max_stranger_channels``).
MAX_STRANGER_CHANNELS: Final = 64

#: PluginConfig's ``signer`` until ``__post_init__`` makes one from ``agent_secret``.
_NO_SIGNER: Final = cast(Signer, None)


#: PluginConfig's fields that ``buzz.toml`` also gives, and the file's name for each: a value
#: given in Python is checked as the file's would be (docs/bot.md, "Values are checked where
#: they are given").
_AS_IN_FILE: Final = {
    "permissions": "agent.permissions",
    "ask_timeout": "agent.ask_timeout",
    "max_questions": "agent.max_questions",
    "max_reply_bytes": "agent.max_reply_bytes",
    "channels": "subscriptions.channels",
    "kinds": "subscriptions.kinds",
    "mentions_required": "subscriptions.mentions_required",
    "plaintext_dm": "subscriptions.plaintext_dm",
    "clock_skew": "subscriptions.clock_skew",
    "gate": "gate.mode",
    "in_flight": "in_flight",
    "context_message_limit": "context_message_limit",
    "reply_mode": "reply_mode",
    "relay_lists": "relay_lists",
    "relay_timeout": "timeouts.relay",
    "relay_grace": "timeouts.grace",
    "idle_timeout": "timeouts.idle",
    "hard_timeout": "timeouts.hard",
    "max_recipients": "private.max_recipients",
    "give_up_after": "outbox.give_up_after",
    "session_scope": "sessions.scope",
    "max_live_sessions": "sessions.max_live",
    "thread_checkpoint": "sessions.checkpoint",
}


def parse_shard(text: str) -> Shard:
    """``"i/n"`` with 0 ≤ i < n; raises :class:`ConfigError`."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ConfigError(f"--shard: expected i/n (e.g. 0/2), got {text[:20]!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ConfigError("--shard: i/n needs n ≥ 1 and 0 ≤ i < n")
    return Shard(index, count)


@dataclass(frozen=True, kw_only=True)
class PluginConfig:
    """Everything the plugin needs, already resolved (keys parsed, files read).

    The agent's key is ``agent_secret`` (held in this process) or ``signer`` (any
    :class:`~nostr_buzz.signer.Signer`: a NIP-46 bunker, another library's signer), exactly one.
    The bot signs, encrypts, decrypts and authenticates only through :attr:`signer`, which is a
    :class:`~nostr_buzz.signer.LocalSigner` of ``agent_secret`` when that was given.
    """

    #: The agent's secret key, when it lives in this process (a SecretKey, ``nsec1…`` or hex).
    agent_secret: SecretKey | None = None
    #: Who signs for the agent (ready: its public key known); set from ``agent_secret`` if absent.
    signer: Signer = _NO_SIGNER
    #: The owner's public key: a :class:`PublicKey`, 64 hex digits or ``npub1…`` (kept as a
    #: PublicKey).
    owner: PublicKey
    #: Relay URLs, a tuple (or list) of them: a single string is refused.
    read_relays: tuple[str, ...]
    write_relays: tuple[str, ...]
    #: The ACP agent's command (``[agent] command``); None with ``agent_module`` or with an
    #: agent object given to ``BuzzPlugin(config, agent=…)``.
    agent_command: str | None = None
    agent_args: tuple[str, ...] = ()
    agent_env: Mapping[str, str] = field(default_factory=dict)
    agent_pass_env: tuple[str, ...] = ()
    agent_cwd: str | None = None
    #: Run the agent as this OS user (``[agent] user``), so it cannot read the bot's secrets.
    agent_user: str | None = None
    #: How the agent's permission requests are answered (``[agent] permissions``).
    permissions: choices.Permissions = "owner"
    #: Seconds the owner has to answer a permission question (``[agent] ask_timeout``); 0:
    #: never ask, reject at once what the rule cannot approve.
    ask_timeout: float = 300.0
    #: Questions one turn may put to the owner (``[agent] max_questions``); its further
    #: requests are rejected without asking (docs/bot.md, "Asking the owner").
    max_questions: int = 3
    state_dir: Path = Path(".buzz")
    channels: tuple[str, ...] = ()
    kinds: tuple[int, ...] = (CHAT_KIND, PRIVATE_MESSAGE_KIND)
    mentions_required: bool = True
    #: Serve a kind 9 without an ``h`` tag as a direct message (plaintext: off by default).
    plaintext_dm: bool = False
    gate: choices.AuthorGate = "owner-only"
    #: Public keys (each hex, ``npub1…`` or a :class:`PublicKey`; kept as hex).
    allowlist: frozenset[str] = frozenset()
    agents: frozenset[str] = frozenset()
    #: Keys trusted like the owner for a channel's canvas and huddle guidelines.
    trusted: frozenset[str] = frozenset()
    in_flight: choices.InFlightPolicy = "steer"
    context_message_limit: int = 20
    relay_timeout: float = 10.0
    #: Seconds a query waits for the other relays once the first has answered.
    relay_grace: float = 0.3
    idle_timeout: float = 620.0
    hard_timeout: float = 7200.0
    standing: Standing = field(default_factory=Standing)
    reply_mode: choices.ReplyMode = "auto"
    model: str | None = None
    shard: Shard | None = None
    #: A batch that may still grow flushes once it has been quiet this long, so that a burst
    #: of messages sent together becomes one turn (``DispatchQueue.flush_next(settle=…)``).
    coalesce_window: float = 0.25
    #: A batch that failed this many times is dead-lettered (a notice goes to its thread).
    max_attempts: int = 10
    #: Seconds replay and live subscriptions reach back before the position (clock skew).
    clock_skew: float = 600.0
    #: A private answer goes to at most this many members of a room the owner is in
    #: (``[private] max_recipients``); otherwise to the sender only.
    max_recipients: int = 10
    #: Seconds after which an outbox entry no relay accepted is given up (``[outbox]``).
    give_up_after: float = 7 * 86400.0
    #: Channels in which actors other than the owner may hold queued events at once
    #: (docs/queue.md): a stranger's event for one more is refused, ``queue_channels_full``.
    max_stranger_channels: int = MAX_STRANGER_CHANNELS
    #: Loopback or private relays that people's relay lists (NIP-65) may name besides the
    #: bot's own (``[outbox] local_relays``): any other local address in one is skipped.
    local_relays: tuple[str, ...] = ()
    #: The spending caps and what being over one does (``[budget]``, docs/bot.md "Budgets").
    budget: Caps = field(default_factory=Caps)
    #: ``MODULE:ATTR`` of an in-process agent (``[agent] module``), instead of the command.
    agent_module: str | None = None
    #: How the envelope tells the model to fetch history it was not given: buzz's commands
    #: by default, ``Retrieval.tool(name)`` for the agent's own tool, ``NO_RETRIEVAL``: none.
    retrieval: Retrieval = BUZZ_RETRIEVAL
    #: UTF-8 bytes of the agent's text a reply keeps (``[agent] max_reply_bytes``); the rest
    #: is dropped as it streams in, and the reply ends with a notice of the cut.
    max_reply_bytes: int = DEFAULT_REPLY_BYTES
    #: What keys an agent session and the queue (``[sessions] scope``): ``channel``, or
    #: ``thread`` (a thread's root with its channel; docs/bot.md, "Session scope").
    session_scope: choices.SessionScope = "channel"
    #: Agent sessions open at once (``[sessions] max_live``): the least recently used idle one
    #: is closed when another must open (docs/bot.md, "Live sessions").
    max_live_sessions: int = DEFAULT_MAX_LIVE
    #: Thread checkpoints (``[sessions] checkpoint``): ``off``; ``compaction`` (the agent's
    #: compaction summary kept as the key's checkpoint, and a new session starts from it);
    #: ``summary_on_close`` (also a summary turn before a close for room; docs/bot.md,
    #: "Thread checkpoints").
    thread_checkpoint: choices.CheckpointMode = "off"
    #: OpenTelemetry export of every turn (``[telemetry]``; None: none, and the SDK is never
    #: imported; docs/bot.md, "Telemetry").
    telemetry: Telemetry | None = None
    #: The bot's own relay lists when it listens (``relay_lists``): ``merge`` adds its relays
    #: to the lists its key has, ``publish`` replaces only a list it made, ``leave`` publishes
    #: none (docs/bot.md, "Its own relay lists").
    relay_lists: choices.RelayListsMode = "merge"

    def __post_init__(self) -> None:
        self._normalise()
        self._check_values()
        secret, signer = self.agent_secret, cast(Signer | None, self.signer)
        if signer is None:
            if secret is None:
                raise ConfigError("PluginConfig needs the agent's key: agent_secret or signer")
            object.__setattr__(self, "signer", LocalSigner(secret))
        elif not isinstance(signer, Signer):
            raise ConfigError(f"PluginConfig signer: {type(signer).__name__} is not a Signer")
        elif secret is not None and not _signs_as(signer, secret):
            # (dataclasses.replace passes both back: the LocalSigner made from the same key)
            raise ConfigError("PluginConfig takes agent_secret or signer, not both")

    def _normalise(self) -> None:
        """Keys in any of their forms, lists for tuples: one form kept (``core/given.py``);
        a value of another type is a :class:`ConfigError` naming the field and what it got."""
        where = "PluginConfig"
        put = functools.partial(object.__setattr__, self)
        put("owner", given_key(self.owner, f"{where} owner"))
        if self.agent_secret is not None:  # nsec1… or hex too; an error never quotes it
            try:
                put("agent_secret", as_secret_key(self.agent_secret, f"{where} agent_secret"))
            except InvalidKey as exc:
                raise ConfigError(str(exc)) from None
        for name in ("allowlist", "agents", "trusted"):
            put(name, given_key_set(getattr(self, name), f"{where} {name}"))
        for name in ("read_relays", "write_relays", "local_relays"):
            put(name, given_relays(getattr(self, name), f"{where} {name}"))
        for name in ("channels", "agent_args", "agent_pass_env"):
            put(name, given_strings(getattr(self, name), f"{where} {name}"))
        put("kinds", given_ints(self.kinds, f"{where} kinds"))
        env = self.agent_env
        if not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ConfigError(
                f"{where} agent_env: expected a mapping of str to str, got {shown(env)}"
            )
        for name in ("agent_command", "agent_module"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{where} {name}: expected a non-empty str, got {shown(value)}")
        if self.agent_command is not None and self.agent_module is not None:
            raise ConfigError(
                f"{where}: give agent_command (an ACP agent) or agent_module (an in-process "
                "agent), not both"
            )

    def _check_values(self) -> None:
        """Every value ``buzz.toml`` would check, checked the same way (a misspelt gate mode
        would otherwise admit everyone): a :class:`ConfigError` naming the field, the choices
        or the rule, and the value."""
        for name, setting in _AS_IN_FILE.items():
            check_given(setting, getattr(self, name), f"PluginConfig {name}")
        for cap in (*CAP_NAMES, "action"):
            check_given(f"budget.{cap}", getattr(self.budget, cap), f"PluginConfig budget.{cap}")
        check_gate_allowlist(self.gate, self.allowlist, "PluginConfig")
        check_channels(self.channels, "PluginConfig channels")
        if self.telemetry is not None:
            _check_telemetry(self.telemetry)

    def __repr__(self) -> str:  # never the secret key
        return (
            f"PluginConfig(agent={self.signer.public_key.hex}, owner={self.owner.hex}, "
            f"command={self.agent_command!r}, state_dir={str(self.state_dir)!r}, …)"
        )

    @classmethod
    def from_sources(
        cls,
        sources: ConfigSources,
        *,
        key: str | None = None,
        owner: str | None = None,
        relays: Sequence[str] = (),
        shard: Shard | None = None,
        state_dir: str | None = None,
        pass_env: Sequence[str] = (),
        permissions: str | None = None,
        signer: Signer | None = None,
    ) -> PluginConfig:
        """Resolve flags › environment › ``buzz.toml``; every problem is a ConfigError.

        ``signer``: the agent's key is held there (ready: a started ``Nip46Signer``, say), and
        the sources must name no secret key; else they must name one."""
        file = sources.file
        secret = _agent_secret(sources, key, signer)
        owner_key = sources.require_owner(owner)
        read = sources.require_relays(relays, direction="read")
        write = sources.relays(relays, direction="write") or read
        _check_agent_choice(file.agent.command, file.agent.module, file.agent.user)
        standing = _standing_files(sources)
        return cls(
            agent_secret=secret,
            signer=signer if signer is not None else _NO_SIGNER,
            owner=owner_key,
            read_relays=read,
            write_relays=write,
            agent_command=file.agent.command,
            agent_args=file.agent.args,
            agent_module=file.agent.module,
            agent_env=dict(file.agent.env),
            agent_pass_env=sources.pass_env(pass_env),
            permissions=sources.permissions(permissions),
            ask_timeout=file.agent.ask_timeout,
            max_questions=file.agent.max_questions,
            max_reply_bytes=file.agent.max_reply_bytes,
            agent_cwd=file.agent.cwd,
            agent_user=file.agent.user,
            state_dir=state_directory(sources, state_dir),
            channels=file.subscriptions.channels,
            kinds=file.subscriptions.kinds,
            mentions_required=file.subscriptions.mentions_required,
            plaintext_dm=file.subscriptions.plaintext_dm,
            gate=file.gate.mode,
            allowlist=frozenset(PublicKey.from_str(k).hex for k in file.gate.allowlist),
            agents=frozenset(PublicKey.from_str(k).hex for k in file.gate.agents),
            trusted=frozenset(PublicKey.from_str(k).hex for k in file.gate.trusted),
            in_flight=file.in_flight,
            context_message_limit=file.context_message_limit,
            relay_timeout=file.timeouts.relay,
            relay_grace=file.timeouts.grace,
            idle_timeout=file.timeouts.idle,
            hard_timeout=file.timeouts.hard,
            standing=standing,
            reply_mode=file.reply_mode,
            model=file.agent.model,
            shard=shard,
            clock_skew=file.subscriptions.clock_skew,
            max_recipients=file.private.max_recipients,
            give_up_after=file.outbox.give_up_after,
            local_relays=file.outbox.local_relays,
            budget=Caps(**msgspec.structs.asdict(file.budget)),
            session_scope=file.sessions.scope,
            max_live_sessions=file.sessions.max_live,
            thread_checkpoint=file.sessions.checkpoint,
            telemetry=_telemetry(file.telemetry),
            relay_lists=file.relay_lists,
        )


def _check_telemetry(telemetry: object) -> None:
    """A :class:`Telemetry`, and the SDK to export it with."""
    import importlib.util

    from nostr_buzz.core.telemetry import Telemetry

    if not isinstance(telemetry, Telemetry):
        raise ConfigError(
            f"PluginConfig telemetry: expected a Telemetry, got {type(telemetry).__name__}"
        )
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        raise ConfigError(
            "PluginConfig telemetry needs the OpenTelemetry SDK: "
            "pip install 'nostr-buzz[telemetry]'"
        )


def _telemetry(section: TelemetrySection) -> Telemetry | None:
    """``[telemetry]`` as the bot takes it: None while no endpoint is set."""
    if section.endpoint is None:
        return None
    from nostr_buzz.core.telemetry import Telemetry

    fields = msgspec.structs.asdict(section)
    return Telemetry(**fields)


def _standing_files(sources: ConfigSources) -> Standing:
    """``[context]``'s files (relative to the config file's directory), read now."""
    context = sources.file.context
    base_dir = sources.path.parent if sources.path is not None else Path.cwd()

    def read_text(name: str, value: str | None) -> str | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError(f"context.{name}: cannot read {path} ({why})") from None

    return Standing(
        base=read_text("base", context.base),
        persona=read_text("persona", context.persona),
        team_instructions=read_text("team_instructions", context.team_instructions),
    )


def _agent_secret(
    sources: ConfigSources, key: str | None, signer: Signer | None
) -> SecretKey | None:
    """The agent's secret key from the sources; none, and none named, when a signer holds it."""
    if signer is None:
        return sources.require_secret_key(key)
    if key is not None or sources.secret_key() is not None:
        raise ConfigError(
            f"the agent's key is held by a signer: give no secret key ({sources.KEY_SOURCES})"
        )
    return None


def _signs_as(signer: Signer, secret: SecretKey) -> bool:
    return isinstance(signer, LocalSigner) and signer.public_key == secret.public_key


def _check_agent_choice(command: str | None, module: str | None, user: str | None) -> None:
    """One agent: an ACP command or an in-process module, never both or neither."""
    if command is None and module is None:
        raise ConfigError(
            "no agent command configured: set [agent] command in buzz.toml (an ACP agent), "
            "or [agent] module (an in-process agent, MODULE:ATTR)"
        )
    if command is not None and module is not None:
        raise ConfigError(
            "[agent] command and [agent] module are both set (in buzz.toml, flags or BUZZ_* "
            "variables): give one, the ACP agent's command or the in-process agent's module"
        )
    if module is not None and user is not None:
        raise ConfigError(
            "[agent] user cannot apply to an in-process agent ([agent] module): it runs inside "
            "the bot's own process; use an ACP agent command to run the agent as another user"
        )
