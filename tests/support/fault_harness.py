"""Real processes for the end-to-end fault tests in this folder.

What this is: the harness the durability tests drive, with nothing simulated.  It starts
``buzz relay --db DIR --port P`` and ``buzz run --config buzz.toml`` as subprocesses of the test
(the bot runs the bundled demo agent over stdio), SIGKILLs or stops them and starts them again,
follows the bot's ``diagnostics.jsonl`` as it is written (to kill within milliseconds of a
record), publishes signed mentions from the owner, an allowlisted person and a stranger, and
counts what the bot published on the relays:

- replies: kind-9 events signed by the agent, each aimed (NIP-10 ``reply``, else ``root``
  marker) at one event;
- metrics: kind-44200 events signed by the agent, opened with the owner's key; a metered turn
  answers its ``triggeringEventIds`` plus every event steered into it (each steer is one
  ``current_instruction`` layer of the turn's manifest, versioned with the event's id).

"Answered exactly once" means: the mention is answered by exactly one metered turn, and that
turn has exactly one reply.  Every wait here is bounded by a deadline; a failed wait says what
it was waiting for.  Process output goes to log files in the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import MetricPayload, open_metric_event
from tests.support.relays import free_port  # tests/relays.py

BUZZ = (sys.executable, "-m", "nostr_buzz")
CHAT = 9
PAGE = 500  # what buzz relay (nostr-sdk's LocalRelay) returns at most per query
_ID_LEN = 64
_LATER_PART = re.compile(r"\[([2-9]|[1-9][0-9]+)/[0-9]+\]\n")  # part 2+ of a split reply


def seeded_rng(name: str) -> tuple[random.Random, int]:
    """An RNG seeded from ``BUZZ_E2E_SEED`` or fresh; the seed is printed for a replay."""
    given = os.environ.get("BUZZ_E2E_SEED")
    seed = int(given) if given else random.SystemRandom().randrange(2**32)
    print(f"{name}: seed {seed} (replay with BUZZ_E2E_SEED={seed})", flush=True)
    return random.Random(seed), seed


# -- processes ---------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc), so a killed bot leaves no agent behind."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


async def _reap(proc: asyncio.subprocess.Process, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await proc.wait()
            return
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


async def _end_leftovers(pids: Iterable[int], timeout: float = 5.0) -> None:
    """Wait (bounded) for processes that should exit on their own, then SIGKILL them."""
    pending = list(pids)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        pending = [p for p in pending if Path(f"/proc/{p}").exists() and not _zombie(p)]
        if pending:
            await asyncio.sleep(0.05)
    for pid in pending:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) == "Z"
    except OSError:
        return True


class RelayProcess:
    """``buzz relay --db DIR --port P``: restarts keep the same store and the same URL."""

    def __init__(self, db: Path, log: Path, port: int | None = None) -> None:
        self.db = db
        self.log = log
        self.port = port or free_port()
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log, "ab") as log:
                proc = await asyncio.create_subprocess_exec(
                    *BUZZ, "relay", "--db", str(self.db), "--port", str(self.port),
                    stdout=asyncio.subprocess.PIPE, stderr=log,
                )  # fmt: skip
            assert proc.stdout is not None
            line = b""
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                    line = await proc.stdout.readline()
            if line.startswith(b"ws://"):
                self.proc = proc
                self.starts += 1
                return
            await _reap(proc, 2.0)  # e.g. the port is still held by the previous run
            if time.monotonic() >= deadline:
                raise AssertionError(f"buzz relay did not start on {self.port}; see {self.log}")
            await asyncio.sleep(0.2)

    async def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        await _reap(proc, timeout)

    async def restart(self) -> None:
        await self.stop()
        await self.start()


class BotProcess:
    """``buzz run --config FILE [args]`` with the demo agent; ``kill()`` is a real SIGKILL."""

    def __init__(self, config: Path, log: Path, *args: str) -> None:
        self.config = config
        self.log = log
        self.args = args
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.kills = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        assert not self.running, "the bot is already running"
        env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
        with open(self.log, "ab") as log:
            log.write(f"--- start {self.starts + 1} at {time.time():.3f}\n".encode())
            log.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *BUZZ, "run", "--config", str(self.config), *self.args,
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, env=env,
            )  # fmt: skip
        self.starts += 1

    async def running_again(self, timeout: float = 30.0) -> None:
        """Wait (bounded) until the bot runs, e.g. while another task is starting it."""
        deadline = time.monotonic() + timeout
        while not self.running:
            if time.monotonic() >= deadline:
                raise AssertionError(f"the bot did not run again within {timeout} s")
            await asyncio.sleep(0.01)

    async def exited(self) -> int:
        """Wait until the bot exits; its status."""
        assert self.proc is not None
        return await self.proc.wait()

    def kill_now(self) -> list[int]:
        """SIGKILL the bot at this very instant; returns its descendants (for :meth:`reap`)."""
        assert self.proc is not None and self.proc.returncode is None, "the bot is not running"
        descendants = _children(self.proc.pid)
        self.proc.kill()
        self.kills += 1
        return descendants

    async def reap(self, descendants: Sequence[int] = ()) -> None:
        if self.proc is not None:
            await _reap(self.proc, 5.0)
        # The agent gets end-of-file on stdin and exits; anything left is killed by its id.
        await _end_leftovers(descendants)

    async def kill(self) -> None:
        await self.reap(self.kill_now())

    async def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait (bounded); returns the exit status."""
        if self.proc is None:
            return None
        descendants = _children(self.proc.pid)
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        await _reap(self.proc, timeout)
        await _end_leftovers(descendants)
        return self.proc.returncode

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# -- the diagnostics feed ------------------------------------------------------------------


