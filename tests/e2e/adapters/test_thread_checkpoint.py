"""A thread checkpoint from a real adapter's compaction (docs/bot.md, "Thread checkpoints"): a
real ``buzz run`` with ``[sessions] checkpoint = "compaction"`` drives claude-agent-acp against
the tests' model server, which reports a context all but full, so Claude Code compacts at the
start of the second prompt and sends its summary (the model's answer to its request for one).

- The bot keeps that summary as the channel's checkpoint: a kind 34200 event on the relay,
  signed by the agent, that the owner decrypts to the summary Claude Code sent, covering the
  first turn's event.
- After the owner's ``!new`` the channel's next session starts from it: the model's request
  carries ``<thread-checkpoint>`` with the summary, the metric's layer 5 names the checkpoint's
  event id, and ``buzz audit`` of that metric exits 0.
"""

from __future__ import annotations

import json
from pathlib import Path

from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import open_metric_event
from nostr_buzz.nips.nip_tc import CHECKPOINT_KIND, open_checkpoint_event
from tests.e2e.adapters.test_compaction import FULL
from tests.e2e.adapters.test_session_resume import started, write_config
from tests.support.buzz_process import buzz
from tests.support.fault_harness import (
    BotProcess,
    Cast,
    Counter44200,
    DiagnosticsTail,
    RelayProcess,
    evidence,
    mention,
    publish,
    wait_answered,
)
from tests.support.model_server import ModelServer
from tests.support.real_adapters import CLAUDE


async def query_relay(url: str, flt: dict[str, object]) -> list[Event]:
    return (await RelayPool([url], timeout=5.0).query(flt)).events


async def test_claudes_compaction_summary_is_the_checkpoint_a_new_session_starts_from(
    tmp_path: Path,
) -> None:
    cast = Cast.generate()
    agent = cast.agent.public_key.hex
    with ModelServer(usage=FULL) as server:
        relay = RelayProcess(tmp_path / "relay-db", tmp_path / "relay.log")
        await relay.start()
        bot_dir = tmp_path / "bot"
        config = write_config(bot_dir, cast, relay.url, CLAUDE, server)
        with config.open("a", encoding="utf-8") as toml:
            toml.write('[sessions]\ncheckpoint = "compaction"\n')
        bot = BotProcess(config, tmp_path / "bot.log")
        tail = DiagnosticsTail(bot_dir / "state" / "diagnostics.jsonl")
        counter = Counter44200(cast, [relay.url])
        sent = []
        try:
            await started(bot, tail)
            begun = tail.mark()
            for word in ("alpha", "beta"):
                sent.append(mention(cast, cast.owner, f"the word is ASK:{word}", channel="eng"))
                await publish([relay.url], [sent[-1]])
                tally = await wait_answered(counter, sent, timeout=90, tails=[tail])
                assert tally.ok, evidence(tally, [tail], sent)
            await tail.next_record(
                lambda r: r.get("kind") == "thread_checkpoint_published", 60, "checkpoint", begun
            )
            mark = tail.mark()
            await publish([relay.url], [mention(cast, cast.owner, "!new", channel="eng")])
            await tail.next_record(lambda r: r.get("kind") == "owner_command", 30, "!new", mark)
            sent.append(mention(cast, cast.owner, "the word is ASK:gamma", channel="eng"))
            await publish([relay.url], [sent[-1]])
            tally = await wait_answered(counter, sent, timeout=90, tails=[tail])
            assert tally.ok, evidence(tally, [tail], sent)
            [made] = await query_relay(relay.url, {"kinds": [CHECKPOINT_KIND], "authors": [agent]})
            metric_events = await query_relay(
                relay.url, {"kinds": [METRIC_KIND], "authors": [agent]}
            )
            audited = buzz(
                "audit", "--relay", relay.url, "--key", cast.owner.bech32, "--timeout", "5",
                "--json", cwd=str(tmp_path),
            )  # fmt: skip
        finally:
            await bot.stop()
            await relay.stop()
    opened = open_checkpoint_event(cast.owner, cast.agent.public_key, made)
    summaries = [
        s.answer
        for s in server.main_requests()
        if "CRITICAL: Respond with TEXT ONLY" in s.user_text
    ]
    assert opened.summary in summaries and opened.method == "agent_compaction"
    assert opened.session_key == "eng" and opened.covers_through == sent[0].id
    metrics = {e.id: open_metric_event(cast.owner, e) for e in metric_events}
    by_seq = sorted(metrics.items(), key=lambda item: item[1].timestamp)
    assert [m.compactions for _, m in by_seq] == [None, 1, None]
    assert len(tail.of("session_started")) == 2  # !new: a new session for gamma
    [gamma] = [s for s in server.main_requests() if "ASK:gamma" in s.user_text]
    assert "<thread-checkpoint>" in gamma.user_text
    last_id, last = by_seq[-1]
    assert last.context_manifest is not None
    [layer] = [x for x in last.context_manifest.layers if x.order == 5]
    assert (layer.layer, layer.version) == ("thread_checkpoint", made.id)
    assert all(
        m.context_manifest is None or all(x.order != 5 for x in m.context_manifest.layers)
        for _, m in by_seq[:2]
    )
    assert audited.returncode == 0, audited.stderr.decode()
    report = json.loads(audited.stdout)
    assert report["ok"] and last_id in {m["eventId"] for m in report["metrics"]}
