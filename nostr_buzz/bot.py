"""The bot plugin: wires the whole pipeline together (spec 06, "The bot plugin").

subscribe → verify (the relay client) → gate → route → :class:`DispatchQueue` → resolve context
(thread or DM history, profiles, channel metadata) → :func:`compile_turn` → the turn ledger →
:class:`AgentDriver` ``session/prompt`` → publish the reply → account usage → publish the NIP-AM
metric through the durable outbox → diagnostics.

:class:`BuzzPlugin` runs on its own (:meth:`BuzzPlugin.run` subscribes to the read relays) or
embedded in an existing bot that feeds it verified events (:meth:`BuzzPlugin.handle_event`).

Choices where spec 06 is silent (also listed in the project report):

* **Gate.** The agent's own events never start a turn (no loops).  Other agents (``gate.agents``
  or a NIP-24 ``bot`` profile seen earlier) start one only when they mention this agent, even
  with ``mentions_required = false``.  ``owner-only`` admits the owner, ``allowlist`` the owner
  and the listed keys, ``anyone`` every key.  Refusals are ``event_rejected`` diagnostics.
* **Subscriptions.** ``channels`` restricts channel events; events without a channel (direct
  messages) are accepted when they mention the agent.
* **Owner commands.** A kind 9 from the owner that mentions the agent and whose content, after
  leading ``nostr:npub…``/``@name`` tokens, starts with ``!cancel`` or ``!shutdown``.
  ``!cancel`` cancels the running turn of the command's channel (every running turn when that
  channel has none); the cancelled batch is dropped (settled as delivered), not retried.
  ``!shutdown`` stops :meth:`run`.  Commands bypass the shard filter.
* **Sessions.** One ACP session per channel.  The metric's ``sessionId`` is an id the harness
  makes for each ACP session (random, so a restart starts a new one); ``adapterSessionId`` is
  the agent's own session id.  ``harness``: ``goose``/``codex``/``claude`` when the command,
  its arguments or the agent's name say so, else the agent's reported name, else the command.
* **Steering** waits until the turn's prompt is on the wire; steers of one turn are sent one
  at a time.  A dead-lettered batch gets an ``event_dead_lettered`` diagnostic (no notice).
* **Restart safety.** The queue snapshot (with its remembered delivered ids) and the newest
  ``created_at`` handled are written to the state directory after every change; a start
  subscribes with ``since`` = that position, so missed mentions are replayed and handled ones
  are refused as duplicates.  A first start (no state) begins at the current time.
* **Threads** fetch ``limit + 1`` replies so that truncation is proven, not guessed.  A real
  channel without kind 39000 metadata gets no ``channel`` input (no snapshot).
* **Shard** ``i/n``: a destination belongs to shard ``int(sha256(destination)) mod n``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from nostr_buzz.config import AuthorGate, ConfigSources, InFlightPolicy, ReplyMode
from nostr_buzz.core.compiler import compile_steer, compile_turn
from nostr_buzz.core.ledger import TurnLedger
from nostr_buzz.core.manifest import Manifest
from nostr_buzz.core.queue import Batch, DispatchQueue, QueuedEvent
from nostr_buzz.core.turn_input import (
    ChannelInfo,
    ContextMessage,
    ProfileInfo,
    Standing,
    TurnContext,
    TurnEvent,
    TurnInput,
)
from nostr_buzz.errors import BuzzError, ConfigError, QueueError, RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.acp_driver import AgentDriver, SessionStart, TurnResult, standing_text
from nostr_buzz.io.diagnostics import DiagnosticRecord, DiagnosticsFeed, rfc3339_ms
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event
from nostr_buzz.profile import Profile

__all__ = ["BuzzPlugin", "PluginConfig", "Shard", "parse_shard", "shard_of"]

log = logging.getLogger(__name__)

CHAT_KIND: Final = 9
METADATA_KIND: Final = 0
GROUP_METADATA_KIND: Final = 39000
STATE_FILE: Final = "bot-state.json"
QUEUE_FILE: Final = "queue.json"
DIAGNOSTICS_FILE: Final = "diagnostics.jsonl"
OUTBOX_FILE: Final = "outbox.sqlite3"
AGENT_LOG: Final = "agent.log"
#: The worker re-checks the queue at least this often (backoffs end without a wake-up).
_POLL: Final = 0.5
_RESTART_BASE: Final = 0.5
_RESTART_CAP: Final = 30.0
_HEX64: Final = re.compile(r"[0-9a-f]{64}")
_LEADING_MENTION: Final = re.compile(r"\s*(?:nostr:(?:npub|nprofile)1[0-9a-z]+|@\S+)")
_KNOWN_HARNESSES: Final = ("goose", "codex", "claude")
REMEMBERED_COMMANDS: Final = 100


@dataclass(frozen=True)
class Shard:
    index: int
    count: int


def parse_shard(text: str) -> Shard:
    """``"i/n"`` with 0 ≤ i < n; raises :class:`ConfigError`."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ConfigError(f"--shard: expected i/n (e.g. 0/2), got {text[:20]!r}")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1 or index >= count:
        raise ConfigError("--shard: i/n needs n ≥ 1 and 0 ≤ i < n")
    return Shard(index, count)


