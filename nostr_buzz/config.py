"""Configuration: command-line flags, then ``BUZZ_*`` environment, then ``buzz.toml`` (docs/cli.md,
docs/bot.md).

For each value the first source that gives it wins; sources are never merged (a relay list from
the environment replaces the file's list, it is not appended to it).  The file schema covers the
whole bot (docs/bot.md) and is strict: unknown keys are errors that name every one of them.

This module is an edge (it reads files and the environment); nothing in ``core`` imports it.
Error messages never repeat a secret key: a value that looks like one is replaced by a hint.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Union, get_args, get_origin

import msgspec

from nostr_buzz.core.choices import (
    CHOICES,
    AuthorGate,
    BudgetAction,
    CheckpointMode,
    InFlightPolicy,
    Permissions,
    RelayListsMode,
    ReplyMode,
    SessionScope,
    check_choice,
    refuse_choice,
)
from nostr_buzz.errors import (
    SECRET_HINT,
    ConfigError,
    InvalidKey,
    Nip46Error,
    RelayError,
    describe_input,
    looks_secret,
)
from nostr_buzz.io.filemodes import check_key_file, check_secret_mode
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips.nip10 import is_valid_channel_id
from nostr_buzz.nips.relay_url import check_relay_url

if TYPE_CHECKING:
    from nostr_buzz.nips.nip46 import BunkerUri

__all__ = [
    "DEFAULT_CONFIG_NAME",
    "SETTINGS",
    "AgentSection",
    "BudgetSection",
    "BuzzConfig",
    "ConfigSources",
    "ContextSection",
    "GateSection",
    "OutboxSection",
    "Permissions",
    "PrivateSection",
    "Setting",
    "SignerSection",
    "SubscriptionsSection",
    "TelemetrySection",
    "TimeoutsSection",
    "check_channels",
    "check_gate_allowlist",
    "check_given",
    "check_setting",
    "load_config_file",
    "parse_bunker",
    "parse_env_names",
    "parse_relay_list",
    "state_directory",
    "validate_relay_url",
]

DEFAULT_CONFIG_NAME: Final = "buzz.toml"

ENV_RELAYS: Final = "BUZZ_RELAYS"
ENV_PRIVATE_KEY: Final = "BUZZ_PRIVATE_KEY"
ENV_OWNER: Final = "BUZZ_OWNER"
ENV_CONFIG: Final = "BUZZ_CONFIG"
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: ``[agent] permissions``' choices (:data:`nostr_buzz.core.choices.Permissions`).
PERMISSIONS: Final[tuple[Permissions, ...]] = get_args(Permissions)
Direction = Literal["read", "write"]

#: ``[agent] max_reply_bytes``: its default (256 KiB, a long model answer) and bounds (one
#: reply part's floor, docs/bot.md "Relay limits"; 1 MiB).
DEFAULT_REPLY_BYTES: Final = 256 * 1024
MIN_REPLY_BYTES: Final = 4096
MAX_REPLY_BYTES: Final = 1 << 20

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_Kind = Annotated[int, msgspec.Meta(ge=0, le=65535)]
_Cost = Annotated[float, msgspec.Meta(ge=0, le=1e9)]
_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class AgentSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[agent]``: the ACP agent subprocess (docs/bot.md)."""

    command: str | None = None  # executable, e.g. "goose"
    # instead of command: an in-process agent, MODULE:ATTR (docs/bot.md, "In-process agents")
    module: str | None = None
    args: tuple[str, ...] = ()  # e.g. ["acp"]
    env: dict[str, str] = {}  # variables set for the agent (values written here)
    pass_env: tuple[str, ...] = ()  # names copied from buzz's own environment (API keys)
    permissions: Permissions = "owner"  # how the agent's permission requests are answered
    # Seconds the owner has to answer a permission question (!allow / !deny CODE); 0: never
    # ask (a request the rule cannot approve is rejected at once).
    ask_timeout: Annotated[float, msgspec.Meta(ge=0)] = 300.0
    # Questions one turn may put to the owner; the agent's further requests in that turn are
    # rejected without asking, and the owner is told how many at the turn's end.
    max_questions: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    # UTF-8 bytes of the agent's text a reply keeps; the rest is dropped as it streams in and
    # the reply says where it was cut (docs/bot.md, "Bounded replies").
    max_reply_bytes: Annotated[int, msgspec.Meta(ge=MIN_REPLY_BYTES, le=MAX_REPLY_BYTES)] = (
        DEFAULT_REPLY_BYTES
    )
    cwd: str | None = None  # the agent's working directory, used exactly as written
    model: str | None = None  # the model the agent runs, reported in metrics when known
    # Run the agent as this OS user (buzz run starts as root and drops to it for the agent):
    # the way to run any agent you do not fully trust, since it then cannot read the bot's key.
    user: str | None = None

    def __repr__(self) -> str:
        # env values are often API keys: show the names only.
        env = "{" + ", ".join(f"{name!r}: <hidden>" for name in self.env) + "}"
        return (
            f"AgentSection(command={self.command!r}, module={self.module!r}, "
            f"args={self.args!r}, env={env}, "
            f"pass_env={self.pass_env!r}, cwd={self.cwd!r}, model={self.model!r}, "
            f"user={self.user!r})"
        )


class SubscriptionsSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[subscriptions]``: what the bot listens to."""

    channels: tuple[str, ...] = ()  # channel ids (h tags); empty = every channel
    # 9 chat, 14 NIP-17 private messages (received as kind 1059 gift wraps), 1 notes, 1111 comments
    kinds: tuple[_Kind, ...] = (9, 14)
    mentions_required: bool = True
    # A kind 9 without an h tag is readable and writable by anyone on the relay: refused as a
    # direct message unless this opts in (private messages are kind 14).
    plaintext_dm: bool = False
    # How far back (seconds) replay and live subscriptions reach before the last handled
    # message, for authors whose clocks run behind (events seen twice are refused by id).
    clock_skew: Annotated[float, msgspec.Meta(ge=0, le=7 * 86400)] = 600.0


class GateSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[gate]``: whose events may start a turn."""

    mode: AuthorGate = "owner-only"
    allowlist: tuple[str, ...] = ()  # public keys (hex or npub) admitted by mode = "allowlist"
    agents: tuple[str, ...] = ()  # public keys to treat as agents (docs/events.md, profiles)
    # keys trusted like the owner for a channel's canvas, huddle guidelines and metadata
    trusted: tuple[str, ...] = ()


class TimeoutsSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[timeouts]`` in seconds."""

    relay: _Positive = 10.0  # connect + query per relay
    # a query waits this long for the other relays once the first has answered (docs/cli.md)
    grace: _Positive = 0.3
    idle: _Positive = 620.0  # a turn with no agent update for this long is ended
    hard: _Positive = 7200.0  # a turn is ended after this long whatever happens


class PrivateSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[private]``: answering NIP-17 private messages (docs/bot.md)."""

    # A room the owner is in is answered to at most this many members; a larger one, and any
    # room without the owner, only to the message's sender.
    max_recipients: Annotated[int, msgspec.Meta(ge=1)] = 10


class OutboxSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[outbox]``: the durable queue of signed replies and metrics (docs/bot.md)."""

    # Seconds after which an event no relay accepted is given up (default: 7 days).
    give_up_after: _Positive = 7 * 86400.0
    # Loopback or private relays that people's relay lists (NIP-65) may send replies to,
    # besides the bot's own relays: any other local address in such a list is skipped.
    local_relays: tuple[str, ...] = ()


class BudgetSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[budget]``: what the agent may spend per UTC day, week and month (docs/bot.md)."""

    daily_usd: _Cost | None = None
    weekly_usd: _Cost | None = None
    monthly_usd: _Cost | None = None
    daily_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None  # cost-unknown turns too
    # Over a cap: "warn" tells the owner once per period; "stop" runs no turn until it ends.
    action: BudgetAction = "warn"


#: ``[sessions] max_live``'s default: agent sessions kept open at once (docs/bot.md, "Live
#: sessions").
DEFAULT_MAX_LIVE: Final = 64


class SessionsSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[sessions]``: what an agent session serves and how many stay open (docs/bot.md)."""

    # "channel": one session per channel; "thread": one per thread of a channel (its root),
    # so threads run side by side; a private conversation is one session either way.
    scope: SessionScope = "channel"
    # Agent sessions open at once: the least recently used idle one is closed (its receipt
    # kept) when another must open; its next turn continues it where the agent can.
    max_live: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = DEFAULT_MAX_LIVE
    # Thread checkpoints (nips/NIP-TC.md): "off" writes and reads none; "compaction" keeps the
    # agent's own compaction summary of a session as its checkpoint, and a new session of the
    # same key starts from it; "summary_on_close" also asks an agent that cannot continue a
    # session for a summary before closing it for room (docs/bot.md, "Thread checkpoints").
    checkpoint: CheckpointMode = "off"


class ContextSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[context]``: standing context files (paths relative to the config file)."""

    base: str | None = None
    persona: str | None = None
    team_instructions: str | None = None


class SignerSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[signer]``: the agent's key held by a NIP-46 remote signer (a "bunker") instead of this
    process (docs/signers.md)."""

    # bunker://<remote-signer-pubkey>?relay=wss://…&secret=…, as the bunker gives it.  The
    # secret in it is a credential: prefer $BUZZ_BUNKER or this file (mode 0600) to --bunker,
    # since a process's command line is readable by every user (/proc/PID/cmdline).
    bunker: str | None = None
    timeout: _Positive = 30.0  # seconds for each request to the bunker

    def __repr__(self) -> str:
        shown = "<hidden>" if self.bunker is not None else "None"
        return f"SignerSection(bunker={shown}, timeout={self.timeout!r})"


class TelemetrySection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[telemetry]``: OpenTelemetry export of every turn over OTLP/HTTP (docs/bot.md,
    "Telemetry"); off while ``endpoint`` is unset."""

    # The OTLP/HTTP base URL, e.g. "http://localhost:4318" or Langfuse's
    # "https://cloud.langfuse.com/api/public/otel": /v1/traces and /v1/metrics are appended.
    endpoint: str | None = None
    # Sent with every export, e.g. Authorization = "Basic …": credentials, never shown (prefer
    # $BUZZ_TELEMETRY_HEADERS or this file, mode 0600, to a flag).
    headers: dict[str, str] = {}
    service_name: _Name = "nostr-buzz"  # the resource's service.name
    agent_name: _Name | None = None  # gen_ai.agent.name (default: the agent's harness name)
    provider: _Name | None = None  # gen_ai.provider.name, e.g. "anthropic" (default: guessed)
    # Export the words of public turns (the triggering events' text, steers, the reply).
    export_content: bool = False
    metrics: bool = True  # the usage metrics too (Langfuse takes traces only: set false)
    timeout: Annotated[float, msgspec.Meta(gt=0, le=120)] = 10.0  # seconds per export

    def __repr__(self) -> str:
        # header values are credentials: show the names only.
        headers = "{" + ", ".join(f"{name!r}: <hidden>" for name in self.headers) + "}"
        return (
            f"TelemetrySection(endpoint={self.endpoint!r}, headers={headers}, "
            f"service_name={self.service_name!r}, export_content={self.export_content!r}, …)"
        )


class BuzzConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The whole ``buzz.toml``.  Every field has a default, so an empty file is valid."""

    # The agent's secret key: at most one of these three.  Prefer key_file or key_env.
    secret_key: str | None = None
    key_file: str | None = None  # a file holding the key (64-hex or nsec), relative to the config
    key_env: str | None = None  # the name of an environment variable holding the key
    # Or the key in a NIP-46 bunker ([signer] bunker): then none of the three above.
    signer: SignerSection = msgspec.field(default_factory=SignerSection)
    owner: str | None = None  # the owner's public key (hex or npub)
    agents: tuple[str, ...] = ()  # the owner's agents (hex or npub): what buzz metrics counts
    relays: tuple[str, ...] = ()  # read and write, unless the lists below are given
    read_relays: tuple[str, ...] = ()
    write_relays: tuple[str, ...] = ()
    in_flight: InFlightPolicy = "steer"
    context_message_limit: Annotated[int, msgspec.Meta(ge=1)] = 20
    reply_mode: ReplyMode = "auto"
    relay_lists: RelayListsMode = "merge"
    state_dir: str = ".buzz"
    agent: AgentSection = msgspec.field(default_factory=AgentSection)
    subscriptions: SubscriptionsSection = msgspec.field(default_factory=SubscriptionsSection)
    gate: GateSection = msgspec.field(default_factory=GateSection)
    timeouts: TimeoutsSection = msgspec.field(default_factory=TimeoutsSection)
    private: PrivateSection = msgspec.field(default_factory=PrivateSection)
    outbox: OutboxSection = msgspec.field(default_factory=OutboxSection)
    budget: BudgetSection = msgspec.field(default_factory=BudgetSection)
    sessions: SessionsSection = msgspec.field(default_factory=SessionsSection)
    context: ContextSection = msgspec.field(default_factory=ContextSection)
    telemetry: TelemetrySection = msgspec.field(default_factory=TelemetrySection)

    def __repr__(self) -> str:
        # The default repr would print secret_key.
        shown = "<hidden>" if self.secret_key is not None else "None"
        return f"BuzzConfig(secret_key={shown}, owner={self.owner!r}, relays={self.relays!r}, …)"


def _describe(value: str) -> str:
    """A value for an error message, or the secret hint in its place."""
    return describe_input(value)


def validate_relay_url(url: str, *, source: str) -> str:
    """Return ``url`` stripped if it is a ``ws://`` or ``wss://`` URL with a host (the relay
    client's own check, :func:`nostr_buzz.nips.relay_url.check_relay_url`)."""
    try:
        return check_relay_url(url)
    except RelayError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def parse_relay_list(urls: Iterable[str], *, source: str) -> tuple[str, ...]:
    """Validate every URL and drop repeats, keeping the first occurrence's order."""
    seen: dict[str, None] = {}
    for url in urls:
        seen.setdefault(validate_relay_url(url, source=source), None)
    return tuple(seen)


def parse_bunker(text: str, *, source: str) -> BunkerUri:
    """A ``bunker://`` URI (NIP-46); the error says what is wrong, never the URI's secret."""
    from nostr_buzz.nips.nip46 import parse_bunker_uri  # the NIP-46 client, where one is named

    try:
        return parse_bunker_uri(text)
    except Nip46Error as exc:
        raise ConfigError(f"{source}: {exc}") from None


def parse_env_names(names: Iterable[str], *, source: str) -> tuple[str, ...]:
    """Environment variable names (letters, digits and ``_``, not starting with a digit)."""
    parsed = []
    for name in names:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name.strip()):
            shown = str(name)[:40]
            raise ConfigError(f"{source}: {shown!r} is not an environment variable name")
        parsed.append(name.strip())
    return tuple(parsed)


