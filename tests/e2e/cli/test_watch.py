"""``buzz watch`` beside a real ``buzz run``: the bundled demo agent is slow (each turn waits a
minute unless cancelled), the owner sends three mentions in three threads of one channel, and
``buzz watch --once`` — a process of its own, without the bot's key — shows the running turn
(its channel, its author, how long it has run) and the two mentions waiting behind it.  The
live view draws the same on a terminal and ends with Ctrl-C (exit 0).  After the bot stops,
the turn it abandoned is no longer shown as running and its mention is pending again."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from nostr_buzz.bot.state import BotStore
from tests.support.fault_harness import (
    BotProcess,
    Cast,
    DiagnosticsTail,
    mention,
    publish,
    start_bot,
    write_config,
)
from tests.support.relays import free_port, local_relay

BUZZ = (sys.executable, "-m", "nostr_buzz")
WAIT = 20.0


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("BUZZ_", "PYTHONIO"))}


async def watch_once(state: Path) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        *BUZZ, "watch", "--once", "--state-dir", str(state),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(),
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)  # type: ignore[no-any-return]


async def until_view(state: Path, ready: Any, what: str) -> dict[str, Any]:
    """``buzz watch --once`` again until ``ready(view)`` (the bot admits the mentions as they
    arrive: the view may be taken before the last one is queued); bounded."""
    deadline = time.monotonic() + WAIT
    while True:
        view = await watch_once(state)
        if ready(view):
            return view
        if time.monotonic() >= deadline:
            raise AssertionError(f"buzz watch never showed {what}: {view}")


def _read_screen(fd: int, fragments: tuple[str, ...], timeout: float) -> str:
    """What the terminal shows until every fragment has appeared (bounded)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        try:
            seen += os.read(fd, 65536)
        except OSError:  # the process ended: the terminal is closed
            break
        text = seen.decode(errors="replace")
        if all(f in text for f in fragments):
            return text
    raise AssertionError(f"the live view never showed {fragments}: {seen[-2000:]!r}")


def _drain(fd: int, timeout: float) -> None:
    """Read the terminal until the process has closed it (bounded)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        try:
            if ready and not os.read(fd, 65536):
                return
        except OSError:  # EIO: every process on the terminal has closed it
            return


async def live_screen(state: Path, fragments: tuple[str, ...], **locale: str) -> str:
    """``buzz watch`` on a terminal (a pty of 120 columns; ``locale``: its variables) until it
    shows ``fragments``; then Ctrl-C, which must end it with exit 0."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**_env(), "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40", **locale}
    proc = subprocess.Popen(
        [*BUZZ, "watch", "--state-dir", str(state)],
        stdin=follower, stdout=follower, stderr=follower, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    try:
        screen = await asyncio.to_thread(_read_screen, leader, fragments, WAIT)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        await asyncio.to_thread(_drain, leader, WAIT)  # so that its last writes never block
        assert await asyncio.to_thread(proc.wait, WAIT) == 0
        return screen
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)


