"""``buzz relay`` as a real subprocess: prints its URL, serves, stops cleanly on a signal."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from nostr_buzz.event import sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from tests.support.relays import free_port

ALICE = SecretKey.from_str("d4" * 32)
URL = re.compile(r"ws://127\.0\.0\.1:(\d+)")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 20.0


class RelayProcess:
    def __init__(self, proc: asyncio.subprocess.Process, url: str) -> None:
        self.proc = proc
        self.url = url

    async def stop(self, signum: int = signal.SIGINT) -> tuple[int, bytes, bytes]:
        """Signal the relay and wait for it; returns (exit code, rest of stdout, stderr)."""
        self.proc.send_signal(signum)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out, err = await asyncio.wait_for(self.proc.communicate(), STOP_TIMEOUT)
        assert self.proc.returncode is not None
        return self.proc.returncode, out, err


@asynccontextmanager
async def buzz_relay(*args: str) -> AsyncIterator[RelayProcess]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "nostr_buzz",
        "relay",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT)
        match = URL.fullmatch(line.decode().rstrip("\n"))
        assert match, line
        yield RelayProcess(proc, match.group(0))
    finally:
        if proc.returncode is None:
            proc.kill()
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)


async def test_relay_serves_then_stops_on_sigint() -> None:
    async with buzz_relay() as relay:
        event = sign_event(ALICE, kind=1, content="through buzz relay ü", created_at=1_700_000_001)
        pool = RelayPool([relay.url], timeout=5)
        assert (await pool.publish(event)).ok
        # Far more than nostr-sdk's default 60 events a minute: the limit is raised.
        burst = [
            sign_event(ALICE, kind=1, content=f"burst {i}", created_at=1_700_000_100 + i)
            for i in range(80)
        ]
        results = await asyncio.gather(*(pool.publish(e) for e in burst))
        assert all(r.ok for r in results)
        found = await pool.query({"ids": [event.id]})
        assert [e.to_json() for e in found.events] == [event.to_json()]
        code, rest, err = await relay.stop(signal.SIGINT)
        assert code == 0, err
        assert rest == b""  # the URL was the only line


async def test_relay_stops_on_sigterm_and_honours_port() -> None:
    port = free_port()
    async with buzz_relay("--port", str(port), "--host", "127.0.0.1") as relay:
        assert relay.url == f"ws://127.0.0.1:{port}"
        code, _, err = await relay.stop(signal.SIGTERM)
        assert code == 0, err


async def test_db_persists_across_restarts(tmp_path: Path) -> None:
    db = tmp_path / "store"
    event = sign_event(ALICE, kind=1, content="remember me", created_at=1_700_000_002)
    async with buzz_relay("--db", str(db)) as relay:
        assert (await RelayPool([relay.url], timeout=5).publish(event)).ok
        code, _, err = await relay.stop()
        assert code == 0, err
    async with buzz_relay("--db", str(db)) as relay:
        found = await RelayPool([relay.url], timeout=5).query({"ids": [event.id]})
        assert [e.id for e in found.events] == [event.id]
        code, _, err = await relay.stop()
        assert code == 0, err
    # Without --db the store is in memory: a fresh relay does not have it.
    async with buzz_relay() as relay:
        found = await RelayPool([relay.url], timeout=5).query({"ids": [event.id]})
        assert found.events == [] and found.any_finished
        await relay.stop()


async def test_auth_requires_nip42() -> None:
    async with buzz_relay("--auth") as relay:
        event = sign_event(ALICE, kind=1, content="members only", created_at=1_700_000_003)
        anonymous = RelayPool([relay.url], timeout=5)
        refused = await anonymous.publish(event)
        assert not refused.ok
        assert refused.verdicts[relay.url].prefix == "auth-required:"
        member = RelayPool([relay.url], secret=ALICE, timeout=5)
        assert (await member.publish(event)).ok
        found = await member.query({"ids": [event.id]})
        assert [e.id for e in found.events] == [event.id]
        anonymous_read = await anonymous.query({"ids": [event.id]})
        assert anonymous_read.events == []
        assert "auth-required" in (anonymous_read.per_relay[relay.url].error or "")
        code, _, err = await relay.stop()
        assert code == 0, err


async def test_port_in_use_exits_2_with_empty_stdout() -> None:
    async with buzz_relay() as relay:
        port = relay.url.rsplit(":", 1)[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nostr_buzz",
            "relay",
            "--port",
            port,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), START_TIMEOUT)
        assert (proc.returncode, out) == (2, b"")
        assert b"in use" in err
        await relay.stop()
