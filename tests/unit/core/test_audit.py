"""The audit's verdicts on a metric's layers (nostr_buzz/reports/audit.py), with the gate that
``buzz audit`` builds from a configuration (cli/audit.py ``authority_for``)."""

from __future__ import annotations

import msgspec

from nostr_buzz.cli.audit import authority_for
from nostr_buzz.config import BuzzConfig, GateSection, SubscriptionsSection
from nostr_buzz.event import Event, sign_event
from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers
from nostr_buzz.nips.nip_am import MetricPayload
from nostr_buzz.nips.standing import CANVAS_KIND, CORE_MEMORY_KIND
from nostr_buzz.reports.audit import Authority, Lookup, MetricAudit, audit_metric, event_ids
from nostr_buzz.reports.metrics_report import OpenedMetric
from tests.support.audit_metrics import manifest_for
from tests.support.events import chat
from tests.support.keys import AGENT, ALICE, BOB, OWNER, STRANGER

ME = OWNER.public_key.hex


def opened(manifest: Manifest | None, channel: str = "eng") -> OpenedMetric:
    payload = MetricPayload(
        harness="goose",
        timestamp="2026-12-02T10:00:00.000Z",
        channel_id=channel,
        context_manifest=manifest,
    )
    return OpenedMetric("ab" * 32, AGENT.public_key.hex, 1, payload)


def authority(config: BuzzConfig | None = None) -> Authority:
    return authority_for(config or BuzzConfig(), ME, AGENT.public_key.hex)


def found(event: Event, *forgers: str) -> Lookup:
    return Lookup(
        event=event,
        answered=True,
        served_by=("ws://one",),
        forgers={url: ("bad_signature",) for url in forgers},
    )


def audit(event: Event, lookup: Lookup, config: BuzzConfig | None = None) -> MetricAudit:
    return audit_metric(opened(manifest_for(event)), {event.id: lookup}, authority(config))


def instruction(result: MetricAudit) -> tuple[str, str]:
    [layer] = [a for a in result.layers if a.layer == "current_instruction"]
    return layer.verdict, layer.detail


def mention(author: object = OWNER, kind: int = 9) -> Event:
    return chat(author, channel="eng", mention=AGENT, kind=kind)  # type: ignore[arg-type]


def test_the_owners_mention_verifies_and_every_other_layer_is_known_only_by_hash() -> None:
    event = mention()
    result = audit(event, found(event))
    assert event_ids(opened(manifest_for(event))) == [event.id]
    assert instruction(result) == ("verified", "kind 9 by the owner, on 1 relay(s)")
    assert {a.verdict for a in result.layers if a.layer != "current_instruction"} == {"hash_only"}
    assert result.ok and result.manifest_valid


def test_missing_forged_and_unreachable_events_fail_the_audit() -> None:
    event = mention()
    cases = {
        "missing": Lookup(None, answered=True),
        "forged": Lookup(None, answered=True, forgers={"ws://evil": ("bad_signature",)}),
        "unreachable": Lookup(None, answered=False),
    }
    for verdict, lookup in cases.items():
        result = audit(event, lookup)
        assert instruction(result)[0] == verdict and not result.ok
    assert "ws://evil (bad_signature)" in instruction(audit(event, cases["forged"]))[1]
    # A relay that did not answer may hold it: the detail says so.
    partly = Lookup(None, answered=True, unanswered={"ws://down": "timeout"})
    verdict, detail = instruction(audit(event, partly))
    assert verdict == "missing" and detail.endswith("; ws://down did not answer (timeout)")


def test_a_forged_copy_beside_the_real_one_is_named_but_verifies() -> None:
    event = mention()
    result = audit(event, found(event, "ws://evil"))
    verdict, detail = instruction(result)
    assert verdict == "verified" and "failing verification: ws://evil (bad_signature)" in detail
    assert result.ok


