"""``buzz audit`` against real relays on 127.0.0.1: a real bot turn (the demo agent answering the
owner's mention) audits clean; metrics built by hand like a bot's, whose current instruction is
missing, a stranger's or of another kind, exit 4 naming the layer; a relay serving a forged copy
of the instruction is named while the real copy on another relay verifies."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.bot import BuzzPlugin
from nostr_buzz.event import Event
from tests.e2e.cli.test_startup import heavy_in, imported_by
from tests.support import cli
from tests.support.audit_metrics import metric_for
from tests.support.bot_world import WAIT, Recorder, World
from tests.support.cli import BackgroundLoop, dead_url
from tests.support.events import chat
from tests.support.hostile_metrics import private_channel_forgery
from tests.support.hostile_relay import hostile_relay
from tests.support.keys import AGENT, OWNER, STRANGER
from tests.support.relays import start_relay

pytestmark = pytest.mark.usefixtures("no_ambient_config")


@dataclass
class Hand:
    """Relay ``one`` holds every metric and every event but ``unpublished``; ``forger`` serves
    a copy of ``good`` with a broken signature to any query."""

    one: str
    forger: str
    good: Event
    unpublished: Event
    stranger: Event
    reaction: Event
    metrics: dict[str, Event]  # the event each metric names, by name


@pytest.fixture(scope="module")
def hand() -> Iterator[Hand]:
    mention: dict[str, Any] = {"channel": "eng", "mention": AGENT}
    good = chat(OWNER, 1_790_000_000, content="deploy please", **mention)
    unpublished = chat(OWNER, 1_790_000_001, content="never sent", **mention)
    stranger = chat(STRANGER, 1_790_000_002, content="do as I say", **mention)
    reaction = chat(OWNER, 1_790_000_003, content="+", kind=7, **mention)
    named = {"good": good, "missing": unpublished, "stranger": stranger, "kind": reaction}
    metrics = {
        name: metric_for(AGENT, OWNER, event, second=i)
        for i, (name, event) in enumerate(named.items())
    }
    # a stranger's, for the owner's private channel: its instruction is a rumor no relay holds
    rumor = chat(OWNER, 1_790_000_004, content="between us", channel=None, mention=AGENT)
    metrics["private"] = private_channel_forgery(rumor, second=len(named))
    bg = BackgroundLoop()
    one = bg.call(start_relay())
    try:
        forger = bg.enter(hostile_relay("forged_sig", [good]))
        for event in [good, stranger, reaction, *metrics.values()]:
            cli.publish(bg, one.url, event)
        yield Hand(one.url, forger.url, good, unpublished, stranger, reaction, metrics)
    finally:
        bg.call(one.close())
        bg.close()


def audit(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return cli.buzz(capsys, "audit", "--key", OWNER.bech32, "--timeout", "5", *argv)


def report(text: str) -> dict[str, Any]:
    """The JSON report in stdout, or in stderr after a failure (stdout is then empty)."""
    [line] = [x for x in text.splitlines() if x.startswith("{")]
    doc: dict[str, Any] = json.loads(line)
    return doc


def instruction(metric: dict[str, Any]) -> dict[str, Any]:
    layers: list[dict[str, Any]] = metric["layers"]
    [layer] = [x for x in layers if x["layer"] == "current_instruction"]
    return layer


@pytest.mark.parametrize(
    ("name", "verdict", "why"),
    [
        ("missing", "missing", "no relay has this event"),
        ("stranger", "wrong_author", "the gate refuses it (author_not_owner)"),
        ("kind", "wrong_kind", "kind 7; current_instruction takes 1, 9, 1111"),
    ],
)
def test_an_instruction_missing_foreign_or_of_another_kind_exits_4_naming_the_layer(
    capsys: pytest.CaptureFixture[str], hand: Hand, name: str, verdict: str, why: str
) -> None:
    event = hand.metrics[name]
    named = {"missing": hand.unpublished, "stranger": hand.stranger, "kind": hand.reaction}[name]
    code, out, err = audit(capsys, "--metric", event.id, "--relay", hand.one, "--json")
    assert (code, out) == (4, ""), err
    assert f"layer current_instruction {named.id}: {verdict}: " in err and why in err
    doc = report(err)
    assert doc["ok"] is False and doc["metric"] == event.id
    [metric] = doc["metrics"]
    assert instruction(metric)["verdict"] == verdict and metric["manifestValid"] is True
    others = {x["verdict"] for x in metric["layers"] if x["layer"] != "current_instruction"}
    assert others == {"hash_only"}


def test_a_period_audit_names_every_failing_metric_and_passes_the_good_one(
    capsys: pytest.CaptureFixture[str], hand: Hand
) -> None:
    code, out, err = audit(capsys, "--relay", hand.one, "--since", "2026-12-02")
    assert (code, out) == (4, ""), err
    assert "audit failed: 4 problem(s)" in err
    for name in ("missing", "stranger", "kind"):
        assert f"metric {hand.metrics[name].id}: layer current_instruction" in err
    assert f"metric {hand.metrics['private'].id}: channel dm-private-" in err
    assert f"metric {hand.metrics['good'].id}: layer" not in err
    # The table went to stderr: the good metric's instruction row says verified.
    row = next(x for x in err.splitlines() if hand.good.id in x and "current_instruction" in x)
    assert "verified" in row and "kind 9 by the owner" in row


def test_a_strangers_metric_for_a_private_channel_fails_unless_its_signer_is_your_agent(
    capsys: pytest.CaptureFixture[str], hand: Hand, tmp_path: Path
) -> None:
    """No agents configured: a metric anyone could have encrypted to the owner, naming the
    owner's private channel, whose rumor no relay can confirm — exit 4, not ok."""
    metric = hand.metrics["private"].id
    code, out, err = audit(capsys, "--metric", metric, "--relay", hand.one, "--json")
    assert (code, out) == (4, ""), err
    owner = OWNER.public_key.hex
    assert f"metric {metric}: channel dm-private-{owner}: wrong_author: signed by " in err
    assert "which is not one of your agents" in err
    [doc] = report(err)["metrics"]
    assert doc["ok"] is False and instruction(doc)["verdict"] == "private"
    assert doc["channel"]["verdict"] == "wrong_author" and doc["channel"]["actor"] == owner
    # the same metric, its signer named as one of the owner's agents: it vouches for the turn
    stranger = STRANGER.public_key.hex
    argv = ["--metric", metric, "--relay", hand.one, "--agent", stranger, "--json"]
    code, out, err = audit(capsys, *argv)
    assert code == 0, err
    [doc] = report(out)["metrics"]
    assert doc["ok"] is True and doc["channel"]["verdict"] == "private"
    # ... unless the configured gate would refuse it (here: it serves no private messages)
    config = tmp_path / "owner.toml"
    config.write_text("[subscriptions]\nkinds = [9]\n", encoding="utf-8")
    code, out, err = audit(capsys, *argv, "--config", str(config))
    assert code == 4 and "not_admitted" in err and "kind_not_subscribed" in err


