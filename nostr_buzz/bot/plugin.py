""":class:`BuzzPlugin`: wires the bot's parts together.

subscribe → verify (the relay client) → :mod:`.intake` (gate, owner commands, shard) → the
:class:`DispatchQueue` and the state database (:mod:`.state`) → :mod:`.turn` (context from
:mod:`.context`, compile, the agent from :mod:`.supervisor`, steering) → :mod:`.outputs` and
:mod:`.delivery` (reply, NIP-AM metric) → diagnostics.

It runs on its own (:meth:`BuzzPlugin.run` subscribes to the read relays) or embedded in an
existing bot that feeds it verified events (:meth:`BuzzPlugin.handle_event`).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

from nostr_buzz.errors import BuzzError, Nip59Error, RelayError, StateError
from nostr_buzz.event import Event, not_an_event
from nostr_buzz.nips import nip10, nip59
from nostr_buzz.signer import Signer, SignerError

from . import intake

if TYPE_CHECKING:
    from nostr_buzz.agent import AgentFunction, InProcessAgent
    from nostr_buzz.io.diagnostics import DiagnosticRecord
    from nostr_buzz.nips.nip01 import Filter

    from .config import PluginConfig
    from .delivery import Delivery
    from .state import BotStore
    from .turn import TurnRunner

__all__ = ["DIAGNOSTICS_FILE", "BuzzPlugin"]

DIAGNOSTICS_FILE: Final = "diagnostics.jsonl"


class BuzzPlugin:
    """The agent bot: see the package docstring.

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
        agent: InProcessAgent | AgentFunction | None = None,  # instead of an ACP agent
    ) -> None:
        # The parts' modules load with the first plugin made, not with this module's import
        # (``from nostr_buzz import BuzzPlugin`` stays light); the running ones at start().
        from nostr_buzz.core.queue import DispatchQueue
        from nostr_buzz.core.session_key import keyer
        from nostr_buzz.io.diagnostics import DiagnosticsFeed

        from .state import REMEMBERED_COMMANDS
        from .tasks import PluginTasks

        self.config = config
        self._clock = clock
        self.agent_hex = config.signer.public_key.hex  # the bot signs only through it
        # Nothing is created on disk before start(): the feed opens its file on the first
        # record, the state database is opened by start().
        self.diagnostics = DiagnosticsFeed(
            config.state_dir / DIAGNOSTICS_FILE,
            clock=lambda: datetime.fromtimestamp(self._clock(), UTC),
            callback=on_diagnostic,
            include_prompt_text=include_prompt_text,
        )
        self._gate = intake.gate_of(config)
        self._known_agents: set[str] = set(config.agents)
        # Keyed by session scope (docs/bot.md, "Session scope"); the stored one at start().
        self.queue = DispatchQueue(channel_of=keyer(config.session_scope))
        self._position: int | None = None
        self._commands: deque[str] = deque(maxlen=REMEMBERED_COMMANDS)
        # A first start serves what arrives from its creation on (nothing older is replayed).
        self._first_since = int(self._clock())
        self._tasks = PluginTasks()  # its signals and what it runs on the event loop
        self._assemble(agent)
        self.store: BotStore | None = None
        self.delivery: Delivery | None = None
        self._runner: TurnRunner | None = None
        self._started = False
        self._closed = False

    def _assemble(self, agent: InProcessAgent | AgentFunction | None) -> None:
        """The parts that reach the relays and the agent, made with the plugin (each checks
        what it is given).  Their modules load here, with the first plugin made: importing
        BuzzPlugin loads no relay, agent or state code."""
        from nostr_buzz.io.pool import RelayPool

        from .context import ContextResolver
        from .recall import Recall
        from .relays import bot_pool
        from .replay import REPLAY_PAGE
        from .running import RunningTurns
        from .standing import SessionStanding
        from .supervisor import AgentSupervisor
        from .tools import ToolGrants

        config, clock = self.config, self._clock
        self.pool = bot_pool(config, self.diagnostics)  # connections kept from start() on
        if not RelayPool(config.write_relays).urls:
            raise RelayError("a metric publisher needs at least one write relay")
        self.standing = SessionStanding(config, self.pool, self.diagnostics)
        self.recall = Recall.of(config, self.pool, self._first_since, page=REPLAY_PAGE)
        self.turns = RunningTurns.of(config, self.diagnostics, clock)  # by queue channel
        stop, freeze = self._tasks.stop, self.standing.freeze
        self.supervisor = AgentSupervisor(
            config, self.diagnostics, clock, stop, freeze, self.turns, agent
        )
        self.resolver = ContextResolver.of(
            config, self.pool, self._known_agents, self.standing.trusted, self._untrusted_metadata
        )
        self.resolver.cli = self.supervisor.agent_has_cli  # for the history hint
        self.supervisor.tools = ToolGrants.of(self)  # the agent's Nostr tools (.tools)

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Open the state, start the agent, the worker and the retry loop (idempotent)."""
        from .delivery import Delivery
        from .state import BotStore
        from .turn import TurnRunner

        if self._started:
            return
        if self._closed:
            raise BuzzError("this plugin is closed; create a new one")
        self._started = True
        store = self.store = BotStore(self.config.state_dir)
        for problem in store.import_problems:
            self.diagnostics.emit("state_import_failed", payload={"error": problem})
        self.queue = store.journal.load_queue(
            max_attempts=self.config.max_attempts,
            owner=self.config.owner.hex,
            max_stranger_channels=self.config.max_stranger_channels,
            opened=await _open_stored(store, self.config.signer),
            channel_of=self.queue.channel_of,
        )
        self._position = store.position()
        self.private_floor = _floor(self._position, self._first_since, self.config.clock_skew)
        self._commands.extend(store.commands())
        store.refusals.load(intake.refusal_scope(self._gate))
        self.recall.skip = store.refusals.__contains__
        self.pool.open()
        self.recall.pool = self.pool.using(self.recall.pool.urls)  # the connections kept now
        delivery = Delivery(
            self.config, store, self.diagnostics, self._tasks.spawn, self._clock, self.pool
        )
        self.delivery = delivery
        if self.turns.approvals is not None:  # questions go through the outbox from now on
            self.turns.approvals.tell = delivery.tell_owner
        self.standing.directory = delivery.signing.directory
        self._runner = TurnRunner(
            self.config,
            self.queue,
            store,
            self.supervisor,
            self.resolver,
            delivery,
            self.diagnostics,
            clock=self._clock,
            spawn=self._tasks.spawn,
            wake=self._tasks.wake.set,
            running=self.turns,
        )
        await self.supervisor.start()
        tasks = self._tasks
        tasks.start_loops(
            self._runner.work(tasks.stop, tasks.wake), delivery.run(tasks.delivery_stop)
        )

    def _untrusted_metadata(self, event: Event, why: str) -> None:
        channels = event.tag_values("d")
        self.diagnostics.event_rejected(
            why,
            event_id=event.id,
            channel_id=channels[0] if channels else None,
        )

    async def close(self) -> None:
        """Stop everything; running turns are abandoned (their batches run again after a
        restart, from the state database).  Sends in progress get a bounded wait."""
        if self._closed:
            return
        self._closed = True
        await self._tasks.close(self.config.relay_timeout)
        await self.supervisor.close()
        await self.pool.close()
        if self.store is not None:
            with contextlib.suppress(BuzzError):
                if self._position is not None:
                    self.store.save_position(self._position)
            self.store.close()
        self.diagnostics.close()

    async def __aenter__(self) -> BuzzPlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def stop(self) -> None:
        """Ask :meth:`run` to return (what ``!shutdown`` and signal handlers do)."""
        self._tasks.stop.set()

    @property
    def stopping(self) -> bool:
        return self._tasks.stop.is_set()

    async def run(self) -> None:
        """Subscribe to the read relays and serve until :meth:`stop` (or ``!shutdown``)."""
        try:
            await self.start()
            lost, problem = await self._tasks.serve(_listen(self))
            if lost:
                # Every relay gave up reconnecting (or closed the subscription): nothing to serve.
                raise RelayError(
                    "the subscription to every read relay ended"
                    + (f": {problem}" if problem else "; check the relays")
                )
        finally:
            await self.close()

    def _since(self) -> int:
        """Where listening starts: the position (a first start: its creation) − clock skew."""
        position = self._position if self._position is not None else self._first_since
        return max(0, position - int(self.config.clock_skew))

    def subscription_filters(self) -> list[Filter]:
        """What :meth:`run` asks the relays for (live, and when replaying)."""
        from .replay import listen_filters

        return listen_filters(self._gate, self._since(), self.config.channels)

    # -- intake -------------------------------------------------------------------------

    async def handle_event(self, event: Event, prompt_tag: str = "@mention") -> bool:
        """Gate, route and queue one verified event; True when it was queued (or was an owner
        command).  A gift wrap (kind 1059, or the ephemeral 21059) addressed to the agent is
        opened and checked first; its private message then goes the way of any event, unless
        dated before the start and answered already (:mod:`.recall`).  Starts the plugin."""
        return await self._handle(event, prompt_tag, replayed=False)

    async def _handle(self, event: Event, prompt_tag: str, *, replayed: bool) -> bool:
        if not isinstance(event, Event):
            raise BuzzError(f"handle_event: {not_an_event(event)}")
        if self._closed:
            return False
        await self.start()
        assert self.store is not None and self._runner is not None
        if event.kind in nip59.WRAP_KINDS:
            opened = await _open_wrap(event, self, self.store)
            if opened is None:
                return False
            event = opened
        decision = intake.decide(event, self._gate, self._known_agents)
        if isinstance(decision, intake.Admit) and await _answered_before(self, event, replayed):
            return False
        now = self._clock()
        if isinstance(decision, intake.Refuse):
            return _refused(self, decision, event, now)
        if isinstance(decision, intake.Command):
            return await _command(self, decision, event, now)
        result = self.queue.push(event, prompt_tag, now=now)
        for dropped in result.dropped:
            self.diagnostics.event_rejected("queue_full_dropped", event_id=dropped)
        if result.refused:  # strangers hold max_stranger_channels channels already
            self.diagnostics.event_rejected("queue_channels_full", event_id=event.id)
        self._position = intake.advance(self._position, event.created_at, now)
        if result.accepted or result.dropped:
            from nostr_buzz.core.queue import QueuedEvent  # loaded with the queue

            queued = QueuedEvent(event, prompt_tag, now) if result.accepted else None
            self.store.journal.record_push(self.queue, queued, result.dropped, self._position)
        if not result.accepted:
            return False
        key = self.queue.channel_of(event)  # the queue's: a thread's under scope = "thread"
        await self._runner.react(key, event, prompt_tag)
        self._runner.admitted(key, now)
        return True

    async def _obey(self, decision: intake.Command, event: Event) -> None:
        assert self._runner is not None
        command = decision.name
        if command == "allow" or command == "deny":  # anyone's: only the owner's counts
            return self.turns.answer(event, command, decision.argument)
        payload = {"command": command, "eventId": event.id}
        self.diagnostics.emit("owner_command", channel_id=nip10.channel(event), payload=payload)
        if command == "shutdown":
            self.stop()
            return
        await self._runner.obey(command, event)

    # -- introspection (tests, the demo) ------------------------------------------------

    @property
    def position(self) -> int | None:
        """The newest ``created_at`` handled (persisted)."""
        return self._position

    @property
    def harness(self) -> str:
        return self.supervisor.harness


async def _listen(plugin: BuzzPlugin) -> None:
    """What :meth:`BuzzPlugin.run` does once started: listen on the read relays (a first start
    saves its position first), the agent's own relay lists published as it begins
    (:mod:`.own_lists`): they say where it listens, so only a plugin that listens publishes
    them, never one its host feeds."""
    from .replay import Listener

    if plugin._position is None and plugin.store is not None:
        plugin._position = plugin._first_since
        plugin.store.save_position(plugin._position)
    delivery = plugin.delivery
    if delivery is not None:
        plugin._tasks.spawn(delivery.publish_relay_lists(), "buzz-relay-lists")
    listener = Listener(
        plugin.pool,
        plugin._gate,
        plugin.config.channels,
        since=plugin._since,
        handle=plugin.handle_event,
        diagnostics=plugin.diagnostics,
        stopping=plugin._tasks.stop.is_set,
        on_reconnect=delivery.nudge if delivery is not None else None,
        recall=plugin.recall,
        replayed=functools.partial(plugin._handle, prompt_tag="@mention", replayed=True),
    )
    await listener.run()


def _refused(plugin: BuzzPlugin, decision: intake.Refuse, event: Event, now: float) -> bool:
    """A refusal: reported (but another shard's), remembered for a wrap, the position moved."""
    assert plugin.store is not None
    if isinstance(event, nip59.PrivateEvent):
        plugin.store.refusals.remember(event.wrap.id, by_gate=True)
    if decision.reason is None:
        return False  # another process serves it: no diagnostic, no position change
    plugin.diagnostics.event_rejected(
        decision.reason, event_id=event.id, channel_id=nip10.channel(event)
    )
    plugin._position = intake.advance(plugin._position, event.created_at, now)
    return False


async def _answered_before(plugin: BuzzPlugin, event: Event, replayed: bool) -> bool:
    """Whether an admitted event dated before this run was answered already (the relays
    hold the agent's answer): then it is recorded as handled, with a diagnostic, and not
    queued.  A live one waits for a replay under way, which looks it up with its page."""
    recall = plugin.recall
    if not recall.is_old(event) or plugin.queue.knows(event.id):
        return False
    if not replayed and recall.known(event.id) is None:
        await recall.settled()
    if not await recall.answered(event):
        return False
    assert plugin.store is not None
    plugin._position = intake.advance(plugin._position, event.created_at, plugin._clock())
    plugin.queue.remember(event.id)
    plugin.store.remember_handled(event.id, plugin._position)
    plugin.diagnostics.event_rejected(
        "answered_before", event_id=event.id, channel_id=nip10.channel(event)
    )
    return True


async def _command(plugin: BuzzPlugin, decision: intake.Command, event: Event, now: float) -> bool:
    """An owner command (or anyone's ``!allow``/``!deny``, which the approvals judge): the
    owner's is obeyed once, only when newer than the last obeyed one of its kind and not
    dated before this run's start minus the clock skew (:func:`.intake.stale_command`),
    and remembered durably before it takes effect.  Nobody else's is remembered, so no
    stranger can push the owner's out of the bot's memory."""
    assert plugin.store is not None
    if event.pubkey != plugin.config.owner.hex:
        plugin._position = intake.advance(plugin._position, event.created_at, now)
        await plugin._obey(decision, event)  # refused and reported by the approvals
        return True
    kind = intake.command_kind(decision, event)
    last = plugin.store.owner_commands.last(kind) if kind is not None else None
    floor = plugin._first_since - int(plugin.config.clock_skew)
    stale = "command_not_newer" if event.id in plugin._commands else None
    stale = stale or intake.stale_command(event, last, floor)
    if stale is not None:
        plugin.diagnostics.event_rejected(stale, event_id=event.id, channel_id=nip10.channel(event))
        return False
    plugin._commands.append(event.id)
    plugin._position = intake.advance(plugin._position, event.created_at, now)
    plugin.store.remember_command(event, kind, plugin._position)
    await plugin._obey(decision, event)
    return True


async def _open_stored(store: BotStore, signer: Signer) -> dict[str, Event]:
    """The queued private messages, opened through the agent's signer, by wrap id."""
    opened: dict[str, Event] = {}
    for wrap in store.journal.queued_wraps():
        try:
            opened[wrap.id] = (await nip59.open_gift_wrap_with(signer, wrap)).as_event()
        except (Nip59Error, SignerError) as exc:
            raise StateError(f"the bot state {store.path}: event {wrap.id}: {exc}") from None
    return opened


async def _open_wrap(wrap: Event, plugin: BuzzPlugin, store: BotStore) -> nip59.PrivateEvent | None:
    """The private message in a gift wrap addressed to the agent, or None when the wrap was
    refused: now (reported with the wrap's id only, nothing of its content, and remembered) or
    before, on an earlier pass over the same events (not opened, nor reported, again).  A
    message dated before the plugin's :attr:`~BuzzPlugin.private_floor` is refused silently and
    remembered, as if a relay's ``since`` had left it out (:func:`.intake.private_before`).
    A signer that cannot open it now is reported (``gift_wrap_signer_failed``), not remembered."""
    if wrap.id in store.refusals:
        return None
    try:
        opened = plugin.recall.opened(wrap.id)  # opened by the replay that brought it
        if opened is None:
            opened = (await nip59.open_gift_wrap_with(plugin.config.signer, wrap)).as_event()
    except SignerError:
        plugin.diagnostics.event_rejected("gift_wrap_signer_failed", event_id=wrap.id)
        return None
    except Nip59Error as exc:
        plugin.diagnostics.event_rejected(f"gift_wrap_{exc.reason}", event_id=wrap.id)
        store.refusals.remember(wrap.id, by_gate=False)
        return None
    if intake.private_before(opened, plugin.private_floor):
        store.refusals.remember(wrap.id, by_gate=False)  # an old message stays old
        return None
    return opened


def _floor(position: int | None, first_since: int, clock_skew: float) -> int:
    """Where this run listens from, before anything moves the position: the saved position,
    else (a fresh or emptied state) the start itself, minus the clock skew."""
    return (position if position is not None else first_since) - int(clock_skew)