class DiagnosticsTail:
    """The records of a bot's ``diagnostics.jsonl``, read as the file grows (across restarts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self._offset = 0
        self._partial = b""
        self.changed_at = time.monotonic()

    def poll(self) -> list[dict[str, Any]]:
        """Records appended since the last call (a torn last line waits for its end)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size <= self._offset:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read(size - self._offset)
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        new: list[dict[str, Any]] = []
        for line in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    new.append(record)
        if new:
            self.records.extend(new)
            self.changed_at = time.monotonic()
        return new

    def of(self, *kinds: str) -> list[dict[str, Any]]:
        self.poll()
        return [r for r in self.records if r.get("kind") in kinds]

    def mark(self) -> int:
        """A position in the feed: :meth:`next_record` ``after`` it sees every later record."""
        self.poll()
        return len(self.records)

    async def next_record(
        self,
        match: Callable[[dict[str, Any]], bool],
        timeout: float,
        what: str,
        after: int | None = None,
    ) -> dict[str, Any]:
        """Wait for the first matching record after ``after`` (default: from now on), polling
        about every millisecond.  Several waits may run at once on one tail."""
        cursor = self.mark() if after is None else after
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            for record in self.records[cursor:]:
                if match(record):
                    return record
            cursor = len(self.records)
            if time.monotonic() >= deadline:
                raise AssertionError(f"no {what} in {self.path} within {timeout} s")
            await asyncio.sleep(0.001)

    @staticmethod
    def age_ms(record: dict[str, Any]) -> float:
        """Milliseconds since the bot wrote ``record`` (both clocks are this machine's)."""
        written = datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00"))
        return (time.time() - written.timestamp()) * 1000

    async def quiet(self, seconds: float, timeout: float) -> None:
        """Wait until nothing was written for ``seconds`` (at most ``timeout``)."""
        deadline = time.monotonic() + timeout
        self.poll()
        while time.monotonic() < deadline:
            self.poll()
            if time.monotonic() - self.changed_at >= seconds:
                return
            await asyncio.sleep(0.1)

    def lines_about(self, event_ids: Iterable[str], limit: int = 12) -> list[str]:
        """The records that name any of ``event_ids`` (evidence for a finding)."""
        wanted = set(event_ids)
        out: list[str] = []
        for record in self.records:
            text = json.dumps(record, separators=(",", ":"))
            if any(i in text for i in wanted):
                out.append(text[:400])
        return out[-limit:]


# -- people, mentions and publishing ------------------------------------------------------


