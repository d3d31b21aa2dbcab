"""A SIGKILLed bot's leftover agent group is ended by its next start, and only that group.

Real processes throughout: ``buzz relay`` and ``buzz run`` as subprocesses.  The agent command
is a launcher, as codex-acp's npm script is: a tiny script that starts a long-lived grandchild
(``time.sleep(600)``) in its own process group and then becomes the bundled demo agent.  When
the bot is SIGKILLed the demo agent exits on end-of-file but the grandchild keeps running; the
next ``buzz run`` finds the group it recorded, sees the recorded token in the grandchild's
environment, ends the group and serves a mention with its new agent.  A recorded group whose
processes do not carry the token (an unrelated group that reused the id) is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nostr_buzz.io.agent_group import (
    RECORD_FILE,
    TOKEN_ENV,
    GroupRecord,
    new_token,
    read_record,
    write_record,
)
from nostr_buzz.io.filemodes import private_dir
from tests.support.fault_harness import (
    BotProcess,
    Cast,
    Counter44200,
    DiagnosticsTail,
    RelayProcess,
    mention,
    publish,
    wait_answered,
    write_config,
)
from tests.support.waits import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]

#: The agent command: start a grandchild that outlives everything, note its pid, then exec the
#: demo agent (same process, same group: the group's leader).
LAUNCHER = """
import os, subprocess, sys
sleeper = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
with open(sys.argv[1], "a") as fh:
    fh.write(f"{sleeper.pid}\\n")
os.execv(sys.executable, [sys.executable, "-m", "nostr_buzz.demo.agent"])
"""


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@dataclass
class World:
    cast: Cast
    relay: RelayProcess
    bot: BotProcess
    tail: DiagnosticsTail
    state: Path

    async def start_bot(self) -> dict[str, Any]:
        """Start ``buzz run``; its ``agent_started`` record."""
        mark = self.tail.mark()
        await self.bot.start()
        return await self.tail.next_record(
            lambda r: r.get("kind") == "agent_started", 30.0, "agent_started", mark
        )


@asynccontextmanager
async def world(tmp: Path, agent_argv: list[str] | None = None) -> AsyncIterator[World]:
    cast = Cast.generate()
    relay = RelayProcess(tmp / "relay-db", tmp / "relay.log")
    await relay.start()
    config = write_config(tmp / "bot", cast, [relay.url], agent_argv=agent_argv)
    state = tmp / "bot" / "state"
    bot = BotProcess(config, tmp / "bot.log")
    try:
        yield World(cast, relay, bot, DiagnosticsTail(state / "diagnostics.jsonl"), state)
    finally:
        if bot.running:
            await bot.kill()
        await relay.stop()


async def test_a_sigkilled_bots_leftover_group_is_ended_on_the_next_start(
    tmp_path: Path,
) -> None:
    sleepers = tmp_path / "sleepers"
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    try:
        async with world(tmp_path, [str(launcher), str(sleepers)]) as w:
            first = await w.start_bot()
            leader = first["payload"]["pid"]
            lines = await wait_for(
                lambda: sleepers.exists() and sleepers.read_text().split(), "the grandchild"
            )
            orphan = int(lines[0])
            record = read_record(w.state)
            assert record is not None and record.pgid == leader == os.getpgid(orphan)
            assert stat.S_IMODE((w.state / RECORD_FILE).stat().st_mode) == 0o600

            w.bot.kill_now()  # SIGKILL: nothing of the bot runs its clean-up
            await w.bot.reap()
            # The demo agent leaves on end-of-file; its grandchild is the orphan.
            await wait_for(lambda: not _alive(leader), "the demo agent to exit on EOF")
            assert _alive(orphan), "the launcher's grandchild should have outlived the bot"

            mark = w.tail.mark()
            second = await w.start_bot()
            [ended] = [r for r in w.tail.records[mark:] if r["kind"] == "agent_group_ended"]
            assert ended["payload"]["pgid"] == leader
            assert ended["payload"]["processes"] >= 1 and ended["payload"]["left"] == 0
            assert ended["seq"] < second["seq"]  # ended before the new agent started
            await wait_for(lambda: not _alive(orphan), "the orphan to be gone", timeout=5.0)

            ask = mention(w.cast, w.cast.owner, "still there?", channel="orphans")
            await publish([w.relay.url], [ask])
            counter = Counter44200(w.cast, [w.relay.url])
            tally = await wait_answered(counter, [ask], timeout=30.0, tails=[w.tail], quiet=0.5)
            assert tally.ok and tally.answered == [ask.id], tally.summary()

            # A graceful stop ends the group and removes the record.
            new_sleeper = int(sleepers.read_text().split()[1])
            assert await w.bot.stop() == 0
            assert not (w.state / RECORD_FILE).exists()
            assert not _alive(new_sleeper)
    finally:
        if sleepers.exists():
            for pid in sleepers.read_text().split():
                _kill(int(pid))


async def test_a_recorded_group_without_the_token_is_left_alone(tmp_path: Path) -> None:
    # An unrelated process group that happens to have the recorded id; it even carries a
    # token variable, just not the recorded token.
    env = {**os.environ, TOKEN_ENV: new_token()}
    unrelated = subprocess.Popen(SLEEPER, start_new_session=True, env=env, stdin=subprocess.DEVNULL)
    try:
        async with world(tmp_path) as w:
            write_record(private_dir(w.state), GroupRecord(pgid=unrelated.pid, token=new_token()))
            await w.start_bot()
            [spared] = w.tail.of("agent_group_spared")
            assert spared["payload"]["pgid"] == unrelated.pid
            assert "token" in spared["payload"]["reason"]
            assert not w.tail.of("agent_group_ended")
            assert _alive(unrelated.pid)
            assert await w.bot.stop() == 0
            assert unrelated.poll() is None, "an unrelated group must never be signalled"
    finally:
        unrelated.kill()
        await asyncio.to_thread(unrelated.wait)
