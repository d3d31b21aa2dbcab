"""The in-process example agent (examples/http_agent.py) under the crash test the demo agent
passes: real ``buzz run --agent-module examples.http_agent:from_environment`` processes ask
the tests' model server (the Anthropic Messages API, every answer 0.6 s late) and are
SIGKILLed while a prompt's HTTP request is in flight, or within milliseconds of a turn's end
or its metric being stored, then started again on the same state.  On the relay every
accepted mention is answered by exactly one metered turn with exactly one reply, no turn is
metered twice, nothing the stranger sent is answered, and every answered turn's metric has the
model's usage and model.  The model API key reaches the model server, never the diagnostics
or the bot's output.

Random choices come from one seeded RNG; the seed is printed, and ``BUZZ_E2E_SEED=<seed>``
replays them.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.support.fault_harness import (
    BotProcess,
    Cast,
    Counter44200,
    DiagnosticsTail,
    RelayProcess,
    evidence,
    mention,
    publish,
    seeded_rng,
    wait_answered,
    write_config,
)
from tests.support.model_server import ModelServer

ROOT = Path(__file__).resolve().parents[3]
SPEC = "examples.http_agent:from_environment"
API_KEY = "sk-test-never-in-a-log-4711"
#: Each kill waits for one of these records, then sleeps a random moment up to the seconds
#: given.  "request": the model server has a request of the round, which it answers 0.6 s
#: later: the kill comes while that HTTP request is in flight.
KILLS = [
    ("request", 0.5),
    ("request", 0.25),
    ("turn_completed", 0.004),
    ("metric_queued", 0.004),
    ("request", 0.05),
]
MID_TURN = sum(1 for kind, _ in KILLS if kind == "request")


async def started(bot: BotProcess, tail: DiagnosticsTail, timeout: float = 30.0) -> None:
    mark = tail.mark()
    await bot.start()
    try:
        await tail.next_record(lambda r: r.get("kind") == "agent_started", timeout, "start", mark)
    except AssertionError:
        raise AssertionError(f"the bot did not start:\n{bot.log_tail()}") from None


async def test_sigkilled_mid_turn_and_restarted_every_mention_is_answered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng, seed = seeded_rng("in-process sigkills")
    cast = Cast.generate()
    with ModelServer(delay=0.6) as model:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", model.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        )
        monkeypatch.chdir(ROOT)  # where `buzz run` imports examples/ from
        relay = RelayProcess(tmp_path / "relay-db", tmp_path / "relay.log")
        await relay.start()
        config = write_config(tmp_path / "bot", cast, [relay.url], agent_module=SPEC)
        bot = BotProcess(config, tmp_path / "bot.log")
        tail = DiagnosticsTail(tmp_path / "bot" / "state" / "diagnostics.jsonl")
        accepted, refused = [], []
        try:
            await started(bot, tail)
            for round_, (kind, latest) in enumerate(KILLS):
                admitted = [
                    mention(
                        cast,
                        rng.choice([cast.owner, cast.friend]),
                        f"question {round_}.{i} ASK:r{round_}q{i}",
                        channel=f"c{rng.randrange(3)}",
                    )
                    for i in range(3)
                ]
                stranger = mention(cast, cast.stranger, "let me in", channel="c0")
                accepted += admitted
                refused.append(stranger)
                mark, asked = tail.mark(), len(model.requests)
                await publish([relay.url], [*admitted, stranger])
                if kind == "request":
                    await asyncio.to_thread(model.wait_for, lambda seen, n=asked: len(seen) > n, 20)
                else:
                    await tail.next_record(lambda r, k=kind: r.get("kind") == k, 20, kind, mark)
                await asyncio.sleep(rng.uniform(0.0, latest))  # deliberate fault timing
                await bot.kill()
                await started(bot, tail)
            counter = Counter44200(cast, [relay.url])
            tally = await wait_answered(
                counter, accepted, refused=refused, timeout=60, tails=[tail]
            )
            print(f"seed {seed}: {tally.summary()}; kills {bot.kills}", flush=True)
            assert tally.ok, f"seed {seed}: " + evidence(tally, [tail], accepted)
            metrics = await counter.metrics()
        finally:
            await bot.stop()
            await relay.stop()
    answered = [m for m in metrics if m.outcome == "success"]
    assert len(answered) >= len(accepted) // 3  # coalesced turns answer several mentions
    for metric in answered:
        assert metric.harness == "http-agent" and metric.model == "claude-sonnet-4-5"
        # the server's 100 + 20 of a conversation (the example offers the bot's tools)
        assert metric.turn is not None and metric.turn.total_tokens == 120
    # Each request a kill cut short was asked again by the restarted bot.
    assert bot.kills == len(KILLS) and len(model.requests) >= len(answered) + MID_TURN
    said = (tmp_path / "bot.log").read_text()
    assert f"in-process agent: {SPEC}" in said and "the in-process agent runs inside" in said
    assert API_KEY not in said + tail.path.read_text()