def _unknown_keys(struct_type: type[msgspec.Struct], obj: Any, path: str) -> list[str]:
    """Every key of ``obj`` (recursively) that the schema does not know, as dotted paths."""
    if not isinstance(obj, dict):
        return []
    fields = {f.encode_name: f.type for f in msgspec.structs.fields(struct_type)}
    found: list[str] = []
    for key, value in obj.items():
        dotted = f"{path}{key}"
        if key not in fields:
            found.append(dotted)
            continue
        field_type = fields[key]
        if isinstance(field_type, type) and issubclass(field_type, msgspec.Struct):
            found.extend(_unknown_keys(field_type, value, dotted + "."))
    return found


def _check_public_key(value: str, where: str) -> None:
    if looks_secret(value):
        raise ConfigError(f"{where}: expected a public key; the value {SECRET_HINT}")
    try:
        PublicKey.from_str(value)
    except InvalidKey as exc:
        raise ConfigError(f"{where}: {exc}") from None


#: The variable of ``[telemetry] headers`` (credentials of the telemetry back end).
ENV_TELEMETRY_HEADERS: Final = "BUZZ_TELEMETRY_HEADERS"


def _guarded_variables(key_env: str | None) -> dict[str, str]:
    """Variables the agent must never be passed, and what each holds."""
    guarded = {
        ENV_PRIVATE_KEY: "the bot's secret key",
        ENV_TELEMETRY_HEADERS: "telemetry credentials",
    }
    if key_env:
        guarded[key_env] = "the bot's secret key"
    return guarded


def _check_agent(config: BuzzConfig, where: str) -> None:
    """The agent never gets the bot's key, and its user is a plain user name."""
    guarded = _guarded_variables(config.key_env)
    for name in config.agent.pass_env:
        if name in guarded:
            raise ConfigError(
                f"{where}: agent.pass_env names {name}, which holds {guarded[name]}: the "
                "agent must never get it"
            )
    for name, value in config.agent.env.items():
        if looks_secret(value):
            raise ConfigError(f"{where}: agent.env {name}: the value {SECRET_HINT}")
    user = config.agent.user
    if user is not None and (not user or user != user.strip() or "/" in user or user == "root"):
        raise ConfigError(f"{where}: agent.user must be the name of an OS user other than root")


def check_gate_allowlist(mode: str, allowlist: Collection[str], where: str) -> None:
    """``allowlist`` mode with nobody on the list is a mistake, not "the owner only"."""
    if mode == "allowlist" and not allowlist:
        raise ConfigError(f'{where}: gate.mode = "allowlist" needs a non-empty gate.allowlist')


def _validate(config: BuzzConfig, where: str) -> None:
    """Checks the types alone cannot express."""
    for name in ("relays", "read_relays", "write_relays"):
        parse_relay_list(getattr(config, name), source=f"{where}: {name}")
    given = [n for n in ("secret_key", "key_file", "key_env") if getattr(config, n) is not None]
    if len(given) > 1:
        raise ConfigError(f"{where}: give at most one of secret_key, key_file, key_env")
    if config.signer.bunker is not None:
        if given:
            raise ConfigError(
                f"{where}: give the agent's key as {given[0]} or signer.bunker, not both"
            )
        parse_bunker(config.signer.bunker, source=f"{where}: signer.bunker")
    if config.owner is not None:
        _check_public_key(config.owner, f"{where}: owner")
    for i, key in enumerate(config.agents):
        _check_public_key(key, f"{where}: agents[{i}]")
    for i, key in enumerate(config.gate.allowlist):
        _check_public_key(key, f"{where}: gate.allowlist[{i}]")
    for i, key in enumerate(config.gate.agents):
        _check_public_key(key, f"{where}: gate.agents[{i}]")
    for i, key in enumerate(config.gate.trusted):
        _check_public_key(key, f"{where}: gate.trusted[{i}]")
    _check_agent(config, where)
    check_gate_allowlist(config.gate.mode, config.gate.allowlist, where)
    parse_env_names(config.agent.pass_env, source=f"{where}: agent.pass_env")
    check_channels(config.subscriptions.channels, f"{where}: subscriptions.channels")
    _check_telemetry(config.telemetry, where)


def _check_telemetry(section: TelemetrySection, where: str) -> None:
    """``[telemetry]``'s endpoint and headers, checked as ``Telemetry`` checks them (that
    module loads here, with a file to check, not with this one)."""
    from nostr_buzz.core.telemetry import check_otlp_endpoint, check_telemetry_headers

    if section.endpoint is not None:
        check_otlp_endpoint(section.endpoint, f"{where}: telemetry.endpoint")
    check_telemetry_headers(section.headers, f"{where}: telemetry.headers")


def check_channels(channels: Iterable[str], where: str) -> None:
    """Channel ids (``h`` tag values) to subscribe to, each a valid one."""
    for i, channel_id in enumerate(channels):
        if looks_secret(channel_id):
            raise ConfigError(f"{where}[{i}]: expected a channel id; the value {SECRET_HINT}")
        if not is_valid_channel_id(channel_id):
            raise ConfigError(
                f"{where}[{i}] is not a valid channel id (1-128 characters from A-Z a-z 0-9 _ -)"
            )


