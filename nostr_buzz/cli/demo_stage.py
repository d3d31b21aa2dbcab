"""The stage ``buzz demo`` plays on (:mod:`nostr_buzz.cli.demo_script` is the play): an embedded
relay on loopback, fresh keys, the bot with the bundled demo agent (or any ACP command) and a feed
of its diagnostics with bounded waits, the real ``buzz`` command run against the relay, and the
demo's own failure, :class:`DemoFailure`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nostr_buzz.bot import BuzzPlugin, PluginConfig
from nostr_buzz.cli.relay import INSTALL_HINT, local_relay_builder
from nostr_buzz.core.turn_input import Standing
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey

CHANNEL: Final = "demo"
#: Per step: the bundled agent answers in seconds; a real agent may think for a while.
BUNDLED_STEP_TIMEOUT: Final = 30.0
EXTERNAL_STEP_TIMEOUT: Final = 180.0
RELAY_TIMEOUT: Final = 5.0
#: What the bundled agent records (its sessions and prompts), in the state directory.
AGENT_RECORD: Final = "agent-record.jsonl"
STANDING: Final = Standing(
    base="You are buzz, an agent on a Nostr team chat. Reply in the thread you were asked in.",
    persona="Be brief and concrete.",
)


class DemoFailure(BuzzError):
    """The demo could not complete a step; the message says which and why."""


@dataclass
class _Feed:
    """The bot's diagnostics, with bounded waits on them."""

    records: list[DiagnosticRecord] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    bot: asyncio.Task[None] | None = None

    def watch(self, bot: asyncio.Task[None]) -> None:
        """Stop waiting as soon as the bot itself ends (e.g. its agent could not start)."""
        self.bot = bot
        bot.add_done_callback(lambda _: self.changed.set())

    def __call__(self, record: DiagnosticRecord) -> None:
        self.records.append(record)
        self.changed.set()

    def of(self, kind: str) -> list[DiagnosticRecord]:
        return [r for r in self.records if r.kind == kind]

    async def wait_for(
        self,
        kind: str,
        count: int,
        timeout: float,
        step: str,
        where: Callable[[DiagnosticRecord], bool] = lambda _: True,
    ) -> None:
        deadline = time.monotonic() + timeout
        while len([r for r in self.of(kind) if where(r)]) < count:
            if self.bot is not None and self.bot.done():
                problem = None if self.bot.cancelled() else self.bot.exception()
                raise DemoFailure(f"{step}: the bot stopped: {problem or 'no reason given'}")
            failed = self.of("turn_failed")
            if failed:
                raise DemoFailure(f"{step}: the turn failed: {failed[-1].payload.get('error')}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DemoFailure(
                    f"{step}: no {kind!r} after {timeout:g} s (see the agent log for clues)"
                )
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)


async def _start_relay() -> tuple[Any, str]:
    try:
        import nostr_sdk
    except ImportError:
        raise DemoFailure(f"the embedded relay needs nostr-sdk: {INSTALL_HINT}") from None
    nostr_sdk.uniffi_set_event_loop(asyncio.get_running_loop())
    relay = local_relay_builder(nostr_sdk, "127.0.0.1").build()
    try:
        await relay.run()
        url = str(await relay.url())
    except Exception as exc:  # the binding raises its own error types
        raise DemoFailure(f"cannot start the embedded relay: {exc}") from None
    return relay, url