@dataclass(frozen=True)
class Cast:
    """The keys of a scenario: the bot's agent, its owner, an allowlisted friend, a stranger."""

    agent: SecretKey
    owner: SecretKey
    friend: SecretKey
    stranger: SecretKey

    @classmethod
    def generate(cls) -> Cast:
        return cls(*(SecretKey.generate() for _ in range(4)))


def mention(
    cast: Cast,
    author: SecretKey,
    text: str,
    *,
    channel: str,
    root: Event | None = None,
    created_at: int | None = None,
    mentions_agent: bool = True,
) -> Event:
    """A kind-9 chat message in ``channel`` (a reply in ``root``'s thread when given)."""
    tags: list[list[str]] = [["h", channel]]
    if root is not None:
        tags.append(["e", root.id, "", "root"])
    if mentions_agent:
        tags.append(["p", cast.agent.public_key.hex])
    when = int(time.time()) if created_at is None else created_at
    return sign_event(author, kind=CHAT, content=text, tags=tags, created_at=when)


def write_config(
    directory: Path,
    cast: Cast,
    relays: Sequence[str],
    *,
    agent_args: Sequence[str] = (),
    state_dir: str = "state",
    agent_argv: Sequence[str] | None = None,
    agent_module: str | None = None,
) -> Path:
    """A buzz.toml in ``directory``: allowlist gate (owner + friend), the demo agent (or
    ``python AGENT_ARGV…`` when given, e.g. a launcher script that ends in the demo agent; or
    the in-process agent ``agent_module`` names, MODULE:ATTR)."""
    directory.mkdir(parents=True, exist_ok=True)
    key_file = directory / "agent.key"
    key_file.write_text(cast.agent.hex + "\n", encoding="utf-8")
    key_file.chmod(0o600)  # buzz refuses a key file that others can read
    args = ["-m", "nostr_buzz.demo.agent", *agent_args] if agent_argv is None else [*agent_argv]
    agent = f"command = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
    if agent_module is not None:
        agent = f"module = {json.dumps(agent_module)}\n"
    config = directory / "buzz.toml"
    config.write_text(
        'key_file = "agent.key"\n'
        f'owner = "{cast.owner.public_key.hex}"\n'
        f"relays = {json.dumps(list(relays))}\n"
        f'state_dir = "{state_dir}"\n'
        f"[agent]\n{agent}"
        "[gate]\n"
        'mode = "allowlist"\n'
        f'allowlist = ["{cast.friend.public_key.hex}"]\n'
        "[timeouts]\n"
        "relay = 3\n",
        encoding="utf-8",
    )
    return config


async def start_bot(
    directory: Path, cast: Cast, relays: Sequence[str], timeout: float = 30.0
) -> tuple[BotProcess, DiagnosticsTail]:
    """``buzz run`` on ``relays`` with :func:`write_config`'s buzz.toml in ``directory``,
    once its agent has started (stopped again if it does not); the caller stops it."""
    bot = BotProcess(write_config(directory, cast, relays), directory / "bot.log")
    tail = DiagnosticsTail(directory / "state" / "diagnostics.jsonl")
    await bot.start()
    try:
        await tail.next_record(lambda r: r["kind"] == "agent_started", timeout, "start", 0)
    except BaseException:
        await bot.stop()
        raise
    return bot, tail


async def publish(urls: Sequence[str], events: Sequence[Event], timeout: float = 30.0) -> None:
    """Publish every event to every relay (concurrently); each must be accepted."""
    deadline = time.monotonic() + timeout
    limit = asyncio.Semaphore(32)

    async def one(client: RelayClient, event: Event) -> bool:
        async with limit:
            return (await client.publish(event)).ok

    for url in urls:
        missing = list(events)
        async with RelayClient(url, timeout=5.0) as client:
            while missing:
                verdicts = await asyncio.gather(*(one(client, e) for e in missing))
                missing = [e for e, ok in zip(missing, verdicts, strict=True) if not ok]
                if missing and time.monotonic() >= deadline:
                    raise AssertionError(f"{len(missing)} events not accepted by {url}")
                if missing:
                    await asyncio.sleep(0.2)


