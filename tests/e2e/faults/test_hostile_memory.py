"""Bounded memory against any relay: real ``buzz`` processes against a flooding relay.

A relay may send 1,500 valid, matching events of 1 MB each, or 200 of 100,000 tags each.
Queries are bounded by total bytes and tag count (not only by event count): the relay is cut
off and named, and the process's peak resident memory (measured by the kernel for that child
alone, ``wait4``) stays under 300 MB.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import BackgroundLoop
from tests.support.hostile_relay import HostileRelay, hostile_relay
from tests.support.keys import OWNER

RSS_LIMIT_KB = 300 * 1024


@pytest.fixture(params=["flood_big_events", "flood_many_tags"])
def flooding_relay(request: pytest.FixtureRequest) -> Iterator[HostileRelay]:
    bg = BackgroundLoop()
    manager = hostile_relay(request.param)
    relay = bg.call(manager.__aenter__())
    try:
        yield relay
    finally:
        bg.call(manager.__aexit__(None, None, None))
        bg.close()


# The kernel's peak RSS of a process survives exec and so includes the image it was forked
# from: forked from pytest (hundreds of MiB in a full run), ``buzz`` would be charged for
# pytest.  A small launcher process forks ``buzz`` instead and reports its peak with wait4.
_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "nostr_buzz", *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(argv: list[str], cwd: Path) -> tuple[int, str, int]:
    """Run ``buzz argv``; (exit code, stderr, peak RSS in KiB of that process alone)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env["BUZZ_PRIVATE_KEY"] = OWNER.hex
    err_path = cwd / "stderr.txt"
    peak_path = cwd / "peak-rss.txt"
    with open(err_path, "wb") as err, open(os.devnull, "wb") as out:
        code = subprocess.call(
            [sys.executable, "-c", _LAUNCHER, str(peak_path), *argv],
            stdout=out,
            stderr=err,
            env=env,
            cwd=cwd,
            timeout=120,
        )
    return code, err_path.read_text(), int(peak_path.read_text())


@pytest.mark.parametrize(
    "argv",
    [
        ["messages", "get", "--channel", "engineering", "--limit", "500"],
        ["metrics", "--json"],
    ],
    ids=["messages-get", "metrics"],
)
def test_a_flooding_relay_is_cut_off_and_memory_stays_bounded(
    flooding_relay: HostileRelay, argv: list[str], tmp_path: Path
) -> None:
    code, err, peak_kb = run_measured(
        [*argv, "--relay", flooding_relay.url, "--timeout", "20"], tmp_path
    )
    print(f"peak RSS {peak_kb // 1024} MiB")
    assert "Traceback" not in err
    assert peak_kb < RSS_LIMIT_KB, f"peak RSS {peak_kb // 1024} MiB"
    assert flooding_relay.url in err and "cut off" in err, err
    assert code in (0, 2), err  # the relay's partial answer or none: never a crash
    # cut off early: far fewer frames than the relay had in store
    assert flooding_relay.frames_sent < 100


async def test_a_live_subscription_buffers_a_bounded_number_of_bytes() -> None:
    """The consumer takes one event and stops pulling while the relay floods: the client's
    buffer for the subscription never holds more than its byte bound."""
    from nostr_buzz.io.relay import MAX_LIVE_BUFFER_BYTES, RelayClient
    from tests.support.waits import wait_until

    async with hostile_relay("flood_big_events") as relay:
        client = RelayClient(relay.url, timeout=10)
        stream = client.subscribe({"kinds": [9], "#h": ["engineering"]})
        try:
            first = await anext(stream)
            assert first.kind == 9
            await wait_until(lambda: relay.frames_sent >= 40, timeout=60)  # 40 MB sent
            subs = client._inbox.subs.values()
            buffered = [sum(len(e.content) for e in sub.events) for sub in subs]
            assert buffered and max(buffered) <= MAX_LIVE_BUFFER_BYTES
        finally:
            await stream.aclose()
            await client.close()
