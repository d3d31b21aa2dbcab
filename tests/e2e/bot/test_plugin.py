"""The bot plugin end to end: a real LocalRelay, the real demo ACP agent as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.bot import BuzzPlugin, parse_shard, shard_of
from nostr_buzz.errors import ConfigError
from nostr_buzz.event import sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from tests.support.bot_world import WAIT, Recorder, World, metrics_of


async def test_mention_runs_one_turn_replies_and_publishes_an_openable_metric(
    world: World,
) -> None:
    rec = Recorder()
    plugin = BuzzPlugin(world.config(), on_diagnostic=rec)
    runner = asyncio.create_task(plugin.run())
    try:
        mention = world.message(world.owner, "please summarise the deploy")
        await world.publish(mention)
        published = await rec.kind("metric_published")
        await rec.kind("reply_published")
    finally:
        plugin.stop()
        await asyncio.wait_for(runner, WAIT)
    started = rec.of("turn_started")
    assert [r.payload["triggeringEventIds"] for r in started] == [[mention.id]]
    assert rec.of("turn_completed")[0].payload == {"outcome": "success", "stopReason": "end_turn"}
    delivery = rec.of("prompt_context_delivery")[0]

    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert len(replies) == 1
    reply = replies[0]
    assert ("h", "eng") in reply.tags
    assert ("e", mention.id, "", "root", world.owner.public_key.hex) in reply.tags
    assert ("p", world.owner.public_key.hex) in reply.tags
    assert nip10.thread_ref(reply).root == mention.id
    assert "instruction: please summarise the deploy" in reply.content

    [metric] = await metrics_of(world)
    assert published.payload["eventId"]
    assert metric.triggering_event_ids == (mention.id,)
    assert metric.channel_id == "eng"
    assert metric.turn_seq == 1
    assert metric.delta_reliable is True
    assert metric.turn is not None and metric.turn.input_tokens
    assert metric.outcome == "success" and metric.stop_reason == "end_turn"
    assert metric.terminal_evidence == "prompt_response"
    assert metric.harness == "buzz-demo-agent"
    assert metric.context_manifest is not None and metric.context_manifest.hash_matches()
    assert metric.context_manifest.hash == delivery.payload["contextManifest"]["hash"]
    assert metric.started_at is not None and metric.adapter_session_id
    assert plugin.position == mention.created_at
    # The diagnostics feed on disk holds the same records, and never the prompt text.
    feed = (world.tmp / "state" / "diagnostics.jsonl").read_text(encoding="utf-8")
    assert "please summarise" not in feed and '"turn_started"' in feed


async def test_burst_in_one_thread_is_one_turn_and_two_actors_are_two(world: World) -> None:
    rec = Recorder()
    config = world.config(gate="anyone", in_flight="queue")
    root = world.message(world.owner, "root of the thread", mention=False)
    await world.publish(root)
    async with BuzzPlugin(config, on_diagnostic=rec, include_prompt_text=True) as plugin:
        burst = [world.message(world.human, f"part {i}", reply_to=root) for i in range(3)]
        other = SecretKey.generate()
        second = world.message(other, "a separate voice", reply_to=root)
        await world.publish(*burst)  # on the relay too, as thread history for later turns
        for event in [*burst, second]:
            assert await plugin.handle_event(event)
        await rec.kind("turn_completed", 2)
    started = [r.payload["triggeringEventIds"] for r in rec.of("turn_started")]
    assert started == [[e.id for e in burst], [second.id]]
    # The first turn sees the root as thread history (the burst itself is the instruction).
    first, second_turn = rec.of("prompt_context_delivery")
    first_layers = [layer["layer"] for layer in first.payload["contextManifest"]["layers"]]
    assert "recent_thread_delta" in first_layers
    first_text = "\n".join(first.payload["promptText"])
    assert "root of the thread" in first_text and 'included="1" total="4"' in first_text
    # The same session never gets what it was already given: root and burst are filtered out.
    second_text = "\n".join(second_turn.payload["promptText"])
    assert "root of the thread" not in second_text and "part 0" not in second_text
    assert "Content: a separate voice" in second_text


async def test_steer_mid_turn_is_injected_and_its_layer_reaches_the_metric(world: World) -> None:
    rec = Recorder()
    async with BuzzPlugin(world.config("--delay", "8"), on_diagnostic=rec) as plugin:
        first = world.message(world.owner, "long task")
        await plugin.handle_event(first)
        await rec.kind("prompt_context_delivery")
        steer = world.message(world.owner, "also check the logs", reply_to=first)
        await plugin.handle_event(steer)
        injected = await rec.kind("prompt_context_steer")
        await rec.kind("metric_published")
    assert injected.payload["deliveryOutcome"] == "injected"
    layers = [layer["layer"] for layer in injected.payload["contextManifest"]["layers"]]
    assert "steer_delivery_contract" in layers
    # The steer was delivered: it never becomes a turn of its own.
    assert rec.started_with(steer.id) == []
    [metric] = await metrics_of(world)
    assert metric.context_manifest is not None and metric.context_manifest.hash_matches()
    assert "steer_delivery_contract" in [layer.layer for layer in metric.context_manifest.layers]
    assert metric.context_manifest.hash == injected.payload["contextManifest"]["hash"]
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert any("steer: also check the logs" in r.content for r in replies)


async def test_interrupt_cancels_and_the_next_turn_carries_the_cut_off_work(world: World) -> None:
    rec = Recorder()
    config = world.config("--delay", "3", in_flight="interrupt")
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        first = world.message(world.owner, "long task")
        await plugin.handle_event(first)
        await rec.kind("prompt_context_delivery")
        second = world.message(world.owner, "stop, do this instead", reply_to=first)
        await plugin.handle_event(second)
        await rec.kind("turn_completed", 2)
    outcomes = [r.payload["outcome"] for r in rec.of("turn_completed")]
    assert outcomes == ["cancelled", "success"]
    assert rec.of("turn_started")[1].payload["triggeringEventIds"] == [second.id]
    layers = [
        layer["layer"]
        for layer in rec.of("prompt_context_delivery")[1].payload["contextManifest"]["layers"]
    ]
    assert "interrupted_turn" in layers


async def test_author_gate_refuses_a_stranger(world: World) -> None:
    rec = Recorder()
    async with BuzzPlugin(world.config(), on_diagnostic=rec) as plugin:
        stranger = world.message(world.human, "let me in")
        assert await plugin.handle_event(stranger) is False
        own = sign_event(world.agent, kind=9, content="me", tags=[["h", "eng"]], created_at=1)
        assert await plugin.handle_event(own) is False
        assert plugin.queue.pending("eng") == 0
    reasons = [r.payload["reason"] for r in rec.of("event_rejected")]
    assert reasons == ["author_not_owner", "own_event"]
    assert rec.of("turn_started") == []


async def test_agent_crash_fails_the_turn_retries_and_other_channels_still_work(
    world: World,
) -> None:
    rec = Recorder()
    async with BuzzPlugin(world.config("--crash-on", "CRASH"), on_diagnostic=rec) as plugin:
        doomed = world.message(world.owner, "CRASH now", channel="ops")
        await plugin.handle_event(doomed)
        failed = await rec.kind("turn_completed")
        assert failed.payload["outcome"] == "failed"
        await rec.kind("agent_restarted")
        fine = world.message(world.owner, "are you there?", channel="eng")
        await plugin.handle_event(fine)
        await rec.wait(
            lambda r: any(x.payload["outcome"] == "success" for x in r.of("turn_completed")),
            what="a successful turn in another channel",
        )
        # The crashed batch comes back after its backoff (5 s × jitter) as a new attempt.
        await rec.wait(lambda r: len(r.started_with(doomed.id)) >= 2, timeout=10, what="retry")


async def test_restart_does_not_rerun_handled_events_and_replays_missed_mentions(
    world: World,
) -> None:
    rec1 = Recorder()
    first = world.message(world.owner, "first, handled")
    plugin = BuzzPlugin(world.config(), on_diagnostic=rec1)
    runner = asyncio.create_task(plugin.run())
    await world.publish(first)
    await rec1.kind("turn_completed")
    plugin.stop()
    await asyncio.wait_for(runner, WAIT)
    assert rec1.started_with(first.id)

    missed = world.message(world.owner, "sent while the bot was down")
    await world.publish(missed)
    rec2 = Recorder()
    plugin2 = BuzzPlugin(world.config(), on_diagnostic=rec2)
    runner2 = asyncio.create_task(plugin2.run())
    try:
        await rec2.kind("turn_completed")
    finally:
        plugin2.stop()
        await asyncio.wait_for(runner2, WAIT)
    assert [r.payload["triggeringEventIds"] for r in rec2.of("turn_started")] == [[missed.id]]


async def test_owner_commands_are_handled_never_queued(world: World) -> None:
    rec = Recorder()
    plugin = BuzzPlugin(world.config("--delay", "8"), on_diagnostic=rec)
    runner = asyncio.create_task(plugin.run())
    try:
        task = world.message(world.owner, "long task")
        await plugin.handle_event(task)
        await rec.kind("prompt_context_delivery")
        cancel = world.message(world.owner, f"nostr:{world.agent.public_key.bech32} !cancel")
        assert await plugin.handle_event(cancel)
        completed = await rec.kind("turn_completed")
        assert completed.payload["outcome"] == "cancelled"
        assert plugin.queue.pending("eng") == 0 and not plugin.queue.in_flight("eng")
        await world.publish(world.message(world.owner, "!shutdown"))
        await asyncio.wait_for(runner, WAIT)  # run() returns on its own
    finally:
        plugin.stop()
        await asyncio.wait_for(runner, WAIT)
    assert [r.payload["command"] for r in rec.of("owner_command")] == ["cancel", "shutdown"]
    assert len(rec.of("turn_started")) == 1
    # After a restart the stored !shutdown is replayed from the relay but not obeyed again.
    rec2 = Recorder()
    plugin2 = BuzzPlugin(world.config(), on_diagnostic=rec2)
    runner2 = asyncio.create_task(plugin2.run())
    try:
        after = world.message(world.owner, "still there?")
        await world.publish(after)
        await rec2.kind("turn_completed")
        assert not runner2.done()
    finally:
        plugin2.stop()
        await asyncio.wait_for(runner2, WAIT)
    assert rec2.of("owner_command") == []
    assert [r.payload["triggeringEventIds"] for r in rec2.of("turn_started")] == [[after.id]]


async def test_a_plaintext_kind_9_without_h_is_refused_unless_the_config_opts_in(
    world: World,
) -> None:
    rec = Recorder()
    async with BuzzPlugin(world.config(), on_diagnostic=rec) as plugin:
        dm = world.message(world.owner, "anyone can read this", channel=None)
        assert not await plugin.handle_event(dm)
    [rejected] = rec.of("event_rejected")
    assert rejected.payload["reason"] == "plaintext_direct_message"
    assert rec.of("turn_started") == []


async def test_opted_in_plaintext_dm_gets_a_dm_channel_and_a_reply_without_h(world: World) -> None:
    rec = Recorder()
    async with BuzzPlugin(world.config(plaintext_dm=True), on_diagnostic=rec) as plugin:
        dm = world.message(world.owner, "just between us", channel=None)
        assert await plugin.handle_event(dm)
        await rec.kind("reply_published")
    started = rec.of("turn_started")[0]
    assert started.channel_id == f"dm-{world.owner.public_key.hex}"
    [reply] = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert reply.tag_values("h") == [] and ("p", world.owner.public_key.hex) in reply.tags


def test_shard_parsing_and_stable_assignment() -> None:
    assert parse_shard("1/3").index == 1
    for bad in ("3/3", "x", "1/0", "-1/2"):
        with pytest.raises(ConfigError):
            parse_shard(bad)
    ids = [f"{i:064x}" for i in range(200)]
    shards = [shard_of(d, 4) for d in ids]
    assert set(shards) == {0, 1, 2, 3}
    assert shards == [shard_of(d, 4) for d in ids]  # stable


async def test_shard_serves_only_its_destinations(world: World) -> None:
    rec = Recorder()
    events = [world.message(world.owner, f"m{i}") for i in range(8)]
    mine = [e for e in events if shard_of(nip10.destination(e), 2) == 0]
    config = world.config(shard=parse_shard("0/2"), in_flight="queue")
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        queued = [await plugin.handle_event(e) for e in events]
    assert [e for e, q in zip(events, queued, strict=True) if q] == mine


async def test_buzz_run_serves_from_buzz_toml_and_stops_cleanly_on_sigterm(world: World) -> None:
    (world.tmp / "agent.key").write_text(world.agent.hex + "\n", encoding="utf-8")
    (world.tmp / "agent.key").chmod(0o600)
    config = world.tmp / "buzz.toml"
    config.write_text(
        f'key_file = "agent.key"\nowner = "{world.owner.public_key.bech32}"\n'
        f'relays = ["{world.relay.url}"]\nstate_dir = "state"\n'
        f"[agent]\ncommand = {json.dumps(sys.executable)}\n"
        'args = ["-m", "nostr_buzz.demo.agent"]\n[timeouts]\nrelay = 3\n',
        encoding="utf-8",
    )
    # A persisted position from "an earlier run": the mention below is replayed on start.
    (world.tmp / "state").mkdir()
    position = {"position": int(time.time()) - 5}
    (world.tmp / "state" / "bot-state.json").write_text(json.dumps(position), encoding="utf-8")
    mention = world.message(world.owner, "hello from the command line")
    await world.publish(mention)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "nostr_buzz", "run", "--config", str(config),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        pool = RelayPool([world.relay.url], timeout=3.0)
        replies = pool.subscribe({"kinds": [9], "authors": [world.agent.public_key.hex]})
        async with asyncio.timeout(WAIT):
            reply = await anext(replies)
        await replies.aclose()  # type: ignore[attr-defined]
        assert nip10.thread_ref(reply).root == mention.id
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(proc.communicate(), WAIT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, stderr.decode()
    assert stdout == b""
    assert b"stopped" in stderr


def test_buzz_run_without_configuration_is_bad_input(tmp_path: Path, monkeypatch: Any) -> None:
    from nostr_buzz.cli.app import main

    for name in ("BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_RELAYS", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["run"]) == 1
    assert main(["run", "--config", str(tmp_path / "missing.toml")]) == 1
    assert main(["run", "--shard", "2/2"]) == 1


async def test_only_the_same_person_in_the_same_thread_steers_a_running_turn(
    world: World,
) -> None:
    rec = Recorder()
    config = world.config(
        "--delay", "2", gate="allowlist", allowlist=frozenset({world.human.public_key.hex})
    )
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        task = world.message(world.owner, "long task")
        await plugin.handle_event(task)
        await rec.kind("prompt_context_delivery")
        other_person = world.message(world.human, "my own question", reply_to=task)
        other_thread = world.message(world.owner, "an unrelated question")
        steer = world.message(world.owner, "and check the logs", reply_to=task)
        for event in (other_person, other_thread, steer):
            assert await plugin.handle_event(event)
        injected = await rec.kind("prompt_context_steer")
        await rec.kind("turn_completed", 3)
        await rec.kind("reply_published", 3)
    assert injected.payload["deliveryOutcome"] == "injected"
    assert len(rec.of("prompt_context_steer")) == 1
    started = [r.payload["triggeringEventIds"] for r in rec.of("turn_started")]
    assert started[0] == [task.id]
    assert sorted(started[1:]) == sorted([[other_person.id], [other_thread.id]])
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    parents = sorted(nip10.thread_ref(r).parent or "" for r in replies)
    assert parents == sorted([task.id, other_person.id, other_thread.id])
