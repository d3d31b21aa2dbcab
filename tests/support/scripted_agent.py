"""A tiny scripted ACP agent: a raw JSON-RPC 2.0 program over stdio, driven by a JSON config.

It logs every message it receives before it answers, so a test can check exactly what went on
the wire.  ``Scripted(tmp, config)`` writes the program and its config into a test's folder.
A turn's ``stream`` (``{"bytes": N, "count": M}``) makes the agent stream M text chunks of N
bytes each before the rest of the turn (a flood of reply text).  A turn's ``ask`` (a tool
title) makes the agent ask ``session/request_permission`` for that tool first and run it only
when an allow option is chosen (:meth:`Scripted.tools_run` lists what ran); ``asks`` (a list
of titles) asks for each in turn, each once the previous one is answered.
A turn's ``compact`` (``{"summary": TEXT}``) makes the agent compact its context first, as
claude-agent-acp and codex-acp do: a ``compaction_update`` ``in_progress``, the summary as a
``compaction_summary_chunk``, then ``completed`` (sent twice, as a runtime may repeat a terminal
update) — only when the client advertised ``clientCapabilities.session.compaction``.
``caps`` replaces the capabilities it advertises; with ``refuse_reopen`` it refuses
``session/load`` and ``session/resume``, quoting in its error what the session was last told.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nostr_buzz.io.agent_driver import AgentDriver

# A raw JSON-RPC 2.0 agent over stdio, driven by a JSON config (argv[1]).  It logs each message
# it receives to config["log"] (one JSON object per line, written before it answers).
SCRIPTED_AGENT = r"""
import asyncio, json, os, sys

CFG = json.load(open(sys.argv[1]))
LOG = open(CFG["log"], "a")

def log(obj):
    LOG.write(json.dumps(obj) + "\n"); LOG.flush()

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()

def update(sid, upd):
    params = {"sessionId": sid, "update": upd}
    send({"jsonrpc": "2.0", "method": "session/update", "params": params})

STATE = {"turn": 0, "prompt": None, "wake": None, "steered": False, "cancelled": False,
         "asked": 0}
ASKED = {}  # our request id -> the future of the client's answer

async def ask_permission(sid, title, kind="execute"):
    STATE["asked"] += 1
    rid = "perm-%d" % STATE["asked"]
    answered = ASKED[rid] = asyncio.get_running_loop().create_future()
    options = [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
               {"optionId": "no", "name": "Reject", "kind": "reject_once"}]
    tool = {"toolCallId": "call-%d" % STATE["asked"], "title": title, "kind": kind}
    send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission",
          "params": {"sessionId": sid, "toolCall": tool, "options": options}})
    answer = (await answered).get("result", {}).get("outcome", {})
    del ASKED[rid]
    if answer.get("optionId") == "yes":  # the tool runs
        with open(CFG["log"] + ".tools", "a") as ran:
            ran.write(title + "\n")

async def run_prompt(msg):
    sid = msg["params"]["sessionId"]
    turns = CFG.get("turns", [{}])
    script = turns[min(STATE["turn"], len(turns) - 1)]
    STATE["turn"] += 1
    marker = CFG.get("crash_once_marker")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        script = {"updates": script.get("updates", []), "then": "exit"}
    for title in script.get("asks", [script["ask"]] if "ask" in script else []):
        await ask_permission(sid, title)
    compact = script.get("compact")
    if compact is not None and STATE.get("compaction"):
        cid = "compaction-%d" % STATE["turn"]
        head = {"sessionUpdate": "compaction_update", "compactionId": cid}
        update(sid, {**head, "status": "in_progress"})
        update(sid, {"sessionUpdate": "compaction_summary_chunk", "compactionId": cid,
                     "content": {"type": "text", "text": compact.get("summary", "")}})
        update(sid, {**head, "status": "completed"})
        update(sid, {**head, "status": "completed"})
    stream = script.get("stream")
    if stream:  # hostile: `count` text chunks of `bytes` bytes each, as fast as the pipe goes
        text = "x" * (stream["bytes"] - 1) + "\n"
        upd = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        line = json.dumps({"jsonrpc": "2.0", "method": "session/update",
                           "params": {"sessionId": sid, "update": upd}}) + "\n"
        for _ in range(stream["count"]):
            sys.stdout.write(line)
        sys.stdout.flush()
    for upd in script.get("updates", []):
        update(sid, upd)
    then = script.get("then", "answer")
    if then == "echo":
        # hostile: repeat the instruction in a tool call's title and kind (a permission
        # request, answered before going on), then in the error that fails the prompt
        text = "\n".join(b.get("text", "") for b in msg["params"]["prompt"])
        said = [l[9:] for l in text.split("\n") if l.startswith("Content: ")]
        echo = said[-1] if said else text[:200]
        await ask_permission(sid, "run " + echo, echo)
        error = {"code": -32603, "message": "Internal error", "data": {"message": "no: " + echo}}
        send({"jsonrpc": "2.0", "id": msg["id"], "error": error})
        return
    if then == "exit":
        os._exit(3)
    if then == "silent":
        await asyncio.Event().wait()
    if then == "tick":
        # activity every 0.1 s (never idle); answers after `answer_after` seconds
        end = asyncio.get_running_loop().time() + script["answer_after"]
        while asyncio.get_running_loop().time() < end:
            update(sid, {"sessionUpdate": "agent_thought_chunk",
                         "content": {"type": "text", "text": "."}})
            await asyncio.sleep(0.1)
    if then == "wait":
        STATE["wake"] = asyncio.Event()
        STATE["prompt"] = (msg["id"], script)
        await STATE["wake"].wait()
        if STATE["prompt"] is None:
            return  # already answered (prompt_first)
        STATE["prompt"] = None
    if STATE["cancelled"]:
        STATE["cancelled"] = False
        for upd in script.get("cancel_updates", []):
            update(sid, upd)
        result = {"stopReason": "cancelled"}
    else:
        result = {"stopReason": script.get("stopReason", "end_turn")}
        if "usage" in script:
            result["usage"] = script["usage"]
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

