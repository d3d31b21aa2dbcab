"""A restarted bot offers each channel's agent session back to the agent (docs/bot.md, "Sessions
that survive a restart"); a hostile agent refuses, and quotes in its error what the session was
last told.  A real relay, the bot in process twice on one state directory, a real agent process
(the scripted agent, advertising ``loadSession``).

The ``session_not_resumed`` record of the owner's private conversation says that the session
was refused and the error's class, never the agent's text; the public channel's record still
carries it (so the check can fail).
"""

from __future__ import annotations

import json
import time

from tests.e2e.bot.test_private_isolation import wrap_to
from tests.support.bot_world import Recorder, World, serving
from tests.support.scripted_agent import Scripted, chunk

SECRET = "vault-4711-private"


async def test_a_refused_private_session_leaves_the_agents_words_out_of_the_diagnostics(
    world: World,
) -> None:
    agent = Scripted(
        world.tmp,
        {
            "caps": {"loadSession": True},
            "refuse_reopen": True,
            "numbered_sessions": True,
            "turns": [{"updates": [chunk("noted")]}],
        },
    )
    owner = world.owner.public_key.hex
    private = f"dm-private-{owner}"
    # two runs on one state directory: the second offers both sessions back
    for dm_text, public_text in [(f"{SECRET} please", "public-words here"), ("again", "more")]:
        rec = Recorder()
        async with serving(world, rec, agent_args=agent.args):
            _, wrap = wrap_to(world.owner, world.agent, dm_text, int(time.time()))
            await world.publish(wrap)
            await rec.kind("reply_published")
            await world.publish(world.message(world.owner, public_text))
            await rec.kind("reply_published", 2)
    # the second run offered both sessions back; the agent refused both, quoting them
    assert len(agent.requests("session/load")) == 2
    said = [r.payload.get("error", "") for r in rec.of("session_not_resumed")]
    assert any("cannot reopen: public-words here" in e for e in said)  # the agent does quote
    feed = (world.tmp / "state" / "diagnostics.jsonl").read_text(encoding="utf-8")
    assert SECRET not in feed
    assert SECRET not in json.dumps([(r.kind, r.payload) for r in rec.records])
    refused = {r.channel_id: r.payload for r in rec.of("session_not_resumed")}
    assert refused.keys() == {private, "eng"}
    assert refused[private]["reason"] == "refused"
    assert refused[private]["error"] == "JSON-RPC error -32603"
    assert "cannot reopen: public-words here" in refused["eng"]["error"]
    records = [json.loads(line) for line in feed.splitlines()]
    on_file = [r for r in records if r["kind"] == "session_not_resumed"]
    assert {r["channelId"] for r in on_file} == {private, "eng"}