def shard_of(destination: str, count: int) -> int:
    """The stable shard of a destination: sha256 of its UTF-8 bytes, as an integer, mod n."""
    return int.from_bytes(hashlib.sha256(destination.encode("utf-8")).digest(), "big") % count


@dataclass(frozen=True)
class PluginConfig:
    """Everything the plugin needs, already resolved (keys parsed, files read)."""

    agent_secret: SecretKey
    owner: PublicKey
    read_relays: tuple[str, ...]
    write_relays: tuple[str, ...]
    agent_command: str
    agent_args: tuple[str, ...] = ()
    agent_env: Mapping[str, str] = field(default_factory=dict)
    agent_pass_env: tuple[str, ...] = ()
    agent_cwd: str | None = None
    state_dir: Path = Path(".buzz")
    channels: tuple[str, ...] = ()
    kinds: tuple[int, ...] = (CHAT_KIND,)
    mentions_required: bool = True
    gate: AuthorGate = "owner-only"
    allowlist: frozenset[str] = frozenset()
    agents: frozenset[str] = frozenset()
    in_flight: InFlightPolicy = "steer"
    context_message_limit: int = 20
    relay_timeout: float = 10.0
    idle_timeout: float = 620.0
    hard_timeout: float = 7200.0
    standing: Standing = field(default_factory=Standing)
    reply_mode: ReplyMode = "auto"
    model: str | None = None
    shard: Shard | None = None
    #: A new event waits this long before its channel is flushed, so that a burst of
    #: messages sent together becomes one turn (spec 02 coalesces only what is queued).
    coalesce_window: float = 0.25

    def __repr__(self) -> str:  # never the secret key
        return (
            f"PluginConfig(agent={self.agent_secret.public_key.hex}, owner={self.owner.hex}, "
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
    ) -> PluginConfig:
        """Resolve flags › environment › ``buzz.toml``; every problem is a ConfigError."""
        file = sources.file
        secret = sources.require_secret_key(key)
        owner_key = sources.require_owner(owner)
        read = sources.require_relays(relays, direction="read")
        write = sources.relays(relays, direction="write") or read
        if file.agent.command is None:
            raise ConfigError("no agent command configured: set [agent] command in buzz.toml")
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

        standing = Standing(
            base=read_text("base", file.context.base),
            system=read_text("persona", file.context.persona),
            team_instructions=read_text("team_instructions", file.context.team_instructions),
        )
        state = Path(state_dir or file.state_dir).expanduser()
        if not state.is_absolute():
            state = base_dir / state
        return cls(
            agent_secret=secret,
            owner=owner_key,
            read_relays=read,
            write_relays=write,
            agent_command=file.agent.command,
            agent_args=file.agent.args,
            agent_env=dict(file.agent.env),
            agent_pass_env=file.agent.pass_env,
            agent_cwd=file.agent.cwd,
            state_dir=state,
            channels=file.subscriptions.channels,
            kinds=file.subscriptions.kinds,
            mentions_required=file.subscriptions.mentions_required,
            gate=file.gate.mode,
            allowlist=frozenset(PublicKey.from_str(k).hex for k in file.gate.allowlist),
            agents=frozenset(PublicKey.from_str(k).hex for k in file.gate.agents),
            in_flight=file.in_flight,
            context_message_limit=file.context_message_limit,
            relay_timeout=file.timeouts.relay,
            idle_timeout=file.timeouts.idle,
            hard_timeout=file.timeouts.hard,
            standing=standing,
            reply_mode=file.reply_mode,
            model=file.agent.model,
            shard=shard,
        )


@dataclass
class _Session:
    """One live ACP session (one per channel) and what it has been given."""

    start: SessionStart
    harness_id: str  # the metric's sessionId
    delivered: set[str] = field(default_factory=set)
    turns: int = 0


@dataclass
class _Running:
    """A batch between flush and settlement."""

    batch: Batch
    channel_id: str
    channel_type: str
    turn_id: str
    ledger: TurnLedger = field(default_factory=TurnLedger)
    session: _Session | None = None
    live: asyncio.Event = field(default_factory=asyncio.Event)  # the prompt is on the wire
    done: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_reason: Literal["interrupt", "steer", "owner"] | None = None
    steer_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    steered: list[str] = field(default_factory=list)  # ids injected into this turn
    ended: bool = False  # the prompt answered: no new steer may start
    steer_idle: asyncio.Event = field(default_factory=asyncio.Event)  # no steer on the wire

    def __post_init__(self) -> None:
        self.steer_idle.set()