def test_the_configured_gate_decides_whose_instruction_counts(
    capsys: pytest.CaptureFixture[str], hand: Hand, tmp_path: Path
) -> None:
    config = tmp_path / "owner.toml"  # not ./buzz.toml, which every run would read
    config.write_text(
        f'[gate]\nmode = "allowlist"\nallowlist = ["{STRANGER.public_key.bech32}"]\n',
        encoding="utf-8",
    )
    metric = hand.metrics["stranger"].id
    code, out, err = audit(capsys, "--metric", metric, "--relay", hand.one, "--json")
    assert code == 4, err
    code, out, err = audit(
        capsys, "--metric", metric, "--relay", hand.one, "--config", str(config), "--json"
    )
    assert code == 0, err
    layer = instruction(report(out)["metrics"][0])
    assert layer["verdict"] == "verified" and layer["author"] == STRANGER.public_key.hex


def test_a_relay_serving_a_forged_copy_is_named_and_the_real_copy_still_verifies(
    capsys: pytest.CaptureFixture[str], hand: Hand
) -> None:
    metric = hand.metrics["good"].id
    code, out, err = audit(
        capsys, "--metric", metric, "--relay", hand.one, "--relay", hand.forger, "--json"
    )
    assert code == 0, err
    layer = instruction(report(out)["metrics"][0])
    assert layer["verdict"] == "verified" and layer["version"] == hand.good.id
    assert layer["servedBy"] == [hand.one]
    assert layer["forgers"] == {hand.forger: ["bad_signature"]}
    assert f"failing verification: {hand.forger} (bad_signature)" in layer["detail"]
    assert hand.forger in err  # named on stderr too
    # The table says the same on stdout.
    code, out, err = audit(capsys, "--metric", metric, "--relay", hand.one, "--relay", hand.forger)
    assert code == 0, err
    assert f"failing verification: {hand.forger}" in out and "1 verified" in out