def _check_choices(raw: Mapping[str, Any], where: str) -> None:
    """Each enumerated setting the file gives, against :data:`CHOICES` (the message names
    them all, as for a flag, a variable or a value given in Python)."""
    for name, choices in CHOICES.items():
        *sections, leaf = name.split(".")
        table: Any = raw
        for section in sections:
            table = table.get(section) if isinstance(table, dict) else None
        if isinstance(table, dict) and leaf in table:
            check_choice(table[leaf], choices, f"{where}: {name}")


def load_config_file(path: str | Path) -> BuzzConfig:
    """Read and strictly validate one ``buzz.toml``; every problem is a :class:`ConfigError`."""
    import tomllib  # only where a file is read

    where = str(path)
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            data = file.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {where}: {exc.strerror or exc}") from None
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None
    unknown = _unknown_keys(BuzzConfig, raw, "")
    if unknown:
        raise ConfigError(f"{where}: unknown key(s): {', '.join(unknown)}")
    _check_choices(raw, where)
    try:
        config = msgspec.convert(raw, BuzzConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    _validate(config, where)
    if config.secret_key is not None:
        # An inline key is as secret as a key_file: same rule, checked on the file just read.
        check_secret_mode(mode, path, subject=f"{where}: holds secret_key inline and")
    if config.signer.bunker is not None and parse_bunker(config.signer.bunker, source=where).secret:
        # Whoever reads the bunker's connection secret may connect in the bot's place.
        check_secret_mode(mode, path, subject=f"{where}: holds signer.bunker's secret and")
    if config.telemetry.headers:
        # Headers carry the telemetry back end's credentials (an Authorization, an API key).
        check_secret_mode(mode, path, subject=f"{where}: holds telemetry.headers and")
    return config


def _env_value(environ: Mapping[str, str], name: str) -> str | None:
    """An environment variable's value, with blank counted as unset (docs/cli.md)."""
    value = environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def _parse_secret(text: str, source: str) -> SecretKey:
    try:
        return SecretKey.from_str(text)
    except InvalidKey as exc:
        # InvalidKey messages never contain the input.
        raise ConfigError(f"{source}: {exc}") from None


def _parse_public(text: str, source: str) -> PublicKey:
    if looks_secret(text):
        raise ConfigError(f"{source}: expected a public key; the value {SECRET_HINT}")
    try:
        return PublicKey.from_str(text)
    except InvalidKey as exc:
        raise ConfigError(f"{source}: {exc}") from None


# --- every setting as a flag and a BUZZ_* variable ------------------------------------------

#: Names that differ from the rule (``--section-field`` and ``BUZZ_SECTION_FIELD``): the ones
#: every command already used, and shorter flags for the settings people give most.
_ENV_NAMES: Final = {
    "secret_key": ENV_PRIVATE_KEY,
    "signer.bunker": "BUZZ_BUNKER",
    "subscriptions.clock_skew": "BUZZ_CLOCK_SKEW",
}
_FLAG_NAMES: Final = {
    "secret_key": "--key",
    "signer.bunker": "--bunker",
    "relays": "--relay",
    "read_relays": "--read-relay",
    "write_relays": "--write-relay",
    "agent.args": "--agent-arg",
    "agent.model": "--model",
    "agent.permissions": "--permissions",
    "subscriptions.channels": "--channel",
    "subscriptions.kinds": "--kind",
    "subscriptions.mentions_required": "--mentions-required",
    "subscriptions.plaintext_dm": "--plaintext-dm",
    "subscriptions.clock_skew": "--clock-skew",
    "gate.mode": "--gate",
    "timeouts.relay": "--timeout",
    "timeouts.grace": "--grace",
    "timeouts.idle": "--idle-timeout",
    "timeouts.hard": "--hard-timeout",
}
#: Settings that each pick their whole source (flags, else environment, else file) together
#: with their siblings, through :meth:`ConfigSources.secret_key`, ``owner`` and ``relays``.
KEY_SETTINGS: Final = ("secret_key", "key_file", "key_env")
RELAY_SETTINGS: Final = ("relays", "read_relays", "write_relays")
_BY_SOURCE: Final = frozenset({*KEY_SETTINGS, *RELAY_SETTINGS, "owner"})


class Setting(msgspec.Struct, frozen=True):
    """One ``buzz.toml`` setting and the flag and variable that can give it instead."""

    name: str  # dotted: "subscriptions.mentions_required"
    type: Any  # the schema's annotation (Annotated, optional and Literal included)
    default: Any

    @property
    def env(self) -> str:
        return _ENV_NAMES.get(self.name, "BUZZ_" + self.name.replace(".", "_").upper())

    @property
    def flag(self) -> str:
        return _FLAG_NAMES.get(self.name, "--" + self.name.replace(".", "-").replace("_", "-"))

    @property
    def base(self) -> Any:
        """The type without Annotated metadata and without ``| None``."""
        return _base_type(self.type)


def _base_type(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _base_type(members[0])
    return annotation


def _walk(struct_type: type[msgspec.Struct], prefix: str) -> list[Setting]:
    found: list[Setting] = []
    for field in msgspec.structs.fields(struct_type):
        name = prefix + field.encode_name
        kind = field.type
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            found.extend(_walk(kind, name + "."))
        else:
            default = (
                field.default_factory()
                if field.default_factory is not msgspec.NODEFAULT
                else field.default
            )
            found.append(Setting(name, kind, default))
    return found


#: Every setting of the file, in the file's order: derived from the schema, so a new key gets
#: its flag and its variable without being listed anywhere else.
SETTINGS: Final[tuple[Setting, ...]] = tuple(_walk(BuzzConfig, ""))
SETTINGS_BY_NAME: Final = {s.name: s for s in SETTINGS}


def _from_text(setting: Setting, text: str, source: str) -> Any:
    """A setting's value from an environment variable's text.

    Lists are comma-separated (blank items dropped); a table is ``NAME=VALUE`` pairs separated
    by commas; booleans are true/false, yes/no, on/off or 1/0.
    """
    base = setting.base
    origin = get_origin(base)
    value: Any = text
    if origin is dict:
        pairs = [item.strip() for item in text.split(",") if item.strip()]
        if any("=" not in pair for pair in pairs):
            raise ConfigError(f"{source}: expected NAME=VALUE pairs separated by commas")
        value = dict(pair.split("=", 1) for pair in pairs)
    elif origin is tuple or origin is list:
        value = [item.strip() for item in text.split(",") if item.strip()]
    elif base is bool:
        lowered = text.strip().lower()
        truth = {"true": True, "yes": True, "on": True, "1": True}
        falsity = {"false": False, "no": False, "off": False, "0": False}
        if lowered not in truth and lowered not in falsity:
            raise ConfigError(f"{source}: expected true or false, got {_describe(text)}")
        value = truth.get(lowered, False)
    return check_setting(setting, value, source)


def check_setting(setting: Setting, value: Any, source: str) -> Any:
    """``value`` converted to the setting's type; a :class:`ConfigError` naming ``source``."""
    if isinstance(value, list) and get_origin(setting.base) is dict:
        value = _pairs(value, source)
    if setting.name in CHOICES:
        return check_choice(value, CHOICES[setting.name], source)
    try:
        return msgspec.convert(value, setting.type, strict=False)
    except msgspec.ValidationError as exc:
        detail = str(exc).replace(" - at `$`", "").split(" - at `$")[0]
        raise ConfigError(f"{source}: {detail}") from None


def check_given(name: str, value: Any, where: str) -> None:
    """A value for setting ``name`` given in Python (a :class:`~nostr_buzz.bot.config.
    PluginConfig` field), checked as the file's would be but strictly: nothing is converted,
    so a value that would need converting is refused too."""
    setting = SETTINGS_BY_NAME[name]
    if name in CHOICES:
        check_choice(value, CHOICES[name], where)
        return
    try:
        msgspec.convert(value, setting.type, strict=True)
    except msgspec.ValidationError as exc:
        detail = str(exc).replace(" - at `$`", "").split(" - at `$")[0]
        raise ConfigError(f"{where}: {detail}") from None


def _pairs(items: Iterable[str], source: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"{source}: expected NAME=VALUE")
        out[name] = value
    return out


def _nested(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` → ``{"a": {"b": 1}}``."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        *sections, leaf = name.split(".")
        target = out
        for section in sections:
            target = target.setdefault(section, {})
        target[leaf] = value
    return out


def _overlay(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _overlay(merged[key], value)
        else:
            merged[key] = value
    return merged


class ConfigSources:
    """Flags, ``BUZZ_*`` environment and ``buzz.toml``, resolved value by value.

    The file is found as ``config_path`` (``--config``), else ``$BUZZ_CONFIG``, else
    ``./buzz.toml`` when it exists; an explicitly named file must exist and is read at once,
    the implicit one only when a value is needed from it.

    Every setting of the file can also come from a flag (``overrides``: dotted setting name →
    value, as :data:`SETTINGS` names them) or from its variable (``Setting.env``).  The key, the
    owner and the relays pick one source for the whole group (:meth:`secret_key`, :meth:`owner`,
    :meth:`relays`); every other setting is resolved on its own, in :attr:`file`.
    """

    RELAY_SOURCES: Final = f"--relay, {ENV_RELAYS} or relays in {DEFAULT_CONFIG_NAME}"
    KEY_SOURCES: Final = (
        f"--key, {ENV_PRIVATE_KEY} or secret_key/key_file/key_env in {DEFAULT_CONFIG_NAME}"
    )
    OWNER_SOURCES: Final = f"--owner, {ENV_OWNER} or owner in {DEFAULT_CONFIG_NAME}"

    def __init__(
        self,
        *,
        config_path: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self._flags: dict[str, Any] = {}
        for name, value in (overrides or {}).items():
            setting = SETTINGS_BY_NAME.get(name)
            if setting is None:
                raise ConfigError(f"unknown setting {name!r}")
            if value is not None:
                self._flags[name] = check_setting(setting, value, setting.flag)
        self._env: dict[str, Any] | None = None
        explicit: Path | None = None
        if config_path is not None and str(config_path).strip():
            explicit = Path(config_path)
        elif (from_env := _env_value(self.environ, ENV_CONFIG)) is not None:
            explicit = Path(from_env)
        self._file: BuzzConfig | None = None
        self._effective: BuzzConfig | None = None
        if explicit is not None:
            if not explicit.is_file():
                raise ConfigError(f"config file {explicit} not found")
            self.path: Path | None = explicit
            self._file = load_config_file(explicit)
        else:
            implicit = (cwd or Path.cwd()) / DEFAULT_CONFIG_NAME
            self.path = implicit if implicit.is_file() else None

    @property
    def file_only(self) -> BuzzConfig:
        """The config file's own contents (all defaults when there is no file)."""
        if self._file is None:
            self._file = BuzzConfig() if self.path is None else load_config_file(self.path)
        return self._file

    @property
    def env_settings(self) -> dict[str, Any]:
        """The settings the environment gives (dotted name → value), checked."""
        if self._env is None:
            found: dict[str, Any] = {}
            for setting in SETTINGS:
                text = _env_value(self.environ, setting.env)
                if text is not None and setting.name not in ("secret_key", "owner", "relays"):
                    found[setting.name] = _from_text(setting, text, setting.env)
            self._env = found
        return self._env

    @property
    def file(self) -> BuzzConfig:
        """The effective configuration: each setting from its flag, else its variable, else
        the file (the key, owner and relays as the file has them: use the methods for those)."""
        if self._effective is None:
            top = {
                name: value
                for layer in (self.env_settings, self._flags)
                for name, value in layer.items()
                if name not in _BY_SOURCE
            }
            if not top:
                self._effective = self.file_only
            else:
                merged = _overlay(msgspec.to_builtins(self.file_only), _nested(top))
                try:
                    config = msgspec.convert(merged, BuzzConfig)
                except msgspec.ValidationError as exc:  # each value was checked: a backstop
                    raise ConfigError(f"flags and environment: {exc}") from None
                _validate(config, "flags and environment")
                self._effective = config
        return self._effective

    def _file_label(self) -> str:
        return str(self.path) if self.path is not None else DEFAULT_CONFIG_NAME

    def _levels(self, names: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
        """For a group of settings: what the flags, the environment and the file give."""
        config = self.file_only
        file_values = {n: getattr(config, n) for n in names}
        env = {n: self.env_settings.get(n) for n in names}
        return [
            ("flag", {n: self._flags.get(n) for n in names}),
            ("env", env),
            ("file", file_values),
        ]

    def relays(
        self, flags: Sequence[str] = (), *, direction: Direction = "read"
    ) -> tuple[str, ...]:
        """The relays for reading or writing, from the first source that names any."""
        if flags:
            return parse_relay_list(flags, source="--relay")
        specific_name = "read_relays" if direction == "read" else "write_relays"
        specific_flag = self._flags.get(specific_name) or ()
        general_flag = self._flags.get("relays") or ()
        if specific_flag or general_flag:
            setting = SETTINGS_BY_NAME[specific_name if specific_flag else "relays"]
            return parse_relay_list(specific_flag or general_flag, source=setting.flag)
        specific_env = self.env_settings.get(specific_name) or ()
        if specific_env:
            return parse_relay_list(specific_env, source=SETTINGS_BY_NAME[specific_name].env)
        env = _env_value(self.environ, ENV_RELAYS)
        if env is not None:
            items = [item for item in env.split(",") if item.strip()]
            if items:  # "," alone names no relay: as blank, it counts as unset
                return parse_relay_list(items, source=ENV_RELAYS)
        config = self.file_only
        specific = config.read_relays if direction == "read" else config.write_relays
        # Already validated when the file was loaded.
        return specific or config.relays

    def require_relays(
        self, flags: Sequence[str] = (), *, direction: Direction = "read"
    ) -> tuple[str, ...]:
        found = self.relays(flags, direction=direction)
        if not found:
            raise ConfigError(f"no relay configured: give {self.RELAY_SOURCES}")
        return found

    def secret_key(self, flag: str | None = None) -> SecretKey | None:
        """The configured secret key, or None when no source names one."""
        if flag is not None and flag.strip():
            return _parse_secret(flag, "--key")
        env = _env_value(self.environ, ENV_PRIVATE_KEY)
        for level, values in self._levels(KEY_SETTINGS):
            if level == "env" and env is not None:
                return _parse_secret(env, ENV_PRIVATE_KEY)
            given = {n: v for n, v in values.items() if v is not None}
            if not given:
                continue
            if len(given) > 1:
                names = ", ".join(
                    SETTINGS_BY_NAME[n].flag if level == "flag" else SETTINGS_BY_NAME[n].env
                    for n in given
                )
                raise ConfigError(f"give at most one of {names}")
            return self._key_from(level, *next(iter(given.items())))
        return None

    def _key_from(self, level: str, name: str, value: str) -> SecretKey:
        setting = SETTINGS_BY_NAME[name]
        label = {"flag": setting.flag, "env": setting.env}.get(
            level, f"{self._file_label()}: {name}"
        )
        if name == "secret_key":
            return _parse_secret(value, label)
        if name == "key_env":
            found = _env_value(self.environ, value)
            if found is None:
                raise ConfigError(f"{label} names {value!r}, which is not set or blank")
            return _parse_secret(found, f"{label} {value}")
        path = Path(value).expanduser()
        if level == "file" and not path.is_absolute() and self.path is not None:
            # Relative to the config file, so the file works from any directory.
            path = self.path.parent / path
        check_key_file(path, where=self._file_label() if level == "file" else label)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise ConfigError(f"{label} {path}: cannot read it ({reason})") from None
        return _parse_secret(text, f"{label} {path}")

    def bunker(self, flag: str | None = None) -> BunkerUri | None:
        """The agent's NIP-46 bunker (``--bunker``, else ``$BUZZ_BUNKER``, else ``[signer]
        bunker``), or None.  A bunker and a secret key from any sources are refused together:
        which one signs would be a guess."""
        uri: BunkerUri | None
        if flag is not None and flag.strip():
            uri = parse_bunker(flag.strip(), source="--bunker")
        else:
            text = self.file.signer.bunker  # checked when loaded (its source is in the error)
            uri = None if text is None else parse_bunker(text, source="signer.bunker")
        if uri is not None and self.secret_key() is not None:
            raise ConfigError(
                f"the agent's key is given twice: a bunker (--bunker, BUZZ_BUNKER or [signer] "
                f"bunker) and a secret key ({self.KEY_SOURCES}); give one"
            )
        return uri

    def require_secret_key(self, flag: str | None = None) -> SecretKey:
        key = self.secret_key(flag)
        if key is None:
            raise ConfigError(f"no secret key configured: give {self.KEY_SOURCES}")
        return key

    def owner(self, flag: str | None = None) -> PublicKey | None:
        """The owner's public key, or None when no source names one."""
        flag = flag if flag is not None and flag.strip() else self._flags.get("owner")
        if flag is not None and flag.strip():
            return _parse_public(flag.strip(), "--owner")
        env = _env_value(self.environ, ENV_OWNER)
        if env is not None:
            return _parse_public(env, ENV_OWNER)
        if self.file_only.owner is not None:
            return _parse_public(self.file_only.owner, f"{self._file_label()}: owner")
        return None

    def agents(self, flags: Sequence[str] = ()) -> tuple[str, ...]:
        """The owner's agents as hex public keys: ``--agent`` flags, else ``agents`` in the
        file; empty when neither names any."""
        if flags:
            found = [_parse_public(flag.strip(), "--agent").hex for flag in flags]
        else:
            label = self._file_label()
            found = [_parse_public(a, f"{label}: agents").hex for a in self.file.agents]
        return tuple(dict.fromkeys(found))

    def pass_env(self, flags: Sequence[str] = ()) -> tuple[str, ...]:
        """``[agent] pass_env`` plus every ``--pass-env`` name (in order, without repeats)."""
        extra = parse_env_names(flags, source="--pass-env")  # the file's: checked on load
        guarded = _guarded_variables(self.file.key_env)
        for name in extra:
            if name in guarded:
                raise ConfigError(
                    f"--pass-env: {name} holds {guarded[name]}: the agent must never get it"
                )
        return tuple(dict.fromkeys((*self.file.agent.pass_env, *extra)))

    def permissions(self, flag: str | None = None) -> Permissions:
        """``flag`` (any case), else the effective ``[agent] permissions`` (``--permissions``,
        else ``$BUZZ_AGENT_PERMISSIONS``, else the file, else ``owner``)."""
        if flag is not None and flag.strip():
            for known in PERMISSIONS:
                if flag.strip().lower() == known:
                    return known
            refuse_choice(flag.strip(), PERMISSIONS, "--permissions")
        return self.file.agent.permissions

    def state_dir(self, flag: str | None = None) -> Path:
        """The bot's state directory, absolute: ``flag``, else the effective ``state_dir``
        (``--state-dir``, ``$BUZZ_STATE_DIR``, the file, ``.buzz``), relative to the config
        file's directory (without one: the working directory)."""
        base = self.path.parent if self.path is not None else Path.cwd()
        return (base / Path(flag or self.file.state_dir).expanduser()).absolute()

    def require_owner(self, flag: str | None = None) -> PublicKey:
        owner = self.owner(flag)
        if owner is None:
            raise ConfigError(f"no owner configured: give {self.OWNER_SOURCES}")
        return owner


def state_directory(sources: ConfigSources, state_dir: str | None = None) -> Path:
    """The bot's state directory (:meth:`ConfigSources.state_dir`), made absolute now so that
    no later change of directory moves the bot's state."""
    return sources.state_dir(state_dir)