def test_the_configured_gate_judges_the_author() -> None:
    event = mention(STRANGER)
    verdict, detail = instruction(audit(event, found(event)))
    assert verdict == "wrong_author" and "author_not_owner" in detail
    allowed = BuzzConfig(
        gate=GateSection(mode="allowlist", allowlist=(STRANGER.public_key.bech32,))
    )
    assert instruction(audit(event, found(event), allowed))[0] == "verified"
    # Not mentioned, and the gate requires mentions: another of the gate's reasons.
    quiet = chat(OWNER, channel="eng")
    verdict, detail = instruction(audit(quiet, found(quiet)))
    assert verdict == "not_admitted" and "not_mentioned" in detail
    # The agent's own event never starts a turn.
    own = mention(AGENT)
    assert instruction(audit(own, found(own)))[0] == "wrong_author"


def test_a_kind_the_layer_does_not_take_fails_before_the_gate() -> None:
    reaction = mention(kind=7)
    verdict, detail = instruction(audit(reaction, found(reaction)))
    assert verdict == "wrong_kind" and detail.startswith("kind 7; current_instruction takes")
    # A note the configuration does not subscribe to is a kind the gate refuses.
    note = mention(kind=1)
    verdict, detail = instruction(audit(note, found(note)))
    assert verdict == "not_admitted" and "kind_not_subscribed" in detail
    notes = BuzzConfig(subscriptions=SubscriptionsSection(kinds=(1, 9)))
    assert instruction(audit(note, found(note), notes))[0] == "verified"


MINE = (AGENT.public_key.hex,)  # the owner's configured agents


def test_a_private_turn_names_a_rumor_that_is_reported_not_fetched() -> None:
    event = mention()
    metric = opened(manifest_for(event), channel="dm-private-" + ME)
    assert event_ids(metric) == []
    result = audit_metric(metric, {}, authority_for(BuzzConfig(), ME, AGENT.public_key.hex, MINE))
    assert instruction(result)[0] == "private" and result.ok
    assert result.channel is not None and result.channel.verdict == "private"
    assert result.channel.actor == ME and "the owner" in result.channel.detail


def _private(
    actor: str, config: BuzzConfig | None = None, agents: tuple[str, ...] = MINE, **kw: object
) -> MetricAudit:
    """A metric of AGENT's for the private channel of ``actor``, with a one-event manifest
    (``manifest`` in ``kw``: another, or None)."""
    manifest = kw.get("manifest", manifest_for(mention()))
    metric = opened(manifest, channel="dm-private-" + actor)  # type: ignore[arg-type]
    return audit_metric(
        metric, {}, authority_for(config or BuzzConfig(), ME, AGENT.public_key.hex, agents)
    )


def test_a_private_channels_metric_passes_only_from_your_agent_for_an_actor_the_gate_admits() -> (
    None
):
    # no agents configured: nothing vouches for the signer (a stranger can encrypt a metric to
    # the owner), whatever the manifest says, even with none at all
    for manifest in (manifest_for(mention()), None):
        result = _private(ME, agents=(), manifest=manifest)
        assert not result.ok and result.channel is not None
        assert result.channel.verdict == "wrong_author"
        assert "not one of your agents" in result.channel.detail
    # the owner-only gate admits no private message from a stranger
    stranger = STRANGER.public_key.hex
    result = _private(stranger)
    assert not result.ok and result.channel is not None
    assert (result.channel.verdict, result.channel.actor) == ("wrong_author", stranger)
    assert "the gate refuses it (author_not_owner)" in result.channel.detail
    anyone = BuzzConfig(gate=GateSection(mode="anyone"))
    assert _private(stranger, anyone).ok
    no_dms = BuzzConfig(subscriptions=SubscriptionsSection(kinds=(9,)))
    result = _private(ME, no_dms)
    assert not result.ok and result.channel is not None
    assert (
        result.channel.verdict == "not_admitted" and "kind_not_subscribed" in result.channel.detail
    )
    result = _private("not-a-key")
    assert not result.ok and result.channel is not None and result.channel.actor is None
    # a public channel's metric has no channel verdict
    assert audit(mention(), found(mention())).channel is None


def _with_layer(event: Event, name: str, version: str) -> Manifest:
    extra = Layer(
        3, name, "agent_owner", "x", version, "advisory_context", "session_start", 1, False
    )
    return manifest_from_layers([*manifest_for(event).layers, extra])


