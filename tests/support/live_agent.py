"""A fast ACP agent that counts its open sessions: a raw JSON-RPC 2.0 program over stdio.

It advertises ``sessionCapabilities.close`` and ``.resume`` (``caps`` replaces them) and logs,
one JSON line each, every ``session/new``, ``session/close``, ``session/resume``,
``session/load`` and ``session/prompt`` with the number of sessions open at it right after
(``open``), so a test counts from outside how many sessions the bot held open at once.  A
session it never opened, or one the bot closed and did not continue, is refused a prompt (the
bot would be prompting a session the agent let go).

Each answer says which session it came from and how many prompts that session had before
(``answer sess-3 #2``): a continued session counts on, a new one starts at ``#1``.  With
``hold`` set to N, a prompt is answered only once N prompts are in flight at once (else, after
``hold_for`` seconds, it answers ``alone``): a test sees whether turns ran side by side.  A
prompt whose text holds ``ASK:<title>`` first asks ``session/request_permission`` for that
tool and runs it (logs ``ran``) only when allowed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LIVE_AGENT = r"""
import asyncio, json, re, sys

CFG = json.load(open(sys.argv[1]))
LOG = open(CFG["log"], "a")
CAPS = CFG.get("caps", {"loadSession": False,
                        "sessionCapabilities": {"close": {}, "resume": {}}})
OPEN, KNOWN, TURNS, ASKED = set(), set(), {}, {}
STATE = {"n": 0, "flying": 0, "asked": 0}
TOGETHER = asyncio.Event()

def log(**obj):
    obj["open"] = len(OPEN)
    LOG.write(json.dumps(obj) + "\n"); LOG.flush()

def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()

def answer(mid, result):
    send({"jsonrpc": "2.0", "id": mid, "result": result})

def refuse(mid, message):
    send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": message}})

async def ask(sid, title):
    STATE["asked"] += 1
    rid = "perm-%d" % STATE["asked"]
    got = ASKED[rid] = asyncio.get_running_loop().create_future()
    options = [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
               {"optionId": "no", "name": "Reject", "kind": "reject_once"}]
    tool = {"toolCallId": "call-%d" % STATE["asked"], "title": title, "kind": "execute"}
    send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission",
          "params": {"sessionId": sid, "toolCall": tool, "options": options}})
    outcome = (await got).get("result", {}).get("outcome", {})
    ran = outcome.get("optionId") == "yes"
    log(m="tool", sid=sid, title=title, ran=ran)

async def prompt(msg):
    sid, mid = msg["params"]["sessionId"], msg["id"]
    text = "\n".join(b.get("text", "") for b in msg["params"]["prompt"])
    log(m="session/prompt", sid=sid)
    if sid not in OPEN:
        return refuse(mid, "no open session " + sid)
    STATE["flying"] += 1
    try:
        said = "together"
        if CFG.get("hold"):
            if STATE["flying"] >= CFG["hold"]:
                TOGETHER.set()
            try:
                await asyncio.wait_for(TOGETHER.wait(), CFG.get("hold_for", 20))
            except asyncio.TimeoutError:
                said = "alone"
        for title in re.findall(r"ASK:(\S+)", text):
            await ask(sid, title)
        TURNS[sid] = TURNS.get(sid, 0) + 1
        reply = "answer %s #%d %s" % (sid, TURNS[sid], said)
        upd = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": reply}}
        send({"jsonrpc": "2.0", "method": "session/update",
              "params": {"sessionId": sid, "update": upd}})
        usage = {"inputTokens": 7, "outputTokens": 3, "totalTokens": 10}
        answer(mid, {"stopReason": "end_turn", "usage": usage})
    finally:
        STATE["flying"] -= 1

async def handle(msg):
    method, mid = msg.get("method"), msg.get("id")
    if method is None:
        if mid in ASKED:
            ASKED.pop(mid).set_result(msg)
        return
    params = msg.get("params") or {}
    if method == "initialize":
        answer(mid, {"protocolVersion": 1, "agentCapabilities": CAPS,
                     "agentInfo": {"name": "live-agent", "version": "0.1"}})
    elif method == "session/new":
        STATE["n"] += 1
        sid = "sess-%d" % STATE["n"]
        OPEN.add(sid); KNOWN.add(sid)
        log(m=method, sid=sid)
        answer(mid, {"sessionId": sid})
    elif method == "session/close":
        OPEN.discard(params.get("sessionId"))
        log(m=method, sid=params.get("sessionId"))
        answer(mid, {})
    elif method in ("session/resume", "session/load"):
        sid = params.get("sessionId")
        if sid not in KNOWN:
            log(m=method, sid=sid, refused=True)
            return refuse(mid, "unknown session")
        OPEN.add(sid)
        log(m=method, sid=sid)
        answer(mid, {})
    elif method == "session/prompt":
        asyncio.ensure_future(prompt(msg))
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + method}})

async def main():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2 ** 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        await handle(json.loads(line))

asyncio.run(main())
"""


@dataclass
class LiveAgent:
    """The agent's command line (``args`` after the Python executable) and its log."""

    tmp: Path
    config: dict[str, Any]

    def __post_init__(self) -> None:
        script = self.tmp / "live_agent.py"
        script.write_text(LIVE_AGENT, encoding="utf-8")
        self.log = self.tmp / "live_agent.jsonl"
        cfg = self.tmp / "live_agent.json"
        cfg.write_text(json.dumps({**self.config, "log": str(self.log)}), encoding="utf-8")
        self.args = (str(script), str(cfg))
        self.command = " ".join([sys.executable, *self.args])

    def records(self, method: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        text = self.log.read_text(encoding="utf-8")
        # Whole lines only: the agent may be writing the last one while a test looks.
        lines = text[: text.rfind("\n") + 1].splitlines()
        found = [json.loads(line) for line in lines if line]
        return [r for r in found if method is None or r["m"] == method]

    def most_open(self) -> int:
        """The most sessions that were open at the agent at once."""
        return max((r["open"] for r in self.records()), default=0)
