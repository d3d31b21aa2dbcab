"""The ``buzz demo`` script: the whole pipeline on loopback in one command (docs/bot.md).

An embedded relay (nostr-sdk's LocalRelay on 127.0.0.1), fresh keys in a temporary state
directory, the bot with the bundled demo agent (or any ACP command), and a human who posts a
mention, a burst of replies in one thread, a reply by a second person and, while a turn is
running, a message by its author in its thread (a steer) and one by someone else (which waits
for a turn of its own).  The script prints the first turn's envelope, every manifest, the usage
table the owner reads back from the metrics, and one message fetched with
``buzz messages raw``.  The owner's channel canvas and the agent's core memory (set with
``buzz canvas set`` and ``buzz mem set core``) reach the agent's system role; a new canvas
revision reaches the next session only, which the owner's ``!new`` opens (a restarted bot
continues its sessions where the agent can), and changes its manifest.

Every wait is bounded; any failure raises :class:`DemoFailure` with what went wrong.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from nostr_buzz.cli.common import progress
from nostr_buzz.cli.compile import layer_table
from nostr_buzz.cli.demo_stage import (
    CHANNEL,
    RELAY_TIMEOUT,
    DemoFailure,
    DemoStage,
)
from nostr_buzz.cli.manifest import render_diff_text
from nostr_buzz.cli.metrics import render_plain_table
from nostr_buzz.cli.output import terminal_safe
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticRecord
from nostr_buzz.io.metrics_reader import read_metrics
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.private import open_all
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips import nip17, nip59
from nostr_buzz.nips.nip01 import Filter
from nostr_buzz.reports.manifest_diff import diff_manifests

__all__ = [
    "DEMO_AGENT_ENV",
    "DEMO_DELAY",
    "DemoFailure",
    "bundled_agent_command",
    "run_demo",
]

#: How long each turn of the bundled agent works (a steer ends it early): long enough for the
#: steer to land while the turn runs, short enough for the demo to finish in seconds.
DEMO_DELAY: Final = 1.5
#: How many of the agent log's last lines a failed demo shows.
LOG_TAIL_LINES: Final = 20
#: Standing context: it travels in the agent's system role and shows in every manifest.
#: The owner's canvas (two revisions) and the agent's core memory, set before the bot starts.
CANVAS_V1: Final = "# Deploy plan\n1. Fix the migration.\n2. Retry the deploy."
CANVAS_V2: Final = "# Deploy plan\n1. Migration fixed.\n2. Deploy to staging first."
CORE_MEMORY: Final = "Alex owns the deploys; Sam knows the database migrations."

Write = Callable[[str], None]


def bundled_agent_command(delay: float = DEMO_DELAY) -> list[str]:
    return [sys.executable, "-m", "nostr_buzz.demo.agent", "--delay", f"{delay:g}"]


def _heading(write: Write, number: int, title: str) -> None:
    write(f"\n== {number}. {title} ==\n")
    progress(f"buzz demo: {number}. {title}…")


def _manifest_lines(title: str, manifest: Manifest) -> str:
    count = len(manifest.layers)
    lines = [f"{title}: {manifest.hash} ({count} layer{'' if count == 1 else 's'})"]
    lines += ["  " + line for line in layer_table(manifest.layers)]
    return "\n".join(lines) + "\n"


def _manifest_of(record: DiagnosticRecord) -> Manifest:
    return Manifest.from_json(json.dumps(record.payload["contextManifest"]))


class _Demo(DemoStage):
    """The play: the demo's steps, in order, each writing what it shows and checking what it
    claims (the stage it acts on: :class:`~nostr_buzz.cli.demo_stage.DemoStage`)."""

    def __init__(
        self,
        write: Write,
        agent: Sequence[str],
        bundled: bool,
        state: Path,
        pass_env: Sequence[str] = (),
    ) -> None:
        super().__init__(write, agent, bundled, state, (*DEMO_AGENT_ENV, *pass_env))
        self.before: Manifest | None = None  # the manifest of the last turn of a session
        self.revision = ""  # the canvas revision published while that session ran

    async def run(self) -> None:
        async with self.relay():
            await self._script()

    async def _script(self) -> None:
        write = self.write
        _heading(write, 1, "setup")
        write(f"relay      {self.url} (embedded, loopback only)\n")
        write(f"state dir  {self.state}\n")
        write(f"owner      {self.owner.public_key.bech32}\n")
        write(f"agent      {self.agent_key.public_key.bech32}\n")
        write(f"alex       {self.human.public_key.bech32} (human)\n")
        write(f"sam        {self.second.public_key.bech32} (human)\n")
        write(f"agent cmd  {shlex.join(self.agent)}\n")
        await self.publish(
            self.sign(self.human, json.dumps({"name": "Alex"}), kind=0, tags=[]),
            self.sign(self.second, json.dumps({"name": "Sam"}), kind=0, tags=[]),
            self.sign(self.agent_key, json.dumps({"name": "buzz", "bot": True}), kind=0, tags=[]),
            self.sign(
                self.owner,
                "",
                kind=39000,
                tags=[["d", CHANNEL], ["name", "demo"], ["about", "Where the demo happens."]],
            ),
        )
        canvas = await self.buzz(self.owner, "canvas", "set", "--channel", CHANNEL, CANVAS_V1)
        write(f"$ buzz canvas set --channel {CHANNEL} …   (as the owner) → revision {canvas}\n")
        await self.buzz(self.agent_key, "mem", "set", "core", CORE_MEMORY)
        write("$ buzz mem set core …   (as the agent: stored encrypted to the agent's own key)\n")
        async with self.bot():
            await self._conversation()
            await self._metrics_and_raw()
            await self._canvas_revision()
        async with self.bot():
            await self._next_session()

    async def _conversation(self) -> None:
        """Steps 2 to 6: a mention, a burst, a second person, a steer, a private message."""
        mention = await self._mention()
        await self._burst(mention)
        await self._second_person(mention)
        await self._steer()
        await self._private_message()

    async def _mention(self) -> Event:
        write = self.write
        _heading(write, 2, "a mention (turn 1)")
        mention = self.sign(self.human, "Hi buzz, why did last night's deploy fail?")
        await self.publish(mention)
        await self.turn(1, "the mention")
        delivery = self.feed.of("prompt_context_delivery")[0]
        write(f"alex: {mention.content}\n")
        write("\nthe envelope the agent received (one text block each):\n")
        for section in delivery.payload.get("promptText", []):
            write(terminal_safe(section, multiline=True) + "\n\n")
        write(_manifest_lines("manifest of turn 1", _manifest_of(delivery)))
        frozen = self.feed.of("standing_context_frozen")[0].payload
        text = str(frozen.get("standingText", ""))
        started = self.feed.of("session_started")
        legacy = bool(started) and started[0].payload.get("standingStrategy") == "legacy"
        where = "prepended to its first prompt" if legacy else "in the agent's system role"
        write(f"\nthe standing context frozen for this session ({where}):\n")
        write(terminal_safe(text, multiline=True) + "\n")
        if "<channel-canvas>" not in text or CORE_MEMORY not in text:
            raise DemoFailure("the canvas or the core memory did not reach the session")
        if self.bundled and text not in self.recorded_system_prompts():
            raise DemoFailure("the demo agent did not receive the standing context")
        return mention

    async def _burst(self, mention: Event) -> None:
        write = self.write
        _heading(write, 3, "a burst of replies in one thread (coalesced: turn 2)")
        burst = [
            self.sign(self.human, text, root=mention)
            for text in ("It was the migration step.", "Logs are in #ops.", "Can you retry it?")
        ]
        await self.publish(*burst)
        await self.turn(2, "the burst")
        started = self.feed.of("turn_started")[1].payload["triggeringEventIds"]
        write(f"alex posted {len(burst)} replies; turn 2 was triggered by {len(started)}\n")
        if self.bundled and started != [e.id for e in burst]:
            raise DemoFailure(f"the burst became a turn of {len(started)} event(s), not 3")
        write(_manifest_lines("manifest of turn 2", _manifest_of(self.delivery(2))))

    async def _second_person(self, mention: Event) -> None:
        write = self.write
        _heading(write, 4, "a reply by a second person (a separate turn: turn 3)")
        sam = self.sign(self.second, "I can help with the migration too.", root=mention)
        await self.publish(sam)
        await self.turn(3, "the second person's reply")
        started = self.feed.of("turn_started")[2].payload["triggeringEventIds"]
        if started != [sam.id]:
            raise DemoFailure("the second person's reply did not get a turn of its own")
        write(f"sam: {sam.content}\n")
        write(_manifest_lines("manifest of turn 3", _manifest_of(self.delivery(3))))

    async def _steer(self) -> None:
        write = self.write
        _heading(write, 5, "a message while a turn is running (a steer into turn 4)")
        task = self.sign(self.human, "Please run the migration again.")
        await self.publish(task)
        await self.feed.wait_for(
            "prompt_context_delivery", 4, self.step_timeout, "the running turn"
        )
        # Only alex, in alex's thread, may steer alex's turn: sam's message waits for a turn
        # of its own (the authority boundary), published first so that it is queued first.
        aside = self.sign(self.second, "Should I pause the deploys meanwhile?", root=task)
        await self.publish(aside)
        steer = self.sign(self.human, "Use the staging database for it.", root=task)
        await self.publish(steer)
        await self.feed.wait_for("prompt_context_steer", 1, self.step_timeout, "the steer")
        await self.turn(4, "the steered turn")
        record = self.feed.of("prompt_context_steer")[0]
        outcome = record.payload["deliveryOutcome"]
        write(f"alex: {task.content}\nsam (while it runs): {aside.content}\n")
        write(f"alex (while it runs): {steer.content}\n")
        write(f"steer delivery: {outcome}; sam's message waits for a turn of its own\n")
        await self.turn(5, "sam's message, after the steered turn")
        fifth = self.feed.of("turn_started")[4].payload["triggeringEventIds"]
        if self.bundled and fifth != [aside.id]:
            raise DemoFailure("sam's message was not a turn of its own")
        write(_manifest_lines("manifest of turn 4", _manifest_of(self.delivery(4))))
        if "contextManifest" in record.payload:
            write(_manifest_lines("turn 4 ledger after the steer", _manifest_of(record)))
        if self.bundled and outcome != "injected":
            raise DemoFailure(f"the steer was not injected into the running turn ({outcome})")
        # When the agent could not take the steer natively, the message is its own next turn.
        turns = len(self.feed.of("turn_started"))
        await self.feed.wait_for("turn_completed", turns, self.step_timeout, "the last turn")

    async def _private_message(self) -> None:
        """Alex writes to the agent privately (NIP-17), the way 0xchat or Amethyst would; the
        agent answers privately; the relay sees only gift wraps."""
        write = self.write
        turn = len(self.feed.of("turn_started")) + 1
        _heading(write, 6, f"a private message (NIP-17), answered privately (turn {turn})")
        text = "Privately: who has access to the production database?"
        now = int(time.time())
        message = nip17.message(
            self.human.public_key.hex, [self.agent_key.public_key.hex], text, created_at=now
        )
        await self.publish(*(wrap for _, wrap in nip17.wrap_for_room(self.human, message, now=now)))
        await self.feed.wait_for("turn_completed", turn, self.step_timeout, "the private message")
        await self.feed.wait_for(
            "reply_published",
            1,
            self.step_timeout,
            "the private answer",
            where=lambda r: r.payload.get("private") is True,
        )
        found = await RelayPool([self.url], timeout=RELAY_TIMEOUT).query(
            Filter(kinds=(nip59.GIFT_WRAP_KIND,), tags={"p": (self.human.public_key.hex,)})
        )
        inbox = await open_all(self.human, found.events)
        answers = [o for o in inbox.messages if o.sender == self.agent_key.public_key.hex]
        if not answers:
            raise DemoFailure("alex found no private answer from the agent")
        answer = answers[-1].rumor
        if nip17.replied_to(answer) != message.id:
            raise DemoFailure("the private answer does not answer alex's message")
        delivery = self.delivery(turn)
        write(f"alex (private, kind 14 in a kind 1059 gift wrap): {text}\n")
        shown = "withheld" if "promptText" not in delivery.payload else "shown"
        write(f"prompt text in the diagnostics: {shown} (a private message is never logged)\n")
        write(
            f"the agent answered privately: a kind 14 from the agent, e = alex's message, "
            f"wrapped to alex and to itself; alex opened it:\n  "
            f"{terminal_safe(answer.content.splitlines()[0], multiline=False)}\n"
        )
        stored = await RelayPool([self.url], timeout=RELAY_TIMEOUT).query(Filter(limit=500))
        leaked = [e.id for e in stored.events if "production database" in e.to_json()]
        if leaked:
            raise DemoFailure(f"the relay holds the private text in the clear: {leaked}")
        write("the relay holds gift wraps only: no event on it contains the text\n")

    async def _metrics_and_raw(self) -> None:
        write = self.write
        _heading(write, 7, "metrics: published by the agent, read back by the owner")
        queued = len(self.feed.of("metric_queued"))
        turns = len(self.feed.of("turn_completed"))
        if queued != turns:  # every turn is metered, with unknown counters if need be
            raise DemoFailure(f"{turns} turn(s) ended but {queued} metric(s) were queued")
        await self.feed.wait_for("metric_published", queued, self.step_timeout, "the metrics")
        write(f"{queued} metric event(s) (kind 44200, NIP-44 encrypted to the owner) published\n")
        report, fetch = await read_metrics(self.owner, [self.url], timeout=RELAY_TIMEOUT)
        if not fetch.any_finished:
            raise DemoFailure("the relay did not answer the owner's metrics query")
        if len(report.turns) != queued:
            raise DemoFailure(f"the owner read {len(report.turns)} metric(s), expected {queued}")
        if report.manifest_mismatches:
            raise DemoFailure(f"{report.manifest_mismatches} metric manifest(s) do not match")
        write("\nper turn:\n" + render_plain_table(report, turns=True))
        write("\ntotals:\n" + render_plain_table(report, turns=False))

        _heading(write, 8, "one message, fetched with `buzz messages raw --event`")
        replies = self.feed.of("reply_published")
        if not replies:
            raise DemoFailure("the agent published no reply")
        event_id = str(replies[0].payload["eventId"])
        raw = await self.buzz(None, "messages", "raw", "--event", event_id)
        write(f"$ buzz messages raw --event {event_id} --relay {self.url}\n")
        Event.from_json(raw)  # the printed event verifies (id and signature)
        write(raw + "\n")

    async def _canvas_revision(self) -> None:
        write = self.write
        _heading(write, 9, "a new canvas revision: the running session keeps its own")
        revision = await self.buzz(self.owner, "canvas", "set", "--channel", CHANNEL, CANVAS_V2)
        write(f"$ buzz canvas set --channel {CHANNEL} …   (as the owner) → revision {revision}\n")
        await self.publish(self.sign(self.human, "Is the plan still the same?"))
        turn = len(self.feed.of("turn_started")) + 1
        await self.turn(turn, "the turn after the canvas changed")
        self.before = _manifest_of(self.delivery(turn))
        write(_manifest_lines(f"manifest of turn {turn} (same session)", self.before))
        first = _manifest_of(self.delivery(1))
        canvas = [layer.version for layer in self.before.layers if layer.layer == "channel_canvas"]
        if canvas != [layer.version for layer in first.layers if layer.layer == "channel_canvas"]:
            raise DemoFailure("the running session's canvas changed with the new revision")
        write(f"channel_canvas is still {canvas[0]}: the revision this session started with\n")
        self.revision = revision

    async def _next_session(self) -> None:
        write = self.write
        _heading(write, 10, "the owner starts a new session (!new): it sees the new revision")
        await self.publish(self.sign(self.owner, "!new"))
        await self.feed.wait_for("owner_command", 1, self.step_timeout, "the owner's !new")
        write(
            "(the bot restarted first: its session continued where the agent can — !new is how\n"
            " the owner opens a new one)\n"
        )
        await self.publish(self.sign(self.human, "And now?"))
        turn = len(self.feed.of("turn_started")) + 1
        await self.turn(turn, "the first turn of the next session")
        frozen = self.feed.of("standing_context_frozen")
        if frozen[-1].payload.get("canvasRevision") != self.revision:
            raise DemoFailure("the next session did not get the new canvas revision")
        after = _manifest_of(self.delivery(turn))
        write(_manifest_lines(f"manifest of turn {turn} (a new session)", after))
        write("\nwhat changed between the two turns (as `buzz manifest diff` shows it):\n")
        if self.before is None:
            raise DemoFailure("no turn ran in the first session")
        write(render_diff_text(diff_manifests(self.before, after)))


#: Variables an external agent usually needs, passed when set (on top of the trimmed base
#: every agent gets: HOME, LOGNAME, PATH, SHELL, TERM, USER): API keys and endpoints of the
#: model providers, the adapters' own homes and traffic settings, proxies and CA certificates.
#: ``--pass-env`` adds more.
DEMO_AGENT_ENV: Final = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "DISABLE_ERROR_REPORTING",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "CODEX_API_KEY",
    "CODEX_HOME",
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "OPENROUTER_API_KEY",
    "GOOSE_PROVIDER",
    "GOOSE_MODEL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
)


def _kept_log(state: Path) -> str:
    """Copy the agent log out of the state directory (which the demo removes) and say where
    it is, with its last lines; "" when there is none."""
    log = next(state.rglob("agent.log"), None)
    if log is None or not log.is_file():
        return ""
    try:
        text = log.read_bytes().decode("utf-8", errors="replace")
        fd, kept = tempfile.mkstemp(prefix="buzz-demo-agent-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        return f"\n(the agent log could not be kept: {exc.strerror or exc})"
    tail = text.splitlines()[-LOG_TAIL_LINES:]
    shown = "\n".join("  " + terminal_safe(line, multiline=False) for line in tail)
    return f"\nthe agent log is kept at {kept}; its last lines:\n{shown}"


async def run_demo(
    write: Write, agent: Sequence[str] | None = None, pass_env: Sequence[str] = ()
) -> None:
    """Run the whole demo, writing its report through ``write``; raises :class:`DemoFailure`
    (with the agent log's last lines; the log itself is kept).

    ``agent``: an ACP command (argv) instead of the bundled demo agent; ``pass_env``: more
    variable names to pass to it on top of :data:`DEMO_AGENT_ENV`.
    """
    bundled = agent is None
    command = bundled_agent_command() if agent is None else list(agent)
    if not command:
        raise DemoFailure("--agent: the agent command is empty")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="buzz-demo-") as state:
        try:
            await _Demo(write, command, bundled, Path(state), pass_env).run()
        except DemoFailure as exc:
            raise DemoFailure(f"{exc}{_kept_log(Path(state))}") from None
    _heading(write, 11, "done")
    write(f"demo finished in {time.monotonic() - started:.1f} s\n")
