"""The bot against a real relay: keys, a plugin config, signed mentions, and a recorder that
waits (with a bound) on the bot's diagnostic records."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import MetricPayload, open_metric_event
from tests.support.events import chat
from tests.support.relays import RunningRelay

WAIT = 15.0
STEER_NOTE_TEXT = (
    "A new message arrived while you were working. Keep going with your current work and take "
    "the new message into account if it is relevant; if it is not, acknowledge it briefly and "
    "carry on."
)
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@dataclass
class Recorder:
    """Diagnostic records as they happen, with bounded waits on them."""

    records: list[DiagnosticRecord] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, record: DiagnosticRecord) -> None:
        self.records.append(record)
        self.changed.set()

    def of(self, kind: str) -> list[DiagnosticRecord]:
        return [r for r in self.records if r.kind == kind]

    async def wait(
        self, pred: Callable[[Recorder], Any], timeout: float = WAIT, what: str = ""
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = pred(self)
            if found:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                kinds = [(r.kind, r.payload) for r in self.records][-12:]
                raise AssertionError(f"timed out waiting for {what}; last records: {kinds}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)

    async def kind(self, kind: str, count: int = 1, timeout: float = WAIT) -> DiagnosticRecord:
        records = await self.wait(
            lambda r: len(r.of(kind)) >= count and r.of(kind), timeout, f"{count}× {kind}"
        )
        return records[count - 1]  # type: ignore[no-any-return]

    def started_with(self, event_id: str) -> list[DiagnosticRecord]:
        return [r for r in self.of("turn_started") if event_id in r.payload["triggeringEventIds"]]


@dataclass
class World:
    relay: RunningRelay
    owner: SecretKey
    agent: SecretKey
    human: SecretKey
    tmp: Path
    clock: int = field(default_factory=lambda: int(time.time()) - 100)

    def config(self, *agent_flags: str, **changes: Any) -> PluginConfig:
        base = PluginConfig(
            agent_secret=self.agent,
            owner=self.owner.public_key,
            read_relays=(self.relay.url,),
            write_relays=(self.relay.url,),
            agent_command=sys.executable,
            agent_args=("-m", "nostr_buzz.demo.agent", *agent_flags),
            state_dir=self.tmp / "state",
            relay_timeout=3.0,
            coalesce_window=0.1,
            ask_timeout=0.0,  # what the owner rule cannot approve is rejected, not asked
        )
        return replace(base, **changes)

    def message(
        self,
        author: SecretKey,
        content: str,
        *,
        channel: str | None = "eng",
        reply_to: Event | None = None,
        mention: bool = True,
    ) -> Event:
        return chat(
            author,
            int(time.time()),
            content=content,
            channel=channel,
            reply_to=reply_to,
            mention=self.agent if mention else None,
        )

    def say(
        self,
        content: str,
        *,
        channel: str | None = "eng",
        reply_to: Event | None = None,
        author: SecretKey | None = None,
    ) -> Event:
        """A mention of the agent (from the owner unless ``author``), one second after the last:
        distinct, increasing created_at make batch order unambiguous."""
        self.clock += 1
        return chat(
            author or self.owner,
            self.clock,
            content=content,
            channel=channel,
            reply_to=reply_to,
            mention=self.agent,
        )

    async def publish(self, *events: Event) -> None:
        pool = RelayPool([self.relay.url], timeout=3.0)
        for event in events:
            assert (await pool.publish(event)).ok

    async def query(self, flt: dict[str, Any]) -> list[Event]:
        return (await RelayPool([self.relay.url], timeout=3.0).query(flt)).events

    async def metrics(self, count: int = 1) -> list[MetricPayload]:
        """The metrics published for the owner, opened with the owner's key, once there are
        ``count`` of them (or after WAIT), oldest first."""
        flt = {"kinds": [METRIC_KIND], "#p": [self.owner.public_key.hex]}
        deadline = time.monotonic() + WAIT
        while len(events := await self.query(flt)) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        payloads = [open_metric_event(self.owner, e) for e in events]
        return sorted(payloads, key=lambda p: (p.timestamp, p.turn_seq or 0))


def manifest_of(record: DiagnosticRecord) -> Manifest:
    return Manifest.from_json(json.dumps(record.payload["contextManifest"]))


@asynccontextmanager
async def serving(world: World, rec: Recorder, **changes: Any) -> AsyncIterator[BuzzPlugin]:
    """The bot subscribed to the world's relay (``changes`` to its config) until the block
    ends, once its agent has started."""
    plugin = BuzzPlugin(world.config(**changes), on_diagnostic=rec)
    runner = asyncio.create_task(plugin.run())
    try:
        await rec.kind("agent_started")
        yield plugin
    finally:
        plugin.stop()
        await asyncio.wait_for(runner, WAIT)