async def _fetch_range(
    client: RelayClient, flt: dict[str, Any], since: int, until: int, out: dict[str, Event]
) -> None:
    result = await client.query({**flt, "since": since, "until": until, "limit": PAGE}, timeout=15)
    if result.error is not None:
        raise AssertionError(f"query {flt} on {client.url} failed: {result.error}")
    for event in result.events:
        out[event.id] = event
    if len(result.events) >= PAGE:  # the relay may have more: split the time range
        if since >= until:
            raise AssertionError(f"more than {PAGE} events in one second on {client.url}")
        middle = (since + until) // 2
        await _fetch_range(client, flt, since, middle, out)
        await _fetch_range(client, flt, middle + 1, until, out)


async def fetch_all(urls: Sequence[str], flt: dict[str, Any]) -> list[Event]:
    """Every stored event matching ``flt`` on any of the relays (paged past the relay's cap)."""
    now = int(time.time())
    found: dict[str, Event] = {}
    for url in urls:
        async with RelayClient(url, timeout=10.0) as client:
            await _fetch_range(client, flt, now - 2 * 86_400, now + 3 * 86_400, found)
    return list(found.values())


# -- counting answers -----------------------------------------------------------------------


def reply_target(event: Event) -> str | None:
    """The event a reply answers: its NIP-10 ``reply`` e tag, else its ``root`` e tag."""
    marked = {t[3]: t[1] for t in event.tags if len(t) >= 4 and t[0] == "e"}
    return marked.get("reply") or marked.get("root")


def answered_ids(payload: MetricPayload) -> set[str]:
    """The events a metered turn answered: its triggering events and the steers it took."""
    ids = set(payload.triggering_event_ids)
    manifest = payload.context_manifest
    if manifest is not None:
        for layer in manifest.layers:
            if layer.layer == "current_instruction" and len(layer.version) == _ID_LEN:
                ids.add(layer.version)
    return ids


@dataclass
class Tally:
    """What the relays hold for a scenario's mentions."""

    posted: int
    answered: list[str] = field(default_factory=list)  # one metered turn, one reply
    lost: list[str] = field(default_factory=list)  # in no metered turn
    twice: list[str] = field(default_factory=list)  # in more than one metered turn
    unreplied: list[str] = field(default_factory=list)  # metered once, but no reply
    turns: int = 0  # metrics seen
    replies: int = 0  # replies seen
    duplicate_metrics: int = 0  # metrics beyond the first for a turn (same turnId or overlap)
    extra_replies: int = 0  # replies beyond the first to the same event
    refused_answered: list[str] = field(default_factory=list)  # events the gate must refuse
    metrics_without_reply: int = 0

    @property
    def ok(self) -> bool:
        return (
            len(self.answered) == self.posted
            and self.duplicate_metrics == 0
            and self.extra_replies == 0
            and not self.refused_answered
            and self.metrics_without_reply == 0
        )

    def summary(self) -> str:
        return (
            f"posted {self.posted}, answered {len(self.answered)}, lost {len(self.lost)}, "
            f"metered twice {len(self.twice)}, metered but unreplied {len(self.unreplied)}, "
            f"metrics {self.turns}, duplicate metrics {self.duplicate_metrics}, replies "
            f"{self.replies}, extra replies {self.extra_replies}, metered turns without a "
            f"reply {self.metrics_without_reply}, refused events answered "
            f"{len(self.refused_answered)}"
        )


class Counter44200:
    """Counts replies and metrics on relays, opening each metric only once."""

    def __init__(self, cast: Cast, urls: Sequence[str]) -> None:
        self.cast = cast
        self.urls = list(urls)
        self._opened: dict[str, MetricPayload] = {}
        self.bad_metrics: list[str] = []

    async def metrics(self) -> list[MetricPayload]:
        author = self.cast.agent.public_key.hex
        events = await fetch_all(self.urls, {"kinds": [METRIC_KIND], "authors": [author]})
        for event in events:
            if event.id not in self._opened and event.id not in self.bad_metrics:
                try:
                    self._opened[event.id] = open_metric_event(self.cast.owner, event)
                except Exception as exc:  # a metric the owner cannot open is a finding too
                    self.bad_metrics.append(event.id)
                    print(f"metric {event.id} does not open: {exc}", flush=True)
        return [self._opened[e.id] for e in events if e.id in self._opened]

    async def replies(self) -> list[Event]:
        author = self.cast.agent.public_key.hex
        return await fetch_all(self.urls, {"kinds": [CHAT], "authors": [author]})

    async def tally(self, accepted: Sequence[Event], refused: Sequence[Event] = ()) -> Tally:
        metrics = await self.metrics()
        replies = await self.replies()
        return tally(accepted, refused, metrics, replies)


