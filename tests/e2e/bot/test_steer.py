"""A steer the agent answers ``startedNewTurn`` is a turn of its own: the agent's own turn is
answered in the steer's thread and metered with the steer's manifest.

The agent is a real subprocess speaking raw JSON-RPC over stdio: it holds its prompt until a
steer arrives, answers the steer ``startedNewTurn``, answers the prompt, and then runs the
steer's turn by itself (a message chunk and a cost update, with no prompt).
"""

from __future__ import annotations

import json
import sys

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import open_metric_event
from tests.support.bot_world import Recorder, World, manifest_of

AGENT = r"""
import asyncio, json, sys

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()

def update(sid, upd):
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": sid, "update": upd}})

def cost(sid, amount):
    update(sid, {"sessionUpdate": "usage_update", "used": 10, "size": 100,
                 "cost": {"amount": amount, "currency": "USD"}})

STATE = {"wake": None}

async def own_turn(sid, text):
    update(sid, {"sessionUpdate": "agent_message_chunk",
                 "content": {"type": "text", "text": "my own turn for: " + text}})
    cost(sid, 0.75)

async def handle(msg):
    method, mid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": 1, "agentCapabilities": {},
            "agentInfo": {"name": "self-starter", "version": "1"},
            "_meta": {"steering": {"supported": True}}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        sid = params["sessionId"]
        update(sid, {"sessionUpdate": "agent_message_chunk",
                     "content": {"type": "text", "text": "the main answer"}})
        STATE["wake"] = asyncio.Event()
        await STATE["wake"].wait()
        cost(sid, 0.25)
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn",
              "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7}}})
        await own_turn(sid, STATE["steer"])
    elif method == "_session/steering":
        STATE["steer"] = params["prompt"][0]["text"].split("Content: ")[1].split("\n")[0]
        send({"jsonrpc": "2.0", "id": mid, "result": {"outcome": "startedNewTurn"}})
        STATE["wake"].set()
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})

async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        asyncio.ensure_future(handle(json.loads(line)))

asyncio.run(main())
"""


async def test_a_steer_that_started_a_new_turn_is_answered_and_metered_on_its_own(
    world: World,
) -> None:
    script = world.tmp / "self_starter.py"
    script.write_text(AGENT, encoding="utf-8")
    rec = Recorder()
    config = world.config(agent_command=sys.executable, agent_args=(str(script),))
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        first = world.message(world.owner, "long task")
        await plugin.handle_event(first)
        await rec.kind("prompt_context_delivery")
        steer = world.message(world.owner, "and the logs", reply_to=first)
        await plugin.handle_event(steer)
        diag = await rec.kind("prompt_context_steer")
        await rec.kind("reply_published", 2)
        await rec.kind("metric_published", 2)
    assert diag.payload["deliveryOutcome"] == "startedNewTurn"
    started = [r.payload["triggeringEventIds"] for r in rec.of("turn_started")]
    assert started == [[first.id], [steer.id]]

    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    by_parent = {nip10.thread_ref(r).parent: r.content for r in replies}
    assert by_parent[first.id] == "the main answer"
    assert by_parent[steer.id] == "my own turn for: and the logs"

    metric_events = await world.query({"kinds": [44200], "#p": [world.owner.public_key.hex]})
    metrics = {
        m.triggering_event_ids: m
        for m in (open_metric_event(world.owner, e) for e in metric_events)
    }
    main, own = metrics[(first.id,)], metrics[(steer.id,)]
    assert main.context_manifest == manifest_of(rec.of("prompt_context_delivery")[0])
    assert own.context_manifest == manifest_of(diag)  # the steer's own manifest
    assert main.turn is not None and main.turn.cost_usd == 0.25
    assert own.turn is not None and own.turn.cost_usd == 0.5  # 0.75 cumulative − 0.25
    # The diagnostics say what each metric cost (the spend buzz watch shows).
    assert sorted(r.payload["costUsd"] for r in rec.of("metric_queued")) == [0.25, 0.5]
    assert main.turn_id != own.turn_id and main.session_id == own.session_id
    assert json.dumps(rec.of("turn_completed")[-1].payload) == json.dumps(
        {"outcome": "success", "stopReason": "unknown"}
    )


CRASHING = r"""
import asyncio, json, os, sys

MARKER = sys.argv[1]

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()

STATE = {"wake": None}

async def handle(msg):
    method, mid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": 1, "agentCapabilities": {},
            "agentInfo": {"name": "crasher", "version": "1"},
            "_meta": {"steering": {"supported": True}}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        text = "\n".join(b["text"] for b in params["prompt"])
        if not os.path.exists(MARKER):
            STATE["wake"] = asyncio.Event()
            await STATE["wake"].wait()
            open(MARKER, "w").close()
            os._exit(3)  # the steer was taken, then the agent dies
        line = [l for l in text.splitlines() if l.startswith("Content: ")][-1]
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
              "update": {"sessionUpdate": "agent_message_chunk",
                         "content": {"type": "text", "text": "answer to " + line[9:]}}}})
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn",
              "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7}}})
    elif method == "_session/steering":
        send({"jsonrpc": "2.0", "id": mid, "result": {"outcome": "injected"}})
        STATE["wake"].set()
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no"}})

async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        asyncio.ensure_future(handle(json.loads(line)))

asyncio.run(main())
"""


async def test_a_steer_taken_into_a_turn_that_then_fails_is_answered_later(world: World) -> None:
    script = world.tmp / "crasher.py"
    script.write_text(CRASHING, encoding="utf-8")
    marker = world.tmp / "crashed"
    rec = Recorder()
    args = (str(script), str(marker))
    config = world.config(agent_command=sys.executable, agent_args=args)
    async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
        first = world.message(world.owner, "long task")
        await plugin.handle_event(first)
        await rec.kind("prompt_context_delivery")
        steer = world.message(world.owner, "and the logs", reply_to=first)
        await plugin.handle_event(steer)
        injected = await rec.kind("prompt_context_steer")
        failed = await rec.kind("turn_failed")
        await rec.kind("reply_published", 2, timeout=20)  # the retry (after its backoff)
    assert injected.payload["deliveryOutcome"] == "injected"
    assert failed.payload["terminalEvidence"] == "agent_exit"
    started = [r.payload["triggeringEventIds"] for r in rec.of("turn_started")]
    assert started[0] == [first.id]
    assert sorted(i for ids in started[1:] for i in ids) == sorted([first.id, steer.id])
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    parents = sorted(nip10.thread_ref(r).parent or "" for r in replies)
    assert parents == sorted([first.id, steer.id])  # both answered, each once