async def test_watch_shows_the_running_turn_and_the_queue_while_a_slow_agent_runs(
    tmp_path: Path,
) -> None:
    cast = Cast.generate()
    state = tmp_path / "state"
    async with local_relay() as relay:
        config = write_config(tmp_path, cast, [relay.url], agent_args=["--delay", "60"])
        bot = BotProcess(config, tmp_path / "bot.log")
        tail = DiagnosticsTail(state / "diagnostics.jsonl")
        await bot.start()
        try:
            await tail.next_record(lambda r: r["kind"] == "agent_started", WAIT, "start", 0)
            # Three threads of one channel: three turns, one at a time.
            tasks = [mention(cast, cast.owner, f"task {n}", channel="eng") for n in range(3)]
            await publish([relay.url], tasks)
            first = await tail.next_record(lambda r: r["kind"] == "turn_started", WAIT, "turn", 0)

            view = await until_view(
                state,
                lambda v: v["queue"] and v["queue"][0]["pending"] == 2,
                "two mentions waiting",
            )
            [turn] = view["runningTurns"]
            assert turn["turnId"] == first["turnId"] and turn["channel"] == "eng"
            assert turn["actors"] == [cast.owner.public_key.bech32]
            assert turn["eventIds"] == first["payload"]["triggeringEventIds"]
            assert turn["durationSeconds"] > 0 and turn["lastTool"] is None
            assert view["queue"] == [
                {
                    "channel": "eng",
                    "pending": 2,
                    "inFlight": 1,
                    "cancelled": 0,
                    "oldestAgeSeconds": view["queue"][0]["oldestAgeSeconds"],
                    "attempts": 0,
                    "backoffSeconds": None,
                    "thread": None,
                }
            ]
            assert view["agent"]["name"] == "buzz-demo-agent" and not view["agent"]["exited"]
            assert view["spend"]["turns"] == 0 and view["budget"] is None

            npub = cast.owner.public_key.bech32
            screen = await live_screen(state, ("running turns", f"{npub[:12]}…", "queue"))
            assert "no budget configured" in screen
            # A terminal that cannot show "…" (the C locale: ASCII) gets an escape, not a crash.
            ascii_only = {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
            await live_screen(state, ("running turns", f"{npub[:12]}\\u2026"), **ascii_only)
        finally:
            await bot.stop()
        # Stopped: the abandoned turn ended (turn_ended), its mention waits for the next run.
        after = await watch_once(state)
        assert after["runningTurns"] == []
        assert [(c["channel"], c["pending"], c["inFlight"]) for c in after["queue"]] == [
            ("eng", 3, 0)
        ]
        assert not (state / "bot.sqlite3-wal").exists()  # the watcher left nothing behind


async def test_watch_shows_each_relay_a_reply_and_a_metric_still_owe(tmp_path: Path) -> None:
    """Two write relays, one of them down (nothing listens on its port): the turn's reply and
    metric are delivered by the other, and ``buzz watch`` shows each of them accepted there and
    failing on the relay that is down, with its error, until that relay takes them."""
    cast = Cast.generate()
    state = tmp_path / "state"
    down = f"ws://127.0.0.1:{free_port()}"
    async with local_relay() as relay:
        bot, tail = await start_bot(tmp_path, cast, [relay.url, down])
        try:
            await publish([relay.url], [mention(cast, cast.owner, "hello", channel="eng")])
            await tail.next_record(lambda r: r["kind"] == "metric_published", WAIT, "metric", 0)

            def owed(view: dict[str, Any]) -> bool:
                names = {e["name"] for e in view["outbox"]["entries"]}
                failing = [
                    r for e in view["outbox"]["entries"] for r in e["relays"]
                    if r["relay"] == down and r["state"] == "failing"
                ]  # fmt: skip
                return {"reply", "metric"} <= names and len(failing) >= 2

            view = await until_view(state, owed, "the reply and the metric owed to the relay down")
            for entry in view["outbox"]["entries"]:
                states = {r["relay"]: r for r in entry["relays"]}
                assert states[relay.url]["state"] == "accepted", entry
                assert states[down]["attempts"] >= 1 and entry["waiting"] == 1, entry
                assert "connect failed" in (states[down]["lastError"] or ""), entry
            screen = await live_screen(state, ("outbox, relay by relay", "failing"))
            assert "accepted" in screen
        finally:
            await bot.stop()


def test_watch_once_needs_no_key_nor_the_agent_protocol_nor_rich(tmp_path: Path) -> None:
    store = BotStore(tmp_path / "state")
    store.close()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "nostr_buzz", "watch", "--once", "--state-dir",
         str(tmp_path / "state")],
        capture_output=True, env=_env(), timeout=WAIT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["queue"] == []
    modules = set(re.findall(r"import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)", done.stderr.decode()))
    assert "nostr_buzz.io.watch" in modules  # the measurement sees our own imports
    heavy = {"acp", "pydantic", "rich", "websockets", "nostr_buzz.bot"}
    assert not [m for m in modules if m in heavy or m.split(".")[0] in heavy]