async def handle(msg):
    log(msg)
    method, mid = msg.get("method"), msg.get("id")
    if method is None:
        if mid in ASKED:
            ASKED[mid].set_result(msg)
        return
    if method == "initialize":
        session_caps = (msg["params"].get("clientCapabilities") or {}).get("session") or {}
        STATE["compaction"] = isinstance(session_caps.get("compaction"), dict)
        if CFG.get("stderr_bytes"):
            sys.stderr.write("x" * CFG["stderr_bytes"]); sys.stderr.flush()
        log({"env": sorted(os.environ)})
        result = {"protocolVersion": CFG.get("protocol", 1),
                  "agentCapabilities": CFG.get("caps", {"loadSession": False}),
                  "agentInfo": {"name": CFG.get("name", "scripted"), "version": "0.1"}}
        if CFG.get("meta"):
            result["_meta"] = CFG["meta"]
        send({"jsonrpc": "2.0", "id": mid, "result": result})
    elif method == "session/new":
        STATE["sessions"] = STATE.get("sessions", 0) + 1
        sid = f"sess-{STATE['sessions']}" if CFG.get("numbered_sessions") else "sess-1"
        result = {"sessionId": sid}
        if CFG.get("modes"):  # session modes, as claude-agent-acp / codex-acp advertise them
            result["modes"] = CFG["modes"]
        send({"jsonrpc": "2.0", "id": mid, "result": result})
    elif method == "session/prompt":
        asyncio.ensure_future(run_prompt(msg))
    elif method == "session/cancel":
        STATE["cancelled"] = True
        if STATE["wake"] is not None:
            STATE["wake"].set()
    elif method == CFG.get("steer_method"):
        answer = CFG["steer_answer"]
        if CFG.get("prompt_first") and STATE["prompt"] is not None:
            # the prompt's response goes out first, the steer's answer right after it
            pid, script = STATE["prompt"]
            STATE["prompt"] = None
            result = {"stopReason": "end_turn", "usage": script["usage"]}
            send({"jsonrpc": "2.0", "id": pid, "result": result})
            STATE["wake"].set()
            await asyncio.sleep(CFG.get("steer_delay", 0))
            send({"jsonrpc": "2.0", "id": mid, **answer})
            return
        send({"jsonrpc": "2.0", "id": mid, **answer})
        outcome = answer.get("result", {}).get("outcome")
        wrap_up = outcome in ("injected", "startedNewTurn") or CFG.get("name") == "goose"
        if wrap_up and STATE["wake"] is not None:
            STATE["wake"].set()  # the turn wraps up after the steer
    elif method in ("session/load", "session/resume") and CFG.get("refuse_reopen"):
        # hostile: refuse, quoting what the session was last told (read back from the log)
        sid = msg["params"]["sessionId"]
        told = [m for m in map(json.loads, open(CFG["log"])) if m.get("method") == "session/prompt"
                and m["params"]["sessionId"] == sid]
        text = "\n".join(b.get("text", "") for b in told[-1]["params"]["prompt"]) if told else ""
        said = [l[9:] for l in text.split("\n") if l.startswith("Content: ")]
        data = {"message": "cannot reopen: " + (said[-1] if said else "?")}
        error = {"code": -32603, "message": "Internal error", "data": data}
        send({"jsonrpc": "2.0", "id": mid, "error": error})
    elif method in CFG.get("ok_methods", []):
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif mid is not None:
        if CFG.get("unknown") == "empty":  # hostile: an empty success for anything
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": mid,
                  "error": {"code": -32601, "message": "Method not found"}})

async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        await handle(json.loads(line))

asyncio.run(main())
"""


@dataclass
class Scripted:
    """A scripted agent: its command line and the log of what it received."""

    tmp: Path
    config: dict[str, Any]
    name: str = "agent"

    def __post_init__(self) -> None:
        script = self.tmp / "scripted_agent.py"
        script.write_text(SCRIPTED_AGENT, encoding="utf-8")
        self.log = self.tmp / f"{self.name}.received.jsonl"
        self.config = {**self.config, "log": str(self.log)}
        cfg = self.tmp / f"{self.name}.json"
        cfg.write_text(json.dumps(self.config), encoding="utf-8")
        self.args = (str(script), str(cfg))

    def received(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.received() if m.get("method") == method]

    def methods(self) -> list[str]:
        return [m["method"] for m in self.received() if "method" in m]

    def tools_run(self) -> list[str]:
        """The titles of the tools the agent ran (approved), in order."""
        ran = self.log.with_name(self.log.name + ".tools")
        return ran.read_text(encoding="utf-8").splitlines() if ran.exists() else []

    def driver(self, **kwargs: Any) -> AgentDriver:
        return AgentDriver(sys.executable, self.args, **kwargs)


def usage_update(cost: float) -> dict[str, Any]:
    return {
        "sessionUpdate": "usage_update",
        "used": 10,
        "size": 1000,
        "cost": {"amount": cost, "currency": "USD"},
    }


def chunk(text: str) -> dict[str, Any]:
    return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}


USAGE = {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10}
