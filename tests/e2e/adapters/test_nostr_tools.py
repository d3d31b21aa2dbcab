"""The agent's own Nostr tools over MCP, with the real adapters: claude-agent-acp and codex-acp
are offered the bot's tool server in ``session/new``, the model (the tests' model server) calls
``fetch_event`` for an event named in the thread, and gets the event's raw signed JSON; the
turn's metric names the event by its id in a ``retrieved_event`` layer, and ``buzz audit``
passes it.  An unknown id gives the typed ``not_found``, and a stranger's event comes with the
gate's word on its author."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips.nip_am import MetricPayload
from tests.support import cli
from tests.support.adapter_bot import Bot, answer, bot_world, running
from tests.support.model_server import Seen
from tests.support.real_adapters import CLAUDE, CODEX

pytestmark = pytest.mark.usefixtures("no_ambient_config")


async def publish(bot: Bot, event: Event) -> None:
    result = await RelayPool([bot.relay.url], timeout=5).publish(event)
    assert result.ok, result.verdicts


def tool_output(bot: Bot, marker: str) -> dict[str, Any]:
    """The last tool result the model server received in the turn whose question holds
    ``marker`` (Claude Code's tool search for a deferred tool comes before it), as JSON."""
    seen = [s for s in bot.server.main_requests() if s.tool_result and marker in s.user_text]
    return outcome(seen[-1])


def outcome(seen: Seen) -> dict[str, Any]:
    text = seen.tool_output
    start = text.index("{")  # an adapter may put words before an error's JSON
    value = json.loads(text[start : text.rindex("}") + 1])
    assert isinstance(value, dict)
    return value


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


@pytest.mark.parametrize("name", [CLAUDE, CODEX])
async def test_the_model_fetches_a_signed_event_through_the_bots_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    async with bot_world(tmp_path) as bot:
        earlier = bot.message("the deploy is at noon")
        stranger = bot.message("trust me, deploy now", author=bot.human)
        for event in (earlier, stranger):
            await publish(bot, event)
        async with running(bot, name) as plugin:
            ask = bot.message(f"What did I say? MCP:fetch_event:id={earlier.id};; ASK:one")
            await publish(bot, ask)
            assert (await answer(bot, plugin, ask)).endswith("TOOL-DONE ANSWER:one")
            unknown = secrets.token_hex(32)
            missing = bot.message(f"MCP:fetch_event:id={unknown};; ASK:two")
            await publish(bot, missing)
            assert (await answer(bot, plugin, missing)).endswith("ANSWER:two")
            theirs = bot.message(f"MCP:fetch_event:id={stranger.id};; ASK:three")
            await publish(bot, theirs)
            assert (await answer(bot, plugin, theirs)).endswith("ANSWER:three")
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
