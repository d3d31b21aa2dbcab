"""An agent that compacts its context, under a real ``buzz run``: four mentions in one channel,
one session; the (scripted) agent compacts in the second turn, as claude-agent-acp and codex-acp
do when the client advertises ``clientCapabilities.session.compaction``.

- The second turn's metric, decrypted as the owner, says it compacted (``compactions: 1``,
  though the agent repeated its terminal update); no other turn's does.
- For an agent without a system role, the standing sections went into the session's first
  prompt and were compacted away: the third prompt carries them again, byte for byte, and the
  third manifest differs from the second, beyond the layers every turn changes, exactly in the
  standing layers, whose freshness is ``redelivered_after_compaction``.  The fourth prompt does
  not carry them (delivered once more is enough) and its standing layers are as before.
- For an agent with a system role, the standing context travelled beside the conversation and
  survived: no prompt carries it, and no standing layer changes.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from nostr_buzz.core.compaction import REDELIVERED_AFTER_COMPACTION
from nostr_buzz.event import Event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.manifest import Manifest
from nostr_buzz.nips.nip_am import KIND as METRIC_KIND
from nostr_buzz.nips.nip_am import MetricPayload, open_metric_event
from nostr_buzz.reports.manifest_diff import diff_manifests
from tests.support.buzz_process import Lines, buzz, relay_process, run_bot
from tests.support.keys import AGENT, OWNER
from tests.support.scripted_agent import USAGE, Scripted, chunk

#: The layers of the session's standing context (docs/envelope.md, "Layers and the manifest").
STANDING_LAYERS = {
    "workspace",
    "platform_contract",
    "persona_and_team_guidance",
    "core_memory",
    "channel_canvas",
}
SUMMARY = "We talked about the weather."
BASE = "You answer in one short sentence."
PERSONA = "You are Pip, the team's weather bot."


def by_agent(relay: str, kinds: list[int]) -> list[Event]:
    flt = {"kinds": kinds, "authors": [AGENT.public_key.hex]}
    return asyncio.run(RelayPool([relay], timeout=5.0).query(flt)).events


def run_four_turns(tmp_path: Path, caps: dict[str, Any]) -> tuple[Scripted, list[MetricPayload]]:
    """Four mentions by the owner in ``eng``, one turn each; the agent's log and the four
    metrics, decrypted as the owner, in turn order."""
    (tmp_path / "base.md").write_text(BASE, encoding="utf-8")
    (tmp_path / "persona.md").write_text(PERSONA, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "buzz.toml").write_text(
        f'[agent]\ncwd = "{work}"\n[context]\nbase = "base.md"\npersona = "persona.md"\n',
        encoding="utf-8",
    )
    answer = {"updates": [chunk("Sunny.")], "usage": USAGE}
    turns = [answer, {**answer, "compact": {"summary": SUMMARY}}, answer, answer]
    agent = Scripted(tmp_path, {"turns": turns, "caps": caps})
    command = " ".join([sys.executable, *agent.args])
    with relay_process() as relay:
        owner_env = {"BUZZ_RELAYS": relay, "BUZZ_PRIVATE_KEY": OWNER.bech32}
        bot = run_bot(relay, command, tmp_path / "state", agent=AGENT, owner=OWNER, cwd=tmp_path)
        try:
            assert bot.stderr is not None
            stderr = Lines(bot.stderr)
            stderr.until("buzz: agent ")
            for n in range(1, 5):
                sent = buzz(
                    "messages",
                    "send",
                    "--channel",
                    "eng",
                    "--mention",
                    AGENT.public_key.bech32,
                    f"weather, take {n}?",
                    env=owner_env,
                )
                assert sent.returncode == 0, sent.stderr
                turn = stderr.until("buzz: turn in eng", timeout=60)
                assert ": success, " in turn, turn
            deadline = time.monotonic() + 30  # each metric leaves through the outbox
            while len(metrics := by_agent(relay, [METRIC_KIND])) < 4:
                assert time.monotonic() < deadline, f"{len(metrics)} metrics on the relay"
                time.sleep(0.2)
        finally:
            bot.terminate()
            bot.wait(30)
    payloads = sorted((open_metric_event(OWNER, m) for m in metrics), key=lambda p: p.turn_seq or 0)
    assert [p.turn_seq for p in payloads] == [1, 2, 3, 4]
    assert len({p.session_id for p in payloads}) == 1
    return agent, payloads


def manifest(payload: MetricPayload) -> Manifest:
    assert payload.context_manifest is not None
    return Manifest.from_json(payload.context_manifest.to_json())


def changed(a: MetricPayload, b: MetricPayload) -> dict[str, tuple[str, ...]]:
    """The layers that differ from ``a``'s manifest to ``b``'s, with the fields that do."""
    diff = diff_manifests(manifest(a), manifest(b))
    assert not diff.added and not diff.removed
    return {c.layer: c.fields for c in diff.changed}


def prompts(agent: Scripted) -> list[list[str]]:
    """The text blocks of every ``session/prompt``, in order."""
    return [
        [block["text"] for block in request["params"]["prompt"]]
        for request in agent.requests("session/prompt")
    ]


def standing_blocks(blocks: list[str]) -> list[str]:
    """The blocks before ``<buzz-turn>``: the standing sections of a legacy prompt."""
    return blocks[: blocks.index("<buzz-turn>")]


def test_a_compaction_is_in_the_metric_and_the_standing_sections_are_delivered_again(
    tmp_path: Path,
) -> None:
    agent, metrics = run_four_turns(tmp_path, {"loadSession": False})
    assert [m.compactions for m in metrics] == [None, 1, None, None]
    sent = prompts(agent)
    first = standing_blocks(sent[0])
    assert first[0].startswith("<workspace>") and any(BASE in b for b in first)
    assert any(PERSONA in b for b in first)
    # Compacted away in the second turn: the third prompt carries them again, byte for byte.
    assert standing_blocks(sent[1]) == []
    assert standing_blocks(sent[2]) == first
    assert standing_blocks(sent[3]) == []
    # Every turn changes its own layers; beyond those, the manifest after the compaction
    # differs exactly in the standing layers, and only in their freshness.
    every_turn = changed(metrics[0], metrics[1])
    assert not STANDING_LAYERS & set(every_turn)
    after = changed(metrics[1], metrics[2])
    redelivered = {layer: f for layer, f in after.items() if layer not in every_turn}
    standing = {layer.layer for layer in manifest(metrics[1]).layers} & STANDING_LAYERS
    assert {"workspace", "platform_contract", "persona_and_team_guidance"} <= standing
    assert redelivered == {layer: ("freshness",) for layer in standing}
    third = {layer.layer: layer.freshness for layer in manifest(metrics[2]).layers}
    assert all(third[layer] == REDELIVERED_AFTER_COMPACTION for layer in standing)
    # The next turn holds them as delivered: its standing layers are the first turn's again.
    back = changed(metrics[1], metrics[3])
    assert not STANDING_LAYERS & set(back)


def test_a_compaction_leaves_a_system_role_s_standing_context_where_it_was(
    tmp_path: Path,
) -> None:
    caps = {"loadSession": False, "sessionCapabilities": {"systemPrompt": {}}}
    agent, metrics = run_four_turns(tmp_path, caps)
    assert [m.compactions for m in metrics] == [None, 1, None, None]
    [opened] = agent.requests("session/new")
    system = opened["params"]["systemPrompt"]["content"][0]["text"]
    assert BASE in system and PERSONA in system
    assert all(standing_blocks(blocks) == [] for blocks in prompts(agent))
    every_turn = changed(metrics[0], metrics[1])
    after = changed(metrics[1], metrics[2])
    assert set(after) <= set(every_turn)
    assert not STANDING_LAYERS & set(after)
