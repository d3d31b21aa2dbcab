"""The pure core of a bot of your own, with no I/O: what both example bots plug into their
transport (``examples/nostr_sdk_bot.py``, ``examples/websockets_bot.py``).

Fed raw event JSON as a relay delivers it, :class:`PureBot` verifies each event (id recomputed,
signature checked), lets the gate decide (``decide``), queues what it admits (``DispatchQueue``:
batches of one actor in one thread, a short settle window so that a burst is one turn), and for
each settled batch compiles the turn (``compile_turn``: the envelope sections and the manifest),
asks its agent, and returns the events to publish: the reply, in the kind of the event it
answers, and the encrypted NIP-AM metric of the turn for the owner.  It reads no clock and opens
no socket: the transport passes ``now`` in and publishes what comes out.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import uuid
from collections.abc import Awaitable, Callable

from nostr_buzz import (
    NO_RETRIEVAL,
    Admit,
    CompiledTurn,
    DispatchQueue,
    Event,
    Gate,
    InvalidEvent,
    MetricPayload,
    PublicKey,
    SecretKey,
    TokenCounts,
    TurnEvent,
    TurnInput,
    build_metric_event,
    build_reply,
    channel_info_of,
    compile_turn,
    decide,
    metric_timestamp,
)

#: Seconds a batch that may still grow waits for more of the same burst.
SETTLE = 0.25


def describe(turn: CompiledTurn) -> str:
    """A stand-in agent: it says what it was given (put your model call here)."""
    return f"I read {len(turn.sections)} sections; manifest {turn.manifest.hash}"


class PureBot:
    """One agent key answering mentions (see the module docstring)."""

    def __init__(
        self,
        agent: SecretKey,
        owner: PublicKey,
        answer: Callable[[CompiledTurn], str] = describe,
    ) -> None:
        self.agent = agent
        self.owner = owner
        self.answer = answer
        self.gate = Gate(
            agent=agent.public_key.hex,
            owner=owner.hex,
            kinds=frozenset({9, 1}),
            channels=frozenset(),  # every channel
            mentions_required=True,
            mode="owner-only",
            allowlist=frozenset(),
        )
        self.queue = DispatchQueue(rng=random.Random(), owner=owner.hex)
        self.session = uuid.uuid4().hex
        self.turns = 0

    def receive(self, raw_json: str, now: float) -> bool:
        """One event from a relay: verified, gated, queued; False when it was not queued."""
        try:
            event = Event.from_json(raw_json)
        except InvalidEvent:
            return False  # a forgery or garbage: never goes further
        if not isinstance(decide(event, self.gate, set()), Admit):
            return False  # refused (or an owner command, which this example ignores)
        return self.queue.push(event, now=now).accepted

    def wait(self, now: float) -> float | None:
        """Seconds until a held-back batch settles (None: none is waiting)."""
        return self.queue.next_settle(now, settle=SETTLE)

    def next_turn(self, now: float) -> list[Event]:
        """The reply and the metric of the next settled batch, signed; [] when none."""
        batch = self.queue.flush_next(now, settle=SETTLE)
        if batch is None:
            return []
        newest = batch.events[-1].event
        turn_input = TurnInput(
            events=tuple(TurnEvent(q.event, q.prompt_tag) for q in batch.events),
            channel=channel_info_of(newest),
            owner=self.owner.hex,
            retrieval=NO_RETRIEVAL,  # this agent has no tool to fetch more history
        )
        turn = compile_turn(turn_input)
        reply = build_reply(self.agent, newest, self.answer(turn), int(now))
        self.turns += 1
        payload = MetricPayload(
            harness="example-bot",
            timestamp=metric_timestamp(now),
            channel_id=turn_input.channel_id,
            session_id=self.session,
            turn_id=uuid.uuid4().hex,
            turn_seq=self.turns,
            turn=TokenCounts(),  # unknown: the stand-in agent counts no tokens
            outcome="success",
            triggering_event_ids=tuple(q.event.id for q in batch.events),
            context_manifest=turn.manifest,
        )
        metric = build_metric_event(self.agent, self.owner, payload)
        self.queue.complete(batch)
        return [reply, metric]


#: A transport: serve ``bot`` on ``relays`` until ``stop`` is set.
Serve = Callable[[list[str], PureBot, asyncio.Event], Awaitable[None]]


#: What a bot of these examples reads from its environment.
ENVIRONMENT = ("BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_RELAYS")


def require_environment(usage: str | None) -> None:
    """Exit with ``usage`` (and what is missing) on stderr unless :data:`ENVIRONMENT` is set."""
    missing = [name for name in ENVIRONMENT if not os.environ.get(name)]
    if missing:
        raise SystemExit(f"{(usage or '').strip()}\n\nmissing: {', '.join(missing)}")


async def run(serve: Serve, usage: str | None = None) -> None:
    """Serve the bot of ``BUZZ_PRIVATE_KEY`` (the agent's key: only ever from the environment)
    for ``BUZZ_OWNER`` on ``BUZZ_RELAYS`` (comma-separated) until SIGINT or SIGTERM; without
    them, exit with ``usage``."""
    require_environment(usage)
    bot = PureBot(
        SecretKey.from_str(os.environ["BUZZ_PRIVATE_KEY"]),
        PublicKey.from_str(os.environ["BUZZ_OWNER"]),
    )
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await serve(os.environ["BUZZ_RELAYS"].split(","), bot, stop)


if __name__ == "__main__":  # a library for the bots beside it
    raise SystemExit(
        f"{__doc__.strip()}\n\nRun a bot built on it: python examples/websockets_bot.py "
        "or python examples/nostr_sdk_bot.py"
    )