def _utc(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _harness(command: str, args: Sequence[str], agent_name: str | None) -> str:
    words = " ".join([command, *args, agent_name or ""]).lower()
    for known in _KNOWN_HARNESSES:
        if known in words:
            return known
    if agent_name:
        return agent_name
    return Path(command).name or command


def _owner_command(content: str) -> str | None:
    """``cancel`` or ``shutdown`` when the content is an owner command, else None."""
    rest = content
    while (match := _LEADING_MENTION.match(rest)) is not None:
        rest = rest[match.end() :]
    word = rest.strip().split(maxsplit=1)
    if word and word[0] in ("!cancel", "!shutdown"):
        return word[0][1:]
    return None


class BuzzPlugin:
    """The agent bot: see the module docstring.

    ``clock``: wall-clock seconds (queue times, reply ``created_at``).  ``on_diagnostic``: an
    in-process observer of every diagnostic record.  Use ``async with BuzzPlugin(cfg) as bot``
    or :meth:`start`/:meth:`close`; :meth:`run` does both around its subscription.
    """

    def __init__(
        self,
        config: PluginConfig,
        *,
        on_diagnostic: Callable[[DiagnosticRecord], None] | None = None,
        clock: Callable[[], float] = time.time,
        include_prompt_text: bool = False,
    ) -> None:
        self.config = config
        self._clock = clock
        self.agent_hex = config.agent_secret.public_key.hex
        # Nothing is created on disk before start(): the feed opens its file on the first
        # record, the outbox is opened by start().
        self.diagnostics = DiagnosticsFeed(
            config.state_dir / DIAGNOSTICS_FILE,
            clock=lambda: datetime.fromtimestamp(self._clock(), UTC),
            callback=on_diagnostic,
            include_prompt_text=include_prompt_text,
        )
        self.queue = self._load_queue()
        self._position, commands = self._load_state()
        #: Owner commands already obeyed (persisted): replays after a restart are ignored.
        self._commands: deque[str] = deque(commands, maxlen=REMEMBERED_COMMANDS)
        # A first start serves what arrives from its creation on (nothing older is replayed).
        self._first_since = int(self._clock())
        self.pool = RelayPool(
            config.read_relays, secret=config.agent_secret, timeout=config.relay_timeout
        )
        self.write_pool = RelayPool(
            config.write_relays, secret=config.agent_secret, timeout=config.relay_timeout
        )
        if not self.write_pool.urls:
            raise RelayError("a metric publisher needs at least one write relay")
        self._metric_context: dict[str, tuple[str | None, str | None, str | None]] = {}
        self.publisher: MetricPublisher | None = None  # opened by start()
        self.driver = AgentDriver(
            config.agent_command,
            config.agent_args,
            env_names=config.agent_pass_env,
            env=config.agent_env,
            cwd=config.agent_cwd,
            log_path=config.state_dir / AGENT_LOG,
            idle_timeout=config.idle_timeout,
            hard_timeout=config.hard_timeout,
            on_diagnostic=self._on_driver_diagnostic,
            # One clock for the metric's startedAt (taken here) and timestamp (the driver's).
            clock=lambda: datetime.fromtimestamp(self._clock(), UTC),
        )
        self._sessions: dict[str, _Session] = {}
        self._running: dict[str, _Running] = {}
        self._known_agents: set[str] = set(config.agents)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._publisher_stop = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._retrier: asyncio.Task[None] | None = None
        self._agent_lock = asyncio.Lock()
        self._agent_failures = 0
        self._last_push = 0.0
        self._started = False
        self._closed = False
        self.harness = _harness(config.agent_command, config.agent_args, None)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start the agent, the worker loop and the metric retry loop (idempotent)."""
        if self._started:
            return
        if self._closed:
            raise BuzzError("this plugin is closed; create a new one")
        self._started = True
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        self.publisher = MetricPublisher(
            self.config.agent_secret,
            self.config.owner,
            self.config.state_dir / OUTBOX_FILE,
            list(self.config.write_relays),
            timeout=self.config.relay_timeout,
            on_report=self._on_publish_report,
        )
        info = await self.driver.start()
        self.harness = _harness(self.config.agent_command, self.config.agent_args, info.name)
        self._worker = asyncio.create_task(self._work(), name="buzz-worker")
        self._retrier = asyncio.create_task(
            self.publisher.run(self._publisher_stop, idle=max(1.0, self.config.relay_timeout)),
            name="buzz-metric-retry",
        )

    async def close(self) -> None:
        """Stop everything; running turns are abandoned (their batches are retried after a
        restart, from the queue snapshot).  Metric sends in progress get a bounded wait."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._publisher_stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.cancel()
        turn_tasks = [t for t in self._tasks if t.get_name().startswith("buzz-turn")]
        for task in turn_tasks:
            task.cancel()
        others = [t for t in self._tasks if t not in turn_tasks]
        if others:
            # Metric sends and steers: each already bounded by its own timeout.
            await asyncio.wait(others, timeout=self.config.relay_timeout + 3)
            for task in others:
                task.cancel()
        pending = [t for t in [self._worker, self._retrier, *self._tasks] if t is not None]
        if pending:
            await asyncio.wait(pending, timeout=self.config.relay_timeout + 5)
        await self.driver.close()
        if self._started:  # a plugin never started leaves nothing on disk
            self._persist()
        if self.publisher is not None:
            self.publisher.close()
        self.diagnostics.close()

    async def __aenter__(self) -> BuzzPlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def stop(self) -> None:
        """Ask :meth:`run` to return (what ``!shutdown`` and signal handlers do)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    async def run(self) -> None:
        """Subscribe to the read relays and serve until :meth:`stop` (or ``!shutdown``)."""
        try:
            await self.start()
            subscription = asyncio.create_task(self._subscribe(), name="buzz-subscription")
            stopper = asyncio.create_task(self._stop.wait())
            await asyncio.wait({subscription, stopper}, return_when=asyncio.FIRST_COMPLETED)
            lost = subscription.done() and not self._stop.is_set()
            for task in (subscription, stopper):
                task.cancel()
            outcomes = await asyncio.gather(subscription, stopper, return_exceptions=True)
            if lost:
                problem = outcomes[0] if isinstance(outcomes[0], Exception) else None
                # Every relay gave up reconnecting (or closed the subscription): nothing to serve.
                raise RelayError(
                    "the subscription to every read relay ended"
                    + (f": {problem}" if problem else "; check the relays")
                )
        finally:
            await self.close()

    def subscription_filters(self) -> list[dict[str, Any]]:
        """What :meth:`run` asks the relays for, from the persisted position on."""
        since = self._position if self._position is not None else self._first_since
        base: dict[str, Any] = {"kinds": list(self.config.kinds), "since": since}
        mentioned = {**base, "#p": [self.agent_hex]}
        if self.config.mentions_required:
            return [mentioned]
        if self.config.channels:
            return [mentioned, {**base, "#h": list(self.config.channels)}]
        return [base]

    async def _subscribe(self) -> None:
        filters = self.subscription_filters()
        if self._position is None:
            self._position = int(filters[0]["since"])
            self._persist()
        events = self.pool.subscribe(filters)
        try:
            async for event in events:
                await self.handle_event(event)
                if self._stop.is_set():
                    return
        finally:
            # Closing the generator closes every relay connection and task (RelayPool).
            await events.aclose()  # type: ignore[attr-defined]

    # -- intake -------------------------------------------------------------------------

    async def handle_event(self, event: Event, prompt_tag: str = "@mention") -> bool:
        """Gate, route and queue one verified event; True when it was queued (or was an owner
        command).  Starts the plugin on first use."""
        if not isinstance(event, Event):
            raise BuzzError("handle_event expects a verified Event")
        if self._closed:
            return False
        await self.start()
        command = self._command_of(event)
        if command is not None:
            if event.id in self._commands:
                return False  # replayed after a restart: a command is obeyed once
            self._commands.append(event.id)
            self._advance(event)
            await self._owner_command(command, event)
            return True
        reason = self._refusal(event)
        if reason is not None:
            self.diagnostics.event_rejected(
                reason, event_id=event.id, channel_id=nip10.channel(event)
            )
            self._advance(event)
            return False
        if self.config.shard is not None:
            shard = self.config.shard
            if shard_of(nip10.destination(event), shard.count) != shard.index:
                return False  # another process serves it: no diagnostic, no position change
        result = self.queue.push(event, prompt_tag, now=self._clock())
        for dropped in result.dropped:
            self.diagnostics.event_rejected("queue_full_dropped", event_id=dropped)
        self._advance(event)
        if not result.accepted:
            return False
        self._last_push = time.monotonic()
        channel = self._queue_channel(event)
        running = self._running.get(channel)
        if running is not None and self.queue.in_flight(channel):
            if self.config.in_flight == "steer":
                self._spawn(self._steer(running, event, prompt_tag), "buzz-steer")
            elif self.config.in_flight == "interrupt":
                await self._cancel_turn(running, "interrupt")
        self._wake.set()
        return True

    @staticmethod
    def _queue_channel(event: Event) -> str:
        return nip10.channel(event) or f"dm-{event.pubkey}"

    def _mentions_me(self, event: Event) -> bool:
        return self.agent_hex in nip10.mentions(event)

    def _command_of(self, event: Event) -> str | None:
        if event.kind != CHAT_KIND or event.pubkey != self.config.owner.hex:
            return None
        if not self._mentions_me(event):
            return None
        return _owner_command(event.content)

    def _refusal(self, event: Event) -> str | None:
        """Why the gate refuses an event, or None (see the module docstring)."""
        cfg = self.config
        actor = event.pubkey
        if actor == self.agent_hex:
            return "own_event"
        if event.kind not in cfg.kinds:
            return "kind_not_subscribed"
        mentioned = self._mentions_me(event)
        if cfg.mentions_required and not mentioned:
            return "not_mentioned"
        if actor in self._known_agents and not mentioned:
            return "agent_not_mentioning"
        channel = nip10.channel(event)
        if channel is None and not mentioned:
            return "direct_without_mention"
        if channel is not None and cfg.channels and channel not in cfg.channels:
            return "channel_not_subscribed"
        if cfg.gate == "owner-only" and actor != cfg.owner.hex:
            return "author_not_owner"
        if cfg.gate == "allowlist" and actor != cfg.owner.hex and actor not in cfg.allowlist:
            return "author_not_allowed"
        return None

    def _advance(self, event: Event) -> None:
        # Capped at the clock: an event dated in the future must not make a restart skip
        # everything sent before that date.
        seen = min(event.created_at, int(self._clock()))
        if self._position is None or seen > self._position:
            self._position = seen
        self._persist()

    async def _owner_command(self, command: str, event: Event) -> None:
        self.diagnostics.emit(
            "owner_command",
            channel_id=nip10.channel(event),
            payload={"command": command, "eventId": event.id},
        )
        if command == "shutdown":
            self.stop()
            return
        channel = self._queue_channel(event)
        targets = [self._running[channel]] if channel in self._running else []
        if not targets:
            targets = list(self._running.values())
        for running in targets:
            await self._cancel_turn(running, "owner")

    async def _cancel_turn(
        self, running: _Running, reason: Literal["interrupt", "steer", "owner"]
    ) -> None:
        if running.cancel_reason is None:
            running.cancel_reason = reason
        if running.session is not None and running.live.is_set():
            await self.driver.cancel(running.session.start.session_id)

    # -- the worker ---------------------------------------------------------------------

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _work(self) -> None:
        while not self._stop.is_set():
            quiet_for = time.monotonic() - self._last_push
            if quiet_for < self.config.coalesce_window:
                # A burst may still be arriving: a deliberate debounce, bounded by the window.
                await asyncio.sleep(self.config.coalesce_window - quiet_for)
                continue
            batch = self.queue.flush_next(self._clock())
            if batch is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_POLL):
                        await self._wake.wait()
                continue
            self._persist()
            self._spawn(self._run_batch(batch), f"buzz-turn {batch.channel}")

    async def _ensure_agent(self) -> None:
        async with self._agent_lock:
            while not self.driver.alive and not self._closed:
                if self._agent_failures:
                    delay = min(_RESTART_CAP, _RESTART_BASE * 2 ** (self._agent_failures - 1))
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._stop.wait()
                    if self._closed:
                        return
                self._sessions.clear()  # sessions died with the process
                try:
                    info = await self.driver.restart()
                except BuzzError as exc:
                    self._agent_failures += 1
                    self.diagnostics.emit("agent_restart_failed", payload={"error": str(exc)})
                    continue
                self.harness = _harness(
                    self.config.agent_command, self.config.agent_args, info.name
                )
                self.diagnostics.emit("agent_restarted", payload={"pid": info.pid})

    async def _session_for(self, channel: str) -> _Session:
        if not self.driver.alive:
            await self._ensure_agent()
        session = self._sessions.get(channel)
        if session is None:
            text = standing_text(self.config.standing, self.config.agent_cwd)
            cwd = self.config.agent_cwd or str(Path.cwd())
            start = await self.driver.new_session(cwd, text)
            session = _Session(start=start, harness_id=uuid.uuid4().hex)
            self._sessions[channel] = session
        return session

    async def _run_batch(self, batch: Batch) -> None:
        newest = batch.events[-1].event
        channel = nip10.channel(newest)
        running = _Running(
            batch=batch,
            channel_id=channel or batch.channel,
            channel_type="stream" if channel is not None else "dm",
            turn_id=uuid.uuid4().hex,
        )
        self._running[batch.channel] = running
        started_at = datetime.fromtimestamp(self._clock(), UTC)
        result: TurnResult | None = None
        try:
            session = await self._session_for(batch.channel)
            running.session = session
            turn_input, history_ids = await self._resolve(batch, running, session)
            compiled = compile_turn(turn_input)
            running.ledger.reset()
            running.ledger.set_base(compiled.manifest)
            ids = dict(session=session.harness_id, turn=running.turn_id, channel=running.channel_id)
            self.diagnostics.turn_started(
                [q.event.id for q in batch.events],
                channel_id=ids["channel"],
                session_id=ids["session"],
                turn_id=ids["turn"],
            )
            if running.cancel_reason is not None:
                self._settle_cancelled(running)
                return
            self.diagnostics.prompt_context_delivery(
                compiled.sections,
                compiled.manifest,
                # Legacy delivery prepends every non-blank standing section to this prompt.
                standing_context_included=not turn_input.standing_context_sent
                and bool(standing_text(self.config.standing, None)),
                event_delta_count=len(turn_input.context.messages) if turn_input.context else 0,
                channel_id=ids["channel"],
                session_id=ids["session"],
                turn_id=ids["turn"],
            )
            session_id = session.start.session_id
            turn = asyncio.create_task(self.driver.run_turn(session_id, compiled.sections))
            # run_turn registers the turn before its first await: from here steers may go.
            await asyncio.sleep(0)
            running.live.set()
            if running.cancel_reason is not None:
                await self.driver.cancel(session_id)
            result = await turn
            running.ended = True
            # A steer the agent answered before its prompt response belongs to this turn's
            # ledger: let it finish (bounded by the driver's request timeout) before the
            # metric takes the snapshot and the batch settles.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.driver.request_timeout + 1):
                    await running.steer_idle.wait()
            session.turns += 1
            self.diagnostics.turn_completed(
                result.outcome,
                result.stop_reason,
                channel_id=ids["channel"],
                session_id=ids["session"],
                turn_id=ids["turn"],
            )
            if result.usage is not None:
                self._publish_metric(batch, running, session, result, started_at)
            self._settle(running, result, session, history_ids)
            if result.outcome == "success" and self.config.reply_mode == "auto":
                text = result.final_message or result.reply
                if text.strip():
                    self._spawn(self._reply(newest, text), "buzz-reply")
            if result.terminal_evidence == "agent_exit" or not self.driver.alive:
                self._agent_failures += 1
                self._sessions.clear()
                self._spawn(self._ensure_agent(), "buzz-agent-restart")
            elif result.outcome == "success":
                self._agent_failures = 0
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # resolution, session or compile trouble: retry the batch
            log.warning("turn in %s failed: %s", batch.channel, exc)
            self.diagnostics.emit(
                "turn_failed",
                channel_id=running.channel_id,
                turn_id=running.turn_id,
                payload={"error": f"{type(exc).__name__}: {exc}"},
            )
            self._fail(batch)
            if not self.driver.alive:
                self._spawn(self._ensure_agent(), "buzz-agent-restart")
        finally:
            running.done.set()
            if self._running.get(batch.channel) is running:
                del self._running[batch.channel]
            self._persist()
            self._wake.set()

    def _settle(
        self, running: _Running, result: TurnResult, session: _Session, history: Iterable[str]
    ) -> None:
        batch = running.batch
        if result.outcome == "success":
            self.queue.complete(batch)
            session.delivered.update(q.event.id for q in batch.events)
            session.delivered.update(q.event.id for q in batch.cancelled_events)
            session.delivered.update(history)
            session.delivered.update(running.steered)
        elif result.outcome == "cancelled":
            self._settle_cancelled(running)
        else:
            self._fail(batch)

    def _settle_cancelled(self, running: _Running) -> None:
        reason = running.cancel_reason
        if reason in ("interrupt", "steer"):
            self.queue.requeue_cancelled(running.batch, reason)
        else:  # the owner's !cancel, or the agent cancelled on its own: dropped, not retried
            self.queue.complete(running.batch)

    def _fail(self, batch: Batch) -> None:
        dead = self.queue.fail(batch, self._clock())
        if dead is not None:
            self.diagnostics.emit(
                "event_dead_lettered",
                channel_id=dead.channel,
                payload={"eventIds": [q.event.id for q in dead.events], "attempts": dead.attempts},
            )

    # -- steering -----------------------------------------------------------------------

    async def _steer(self, running: _Running, event: Event, prompt_tag: str) -> None:
        async with running.steer_lock:
            live = asyncio.create_task(running.live.wait())
            done = asyncio.create_task(running.done.wait())
            try:
                await asyncio.wait({live, done}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                live.cancel()
                done.cancel()
            session = running.session
            if (
                running.done.is_set()
                or running.ended
                or session is None
                or running.cancel_reason is not None
            ):
                return  # the event stays pending: it rides with the channel's next batch
            running.steer_idle.clear()
            try:
                await self._deliver_steer(running, session, event, prompt_tag)
            finally:
                running.steer_idle.set()

    async def _deliver_steer(
        self, running: _Running, session: _Session, event: Event, prompt_tag: str
    ) -> None:
        session_id = session.start.session_id
        steer = compile_steer(
            event,
            channel_id=running.channel_id,
            channel_type=running.channel_type,
            prompt_tag=prompt_tag,
        )
        outcome = await self.driver.steer(session_id, steer.text)
        ids = dict(
            channel_id=running.channel_id,
            session_id=session.harness_id,
            turn_id=running.turn_id,
        )
        now = self._clock()
        if outcome == "injected":
            running.ledger.accept_update(steer.manifest)  # before acknowledging (spec 06)
            running.steered.append(event.id)
            self._steer_result(event.id, "injected", now)
            self.diagnostics.prompt_context_steer("injected", running.ledger.snapshot(), **ids)
        elif outcome == "started_new_turn":
            self._steer_result(event.id, "started_new_turn", now)
            self.diagnostics.prompt_context_steer("startedNewTurn", steer.manifest, **ids)
        elif outcome == "failed":
            self.diagnostics.prompt_context_steer("failed", None, **ids)
            await self._cancel_turn(running, "steer")
        else:  # released: the event stays pending
            self.diagnostics.prompt_context_steer("released", None, **ids)
        self._persist()

    def _steer_result(self, event_id: str, outcome: str, now: float) -> None:
        with contextlib.suppress(QueueError):
            self.queue.steer_result(event_id, outcome, now)

    # -- context resolution ---------------------------------------------------------------

    async def _resolve(
        self, batch: Batch, running: _Running, session: _Session
    ) -> tuple[TurnInput, list[str]]:
        """The compiler's input for ``batch`` (spec 06 "Context resolution"), and the ids of
        the history messages fetched (committed as delivered after a successful turn)."""
        events = [q.event for q in batch.events]
        cancelled = [q.event for q in batch.cancelled_events]
        newest = events[-1]
        limit = self.config.context_message_limit
        timeout = self.config.relay_timeout
        root_id = nip10.thread_ref(newest).root
        channel = nip10.channel(newest)
        kind: Literal["thread", "dm"] | None = None
        history: list[Event] = []
        total = 0
        truncated = False
        if root_id is not None:
            kind = "thread"
            replies_filter: dict[str, Any] = {
                "kinds": list(self.config.kinds),
                "#e": [root_id],
                "limit": limit + 1,
            }
            if channel is not None:
                replies_filter["#h"] = [channel]
            found = await self.pool.query([{"ids": [root_id]}, replies_filter], timeout=timeout)
            root = next((e for e in found.events if e.id == root_id), None)
            replies = [
                e
                for e in found.events
                if e.id != root_id
                and nip10.thread_ref(e).root == root_id
                and nip10.channel(e) == channel
            ]
            replies.sort(key=lambda e: (e.created_at, e.id))
            truncated = len(replies) > limit
            # Spec 06: 1 (the root, which exists even when the relay no longer returns it)
            # + the replies the fetch proved to exist.
            total = 1 + len(replies)
            history = ([root] if root is not None else []) + replies[-limit:]
        elif channel is None:
            kind = "dm"
            actor = newest.pubkey
            flt = {"kinds": list(self.config.kinds), "limit": limit}
            found = await self.pool.query(
                [
                    {**flt, "authors": [actor], "#p": [self.agent_hex]},
                    {**flt, "authors": [self.agent_hex], "#p": [actor]},
                ],
                timeout=timeout,
            )
            direct = [e for e in found.events if nip10.channel(e) is None]
            direct.sort(key=lambda e: (e.created_at, e.id))
            history = direct[-limit:]
            truncated = len(history) >= limit
            total = len(history) + (1 if truncated else 0)
        fetched_ids = [e.id for e in history]
        had_delivered = any(i in session.delivered for i in fetched_ids)
        in_batch = {e.id for e in events} | {e.id for e in cancelled}
        kept = [e for e in history if e.id not in session.delivered and e.id not in in_batch]
        context: TurnContext | None = None
        if kind is not None and kept:
            context = TurnContext(
                kind=kind,
                messages=tuple(
                    ContextMessage(
                        pubkey=e.pubkey,
                        content=e.content,
                        event_id=e.id,
                        timestamp=_utc(e.created_at),
                    )
                    for e in kept
                ),
                total=total,
                truncated=truncated,
            )
        profiles, channel_info = await self._profiles_and_channel(
            [*events, *cancelled], kept, channel, newest.pubkey
        )
        start = session.start
        turn_input = TurnInput(
            events=tuple(TurnEvent(q.event, q.prompt_tag) for q in batch.events),
            cancelled_events=tuple(
                TurnEvent(q.event, q.prompt_tag) for q in batch.cancelled_events
            ),
            cancel_reason=batch.cancel_reason or "steer",
            channel=channel_info,
            context=context,
            context_had_delivered_events=had_delivered,
            profiles=profiles,
            standing=self.config.standing,
            system_prompt_support=start.system_prompt_support,
            standing_context_sent=start.standing_context_sent or session.turns > 0,
        )
        return turn_input, fetched_ids

    async def _profiles_and_channel(
        self,
        batch_events: Sequence[Event],
        history: Sequence[Event],
        channel: str | None,
        actor: str,
    ) -> tuple[dict[str, ProfileInfo], ChannelInfo | None]:
        people: dict[str, None] = {self.agent_hex: None}
        for event in [*batch_events, *history]:
            people[event.pubkey] = None
            for mention in nip10.mentions(event):
                lowered = mention.lower()
                if _HEX64.fullmatch(lowered):
                    people[lowered] = None
        filters: list[dict[str, Any]] = [{"kinds": [METADATA_KIND], "authors": list(people)}]
        if channel is not None:
            filters.append({"kinds": [GROUP_METADATA_KIND], "#d": [channel]})
        found = await self.pool.query(filters, timeout=self.config.relay_timeout)
        newest_profile: dict[str, Event] = {}
        metadata: Event | None = None
        for event in found.events:
            if event.kind == METADATA_KIND and event.pubkey in people:
                known = newest_profile.get(event.pubkey)
                if known is None or event.created_at > known.created_at:
                    newest_profile[event.pubkey] = event
            elif (
                event.kind == GROUP_METADATA_KIND
                and channel in event.tag_values("d")
                and (metadata is None or event.created_at > metadata.created_at)
            ):
                metadata = event
        profiles: dict[str, ProfileInfo] = {}
        for pubkey in people:
            label: str | None = None
            is_agent = pubkey in self._known_agents or pubkey == self.agent_hex
            source = newest_profile.get(pubkey)
            if source is not None:
                profile = Profile.from_event(source)
                label = profile.label
                if profile.is_agent:
                    is_agent = True
                    self._known_agents.add(pubkey)
            profiles[pubkey] = ProfileInfo(label=label, is_agent=is_agent)
        channel_info: ChannelInfo | None = None
        if channel is None:
            actor_label = profiles.get(actor, ProfileInfo()).label
            channel_info = ChannelInfo(name=actor_label or actor, id=f"dm-{actor}", type="dm")
        elif metadata is not None:
            names = metadata.tag_values("name")
            about = metadata.tag_values("about")
            channel_info = ChannelInfo(
                name=names[0] if names else channel,
                id=channel,
                type="stream",
                description=about[0] if about else None,
            )
        return profiles, channel_info

    # -- outputs ------------------------------------------------------------------------

    def reply_tags(self, target: Event) -> list[list[str]]:
        """Tags of the reply to ``target``: ``h`` (its channel), NIP-10 marked ``e`` tags
        (root, plus reply when the target is not the root) and ``p`` for the target's author."""
        tags: list[list[str]] = []
        channel = nip10.channel(target)
        if channel is not None:
            tags.append(["h", channel])
        root = nip10.thread_ref(target).root
        if root is None or root == target.id:
            tags.append(["e", target.id, "", "root", target.pubkey])
        else:
            tags.append(["e", root, "", "root"])
            tags.append(["e", target.id, "", "reply", target.pubkey])
        if target.pubkey != self.agent_hex:
            tags.append(["p", target.pubkey])
        return tags

    async def _reply(self, target: Event, text: str) -> None:
        reply = sign_event(
            self.config.agent_secret,
            kind=CHAT_KIND,
            content=text,
            tags=self.reply_tags(target),
            created_at=int(self._clock()),
        )
        result = await self.write_pool.publish(reply)
        self.diagnostics.emit(
            "reply_published" if result.ok else "reply_failed",
            channel_id=nip10.channel(target),
            payload={"eventId": reply.id, "inReplyTo": target.id, "relays": result.accepted},
        )

    def _publish_metric(
        self,
        batch: Batch,
        running: _Running,
        session: _Session,
        result: TurnResult,
        started_at: datetime,
    ) -> None:
        usage = result.usage
        if usage is None:
            return
        newest = batch.events[-1].event
        ref = nip10.thread_ref(newest)
        payload = MetricPayload(
            harness=self.harness,
            timestamp=rfc3339_ms(result.ended_at),
            model=self.config.model,
            channel_id=running.channel_id,
            session_id=session.harness_id,
            turn_id=running.turn_id,
            turn_seq=usage.turn_seq,
            turn=usage.turn,
            cumulative=usage.cumulative,
            delta_reliable=usage.delta_reliable,
            stop_reason=result.stop_reason,
            outcome=result.outcome,
            terminal_evidence=result.terminal_evidence,
            triggering_event_ids=tuple(q.event.id for q in batch.events),
            root_event_id=ref.root,
            parent_event_id=ref.parent,
            started_at=rfc3339_ms(started_at),
            adapter_session_id=result.adapter_session_id,
            native_stop_reason=result.native_stop_reason,
            context_manifest=running.ledger.snapshot(),
        )
        ids = (running.channel_id, session.harness_id, running.turn_id)
        try:
            event = build_metric_event(self.config.agent_secret, self.config.owner, payload)
        except BuzzError as exc:
            self.diagnostics.emit(
                "metric_invalid",
                channel_id=ids[0],
                session_id=ids[1],
                turn_id=ids[2],
                payload={"error": str(exc)},
            )
            return
        self._metric_context[event.id] = ids
        if self.publisher is None:  # never, while started
            return
        # Committed to the outbox here, before the first send and before this coroutine can be
        # interrupted; the send runs in the background and never blocks the turn (spec 04).
        store_problem = self.publisher.store(event)
        self.diagnostics.metric_queued(
            event.id, channel_id=ids[0], session_id=ids[1], turn_id=ids[2]
        )
        self._spawn(self.publisher.send_stored(event, store_problem), "buzz-metric")

    def _on_publish_report(self, report: PublishReport) -> None:
        event_id = report.event_id
        if event_id is None:
            return
        channel_id, session_id, turn_id = self._metric_context.get(event_id, (None, None, None))
        if report.delivered:
            self._metric_context.pop(event_id, None)
            accepted = [url for url, v in report.verdicts.items() if v.ok]
            self.diagnostics.metric_published(
                event_id, accepted, channel_id=channel_id, session_id=session_id, turn_id=turn_id
            )

    def _on_driver_diagnostic(
        self, kind: str, session_id: str | None, payload: dict[str, Any]
    ) -> None:
        self.diagnostics.emit(kind, payload={**payload, "adapterSessionId": session_id})

    # -- state --------------------------------------------------------------------------

    def _load_queue(self) -> DispatchQueue:
        path = self.config.state_dir / QUEUE_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return DispatchQueue()
        try:
            return DispatchQueue.restore(data)
        except QueueError as exc:
            # A corrupt snapshot must not stop the bot; keep it aside for inspection.
            aside = path.with_name(path.name + ".corrupt")
            os.replace(path, aside)
            self.diagnostics.emit("queue_snapshot_corrupt", payload={"error": str(exc)})
            return DispatchQueue()

    def _load_state(self) -> tuple[int | None, list[str]]:
        try:
            raw = json.loads((self.config.state_dir / STATE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, []
        if not isinstance(raw, dict):
            return None, []
        position = raw.get("position")
        commands = raw.get("commands")
        ids = [c for c in commands if isinstance(c, str)] if isinstance(commands, list) else []
        valid = isinstance(position, int) and not isinstance(position, bool) and position >= 0
        return (position if valid else None), ids

    def _persist(self) -> None:
        state = self.config.state_dir
        try:
            _write_atomic(state / QUEUE_FILE, self.queue.snapshot())
            if self._position is not None:
                state_obj = {"position": self._position, "commands": list(self._commands)}
                body = json.dumps(state_obj).encode("utf-8")
                _write_atomic(state / STATE_FILE, body)
        except OSError as exc:
            log.warning("cannot persist the bot state in %s: %s", state, exc)

    # -- introspection (tests, the demo) ------------------------------------------------

    @property
    def position(self) -> int | None:
        """The newest ``created_at`` handled (persisted)."""
        return self._position

    def running_channels(self) -> list[str]:
        return list(self._running)

    def ledger_snapshot(self, channel: str) -> Manifest | None:
        running = self._running.get(channel)
        return running.ledger.snapshot() if running is not None else None

    @staticmethod
    def queued(batch: Batch) -> list[QueuedEvent]:
        return list(batch.events)