def tally(
    accepted: Sequence[Event],
    refused: Sequence[Event],
    metrics: Sequence[MetricPayload],
    replies: Sequence[Event],
) -> Tally:
    result = Tally(posted=len(accepted), turns=len(metrics), replies=len(replies))
    answered_by: dict[str, list[int]] = {}
    turn_ids: Counter[str] = Counter()
    firsts = [r for r in replies if not _LATER_PART.match(r.content)]  # a split reply is one
    targets = Counter(t for t in (reply_target(r) for r in firsts) if t is not None)
    replied: list[bool] = []
    for index, payload in enumerate(metrics):
        ids = answered_ids(payload)
        for event_id in ids:
            answered_by.setdefault(event_id, []).append(index)
        if payload.turn_id is not None:
            turn_ids[payload.turn_id] += 1
        replied.append(any(targets[i] for i in ids))
    result.extra_replies = sum(n - 1 for n in targets.values() if n > 1)
    result.metrics_without_reply = replied.count(False)
    for event in accepted:
        turns = answered_by.get(event.id, [])
        if not turns:
            result.lost.append(event.id)
        elif len(turns) > 1:
            result.twice.append(event.id)
        elif not replied[turns[0]]:
            result.unreplied.append(event.id)
        else:
            result.answered.append(event.id)
    # Two metrics for one turn: the same turn id, or one mention metered by two turns.
    repeated_turns = sum(n - 1 for n in turn_ids.values() if n > 1)
    metered_again = sum(len(answered_by[i]) - 1 for i in result.twice)
    result.duplicate_metrics = max(repeated_turns, metered_again)
    result.refused_answered = [e.id for e in refused if e.id in answered_by or targets[e.id]]
    return result


async def wait_answered(
    counter: Counter44200,
    accepted: Sequence[Event],
    *,
    refused: Sequence[Event] = (),
    timeout: float,
    tails: Sequence[DiagnosticsTail] = (),
    quiet: float = 1.5,
) -> Tally:
    """Poll the relays until every accepted event is answered (or ``timeout``), then let the
    bots go quiet (bounded) so late duplicates are counted too; returns the final tally."""
    deadline = time.monotonic() + timeout
    while True:
        current = await counter.tally(accepted, refused)
        if len(current.answered) + len(current.twice) == current.posted:
            break
        if time.monotonic() >= deadline:
            return current
        await asyncio.sleep(1.0)
    for tail in tails:
        await tail.quiet(quiet, timeout=10.0)
    return await counter.tally(accepted, refused)


def evidence(
    tally_: Tally,
    tails: Sequence[DiagnosticsTail],
    events: Sequence[Event] = (),
    limit: int = 3,
) -> str:
    """A failure message: the counts, and what is known about a few of the missing answers
    (the mention itself and the diagnostics lines that name it)."""
    by_id = {e.id: e for e in events}
    now = int(time.time())
    lines = [tally_.summary()]
    for label, ids in (
        ("lost", tally_.lost),
        ("twice", tally_.twice),
        ("unreplied", tally_.unreplied),
    ):
        for event_id in ids[:limit]:
            event = by_id.get(event_id)
            about = ""
            if event is not None:
                skew = event.created_at - now
                about = f" {event.content!r} in {nip10.channel(event)}, created_at now{skew:+d} s"
            lines.append(f"{label} {event_id}{about}:")
            for tail in tails:
                lines.extend("  " + line for line in tail.lines_about([event_id], limit=6))
    return "\n".join(lines)
