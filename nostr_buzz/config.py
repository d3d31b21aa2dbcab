"""Configuration: command-line flags, then ``BUZZ_*`` environment, then ``buzz.toml`` (spec 05/06).

For each value the first source that gives it wins; sources are never merged (a relay list from
the environment replaces the file's list, it is not appended to it).  The file schema covers the
whole bot (spec 06) and is strict: unknown keys are errors that name every one of them.

This module is an edge (it reads files and the environment); nothing in ``core`` imports it.
Error messages never repeat a secret key: a value that looks like one is replaced by a hint.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlsplit

import msgspec

from nostr_buzz.errors import SECRET_HINT, ConfigError, InvalidKey, looks_secret
from nostr_buzz.io.filemodes import check_key_file
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips.nip10 import is_valid_channel_id

__all__ = [
    "DEFAULT_CONFIG_NAME",
    "AgentSection",
    "BuzzConfig",
    "ConfigSources",
    "ContextSection",
    "GateSection",
    "SubscriptionsSection",
    "TimeoutsSection",
    "load_config_file",
    "parse_relay_list",
    "validate_relay_url",
]

DEFAULT_CONFIG_NAME: Final = "buzz.toml"

ENV_RELAYS: Final = "BUZZ_RELAYS"
ENV_PRIVATE_KEY: Final = "BUZZ_PRIVATE_KEY"
ENV_OWNER: Final = "BUZZ_OWNER"
ENV_CONFIG: Final = "BUZZ_CONFIG"

InFlightPolicy = Literal["queue", "steer", "interrupt"]
AuthorGate = Literal["owner-only", "allowlist", "anyone"]
ReplyMode = Literal["auto", "agent"]
Direction = Literal["read", "write"]

_Positive = Annotated[float, msgspec.Meta(gt=0)]
_Kind = Annotated[int, msgspec.Meta(ge=0, le=65535)]


class AgentSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[agent]``: the ACP agent subprocess (spec 06)."""

    command: str | None = None  # executable, e.g. "goose"
    args: tuple[str, ...] = ()  # e.g. ["acp"]
    env: dict[str, str] = {}  # variables set for the agent (values written here)
    pass_env: tuple[str, ...] = ()  # names copied from buzz's own environment (API keys)
    cwd: str | None = None  # the agent's working directory, used exactly as written
    model: str | None = None  # the model the agent runs, reported in metrics when known
    # Run the agent as this OS user (buzz run starts as root and drops to it for the agent):
    # the way to run any agent you do not fully trust, since it then cannot read the bot's key.
    user: str | None = None

    def __repr__(self) -> str:
        # env values are often API keys: show the names only.
        env = "{" + ", ".join(f"{name!r}: <hidden>" for name in self.env) + "}"
        return (
            f"AgentSection(command={self.command!r}, args={self.args!r}, env={env}, "
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
    agents: tuple[str, ...] = ()  # public keys to treat as agents (spec 01, profiles)
    # keys trusted like the owner for a channel's canvas, huddle guidelines and metadata
    trusted: tuple[str, ...] = ()


class TimeoutsSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[timeouts]`` in seconds."""

    relay: _Positive = 10.0  # connect + query per relay
    idle: _Positive = 620.0  # a turn with no agent update for this long is ended
    hard: _Positive = 7200.0  # a turn is ended after this long whatever happens


class ContextSection(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """``[context]``: standing context files (paths relative to the config file)."""

    base: str | None = None
    persona: str | None = None
    team_instructions: str | None = None


class BuzzConfig(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """The whole ``buzz.toml``.  Every field has a default, so an empty file is valid."""

    # The agent's secret key: at most one of these three.  Prefer key_file or key_env.
    secret_key: str | None = None
    key_file: str | None = None  # a file holding the key (64-hex or nsec), relative to the config
    key_env: str | None = None  # the name of an environment variable holding the key
    owner: str | None = None  # the owner's public key (hex or npub)
    agents: tuple[str, ...] = ()  # the owner's agents (hex or npub): what buzz metrics counts
    relays: tuple[str, ...] = ()  # read and write, unless the lists below are given
    read_relays: tuple[str, ...] = ()
    write_relays: tuple[str, ...] = ()
    in_flight: InFlightPolicy = "steer"
    context_message_limit: Annotated[int, msgspec.Meta(ge=1)] = 20
    reply_mode: ReplyMode = "auto"
    state_dir: str = ".buzz"
    agent: AgentSection = msgspec.field(default_factory=AgentSection)
    subscriptions: SubscriptionsSection = msgspec.field(default_factory=SubscriptionsSection)
    gate: GateSection = msgspec.field(default_factory=GateSection)
    timeouts: TimeoutsSection = msgspec.field(default_factory=TimeoutsSection)
    context: ContextSection = msgspec.field(default_factory=ContextSection)

    def __repr__(self) -> str:
        # The default repr would print secret_key.
        shown = "<hidden>" if self.secret_key is not None else "None"
        return f"BuzzConfig(secret_key={shown}, owner={self.owner!r}, relays={self.relays!r}, …)"


def _describe(value: str) -> str:
    """A value for an error message, or the secret hint in its place."""
    if looks_secret(value):
        return SECRET_HINT
    return repr(value if len(value) <= 80 else value[:80] + "…")


def validate_relay_url(url: str, *, source: str) -> str:
    """Return ``url`` stripped if it is a ``ws://`` or ``wss://`` URL with a host."""
    text = url.strip()
    try:
        parts = urlsplit(text)
        ok = parts.scheme.lower() in ("ws", "wss") and bool(parts.hostname)
        if ok:
            _ = parts.port  # raises ValueError for a non-numeric or out-of-range port
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(
            f"{source}: relay URL {_describe(text)} is not a ws:// or wss:// URL with a host"
        )
    return text


def parse_relay_list(urls: Iterable[str], *, source: str) -> tuple[str, ...]:
    """Validate every URL and drop repeats, keeping the first occurrence's order."""
    seen: dict[str, None] = {}
    for url in urls:
        seen.setdefault(validate_relay_url(url, source=source), None)
    return tuple(seen)


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


def _check_agent(config: BuzzConfig, where: str) -> None:
    """The agent never gets the bot's key, and its user is a plain user name."""
    key_variables = {ENV_PRIVATE_KEY} | ({config.key_env} if config.key_env else set())
    for name in config.agent.pass_env:
        if name in key_variables:
            raise ConfigError(
                f"{where}: agent.pass_env names {name}, which holds the bot's secret key: the "
                "agent must never get it"
            )
    for name, value in config.agent.env.items():
        if looks_secret(value):
            raise ConfigError(f"{where}: agent.env {name}: the value {SECRET_HINT}")
    user = config.agent.user
    if user is not None and (not user or user != user.strip() or "/" in user or user == "root"):
        raise ConfigError(f"{where}: agent.user must be the name of an OS user other than root")


def _validate(config: BuzzConfig, where: str) -> None:
    """Checks the types alone cannot express."""
    for name in ("relays", "read_relays", "write_relays"):
        parse_relay_list(getattr(config, name), source=f"{where}: {name}")
    given = [n for n in ("secret_key", "key_file", "key_env") if getattr(config, n) is not None]
    if len(given) > 1:
        raise ConfigError(f"{where}: give at most one of secret_key, key_file, key_env")
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
    if config.gate.mode == "allowlist" and not config.gate.allowlist:
        raise ConfigError(f'{where}: gate.mode = "allowlist" needs a non-empty gate.allowlist')
    for i, channel_id in enumerate(config.subscriptions.channels):
        if looks_secret(channel_id):
            raise ConfigError(
                f"{where}: subscriptions.channels[{i}]: expected a channel id; the value "
                f"{SECRET_HINT}"
            )
        if not is_valid_channel_id(channel_id):
            raise ConfigError(
                f"{where}: subscriptions.channels[{i}] is not a valid channel id "
                "(1-128 characters from A-Z a-z 0-9 _ -)"
            )


def load_config_file(path: str | Path) -> BuzzConfig:
    """Read and strictly validate one ``buzz.toml``; every problem is a :class:`ConfigError`."""
    where = str(path)
    try:
        data = Path(path).read_bytes()
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
    try:
        config = msgspec.convert(raw, BuzzConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    _validate(config, where)
    return config


def _env_value(environ: Mapping[str, str], name: str) -> str | None:
    """An environment variable's value, with blank counted as unset (spec 05)."""
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


class ConfigSources:
    """Flags, ``BUZZ_*`` environment and ``buzz.toml``, resolved value by value.

    The file is found as ``config_path`` (``--config``), else ``$BUZZ_CONFIG``, else
    ``./buzz.toml`` when it exists; an explicitly named file must exist and is read at once,
    the implicit one only when a value is needed from it.
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
    ) -> None:
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        explicit: Path | None = None
        if config_path is not None and str(config_path).strip():
            explicit = Path(config_path)
        elif (from_env := _env_value(self.environ, ENV_CONFIG)) is not None:
            explicit = Path(from_env)
        self._file: BuzzConfig | None = None
        if explicit is not None:
            if not explicit.is_file():
                raise ConfigError(f"config file {explicit} not found")
            self.path: Path | None = explicit
            self._file = load_config_file(explicit)
        else:
            implicit = (cwd or Path.cwd()) / DEFAULT_CONFIG_NAME
            self.path = implicit if implicit.is_file() else None

    @property
    def file(self) -> BuzzConfig:
        """The config file's contents (all defaults when there is no file)."""
        if self._file is None:
            self._file = BuzzConfig() if self.path is None else load_config_file(self.path)
        return self._file

    def _file_label(self) -> str:
        return str(self.path) if self.path is not None else DEFAULT_CONFIG_NAME

    def relays(
        self, flags: Sequence[str] = (), *, direction: Direction = "read"
    ) -> tuple[str, ...]:
        """The relays for reading or writing, from the first source that names any."""
        if flags:
            return parse_relay_list(flags, source="--relay")
        env = _env_value(self.environ, ENV_RELAYS)
        if env is not None:
            items = [item for item in env.split(",") if item.strip()]
            if items:  # "," alone names no relay: as blank, it counts as unset
                return parse_relay_list(items, source=ENV_RELAYS)
        config = self.file
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
        if env is not None:
            return _parse_secret(env, ENV_PRIVATE_KEY)
        config = self.file
        label = self._file_label()
        if config.secret_key is not None:
            return _parse_secret(config.secret_key, f"{label}: secret_key")
        if config.key_env is not None:
            value = _env_value(self.environ, config.key_env)
            if value is None:
                raise ConfigError(
                    f"{label}: key_env names {config.key_env!r}, which is not set or blank"
                )
            return _parse_secret(value, f"{label}: key_env {config.key_env}")
        if config.key_file is not None:
            path = Path(config.key_file).expanduser()
            if not path.is_absolute() and self.path is not None:
                # Relative to the config file, so the file works from any directory.
                path = self.path.parent / path
            check_key_file(path, where=label)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise ConfigError(f"{label}: key_file {path}: cannot read it ({reason})") from None
            return _parse_secret(text, f"{label}: key_file {path}")
        return None

    def require_secret_key(self, flag: str | None = None) -> SecretKey:
        key = self.secret_key(flag)
        if key is None:
            raise ConfigError(f"no secret key configured: give {self.KEY_SOURCES}")
        return key

    def owner(self, flag: str | None = None) -> PublicKey | None:
        """The owner's public key, or None when no source names one."""
        if flag is not None and flag.strip():
            return _parse_public(flag.strip(), "--owner")
        env = _env_value(self.environ, ENV_OWNER)
        if env is not None:
            return _parse_public(env, ENV_OWNER)
        if self.file.owner is not None:
            return _parse_public(self.file.owner, f"{self._file_label()}: owner")
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

    def require_owner(self, flag: str | None = None) -> PublicKey:
        owner = self.owner(flag)
        if owner is None:
            raise ConfigError(f"no owner configured: give {self.OWNER_SOURCES}")
        return owner