class DemoStage:
    """What the demo's steps act with: the relay's URL, the people's keys (owner, agent, alex,
    sam), the bot's configuration and the feed of its diagnostics, signing and publishing as one
    of them, and the real ``buzz`` command."""

    def __init__(
        self,
        write: Callable[[str], None],
        agent: Sequence[str],
        bundled: bool,
        state: Path,
        pass_env: Sequence[str] = (),
    ) -> None:
        self.write = write
        self.agent = list(agent)
        self.pass_env = tuple(dict.fromkeys(pass_env))
        self.bundled = bundled
        self.state = state
        if bundled:  # the demo agent writes down what reached it, so the demo can show it
            self.agent += ["--record", str(state / AGENT_RECORD)]
        self.step_timeout = BUNDLED_STEP_TIMEOUT if bundled else EXTERNAL_STEP_TIMEOUT
        self.owner = SecretKey.generate()
        self.agent_key = SecretKey.generate()
        self.human = SecretKey.generate()
        self.second = SecretKey.generate()
        self.feed = _Feed()
        self.url = ""

    @contextlib.asynccontextmanager
    async def relay(self) -> AsyncIterator[None]:
        """The embedded relay running (its URL in ``url``) for the duration of the block."""
        relay, self.url = await _start_relay()
        try:
            yield
        finally:
            relay.shutdown()
            del relay
            gc.collect()

    def sign(
        self,
        author: SecretKey,
        content: str,
        *,
        root: Event | None = None,
        kind: int = 9,
        tags: Sequence[Sequence[str]] | None = None,
    ) -> Event:
        if tags is None:
            built: list[list[str]] = [["h", CHANNEL]]
            if root is not None:
                built.append(["e", root.id, "", "root", root.pubkey])
            built.append(["p", self.agent_key.public_key.hex])
            tags = built
        return sign_event(
            author, kind=kind, content=content, tags=tags, created_at=int(time.time())
        )

    async def publish(self, *events: Event) -> None:
        pool = RelayPool([self.url], timeout=RELAY_TIMEOUT)
        results = await asyncio.gather(*(pool.publish(e) for e in events))
        for event, result in zip(events, results, strict=True):
            if not result.ok:
                verdicts = "; ".join(f"{u}: {v.message}" for u, v in result.verdicts.items())
                raise DemoFailure(f"the relay refused event {event.id}: {verdicts}")

    async def turn(self, number: int, step: str) -> DiagnosticRecord:
        await self.feed.wait_for("turn_completed", number, self.step_timeout, step)
        return self.feed.of("turn_completed")[number - 1]

    def config(self) -> PluginConfig:
        return PluginConfig(
            agent_secret=self.agent_key,
            owner=self.owner.public_key,
            read_relays=(self.url,),
            write_relays=(self.url,),
            agent_command=self.agent[0],
            agent_args=tuple(self.agent[1:]),
            agent_pass_env=self.pass_env,
            state_dir=self.state / "bot",
            gate="allowlist",
            allowlist=frozenset({self.human.public_key.hex, self.second.public_key.hex}),
            in_flight="steer",
            standing=STANDING,
            # The burst is published at once; a wider window keeps it one turn on a busy host.
            coalesce_window=0.5,
            relay_timeout=RELAY_TIMEOUT,
            idle_timeout=self.step_timeout,
            hard_timeout=self.step_timeout * 2,
        )

    @contextlib.asynccontextmanager
    async def bot(self) -> AsyncIterator[None]:
        """The bot running (on the demo's state directory) for the duration of the block."""
        plugin = BuzzPlugin(self.config(), on_diagnostic=self.feed, include_prompt_text=True)
        runner = asyncio.create_task(plugin.run(), name="buzz-demo-bot")
        self.feed.watch(runner)
        try:
            yield
        finally:
            plugin.stop()
            try:
                await asyncio.wait_for(runner, RELAY_TIMEOUT * 4)
            except TimeoutError:
                runner.cancel()
                raise DemoFailure("the bot did not stop in time") from None
            except asyncio.CancelledError:
                raise
            except BuzzError:
                pass  # already reported by the step that saw the bot stop

    async def buzz(self, key: SecretKey | None, *argv: str) -> str:
        """Run the real ``buzz`` command against the demo relay; its stdout, stripped."""
        command = [sys.executable, "-m", "nostr_buzz", *argv, "--relay", self.url]
        command += ["--timeout", f"{RELAY_TIMEOUT:g}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
        if key is not None:  # through the environment, never on a command line
            env["BUZZ_PRIVATE_KEY"] = key.hex
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=self.state,  # no stray ./buzz.toml is read
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), RELAY_TIMEOUT * 4)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise DemoFailure(f"buzz {argv[0]} {argv[1]} did not finish in time") from None
        if proc.returncode != 0:
            raise DemoFailure(
                f"buzz {argv[0]} {argv[1]} exited {proc.returncode}: {err.decode(errors='replace')}"
            )
        return out.decode("utf-8").strip()

    def recorded_system_prompts(self) -> list[str]:
        path = self.state / AGENT_RECORD
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        entries = [json.loads(line) for line in lines]
        return [str(e["systemPrompt"]) for e in entries if e.get("systemPrompt")]

    def delivery(self, turn: int) -> DiagnosticRecord:
        return self.feed.of("prompt_context_delivery")[turn - 1]