def test_bad_input_unknown_metric_and_dead_relays_use_the_usual_exit_codes(
    capsys: pytest.CaptureFixture[str], hand: Hand
) -> None:
    metric = hand.metrics["good"].id
    code, out, err = audit(capsys, "--metric", metric, "--since", "2026-12-01")
    assert (code, out) == (1, "") and "--metric" in err
    code, out, err = audit(capsys, "--metric", "zz", "--relay", hand.one)
    assert (code, out) == (1, "") and "--metric" in err
    code, out, err = audit(capsys, "--metric", hand.good.id[::-1], "--relay", hand.one)
    assert (code, out) == (3, "") and "not found" in err
    code, out, err = audit(capsys, "--metric", hand.good.id, "--relay", hand.one)
    assert (code, out) == (4, "") and "not a metric for you (wrong_kind)" in err
    stranger = STRANGER.public_key.hex
    code, out, err = audit(capsys, "--metric", metric, "--relay", hand.one, "--agent", stranger)
    assert (code, out) == (4, "") and "not one of your agents" in err
    code, out, err = audit(capsys, "--relay", dead_url(), "--timeout", "2")
    assert (code, out) == (2, "") and "no relay answered" in err


async def test_a_real_turn_audits_clean(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder()
    async with BuzzPlugin(world.config(), on_diagnostic=rec) as plugin:
        mention = world.message(world.owner, "please summarise the deploy")
        await world.publish(mention)
        await plugin.handle_event(mention)
        published = await rec.kind("metric_published", timeout=WAIT)
    metric_id = published.payload["eventId"]
    argv = ["audit", "--relay", world.relay.url, "--key", world.owner.bech32, "--timeout", "5"]
    # buzz runs its own event loop: in a thread, so that this loop keeps serving the relay.
    code, out, err = await asyncio.to_thread(cli.buzz, capsys, *argv, "--json")
    assert code == 0, err
    doc = report(out)
    [metric] = doc["metrics"]
    assert metric["eventId"] == metric_id and metric["ok"] and doc["ok"]
    layer = instruction(metric)
    assert layer["verdict"] == "verified" and layer["version"] == mention.id
    assert layer["kind"] == 9 and layer["author"] == world.owner.public_key.hex
    assert {x["verdict"] for x in metric["layers"]} == {"verified", "hash_only"}
    code, out, err = await asyncio.to_thread(cli.buzz, capsys, *argv, "--metric", metric_id)
    assert code == 0, err
    assert f"metric {metric_id}" in out and "1 verified" in out


def test_audit_loads_the_gate_but_not_the_agent_protocol() -> None:
    env = {"BUZZ_PRIVATE_KEY": OWNER.hex}
    code, modules = imported_by("audit", "--relay", dead_url(), "--timeout", "1", env=env)
    assert code == 2
    assert {"nostr_buzz.io.audit", "nostr_buzz.core.gate"} <= modules  # the public gate
    assert heavy_in(modules) == [] and "nostr_buzz.bot.plugin" not in modules
