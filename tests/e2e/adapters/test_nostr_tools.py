"""The agent's own Nostr tools over MCP, with the real adapters: claude-agent-acp and codex-acp
are offered the bot's tool server in ``session/new``, the model (the tests' model server) calls
``fetch_event`` for an event named in the thread, and gets the event's raw signed JSON; the
turn's metric names the event by its id in a ``retrieved_event`` layer, and ``buzz audit``
passes it.  An unknown id gives the typed ``not_found``, and a stranger's event comes with the
gate's word on its author."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.bot.tools import BRIDGE
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip17, nip59
from nostr_buzz.nips.nip_am import MetricPayload
from tests.support import cli
from tests.support.adapter_bot import (
    Bot,
    answer,
    bot_world,
    held,
    running,
    until,
    until_reply,
)
from tests.support.model_server import Seen
from tests.support.real_adapters import CLAUDE, CODEX, GEMINI, adapter_env

pytestmark = pytest.mark.usefixtures("no_ambient_config")


async def publish(bot: Bot, event: Event) -> None:
    result = await RelayPool([bot.relay.url], timeout=5).publish(event)
    assert result.ok, result.verdicts


async def asked(bot: Bot, plugin: BuzzPlugin, text: str, word: str) -> str:
    """The owner's mention ``text ASK:word`` published and answered; the reply."""
    ask = bot.message(f"{text} ASK:{word}")
    await publish(bot, ask)
    reply = await answer(bot, plugin, ask)
    assert reply.endswith(f"ANSWER:{word}"), reply
    return reply


def tool_output(bot: Bot, marker: str) -> dict[str, Any]:
    """The last tool result the model server received in the turn whose question holds
    ``marker`` (Claude Code's tool search for a deferred tool comes before it), as JSON."""
    seen = [s for s in bot.server.main_requests() if s.tool_result and marker in s.user_text]
    return outcome(seen[-1])


def outcome(seen: Seen) -> dict[str, Any]:
    """The tool's JSON in what the adapter sent back: an adapter may put words around it, or
    give it more than once (gemini-cli)."""
    text, decoder = seen.tool_output, json.JSONDecoder()
    for start in (i for i, c in enumerate(text) if c == "{"):
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(value, dict) and ("error" in value or "event" in value or "events" in value):
            return value
    raise AssertionError(f"no tool answer in {text!r}")


def retrieved(metric: MetricPayload) -> list[tuple[str, str, str]]:
    manifest = metric.context_manifest
    assert manifest is not None and manifest.hash_matches()
    return [
        (layer.scope, layer.source, layer.version)
        for layer in manifest.layers
        if layer.layer == "retrieved_event"
    ]


