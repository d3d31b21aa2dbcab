"""Bounded memory against the agent: a real ``buzz run`` process whose real (scripted) ACP agent
streams a 300 MB reply.  The bot keeps only ``[agent] max_reply_bytes`` of it (256 KiB), so its
peak resident memory (the kernel's ``VmHWM`` for that process) stays under 200 MB; the cut
reply, which says where it was cut, is delivered once (its parts counted on the relay) with
one metric for the turn.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from nostr_buzz.bot.plugin import DIAGNOSTICS_FILE
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from tests.support.buzz_process import Lines, buzz, relay_process, run_bot
from tests.support.keys import AGENT, OWNER
from tests.support.scripted_agent import USAGE, Scripted

RSS_LIMIT_KB = 200 * 1024
CHUNK = 1_000_000
CHUNKS = 300  # 300 MB of reply text


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (``VmHWM``, KiB) as the kernel counts it."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def by_agent(relay: str, kinds: list[int]) -> list[Event]:
    flt = {"kinds": kinds, "authors": [AGENT.public_key.hex]}
    return asyncio.run(RelayPool([relay], timeout=5.0).query(flt)).events


def total_of(part: Event) -> int:
    """N of a part's ``[k/N]`` line."""
    return int(part.content.split("/", 1)[1].split("]", 1)[0])


def test_a_300_mb_streamed_reply_keeps_the_bot_small_and_is_delivered_once_cut(
    tmp_path: Path,
) -> None:
    agent = Scripted(
        tmp_path, {"turns": [{"stream": {"bytes": CHUNK, "count": CHUNKS}, "usage": USAGE}]}
    )
    command = " ".join([sys.executable, *agent.args])
    state = tmp_path / "state"
    with relay_process() as relay:
        owner_env = {"BUZZ_RELAYS": relay, "BUZZ_PRIVATE_KEY": OWNER.bech32}
        bot = run_bot(relay, command, state, agent=AGENT, owner=OWNER, cwd=tmp_path)
        try:
            assert bot.stderr is not None and bot.pid is not None
            stderr = Lines(bot.stderr)
            stderr.until("buzz: agent ")
            sent = buzz(
                "messages",
                "send",
                "--channel",
                "eng",
                "--mention",
                AGENT.public_key.bech32,
                "say everything you know",
                env=owner_env,
            )
            assert sent.returncode == 0, sent.stderr
            mention_id = sent.stdout.decode().strip()
            turn = stderr.until("buzz: turn in eng", timeout=60)
            assert ": success, " in turn, turn
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                parts = by_agent(relay, [9])
                if parts and len(parts) >= total_of(parts[0]):
                    break
                time.sleep(0.2)
            time.sleep(2)  # anything sent again would be on the relay by now
            peak_kb = peak_rss_kb(bot.pid)
            parts = by_agent(relay, [9])
            metrics = by_agent(relay, [METRIC_KIND])
        finally:
            bot.terminate()
            bot.wait(30)
    print(f"peak RSS {peak_kb // 1024} MiB; {len(parts)} parts")
    assert peak_kb < RSS_LIMIT_KB, f"peak RSS {peak_kb // 1024} MiB"
    # The cut reply, once: one set of parts [1/N] … [N/N] answering the mention.
    total = total_of(parts[0])
    ordered = sorted(parts, key=lambda p: p.created_at)
    assert [p.content.split("\n", 1)[0] for p in ordered] == [
        f"[{k}/{total}]" for k in range(1, total + 1)
    ]
    assert all(nip10.thread_ref(p).root == mention_id for p in parts)
    text = "".join(p.content.split("\n", 1)[1] for p in ordered)
    assert text.startswith("x" * 1000)
    assert text.rstrip().endswith("bytes of the agent's answer were left out]")
    assert "reply cut at 262,144 bytes" in text
    assert len(text.encode()) < 300 * 1024
    assert len(metrics) == 1
    feed = [json.loads(line) for line in (state / DIAGNOSTICS_FILE).read_text().splitlines()]
    [cut] = [r for r in feed if r["kind"] == "reply_cut"]
    assert cut["payload"]["droppedBytes"] == CHUNK * CHUNKS - 256 * 1024
    published = [r["payload"]["eventId"] for r in feed if r["kind"] == "reply_published"]
    assert sorted(published) == sorted(p.id for p in parts)  # each part published once