def test_standing_layers_trust_the_owner_agent_and_trusted_keys_core_memory_the_agent() -> None:
    trigger = mention()
    tags = [["h", "eng"], ["p", BOB.public_key.hex], ["t", "plan"]]  # as clients tag a text
    canvas = sign_event(ALICE, kind=CANVAS_KIND, content="#plan", tags=tags, created_at=1)
    memory = sign_event(
        OWNER, kind=CORE_MEMORY_KIND, content="x", tags=[["d", "core"]], created_at=1
    )
    lookups = {trigger.id: found(trigger), canvas.id: found(canvas), memory.id: found(memory)}

    def verdict(name: str, event: Event, config: BuzzConfig | None = None) -> str:
        metric = opened(_with_layer(trigger, name, event.id))
        result = audit_metric(metric, lookups, authority(config))
        return next(a.verdict for a in result.layers if a.layer == name)

    assert verdict("channel_canvas", canvas) == "wrong_author"
    trusting = BuzzConfig(gate=GateSection(trusted=(ALICE.public_key.hex,)))
    assert verdict("channel_canvas", canvas, trusting) == "verified"
    assert verdict("core_memory", memory) == "wrong_author"  # the owner's: not the agent's
    assert verdict("core_memory", trigger) == "wrong_kind"
    assert verdict("persona_and_team_guidance", canvas) == "no_rule"


def test_a_manifest_whose_hash_does_not_match_fails_and_no_manifest_passes() -> None:
    event = mention()
    good = manifest_for(event)
    tampered = msgspec.structs.replace(good, hash="sha256:" + "0" * 64)
    result = audit_metric(opened(tampered), {event.id: found(event)}, authority())
    assert result.manifest_valid is False and not result.ok
    bare = audit_metric(opened(None), {}, authority())
    assert bare.layers == () and bare.manifest_valid is None and bare.ok


def test_a_thread_checkpoint_verifies_only_as_the_agent_s_own_to_the_owner() -> None:
    from nostr_buzz.nips.nip_tc import ThreadCheckpoint, build_checkpoint_event

    trigger = mention()
    payload = ThreadCheckpoint(
        session_key="eng/" + trigger.id,
        covers_through=trigger.id,
        method="agent_compaction",
        summary="So far: the deploy.",
        timestamp="2026-12-02T09:00:00.000Z",
    )
    real = build_checkpoint_event(AGENT, OWNER.public_key, payload)
    forged = build_checkpoint_event(STRANGER, OWNER.public_key, payload)  # another key
    to_someone_else = build_checkpoint_event(AGENT, ALICE.public_key, payload)
    lookups = {e.id: found(e) for e in (trigger, real, forged, to_someone_else)}

    def judged(event: Event, lookup: Lookup | None = None) -> tuple[str, bool]:
        manifest = _with_layer(trigger, "thread_checkpoint", event.id)
        metric = opened(manifest)
        assert event.id in event_ids(metric)
        result = audit_metric(
            metric, {**lookups, **({event.id: lookup} if lookup else {})}, authority()
        )
        return next(a.verdict for a in result.layers if a.layer == "thread_checkpoint"), result.ok

    assert judged(real) == ("verified", True)
    # With the owner's key the audit opens it: a checkpoint of another channel fails.
    elsewhere = build_checkpoint_event(
        AGENT, OWNER.public_key, msgspec.structs.replace(payload, session_key="ops/" + trigger.id)
    )
    lookups[elsewhere.id] = found(elsewhere)
    opening = authority_for(BuzzConfig(), ME, AGENT.public_key.hex, owner_secret=OWNER)
    for event, want in ((real, "verified"), (elsewhere, "wrong_channel")):
        metric = opened(_with_layer(trigger, "thread_checkpoint", event.id))
        result = audit_metric(metric, lookups, opening)
        assert [a.verdict for a in result.layers if a.order == 3] == [want]
        assert result.ok is (want == "verified")
    assert judged(elsewhere) == ("verified", True)  # without the key: who signed, not what
    assert judged(forged) == ("wrong_author", False)
    assert judged(to_someone_else) == ("malformed", False)
    assert judged(trigger) == ("wrong_kind", False)
    assert judged(real, Lookup(event=None, answered=True)) == ("missing", False)
    assert judged(real, Lookup(None, True, forgers={"ws://x": ("bad_signature",)}))[0] == "forged"