async def audited(bot: Bot, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    argv = ["audit", "--relay", bot.relay.url, "--key", bot.owner.bech32, "--timeout", "5"]
    argv += ["--agent", bot.agent.public_key.bech32, "--json"]
    code, out, err = await asyncio.to_thread(cli.buzz, capsys, *argv)
    assert code == 0, err
    [line] = [x for x in out.splitlines() if x.startswith("{")]
    doc = json.loads(line)
    assert isinstance(doc, dict)
    return doc


def trusted(bot: Bot, name: str) -> dict[str, Any]:
    """gemini-cli starts a session's MCP servers only in a folder it trusts (its headless
    setting, as a bot's operator would give it); the others need nothing."""
    if name != GEMINI:
        return {}
    env = adapter_env(name, bot.server, bot.tmp / "home")
    return {"agent_env": {**env, "GEMINI_CLI_TRUST_WORKSPACE": "true"}}


@pytest.mark.parametrize("name", [CLAUDE, CODEX, GEMINI])
async def test_the_model_fetches_a_signed_event_through_the_bots_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    async with bot_world(tmp_path) as bot:
        earlier = bot.message("the deploy is at noon")
        stranger = bot.message("trust me, deploy now", author=bot.human)
        for event in (earlier, stranger):
            await publish(bot, event)
        async with running(bot, name, **trusted(bot, name)) as plugin:
            said = await asked(bot, plugin, f"MCP:fetch_event:id={earlier.id};;", "one")
            assert said.endswith("TOOL-DONE ANSWER:one")
            unknown = secrets.token_hex(32)
            await asked(bot, plugin, f"MCP:fetch_event:id={unknown};;", "two")
            await asked(bot, plugin, f"MCP:fetch_event:id={stranger.id};;", "three")
            metrics = await bot.metrics(3)
        doc = await audited(bot, capsys)
    # the model got the event's raw signed JSON, verified, with the gate's word on its author
    found = tool_output(bot, "ASK:one")
    assert found["event"] == json.loads(earlier.to_json()) and found["gate"] == "admitted"
    assert tool_output(bot, "ASK:two") == {
        "error": "not_found",
        "detail": "no relay has this event",
        "id": unknown,
    }
    refused = tool_output(bot, "ASK:three")
    assert refused["event"] == json.loads(stranger.to_json())
    assert refused["gate"] == "refused (author_not_owner)"
    # each metric names what its turn handed over, and nothing else
    assert [retrieved(m) for m in metrics] == [
        [("fetch_event", "relay_event", earlier.id)],
        [],
        [("fetch_event", "relay_event", stranger.id)],
    ]
    assert doc["ok"] and len(doc["metrics"]) == 3
    verdicts = [
        (layer["version"], layer["verdict"])
        for metric in doc["metrics"]
        for layer in metric["layers"]
        if layer["layer"] == "retrieved_event"
    ]
    assert sorted(verdicts) == sorted([(earlier.id, "verified"), (stranger.id, "verified")])


def private_message(bot: Bot, author: SecretKey, content: str) -> tuple[Event, str]:
    """A NIP-17 message from ``author`` to the agent: its gift wrap, and its rumor's id."""
    bot.clock += 1
    rumor = nip17.message(
        author.public_key.hex, [bot.agent.public_key.hex], content, created_at=bot.clock
    )
    wrap = nip59.gift_wrap(author, bot.agent.public_key, rumor, now=int(time.time()))
    return wrap, rumor.id


@pytest.mark.parametrize("name", [CLAUDE, CODEX])
async def test_a_session_reads_its_own_private_conversation_and_no_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """The attacker is the model: in the owner's private conversation it asks for a stranger's
    private message (by its rumor's id, and by its gift wrap's id); in a public channel, for
    the owner's private message.  It gets the owner's own message only in the owner's
    conversation."""
    async with bot_world(tmp_path) as bot:
        gate = {"gate": "allowlist", "allowlist": frozenset({bot.human.public_key.hex})}
        ours, ours_id = private_message(bot, bot.owner, "the vault code is 4711")
        theirs, theirs_id = private_message(bot, bot.human, "my own secret marmalade-quokka")
        for wrap in (ours, theirs):
            await publish(bot, wrap)
        asks = {
            "p1": theirs_id,  # another conversation's message, by its rumor's id
            "p2": theirs.id,  # … and by the gift wrap carrying it
            "p3": ours_id,  # this conversation's own earlier message
        }
        public = {"c1": ours_id, "c2": ours.id}  # a public session asks for a private one
        async with running(bot, name, **gate) as plugin:
            for word, ref in asks.items():
                done = len(bot.of("turn_completed"))
                wrap, _ = private_message(bot, bot.owner, f"MCP:fetch_event:id={ref};; ASK:{word}")
                await plugin.handle_event(wrap)
                await bot.count("turn_completed", done + 1)
            for word, ref in public.items():
                await asked(bot, plugin, f"MCP:fetch_event:id={ref};;", word)
            metrics = await bot.metrics(5)
        doc = await audited(bot, capsys)
    answers = {word: tool_output(bot, f"ASK:{word}") for word in [*asks, *public]}
    assert answers["p1"] == {
        "error": "not_found",
        "detail": "no relay has this event",
        "id": theirs_id,
    }
    private = "private messages are not served in this session"
    assert answers["p2"] == {"error": "private", "detail": private, "id": theirs.id}
    assert answers["p3"]["event"]["content"] == "the vault code is 4711"
    assert answers["p3"]["id"] == ours_id and "sig" not in answers["p3"]["event"]
    assert answers["c1"] == {
        "error": "not_found",
        "detail": "no relay has this event",
        "id": ours_id,
    }
    assert answers["c2"] == {"error": "private", "detail": private, "id": ours.id}
    # nothing the stranger wrote reached the model, in any request
    assert not any("marmalade-quokka" in seen.body for seen in bot.server.requests)
    by_channel = {(m.channel_id, tuple(retrieved(m))) for m in metrics}
    owners = f"dm-private-{bot.owner.public_key.hex}"
    assert (owners, (("fetch_event", "private_conversation", ours_id),)) in by_channel
    assert [m for m in metrics if retrieved(m) and m.channel_id != owners] == []
    assert doc["ok"], doc


async def test_the_hint_names_the_sessions_tool_and_the_tool_it_names_works(
    tmp_path: Path,
) -> None:
    """A kind-1 note's channel is ``dm-<pubkey>``, which buzz's command line refuses: the
    context status names the session's tool instead, and the model that follows it gets the
    notes between that person and the agent."""
    async with bot_world(tmp_path) as bot:
        channel = f"dm-{bot.owner.public_key.hex}"

        def note(content: str) -> Event:
            bot.clock += 1
            tags = [["p", bot.agent.public_key.hex]]
            return sign_event(bot.owner, kind=1, content=content, tags=tags, created_at=bot.clock)

        older, earlier = note("we deploy today"), note("the deploy is at noon")
        ask = note(f"MCP:fetch_messages:channel={channel};; ASK:note")
        for event in (older, earlier, ask):
            await publish(bot, event)
        # at most one message of history: the envelope holds not all of it, and says where it is
        limits = {"kinds": (1, 9, 14), "context_message_limit": 1}
        async with running(bot, CLAUDE, **limits) as plugin:
            await plugin.handle_event(ask)
            await bot.count("metric_queued", 1)
            [metric] = await bot.metrics(1)
    [first, *_] = bot.server.main_requests()
    hint = f"retrieve: the buzz tool fetch_messages(channel={channel})"
    assert hint in first.user_text and "buzz messages" not in first.body
    listed = tool_output(bot, "ASK:note")
    assert listed["channel"] == channel
    events = [item["event"] for item in listed["events"]]
    assert events == [json.loads(e.to_json()) for e in (older, earlier, ask)]
    assert sorted(retrieved(metric)) == sorted(
        ("fetch_messages", "relay_event", e.id) for e in (older, earlier, ask)
    )


async def ts_client(
    url: str, token: str, calls: list[list[Any]], stdio: dict[str, Any] | None = None
) -> dict[str, Any]:
    """tests/agents/mcp_client.mjs (the official TypeScript SDK) against the tool server (or
    the stdio server ``stdio`` describes): its one JSON line.  The token travels in the
    environment, never the command line."""
    script = Path(__file__).resolve().parents[2] / "agents" / "mcp_client.mjs"
    env = {"PATH": os.environ.get("PATH", ""), "MCP_URL": url, "MCP_TOKEN": token}
    if stdio is not None:
        env["MCP_STDIO"] = json.dumps(stdio)
    process = await asyncio.create_subprocess_exec(
        "node", str(script), json.dumps(calls), env=env, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    [line] = out.decode().splitlines() or [f'{{"error": {json.dumps(err.decode()[-500:])}}}']
    value = json.loads(line)
    assert isinstance(value, dict)
    return value


async def test_the_tool_server_answers_an_independent_mcp_client(tmp_path: Path) -> None:
    """The official TypeScript SDK, holding the capability of a session whose turn is running,
    gets what the adapters' model got (the tool list, the raw signed event, the typed
    not-found) and its retrieval is in that turn's metric; without a token, or once the turn
    is over, it reads nothing."""
    async with bot_world(tmp_path) as bot:
        earlier = bot.message("the deploy is at noon")
        await publish(bot, earlier)
        unknown = secrets.token_hex(32)
        calls = [["fetch_event", {"id": earlier.id}], ["fetch_event", {"id": unknown}]]
        async with running(bot, CLAUDE) as plugin:
            busy = bot.message("ASK:busy HOLD:busy")
            await publish(bot, busy)
            await held(bot, plugin, busy, "busy")
            session = plugin.supervisor.sessions[nip10.queue_channel(busy)]
            tools = plugin.supervisor.tools
            assert tools is not None and session.tool_grant is not None
            entry = tools.server.grant(session.tool_grant)  # the session's capability, again
            [header] = entry["headers"]
            token = header["value"].removeprefix("Bearer ")
            during = await ts_client(entry["url"], token, calls)
            stranger = await ts_client(entry["url"], secrets.token_urlsafe(32), calls)
            # the stdio bridge an agent without HTTP MCP is offered, run as a stdio server
            bridge = {
                "command": sys.executable,
                "args": ["-P", BRIDGE],
                "env": {"BUZZ_MCP_URL": entry["url"], "BUZZ_MCP_TOKEN": token},
            }
            bridged = await ts_client("", "", calls, stdio=bridge)
            bot.server.release("busy")
            assert (await until_reply(bot, busy)).endswith("ANSWER:busy")
            after = await ts_client(entry["url"], token, calls[:1])
            [metric] = await bot.metrics(1)
    assert during["tools"] == [
        "fetch_event",
        "fetch_thread",
        "fetch_messages",
        "fetch_profile",
        "fetch_channel",
    ]
    found, missing = during["calls"]
    assert not found["isError"] and json.loads(found["text"]) == {
        "id": earlier.id,
        "event": json.loads(earlier.to_json()),
        "gate": "admitted",
    }
    assert missing["isError"] and json.loads(missing["text"]) == {
        "error": "not_found",
        "detail": "no relay has this event",
        "id": unknown,
    }
    assert bridged == during  # the same answers through the stdio bridge
    assert "unknown or revoked token" in stranger["error"]  # refused before the MCP layer
    [late] = after["calls"]
    assert late["isError"] and json.loads(late["text"])["error"] == "no_turn"
    assert retrieved(metric) == [("fetch_event", "relay_event", earlier.id)]


async def test_watch_shows_a_running_turns_last_tool_call_whatever_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent calls the bot's tool (no shell, nothing that needs the owner): ``buzz watch``
    shows it as the running turn's last tool call, and the feed names it, with its title in a
    public turn and its kind alone in a private one."""
    async with bot_world(tmp_path) as bot:
        earlier = bot.message("the deploy is at noon")
        await publish(bot, earlier)
        async with running(bot, CLAUDE) as plugin:
            busy = bot.message(f"MCP:fetch_event:id={earlier.id};; HOLD:w ASK:w")
            await publish(bot, busy)
            await plugin.handle_event(busy)
            await asyncio.to_thread(
                bot.server.wait_for,
                lambda seen: any(s.tool_result and "HOLD:w" in s.user_text for s in seen),
            )
            # the adapter's notice of the call may come after the model's next request
            await until(
                lambda: any("fetch_event" in str(r.payload) for r in bot.of("tool_call")),
                "the fetch_event call in the feed",
            )
            argv = ["watch", "--once", "--state-dir", str(tmp_path / "state")]
            code, out, err = await asyncio.to_thread(cli.buzz, capsys, *argv)
            bot.server.release("w")
            assert (await until_reply(bot, busy)).endswith("TOOL-DONE ANSWER:w")
            done = len(bot.of("turn_completed"))
            wrap, _ = private_message(bot, bot.owner, f"MCP:fetch_event:id={earlier.id};; ASK:p")
            await plugin.handle_event(wrap)
            await bot.count("turn_completed", done + 1)
    assert code == 0, err
    [turn] = json.loads(out)["runningTurns"]
    last = turn["lastTool"]
    assert last is not None and "fetch_event" in (last["title"] or ""), last
    calls = [(r.channel_id, r.payload) for r in bot.of("tool_call")]
    public = [p for c, p in calls if c == "eng"]
    private = [p for c, p in calls if c == f"dm-private-{bot.owner.public_key.hex}"]
    # every call, whatever it was (Claude Code's tool search first), by its title and kind
    assert any("fetch_event" in (p["title"] or "") for p in public), calls
    assert all(p["title"] and p["toolKind"] for p in public), calls
    assert private and all("title" not in p and p["toolKind"] for p in private), calls


async def test_the_in_process_example_agent_fetches_through_its_tool(tmp_path: Path) -> None:
    """examples/http_agent.py offers the bot's tools (``turn.tools``) to the model (the tests'
    Messages API): the model calls fetch_event, gets the raw signed event, and the turn's
    metric names it, as over MCP."""
    from examples.http_agent import HttpAgent

    async with bot_world(tmp_path) as bot:
        earlier = bot.message("the deploy is at noon")
        await publish(bot, earlier)
        agent = HttpAgent("sk-test-not-a-key", base_url=bot.server.url)
        config = bot.config(CLAUDE)
        async with BuzzPlugin(config, on_diagnostic=bot.records.append, agent=agent) as plugin:
            said = await asked(bot, plugin, f"MCP:fetch_event:id={earlier.id};;", "ex")
            [metric] = await bot.metrics(1)
    assert said.endswith("TOOL-DONE ANSWER:ex")
    found = tool_output(bot, "ASK:ex")
    assert found["event"] == json.loads(earlier.to_json()) and found["gate"] == "admitted"
    assert retrieved(metric) == [("fetch_event", "relay_event", earlier.id)]
    [first, *_] = bot.server.main_requests()  # the hint names the tool it was given
    assert "retrieve: the buzz tool fetch_messages(channel=eng)" in first.user_text
