"""The context compiler (docs/envelope.md): goldens, hand-written envelopes, layers, manifests,
inputs; then the conformance cases written from the text alone; then properties (whatever the
text, the envelope keeps its shape)."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import json
import random
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nostr_buzz import BuzzError, ManifestError, TurnLedger
from nostr_buzz.core.compiler import (
    STEER_NOTE,
    compile_steer,
    compile_turn,
    slash_command,
    standing_text,
)
from nostr_buzz.core.labels import message_lines
from nostr_buzz.core.turn_input import (
    ChannelInfo,
    ContextMessage,
    ProfileInfo,
    Standing,
    TurnContext,
    TurnEvent,
    TurnInput,
)
from nostr_buzz.errors import InvalidEvent, TurnInputError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.manifest import Layer, Manifest, content_hash, manifest_from_layers
from nostr_buzz.text.escape import escape_attribute, escape_text
from tests.support import golden_gen
from tests.support.data import FIXTURES

TURNS = FIXTURES / "turns"
CASES = sorted(golden_gen.CASES)


def load_input(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((TURNS / f"{name}.input.json").read_bytes())
    return obj


def compile_case(name: str) -> Any:
    return compile_turn(TurnInput.from_json((TURNS / f"{name}.input.json").read_bytes()))


def compile_obj(obj: dict[str, Any]) -> Any:
    return compile_turn(TurnInput.from_json(json.dumps(obj)))


def layer(manifest: Manifest, name: str) -> Layer:
    (found,) = [x for x in manifest.layers if x.layer == name]
    return found


# ---------------------------------------------------------------------------------------------
# Goldens


def test_there_are_at_least_fourteen_goldens() -> None:
    assert len(CASES) >= 14
    for name in CASES:
        for suffix in ("input.json", "sections.txt", "manifest.json"):
            assert (TURNS / f"{name}.{suffix}").is_file(), f"{name}.{suffix}"


@pytest.mark.parametrize("name", CASES)
def test_golden(name: str) -> None:
    compiled = compile_case(name)
    expected_sections = golden_gen.parse_sections(
        (TURNS / f"{name}.sections.txt").read_bytes().decode()
    )
    assert compiled.sections == expected_sections
    expected_manifest = (TURNS / f"{name}.manifest.json").read_bytes().decode()
    assert compiled.manifest.to_json() + "\n" == expected_manifest
    assert Manifest.from_json(expected_manifest).hash == compiled.manifest.hash


@pytest.mark.parametrize("name", CASES)
def test_golden_inputs_are_reproducible(name: str) -> None:
    text = golden_gen.input_text(golden_gen.CASES[name]())
    assert text == (TURNS / f"{name}.input.json").read_bytes().decode()


def test_sections_file_format_round_trips() -> None:
    sections = ["a\n", "", "b\n\nc", "===== section 9 =====", "x\r\ny"]
    assert golden_gen.parse_sections(golden_gen.sections_text(sections)) == sections


# ---------------------------------------------------------------------------------------------
# Envelopes written out by hand from docs/envelope.md


def test_channel_top_level_mention_by_hand() -> None:
    obj = load_input("channel_top_level_mention")
    ev = obj["events"][0]["event"]
    morgan, buzz = golden_gen.pk(golden_gen.MORGAN), golden_gen.pk(golden_gen.BUZZ)
    expected = [
        "<buzz-turn>",
        "<ambient-context>\n"
        "Scope: channel\n"
        "History: not loaded; retrieve: buzz messages get --channel engineering-7f3a\n"
        "Channel: engineering\n"
        "Description: Build, deploy, on-call.\n"
        "</ambient-context>",
        f'<event type="mention" actor="{morgan}" author="Morgan" event_id="{ev["id"]}" '
        f'mentions="Buzz ({buzz})">\n'
        "Content: @Buzz can you check the deploy?\n"
        "</event>",
        f'<delivery channel_id="engineering-7f3a" scope="channel" reply_to="{ev["id"]}" />',
        "</buzz-turn>",
    ]
    compiled = compile_case("channel_top_level_mention")
    assert compiled.sections == expected
    by_name = {x.layer: x for x in compiled.manifest.layers}
    assert [x.layer for x in compiled.manifest.layers] == [
        "channel_snapshot",
        "context_status",
        "current_instruction",
        "delivery_contract",
    ]
    snapshot = "Channel: engineering\nDescription: Build, deploy, on-call."
    assert by_name["channel_snapshot"].version == content_hash(snapshot)
    assert by_name["channel_snapshot"].estimated_tokens == (len(snapshot) + 3) // 4
    status = "Scope: channel\nHistory: not loaded; retrieve: " + (
        "buzz messages get --channel engineering-7f3a"
    )
    assert by_name["context_status"].version == content_hash(status)
    assert by_name["current_instruction"].version == ev["id"]
    assert by_name["delivery_contract"].version == content_hash(expected[3])
    assert by_name["delivery_contract"].estimated_tokens == (len(expected[3]) + 3) // 4


def test_agent_to_agent_and_dm_by_hand() -> None:
    a2a = compile_case("agent_to_agent").sections
    assert a2a[-2] == '<delivery channel_id="engineering-7f3a" scope="thread" />'
    assert "parent=" not in a2a[2]  # a direct reply to the root has no parent attribute
    dm = load_input("dm_top_level")
    morgan, buzz = golden_gen.pk(golden_gen.MORGAN), golden_gen.pk(golden_gen.BUZZ)
    ev = dm["events"][0]["event"]
    assert compile_case("dm_top_level").sections == [
        "<buzz-turn>",
        "<ambient-context>\n"
        "Scope: dm\n"
        "Channel: Morgan\n"
        '<recent-thread-delta included="2" total="2" truncated="false">\n'
        "Morgan: Hi Buzz, got a minute?\n"
        "Buzz: Sure,\nwhat's up?\n"
        "</recent-thread-delta>\n"
        "</ambient-context>",
        f'<event type="dm" actor="{morgan}" author="Morgan" event_id="{ev["id"]}" '
        f'mentions="Buzz ({buzz})">\n'
        "Content: What did we decide yesterday?\n"
        "</event>",
        f'<delivery channel_id="dm-{morgan}" scope="dm" />',
        "</buzz-turn>",
    ]
    dm_thread = compile_case("dm_thread").sections
    ev = load_input("dm_thread")["events"][0]["event"]
    assert dm_thread[-2] == (
        f'<delivery channel_id="dm-{morgan}" scope="dm" reply_to="{ev["id"]}" />'
    )
    assert dm_thread[1] == (
        "<ambient-context>\nScope: dm\nHistory: not loaded; retrieve: buzz messages thread "
        f"--channel dm-{morgan} --event {ev['id']}\nChannel: Morgan\n</ambient-context>"
    )


def test_legacy_first_turn_by_hand() -> None:
    sections = compile_case("legacy_first_turn").sections
    assert sections[:6] == [
        "<base>\nYou are Buzz.\n  Follow the platform rules &amp; be kind.\n</base>",
        "<system>\n  Persona: terse &lt;senior&gt; engineer.\n</system>",
        "<team-instructions>\nTeam: page on-call for prod.\n</team-instructions>",
        "<core-memory>\n[Agent Memory — core]\nMorgan prefers summaries.\n</core-memory>",
        "<channel-canvas>\nRunbook: restart, then verify.\n</channel-canvas>",
        "<buzz-turn>",
    ]
    manifest = compile_case("legacy_first_turn").manifest
    standing = load_input("legacy_first_turn")["standing"]
    assert layer(manifest, "platform_contract").version == content_hash(standing["base"])
    assert layer(manifest, "persona_and_team_guidance").version == content_hash(
        "Persona: terse <senior> engineer.\n\nTeam: page on-call for prod."
    )
    assert layer(manifest, "core_memory").version == content_hash(sections[3])
    assert layer(manifest, "channel_canvas").version == content_hash(sections[4])


WORKSPACE_TEXT = (
    "<workspace>\nYour working directory is /srv/buzz &amp; &lt;co&gt;/work. Keep the files you "
    "create and the repositories you clone there.\n</workspace>"
)


def test_legacy_workspace_is_the_first_standing_section_and_its_layer_hashes_it() -> None:
    compiled = compile_case("legacy_first_turn_with_workspace")
    assert compiled.sections[:3] == [
        WORKSPACE_TEXT,
        "<base>\nYou are Buzz.\n</base>",
        "<buzz-turn>",
    ]
    layers = json.loads(compiled.manifest.to_json())["layers"]
    assert layers[0] == lay(
        1,
        "workspace",
        "session",
        "agent_workspace",
        "instructions",
        "session_start",
        WORKSPACE_TEXT,
    )
    assert layers[1]["layer"] == "platform_contract"


def test_the_system_role_text_holds_the_exact_workspace_bytes_the_layer_hashes() -> None:
    obj = load_input("system_role_with_workspace")
    turn_input = TurnInput.from_json(json.dumps(obj))
    text = standing_text(turn_input.standing)
    workspace, base, system = text.split("\n\n")
    assert workspace == (
        "<workspace>\nYour working directory is /srv/buzz. Keep the files you create and the "
        "repositories you clone there.\n</workspace>"
    )
    assert (base, system) == ("<base>\nYou are Buzz.\n</base>", "<system>\nBe brief.\n</system>")
    compiled = compile_turn(turn_input)
    assert not any("<workspace>" in section for section in compiled.sections)
    assert layer(compiled.manifest, "workspace").version == content_hash(workspace)
    # the session's first turn (standing not yet sent) records the very same layer
    first = compile_turn(msgspec.structs.replace(turn_input, standing_context_sent=False))
    assert layer(first.manifest, "workspace") == layer(compiled.manifest, "workspace")


def test_legacy_later_turns_keep_the_workspace_layer_without_the_section() -> None:
    obj = load_input("legacy_first_turn_with_workspace")
    first = compile_turn(TurnInput.from_json(json.dumps(obj)))
    later = compile_turn(TurnInput.from_json(json.dumps({**obj, "standingContextSent": True})))
    assert later.sections[0] == "<buzz-turn>"
    assert layer(later.manifest, "workspace") == layer(first.manifest, "workspace")
    assert layer(first.manifest, "workspace").version == content_hash(first.sections[0])


@pytest.mark.parametrize("cwd", ["/", "relative/dir", "", "~/work"])
def test_a_workspace_the_agent_is_not_told_has_no_section_and_no_layer(cwd: str) -> None:
    ev = sign(MORGAN, "hi", [["h", CH]])
    bare = {"events": [item(ev)], "standing": {"base": "B"}}
    sections, manifest = run({**bare, "standing": {"base": "B", "workspace": cwd}})
    assert (sections, manifest) == run(bare)
    assert '"workspace"' not in manifest
    assert standing_text(Standing(workspace=cwd)) == ""


def test_a_slash_command_still_leads_a_legacy_first_turn_with_a_workspace() -> None:
    ev = sign(MORGAN, "/compact", [["h", CH]])
    sections, _ = run({"events": [item(ev)], "standing": {"workspace": "/w"}})
    assert sections[0] == "/compact"
    assert sections[1].startswith("<workspace>\n") and sections[2] == "<buzz-turn>"


def test_a_steer_records_no_workspace() -> None:
    steer = compile_steer(sign(MORGAN, "more", [["h", CH]]), channel_id=CH)
    assert all(x.layer != "workspace" for x in steer.manifest.layers)


def test_a_workspace_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(TurnInputError, match="standing section"):
        TurnInput(
            events=(TurnEvent(sign(MORGAN, "hi", [["h", CH]])),),
            standing=Standing(workspace="/w\ud800"),
        )


def test_interrupted_turns_by_hand() -> None:
    obj = load_input("interrupted_interrupt")
    cancelled = obj["cancelledEvents"][0]["event"]
    for name, disposition, merge in (
        ("interrupted_interrupt", "superseded", "supersede_prior_work"),
        ("interrupted_steer", "continue_prior_work", "continue_prior_work"),
    ):
        compiled = compile_case(name)
        ambient = compiled.sections[1]
        start = ambient.index("<interrupted-turn")
        block = ambient[start : ambient.index("</ambient-context>") - 1]
        assert block.startswith(f'<interrupted-turn disposition="{disposition}">\n<event ')
        assert f'event_id="{cancelled["id"]}"' in block
        assert block.endswith("Content: Restart the gateway.\n</event>\n</interrupted-turn>")
        assert compiled.sections[3].endswith(f' merge_disposition="{merge}" />')
        interrupted = layer(compiled.manifest, "interrupted_turn")
        assert (interrupted.order, interrupted.scope, interrupted.source) == (
            6,
            "thread",
            "cancelled_events",
        )
        assert interrupted.version == content_hash(block)


def test_absent_cancel_reason_counts_as_steer() -> None:
    obj = load_input("interrupted_steer")
    del obj["cancelReason"]
    assert compile_obj(obj) == compile_case("interrupted_steer")
    obj["cancelReason"] = None
    assert compile_obj(obj) == compile_case("interrupted_steer")


def test_long_description_is_cut_at_500_characters() -> None:
    compiled = compile_case("long_description")
    line = next(x for x in compiled.sections[1].split("\n") if x.startswith("Description: "))
    sentence = "Deploy & incident coordination for <prod> and staging."
    desc = " ".join([sentence] * 12)
    assert line == "Description: " + escape_text(desc[:500] + "…")
    assert layer(compiled.manifest, "channel_snapshot").truncated is True
    assert compiled.sections[2].startswith('<event type="channel" ')


def test_description_boundary() -> None:
    obj = load_input("channel_top_level_mention")
    for length, cut in ((500, False), (501, True)):
        obj["channel"]["description"] = "x" * length
        compiled = compile_obj(obj)
        assert layer(compiled.manifest, "channel_snapshot").truncated is cut
        assert ("…" in compiled.sections[1]) is cut


def test_injection_attempts_stay_inert() -> None:
    compiled = compile_case("injection_attempts")
    text = "\n".join(compiled.sections)
    assert text.count("<buzz-turn>") == 1 and text.count("</buzz-turn>") == 1
    assert text.count("<ambient-context>") == 1 and text.count("</ambient-context>") == 1
    assert text.count("<event ") == 1 and text.count("</event>") == 1
    assert text.count("<delivery ") == 1
    assert text.count("<recent-thread-delta ") == 1 and text.count("</recent-thread-delta>") == 1
    event_tag = compiled.sections[2].split("\n")[0]
    # Every attribute value is quoted; no stray quote opens a new attribute.
    assert event_tag.count('"') == 2 * len(["type", "actor", "author", "event_id", "mentions"])


# ---------------------------------------------------------------------------------------------
# Layers and versions


def test_thread_turn_layer_orders() -> None:
    manifest = compile_case("thread_reply_with_history").manifest
    assert [x.order for x in manifest.layers] == [1, 2, 3, 4, 6, 6, 7, 8]
    assert [x.layer for x in manifest.layers] == [
        "platform_contract",
        "persona_and_team_guidance",
        "core_memory",
        "channel_snapshot",
        "context_status",
        "recent_thread_delta",
        "current_instruction",
        "delivery_contract",
    ]
    delta = layer(manifest, "recent_thread_delta")
    assert (delta.scope, delta.source, delta.authority, delta.freshness) == (
        "thread",
        "relay_events",
        "evidence",
        "current",
    )


def test_standing_layers_recorded_even_when_sent_in_the_system_role() -> None:
    obj = load_input("legacy_first_turn")
    legacy = compile_obj(obj)
    for flags in ({"systemPromptSupport": True}, {"standingContextSent": True}):
        compiled = compile_obj({**obj, **flags})
        assert compiled.manifest == legacy.manifest
        assert compiled.sections == legacy.sections[5:]


def test_an_unconfirmed_read_marks_the_layers_read_from_relays_and_only_those() -> None:
    obj = load_input("legacy_first_turn")
    confirmed = compile_obj(obj)
    standing = {**obj["standing"], "huddleInstructions": "Keep it short."}
    guided = compile_obj({**obj, "standing": standing})
    unconfirmed = compile_obj({**obj, "standing": {**standing, "unconfirmed": True}})
    freshness = {lay.layer: lay.freshness for lay in unconfirmed.manifest.layers}
    assert freshness["core_memory"] == freshness["channel_canvas"] == "unconfirmed"
    assert freshness["persona_and_team_guidance"] == "unconfirmed"  # the huddle guidelines
    assert freshness["platform_contract"] == "configured"
    assert unconfirmed.sections == guided.sections  # the agent is told the same
    before = {lay.layer: lay.freshness for lay in confirmed.manifest.layers}
    assert before["core_memory"] == before["channel_canvas"] == "session_start"
    # Without huddle guidelines the configured persona layer is not from relays.
    alone = compile_obj({**obj, "standing": {**obj["standing"], "unconfirmed": True}})
    kept = {lay.layer: lay.freshness for lay in alone.manifest.layers}
    assert kept["persona_and_team_guidance"] == "configured"


def test_current_instruction_version() -> None:
    single = compile_case("thread_reply_with_history")
    ev = load_input("thread_reply_with_history")["events"][0]["event"]
    assert layer(single.manifest, "current_instruction").version == ev["id"]
    batch = compile_case("batch_of_three")
    instruction = batch.sections[2]
    assert instruction.count("<event ") == 3
    assert layer(batch.manifest, "current_instruction").version == content_hash(instruction)
    assert layer(batch.manifest, "current_instruction").version.startswith("sha256:")


def test_same_text_different_ids_same_sections_different_manifest() -> None:
    obj = load_input("thread_reply_with_history")
    other = json.loads(json.dumps(obj))
    for message in other["context"]["messages"]:
        message["eventId"] = hashlib.sha256(message["eventId"].encode()).hexdigest()
    a, b = compile_obj(obj), compile_obj(other)
    assert a.sections == b.sections
    assert a.manifest.hash != b.manifest.hash
    changed = [x.layer for x, y in zip(a.manifest.layers, b.manifest.layers, strict=True) if x != y]
    assert changed == ["recent_thread_delta"]


def test_retrieval_status_alone_changes_the_hash() -> None:
    obj = load_input("thread_already_delivered")
    not_loaded = compile_obj({**obj, "contextHadDeliveredEvents": False})
    delivered = compile_obj(obj)
    assert not_loaded.sections[2:] == delivered.sections[2:]
    assert not_loaded.manifest.hash != delivered.manifest.hash
    changed = [
        x.layer
        for x, y in zip(not_loaded.manifest.layers, delivered.manifest.layers, strict=True)
        if x != y
    ]
    assert changed == ["context_status"]


def test_interrupted_turn_evidence_alone_changes_the_hash() -> None:
    obj = load_input("interrupted_steer")
    other = json.loads(json.dumps(obj))
    old = Event.from_dict(obj["cancelledEvents"][0]["event"])
    replacement = sign_event(
        golden_gen.MORGAN,
        kind=old.kind,
        content="Restart the gateway twice.",
        tags=old.tags,
        created_at=old.created_at,
        aux_rand=b"\x07" * 32,
    )
    other["cancelledEvents"][0]["event"] = replacement.to_dict()
    a, b = compile_obj(obj), compile_obj(other)
    assert a.sections[2:] == b.sections[2:]
    assert a.manifest.hash != b.manifest.hash
    changed = [x.layer for x, y in zip(a.manifest.layers, b.manifest.layers, strict=True) if x != y]
    assert changed == ["interrupted_turn"]


def test_delta_version_vector() -> None:
    key = SecretKey.from_str("33" * 32)
    event = sign_event(
        key, kind=9, content="?", tags=[["h", "c"]], created_at=1, aux_rand=bytes(32)
    )
    ti = TurnInput(
        events=(TurnEvent(event),),
        context=TurnContext(
            kind="thread",
            messages=(
                ContextMessage(
                    event_id="a",
                    pubkey="Morgan",
                    timestamp="2026-08-21T12:00:00Z",
                    content="The deploy is failing.",
                ),
            ),
        ),
    )
    delta = layer(compile_turn(ti).manifest, "recent_thread_delta")
    assert delta.version == (
        "sha256:5728d85e83fadfe02290936f2dfdb2273e88589e32b3139c32309002057391b0"
    )


def test_manifest_reference_vector() -> None:
    manifest = manifest_from_layers(
        [
            Layer(
                7,
                "current_instruction",
                "turn",
                "nostr_event",
                "event-1",
                "authoritative",
                "current",
                1,
                False,
            )
        ]
    )
    assert manifest.hash == (
        "sha256:e6c77d04da70df30c632174621fcb8f23102c1b6df7fe14f02092d6466e6c115"
    )


def test_context_message_defaults_and_empty_delta() -> None:
    obj = load_input("channel_top_level_mention")
    obj["context"] = {"kind": "thread", "messages": [], "total": 3}
    compiled = compile_obj(obj)
    assert (
        '<recent-thread-delta included="0" total="3" truncated="false">\n</recent-thread-delta>'
        in compiled.sections[1]
    )
    assert compiled.sections[1].startswith("<ambient-context>\nScope: channel\nChannel:")
    obj["context"] = {
        "kind": "dm",
        "messages": [{"pubkey": "P", "content": "c", "eventId": None, "timestamp": None}],
    }
    delta = layer(compile_obj(obj).manifest, "recent_thread_delta")
    payload = '{"messages":[["","P","unknown","c"]],"scope":"dm","total":1,"truncated":false}'
    assert delta.version == content_hash(payload)
    assert delta.scope == "dm"


def test_blank_standing_sections_are_omitted() -> None:
    obj = load_input("channel_top_level_mention")
    obj["standing"] = {
        "base": " \n\t",
        "system": "\r\n",
        "teamInstructions": "\u2003",
        "coreMemory": "\u3000",
        "huddleInstructions": "",
        "channelCanvas": "\u0085",
    }
    compiled = compile_obj(obj)
    assert compiled == compile_case("channel_top_level_mention")


def test_prerendered_core_memory_is_used_unescaped() -> None:
    obj = load_input("channel_top_level_mention")
    obj["standing"] = {"coreMemory": "  <core-memory>\nA & B\n</core-memory>\n"}
    compiled = compile_obj(obj)
    assert compiled.sections[0] == "<core-memory>\nA & B\n</core-memory>"
    core = layer(compiled.manifest, "core_memory")
    assert core.version == content_hash("<core-memory>\nA & B\n</core-memory>")


def test_u001c_is_not_whitespace() -> None:
    obj = load_input("channel_top_level_mention")
    obj["standing"] = {"teamInstructions": "\u001cteam\u001f"}
    assert compile_obj(obj).sections[0] == (
        "<team-instructions>\n\u001cteam\u001f\n</team-instructions>"
    )


# ---------------------------------------------------------------------------------------------
# Steering (docs/bot.md)


def test_steer_wrapper_and_manifest() -> None:
    obj = load_input("channel_top_level_mention")
    event = Event.from_dict(obj["events"][0]["event"])
    steer = compile_steer(event, channel_id="engineering-7f3a")
    morgan = golden_gen.pk(golden_gen.MORGAN)
    buzz = golden_gen.pk(golden_gen.BUZZ)
    note = (
        "A new message arrived while you were working. Keep going with your current work and "
        "take the new message into account if it is relevant; if it is not, acknowledge it "
        "briefly and carry on."
    )
    assert note == STEER_NOTE
    assert steer.text == (
        '<buzz-turn-update mode="steer">\n'
        "<buzz-turn>\n"
        "<ambient-context>\n"
        "Scope: channel\n"
        "History: not loaded; retrieve: buzz messages get --channel engineering-7f3a\n"
        "</ambient-context>\n"
        # no profiles: no author label and bare mentions
        f'<event type="mention" actor="{morgan}" event_id="{event.id}" mentions="{buzz}">\n'
        "Content: @Buzz can you check the deploy?\n"
        "</event>\n"
        f'<delivery channel_id="engineering-7f3a" scope="channel" reply_to="{event.id}" />\n'
        "</buzz-turn>\n"
        f"<continuation-guidance>{note}</continuation-guidance>\n"
        "</buzz-turn-update>"
    )
    wrapper = (
        f'<buzz-turn-update mode="steer">\n<continuation-guidance>{note}'
        "</continuation-guidance>\n</buzz-turn-update>"
    )
    assert [x.layer for x in steer.manifest.layers] == [
        "context_status",
        "current_instruction",
        "delivery_contract",
        "steer_delivery_contract",
    ]
    last = steer.manifest.layers[-1]
    assert last == Layer(
        8,
        "steer_delivery_contract",
        "turn",
        "native_steer_framing",
        content_hash(wrapper),
        "routing_constraint",
        "current",
        (len(wrapper) + 3) // 4,
        False,
    )
    assert steer.manifest.hash_matches()


def test_steer_never_yields_a_slash_command_and_keeps_dm_scope() -> None:
    key = SecretKey.from_str("44" * 32)
    event = sign_event(key, kind=1, content="/stop now", created_at=5, aux_rand=bytes(32))
    steer = compile_steer(event, channel_id=f"dm-{key.public_key.hex}", channel_type="dm")
    assert steer.text.startswith('<buzz-turn-update mode="steer">\n<buzz-turn>\n')
    assert "Content: /stop now" in steer.text
    assert 'scope="dm" />\n</buzz-turn>' in steer.text
    assert "Channel:" not in steer.text


# ---------------------------------------------------------------------------------------------
# Slash commands

LABELS = ["Buzz Bot", "Morgan"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("/help", "/help"),
        ("  /help me  \n", "/help me  \n"),
        ("@buzz /deploy x", "/deploy x"),
        ("@BUZZ BOT /deploy", "/deploy"),
        ("@Buzz Bot/deploy", None),  # the label needs whitespace after it; "@Buzz" then " Bot/…"
        ("@ops-team.v2_x/run", "/run"),  # a handle needs nothing after it
        ("@morgan @buzz bot\u00a0/x", "/x"),
        ("nostr:npub1abc /go", "/go"),
        ("nostr:nprofile1abc\t@x /go", "/go"),
        ("nostr:note1abc /go", None),
        ("@ /help", None),  # a lone @ stops the scan
        ("@", None),
        ("@é /help", None),
        ("/", None),
        ("/ help", None),
        ("/-x", None),
        ("/é", None),
        ("/9lives", "/9lives"),
        ("hi /help", None),
        ("\u001c/help", None),  # U+001C is not whitespace
        ("\u3000/help", "/help"),
    ],
)
def test_slash_command_scan(content: str, expected: str | None) -> None:
    assert slash_command(content, LABELS) == expected


def test_slash_command_only_for_one_event_without_cancellations() -> None:
    assert compile_case("slash_command").sections[0] == "/deploy staging --force \n"
    obj = load_input("batch_of_three")
    key = golden_gen.MORGAN
    events = [
        sign_event(key, kind=9, content="/a", tags=[["h", "c"]], created_at=i, aux_rand=bytes(32))
        for i in (1, 2)
    ]
    obj["events"] = [{"event": e.to_dict()} for e in events]
    assert compile_obj(obj).sections[0] == "<buzz-turn>"
    obj["events"] = obj["events"][1:]
    assert compile_obj(obj).sections[0] == "/a"
    obj["cancelledEvents"] = [{"event": events[0].to_dict()}]
    assert compile_obj(obj).sections[0] == "<buzz-turn>"


def test_slash_labels_are_sanitized_profile_labels() -> None:
    obj = load_input("slash_command")
    obj["events"][0]["event"] = sign_event(
        golden_gen.MORGAN,
        kind=9,
        content="@the  team /x",
        tags=[["h", "c"]],
        created_at=9,
        aux_rand=bytes(32),
    ).to_dict()
    obj["profiles"] = {"ab": {"label": "\u0007 The  Team\n"}}
    assert compile_obj(obj).sections[0] == "/x"
    obj["profiles"] = {}
    assert compile_obj(obj).sections[0] == "<buzz-turn>"


# ---------------------------------------------------------------------------------------------
# Escaping


@pytest.mark.parametrize(
    ("raw", "text", "attribute"),
    [
        ("a&b", "a&amp;b", "a&amp;b"),
        ("&lt;", "&amp;lt;", "&amp;lt;"),
        ("<x>", "&lt;x&gt;", "&lt;x&gt;"),
        ('"it\'s"', '"it\'s"', "&quot;it&apos;s&quot;"),
        ("a\nb\rc\td", "a\nb\rc\td", "a b c d"),
        # every line break leaves an attribute value on its line (a deliberate difference)
        ("\u2028é\u2029\x85\x0b", "\u2028é\u2029\x85\x0b", " é   "),
    ],
)
def test_escapes(raw: str, text: str, attribute: str) -> None:
    assert escape_text(raw) == text
    assert escape_attribute(raw) == attribute


# ---------------------------------------------------------------------------------------------
# Turn-input files


def good() -> dict[str, Any]:
    return load_input("interrupted_interrupt")


def broken_sig(event: dict[str, Any]) -> dict[str, Any]:
    sig = event["sig"]
    return {**event, "sig": ("0" if sig[0] != "0" else "1") + sig[1:]}


def test_python_constructor_path_matches_file_path() -> None:
    obj = load_input("thread_reply_with_history")
    ti = TurnInput(
        events=(TurnEvent(Event.from_dict(obj["events"][0]["event"]), "@mention"),),
        channel=ChannelInfo(name="engineering", description="Build, deploy, on-call."),
        context=TurnContext(
            kind="thread",
            messages=tuple(
                ContextMessage(m["pubkey"], m["content"], m["eventId"], m["timestamp"])
                for m in obj["context"]["messages"]
            ),
        ),
        profiles={k: ProfileInfo(v["label"], v["isAgent"]) for k, v in obj["profiles"].items()},
        standing=Standing(
            base=obj["standing"]["base"],
            persona=obj["standing"]["system"],
            core_memory=obj["standing"]["coreMemory"],
        ),
        system_prompt_support=True,
    )
    assert compile_turn(ti) == compile_case("thread_reply_with_history")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o.update(events=[]),
        lambda o: o.update(events=None),
        lambda o: o.pop("events"),
        lambda o: o.update(cancelReason="stop"),
        lambda o: o["channel"].update(id=""),
        lambda o: o["channel"].update(id="bad id"),
        lambda o: o["channel"].update(id="x" * 129),
        lambda o: o["channel"].update(id="ok\n"),
        lambda o: o["channel"].update(name=None),
        lambda o: o["context"].update(kind="channel"),
        lambda o: o["context"].update(kind=None),
        lambda o: o["context"].update(messages=None),
        lambda o: o["context"].update(total=-1),
        lambda o: o["context"].update(total=1.5),
        lambda o: o["context"].update(truncated="yes"),
        lambda o: o["context"]["messages"][0].update(pubkey=None),
        lambda o: o["context"]["messages"][0].pop("content"),
        lambda o: o["events"][0].update(event=None),
        lambda o: o["events"][0]["event"].update(id=o["events"][0]["event"]["id"].upper()),
        lambda o: o["events"][0]["event"].update(kind=70000),
        lambda o: o["events"][0]["event"].update(tags=[[]]),
        lambda o: o["cancelledEvents"][0]["event"].update(sig="ab"),
        lambda o: o.update(profiles={"k": None}),
        lambda o: o.update(profiles={"k": {"isAgent": 1}}),
        lambda o: o.update(standing={"base": 5}),
        lambda o: o.update(systemPromptSupport="true"),
    ],
)
def test_shape_errors(mutate: Any) -> None:
    obj = good()
    mutate(obj)
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))


def test_no_channel_anywhere_is_invalid() -> None:
    obj = load_input("dm_top_level")
    del obj["channel"]
    with pytest.raises(TurnInputError, match="channel"):
        TurnInput.from_json(json.dumps(obj))
    obj = load_input("channel_top_level_mention")
    del obj["channel"]  # the h tag of the newest event gives the channel
    assert 'channel_id="engineering-7f3a"' in compile_obj(obj).sections[-2]


def test_nulls_count_as_absent_for_optional_members() -> None:
    obj = load_input("channel_top_level_mention")
    baseline = compile_obj(obj)
    nulls = {
        **obj,
        "cancelledEvents": None,
        "cancelReason": None,
        "context": None,
        "contextHadDeliveredEvents": None,
        "standing": None,
        "systemPromptSupport": None,
        "standingContextSent": None,
        "channel": {**obj["channel"], "id": None, "type": None},
    }
    nulls["events"] = [{**obj["events"][0], "promptTag": None}]
    assert compile_obj(nulls) == baseline


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"[]",
        b"{}",
        b"\xef\xbb\xbf" + (TURNS / "channel_top_level_mention.input.json").read_bytes(),
        b'{"events": NaN}',
        b'{"ignored": Infinity, "events": []}',
        b"\xff",
    ],
)
def test_invalid_files(text: bytes) -> None:
    with pytest.raises(TurnInputError):
        TurnInput.from_json(text)


def test_lone_surrogates_anywhere_are_invalid() -> None:
    raw = (TURNS / "channel_top_level_mention.input.json").read_text(encoding="utf-8")
    for inject in ('{"ignored": "\\ud800",', '{"\\udc00": 1,'):
        with pytest.raises(TurnInputError):
            TurnInput.from_json(raw.replace("{", inject, 1))
    obj = load_input("channel_top_level_mention")
    obj["channel"]["name"] = "\ud800"
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj, ensure_ascii=False))  # a str that is not UTF-8


def test_bad_signature_is_invalid_event_only_for_otherwise_valid_files() -> None:
    obj = good()
    obj["events"][0]["event"] = broken_sig(obj["events"][0]["event"])
    with pytest.raises(InvalidEvent) as info:
        TurnInput.from_json(json.dumps(obj))
    assert info.value.reason == "bad_signature"
    obj["cancelReason"] = "nope"  # a shape problem anywhere wins over the signature check
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))
    obj = good()
    obj["cancelledEvents"][0]["event"]["content"] += "!"
    with pytest.raises(InvalidEvent) as info:
        TurnInput.from_json(json.dumps(obj))
    assert info.value.reason == "bad_id"
    obj["channel"]["id"] = "bad id"
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))


def test_bad_pubkey_reason() -> None:
    obj = good()
    event = dict(obj["events"][0]["event"])
    # x = 5 is not on secp256k1 (5^3 + 7 = 132 is not a square mod p); recompute the id so
    # only the public key is wrong.
    from nostr_buzz.event import compute_id

    event["pubkey"] = "00" * 31 + "05"
    event["id"] = compute_id(
        event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]
    )
    obj["events"][0]["event"] = event
    with pytest.raises(InvalidEvent) as info:
        TurnInput.from_json(json.dumps(obj))
    assert info.value.reason == "bad_pubkey"


def test_str_and_bytes_inputs_agree_and_unknown_keys_are_ignored() -> None:
    raw = (TURNS / "slash_command.input.json").read_bytes()
    obj = json.loads(raw)
    obj["somethingNew"] = {"deep": [1, 2, {"x": None}]}
    obj["events"][0]["extra"] = True
    assert compile_turn(TurnInput.from_json(raw.decode())) == compile_turn(
        TurnInput.from_json(json.dumps(obj).encode())
    )


def test_reply_to_rules() -> None:
    obj = load_input("agent_to_agent")
    scout = golden_gen.pk(golden_gen.SCOUT)
    # a human mentioned by an agent makes the turn human-facing
    obj["profiles"][golden_gen.pk(golden_gen.BUZZ)]["isAgent"] = False
    root = golden_gen.ROOT.id
    assert compile_obj(obj).sections[-2].endswith(f'reply_to="{root}" />')
    # an unknown author is a human
    obj = load_input("agent_to_agent")
    del obj["profiles"][scout]
    assert compile_obj(obj).sections[-2].endswith(f'reply_to="{root}" />')


def test_compiled_turn_is_msgspec_struct() -> None:
    compiled = compile_case("batch_of_three")
    decoded = msgspec.json.decode(msgspec.json.encode(compiled))
    assert decoded["sections"] == compiled.sections
    assert Manifest.from_obj(decoded["manifest"]) == compiled.manifest


def test_fixture_files_have_no_carriage_return_translation(tmp_path: Path) -> None:
    # Golden files are read as bytes: \r inside a section must survive.
    sections = ["a\rb", "c"]
    path = tmp_path / "x.sections.txt"
    path.write_bytes(golden_gen.sections_text(sections).encode())
    assert golden_gen.parse_sections(path.read_bytes().decode()) == sections


def test_bom_in_str_and_deep_nesting_are_turn_input_errors() -> None:
    raw = (TURNS / "channel_top_level_mention.input.json").read_text(encoding="utf-8")
    with pytest.raises(TurnInputError, match="byte-order mark"):
        TurnInput.from_json("\ufeff" + raw)
    deep = '{"ignored": ' + "[" * 100_000 + "]" * 100_000 + "," + raw[1:]
    with pytest.raises(TurnInputError):
        TurnInput.from_json(deep)


def test_standing_is_decoded_straight_into_its_model() -> None:
    from nostr_buzz.core.turn_input import Standing, TurnInput

    obj = load_input("channel_top_level_mention")
    obj["standing"] = {"teamInstructions": "team", "channelCanvas": "canvas"}
    parsed = TurnInput.from_json(json.dumps(obj).encode())
    assert parsed.standing == Standing(team_instructions="team", channel_canvas="canvas")


def test_the_layer_table_of_docs_envelope_md_is_the_compilers() -> None:
    from nostr_buzz.core.compiler import LAYER_TABLE

    doc = (FIXTURES.parent / "docs" / "envelope.md").read_text(encoding="utf-8")
    row = re.compile(r"^\| (\d) \| `(\w+)` \| `(\w+)` \| `(\w+)` \| `(\w+)` \|$", re.M)
    documented = {name: (int(o), *rest) for o, name, *rest in row.findall(doc)}
    assert documented == {
        name: (k.order, k.source, k.authority, k.freshness) for name, k in LAYER_TABLE.items()
    }


def test_every_manifest_layer_comes_from_the_layer_table() -> None:
    from nostr_buzz.core.compiler import LAYER_TABLE

    compiled = compile_obj(load_input("channel_top_level_mention"))
    assert compiled.manifest.layers
    for layer in compiled.manifest.layers:
        kind = LAYER_TABLE[layer.layer]
        assert (layer.order, layer.source, layer.authority, layer.freshness) == (
            kind.order,
            kind.source,
            kind.authority,
            kind.freshness,
        )


# =================================================================================================
# Conformance: cases written from the text of docs/envelope.md (and the steer wrapper of
# docs/bot.md), with expected values built by hand.
# =================================================================================================


# ---------------------------------------------------------------------------------------------
# An independent model of the manifest (docs/envelope.md "Layers and the manifest")


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def tokens(text: str) -> int:
    return (len(text) + 3) // 4


def lay(
    order: int,
    name: str,
    scope: str,
    source: str,
    authority: str,
    freshness: str,
    content: str,
    *,
    version: str | None = None,
    truncated: bool = False,
) -> dict[str, Any]:
    # dict insertion order is the canonical key order of docs/envelope.md
    return {
        "order": order,
        "layer": name,
        "scope": scope,
        "source": source,
        "version": sha(content) if version is None else version,
        "authority": authority,
        "freshness": freshness,
        "estimatedTokens": tokens(content),
        "truncated": truncated,
    }


def manifest_json(layers: list[dict[str, Any]]) -> str:
    canonical = json.dumps(layers, separators=(",", ":"), ensure_ascii=False)
    digest = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return json.dumps(
        {"schemaVersion": 1, "hash": digest, "layers": layers},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def delta_version(messages: list[list[str]], kind: str, total: int, truncated: bool) -> str:
    payload = {"messages": messages, "scope": kind, "total": total, "truncated": truncated}
    return sha(json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def status_layer(text: str) -> dict[str, Any]:
    return lay(6, "context_status", "turn", "delivery_state", "evidence", "current", text)


def snapshot_layer(text: str, truncated: bool = False) -> dict[str, Any]:
    return lay(
        4,
        "channel_snapshot",
        "channel",
        "channel_metadata",
        "shared_evidence",
        "cached",
        text,
        truncated=truncated,
    )


def instruction_layer(text: str, version: str | None) -> dict[str, Any]:
    return lay(
        7,
        "current_instruction",
        "turn",
        "nostr_event",
        "authoritative",
        "current",
        text,
        version=version,
    )


def delivery_layer(text: str) -> dict[str, Any]:
    return lay(
        8, "delivery_contract", "turn", "buzz_routing", "routing_constraint", "current", text
    )


def delta_layer(text: str, kind: str, version: str, truncated: bool) -> dict[str, Any]:
    return lay(
        6,
        "recent_thread_delta",
        kind,
        "relay_events",
        "evidence",
        "current",
        text,
        version=version,
        truncated=truncated,
    )


# ---------------------------------------------------------------------------------------------
# Deterministic signers and events


def key(name: str) -> SecretKey:
    return SecretKey.from_str(hashlib.sha256(f"conformance {name}".encode()).hexdigest())


MORGAN = key("morgan")  # human, labelled
RILEY = key("riley")  # human, no profile
BUZZ = key("buzz")  # agent
SCOUT = key("scout")  # agent
ROOT_ID = "a" * 64
PARENT_ID = "b" * 64
UNKNOWN = "c" * 64  # a pubkey nobody has a profile for
CH = "eng-1"


def pk(k: SecretKey) -> str:
    return k.public_key.hex


def sign(k: SecretKey, content: str, tags: list[list[str]], t: int = 1_787_313_600) -> Event:
    aux = hashlib.sha256(f"{t} {content}".encode()).digest()
    return sign_event(k, kind=9, content=content, tags=tags, created_at=t, aux_rand=aux)


def item(ev: Event, tag: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"event": ev.to_dict()}
    if tag is not None:
        out["promptTag"] = tag
    return out


def run(obj: dict[str, Any]) -> tuple[list[str], str]:
    compiled = compile_turn(TurnInput.from_json(json.dumps(obj, ensure_ascii=False)))
    return list(compiled.sections), compiled.manifest.to_json()


# ---------------------------------------------------------------------------------------------
# Hand-derived turns


def test_thread_reply_parent_differs_from_root_with_mentions() -> None:
    ev = sign(
        RILEY,
        "Can you <check> this & that?\nThanks",
        [
            ["h", CH],
            ["e", ROOT_ID, "", "root"],
            ["e", PARENT_ID, "", "reply"],
            ["p", pk(MORGAN).upper()],  # looked up lowercased, rendered as written
            ["p", UNKNOWN, "wss://relay.example"],
            ["p"],  # fewer than two elements: not a mention
        ],
    )
    obj = {
        "events": [item(ev, "@@mention")],
        "channel": {"name": "engineering", "description": None},
        "context": {
            "kind": "thread",
            "total": 5,
            "truncated": True,
            "messages": [
                {"eventId": ROOT_ID, "pubkey": pk(MORGAN), "content": "deploy <broke>"},
                {"pubkey": UNKNOWN, "timestamp": "2026-08-21T12:00:00+00:00", "content": "a\nb"},
            ],
        },
        "profiles": {
            pk(MORGAN).upper(): {"label": "  Mor\x07gan  "},
            pk(BUZZ): {"label": "Buzz", "isAgent": True},
        },
    }
    sections, manifest = run(obj)
    status = (
        "Scope: thread\n"
        f"History: truncated; retrieve: buzz messages thread --channel {CH} --event {ev.id}"
    )
    snapshot = "Channel: engineering"
    delta = (
        '<recent-thread-delta included="2" total="5" truncated="true">\n'
        "Morgan: deploy &lt;broke&gt;\n"
        f"{UNKNOWN}: a\nb\n"
        "</recent-thread-delta>"
    )
    block = (
        f'<event type="mention" actor="{pk(RILEY)}" event_id="{ev.id}" parent="{PARENT_ID}" '
        f'thread_root="{ROOT_ID}" mentions="Morgan ({pk(MORGAN).upper()}), {UNKNOWN}">\n'
        "Content: Can you &lt;check&gt; this &amp; that?\nThanks\n"
        "</event>"
    )
    delivery = f'<delivery channel_id="{CH}" scope="thread" reply_to="{ROOT_ID}" />'
    assert sections == [
        "<buzz-turn>",
        f"<ambient-context>\n{status}\n{snapshot}\n{delta}\n</ambient-context>",
        block,
        delivery,
        "</buzz-turn>",
    ]
    version = delta_version(
        [
            [ROOT_ID, pk(MORGAN), "unknown", "deploy <broke>"],
            ["", UNKNOWN, "2026-08-21T12:00:00+00:00", "a\nb"],
        ],
        "thread",
        5,
        True,
    )
    assert manifest == manifest_json(
        [
            snapshot_layer(snapshot),
            status_layer(status),
            delta_layer(delta, "thread", version, True),
            instruction_layer(block, ev.id),
            delivery_layer(delivery),
        ]
    )


def test_dm_whose_newest_event_has_a_thread_root() -> None:
    first = sign(RILEY, "hello", [], t=100)
    second = sign(RILEY, "are you there?", [["e", first.id, "", "root"]], t=101)
    dm = f"dm-{pk(RILEY)}"
    obj = {
        "events": [item(first), item(second, "@dm")],
        "channel": {"id": dm, "name": " Riley\r\n", "type": "dm", "description": "not shown"},
        "context": {
            "kind": "dm",
            "messages": [{"eventId": "x", "pubkey": pk(BUZZ), "content": "earlier & later"}],
        },
        "profiles": {pk(BUZZ): {"label": "Buzz", "isAgent": True}},
    }
    sections, manifest = run(obj)
    status = "Scope: dm"  # context present and not truncated: no History line
    snapshot = "Channel: Riley"  # a DM never renders its description
    delta = (
        '<recent-thread-delta included="1" total="1" truncated="false">\n'
        "Buzz: earlier &amp; later\n"
        "</recent-thread-delta>"
    )
    # a direct reply to the root: parent equals root, so no parent attribute
    blocks = (
        f'<event type="mention" actor="{pk(RILEY)}" event_id="{first.id}">\n'
        "Content: hello\n</event>\n"
        f'<event type="dm" actor="{pk(RILEY)}" event_id="{second.id}" thread_root="{first.id}">\n'
        "Content: are you there?\n</event>"
    )
    delivery = f'<delivery channel_id="{dm}" scope="dm" reply_to="{second.id}" />'
    assert sections == [
        "<buzz-turn>",
        f"<ambient-context>\n{status}\n{snapshot}\n{delta}\n</ambient-context>",
        blocks,
        delivery,
        "</buzz-turn>",
    ]
    version = delta_version([["x", pk(BUZZ), "unknown", "earlier & later"]], "dm", 1, False)
    assert manifest == manifest_json(
        [
            snapshot_layer(snapshot),
            status_layer(status),
            delta_layer(delta, "dm", version, False),
            instruction_layer(blocks, None),  # two events: content hash
            delivery_layer(delivery),
        ]
    )


def test_dm_top_level_has_no_reply_to_and_thread_scope_is_not_used() -> None:
    ev = sign(RILEY, "hi", [["h", CH]])
    obj = {"events": [item(ev)], "channel": {"id": "dm-x", "name": "", "type": "dm"}}
    sections, _ = run(obj)
    assert sections[1] == (
        "<ambient-context>\nScope: dm\n"
        "History: not loaded; retrieve: buzz messages get --channel dm-x\n</ambient-context>"
    )
    assert sections[3] == '<delivery channel_id="dm-x" scope="dm" />'


@pytest.mark.parametrize(
    ("mentions", "reply_to"),
    [
        ([pk(BUZZ), pk(MORGAN)], True),  # one human mention makes it human-facing
        ([pk(BUZZ).upper()], False),  # all mentions agents (lookup lowercased)
        ([], False),  # agent author, no mentions
        ([pk(BUZZ), UNKNOWN], True),  # unknown profiles are humans
    ],
)
def test_agent_to_agent_reply_to(mentions: list[str], reply_to: bool) -> None:
    ev = sign(SCOUT, "status?", [["h", CH], *(["p", m] for m in mentions)])
    obj = {
        "events": [item(ev)],
        "profiles": {
            pk(SCOUT): {"label": "Scout", "isAgent": True},
            pk(BUZZ): {"label": "Buzz", "isAgent": True},
            pk(MORGAN): {"label": "Morgan", "isAgent": None},  # null: default false
        },
    }
    sections, manifest = run(obj)
    status = f"Scope: channel\nHistory: not loaded; retrieve: buzz messages get --channel {CH}"
    labels = {pk(BUZZ): "Buzz", pk(BUZZ).upper(): "Buzz", pk(MORGAN): "Morgan"}
    rendered = ", ".join(f"{labels[m]} ({m})" if m in labels else m for m in mentions)
    attr = f' mentions="{rendered}"' if mentions else ""
    block = (
        f'<event type="mention" actor="{pk(SCOUT)}" author="Scout" event_id="{ev.id}"{attr}>\n'
        "Content: status?\n</event>"
    )
    reply = f' reply_to="{ev.id}"' if reply_to else ""
    delivery = f'<delivery channel_id="{CH}" scope="channel"{reply} />'
    assert sections == [
        "<buzz-turn>",
        f"<ambient-context>\n{status}\n</ambient-context>",
        block,
        delivery,
        "</buzz-turn>",
    ]
    assert manifest == manifest_json(
        [status_layer(status), instruction_layer(block, ev.id), delivery_layer(delivery)]
    )


def test_human_author_mentioning_only_agents_is_human_facing() -> None:
    ev = sign(MORGAN, "hi", [["h", CH], ["e", ROOT_ID, "", "root"], ["p", pk(BUZZ)]])
    obj = {"events": [item(ev)], "profiles": {pk(BUZZ): {"isAgent": True}}}
    sections, _ = run(obj)
    assert sections[-2] == f'<delivery channel_id="{CH}" scope="thread" reply_to="{ROOT_ID}" />'


@pytest.mark.parametrize("reason", [None, "absent", "steer", "interrupt"])
def test_batch_of_two_with_cancelled_events(reason: str | None) -> None:
    a = sign(MORGAN, "/deploy now", [["h", CH]], t=10)
    b = sign(RILEY, "also this", [["h", CH], ["p", pk(MORGAN)]], t=11)
    c = sign(MORGAN, "old request", [["h", CH], ["e", ROOT_ID, "", "root"]], t=5)
    obj: dict[str, Any] = {
        "events": [item(a), item(b, "@@")],
        "cancelledEvents": [item(c, "reply")],
        "contextHadDeliveredEvents": True,
        "profiles": {pk(MORGAN): {"label": "Morgan"}},
    }
    if reason != "absent":
        obj["cancelReason"] = reason
    sections, manifest = run(obj)
    interrupt = reason == "interrupt"
    status = (
        f"Scope: channel\nHistory: already delivered; retrieve: buzz messages get --channel {CH}"
    )
    interrupted = (
        f'<interrupted-turn disposition="{"superseded" if interrupt else "continue_prior_work"}">\n'
        f'<event type="reply" actor="{pk(MORGAN)}" author="Morgan" event_id="{c.id}" '
        f'thread_root="{ROOT_ID}">\nContent: old request\n</event>\n'
        "</interrupted-turn>"
    )
    blocks = (
        f'<event type="mention" actor="{pk(MORGAN)}" author="Morgan" event_id="{a.id}">\n'
        "Content: /deploy now\n</event>\n"
        f'<event type="" actor="{pk(RILEY)}" event_id="{b.id}" mentions="Morgan ({pk(MORGAN)})">\n'
        "Content: also this\n</event>"
    )
    merge = "supersede_prior_work" if interrupt else "continue_prior_work"
    delivery = (
        f'<delivery channel_id="{CH}" scope="channel" reply_to="{b.id}" '
        f'merge_disposition="{merge}" />'
    )
    # no slash-command block: the batch has two events
    assert sections == [
        "<buzz-turn>",
        f"<ambient-context>\n{status}\n{interrupted}\n</ambient-context>",
        blocks,
        delivery,
        "</buzz-turn>",
    ]
    assert manifest == manifest_json(
        [
            status_layer(status),
            lay(
                6,
                "interrupted_turn",
                "thread",
                "cancelled_events",
                "evidence",
                "current",
                interrupted,
            ),
            instruction_layer(blocks, None),
            delivery_layer(delivery),
        ]
    )


@pytest.mark.parametrize(
    ("total", "truncated", "shown_total"), [(None, None, 0), (3, False, 3), (0, True, 0)]
)
def test_context_with_zero_messages(
    total: int | None, truncated: bool | None, shown_total: int
) -> None:
    ev = sign(MORGAN, "", [["h", CH]])
    obj = {
        "events": [item(ev)],
        "channel": {"id": None, "name": "\n \r"},  # blank name: no snapshot
        "context": {"kind": "thread", "messages": [], "total": total, "truncated": truncated},
    }
    sections, manifest = run(obj)
    cut = bool(truncated)
    status = "Scope: channel"
    if cut:
        status += f"\nHistory: truncated; retrieve: buzz messages get --channel {CH}"
    delta = (
        f'<recent-thread-delta included="0" total="{shown_total}" '
        f'truncated="{"true" if cut else "false"}">\n</recent-thread-delta>'
    )
    block = f'<event type="mention" actor="{pk(MORGAN)}" event_id="{ev.id}">\nContent: \n</event>'
    delivery = f'<delivery channel_id="{CH}" scope="channel" reply_to="{ev.id}" />'
    assert sections == [
        "<buzz-turn>",
        f"<ambient-context>\n{status}\n{delta}\n</ambient-context>",
        block,
        delivery,
        "</buzz-turn>",
    ]
    assert manifest == manifest_json(
        [
            status_layer(status),
            delta_layer(delta, "thread", delta_version([], "thread", shown_total, cut), cut),
            instruction_layer(block, ev.id),
            delivery_layer(delivery),
        ]
    )


BASE = "\n\r\n  Base & rules\n  \u3000\n"
SYSTEM = "\r\nBe <kind>\r\n  "
CORE = "\u2003 <core-memory>\nfacts & <stuff>\n</core-memory>\n\t"


@pytest.mark.parametrize(
    ("support", "sent", "legacy"),
    [(False, False, True), (None, None, True), (True, False, False), (False, True, False)],
)
def test_standing_sections_whitespace_and_prerendered_core_memory(
    support: bool | None, sent: bool | None, legacy: bool
) -> None:
    ev = sign(MORGAN, "go", [["h", CH]])
    obj = {
        "events": [item(ev)],
        "standing": {
            "base": BASE,
            "system": SYSTEM,
            "teamInstructions": " \u00a0\u2028 ",  # blank: omitted
            "coreMemory": CORE,
            "huddleInstructions": "\x1c",  # U+001C is not White_Space: kept
            "channelCanvas": "\n\t\u0085\n",  # blank: omitted
        },
        "systemPromptSupport": support,
        "standingContextSent": sent,
    }
    sections, manifest = run(obj)
    standing = [
        "<base>\n  Base &amp; rules\n</base>",
        "<system>\nBe &lt;kind&gt;\r\n  \n</system>",
        "<core-memory>\nfacts & <stuff>\n</core-memory>",  # already rendered: unescaped
        "<huddle-instructions>\n\x1c\n</huddle-instructions>",
    ]
    status = f"Scope: channel\nHistory: not loaded; retrieve: buzz messages get --channel {CH}"
    block = f'<event type="mention" actor="{pk(MORGAN)}" event_id="{ev.id}">\nContent: go\n</event>'
    delivery = f'<delivery channel_id="{CH}" scope="channel" reply_to="{ev.id}" />'
    turn = [
        "<buzz-turn>",
        f"<ambient-context>\n{status}\n</ambient-context>",
        block,
        delivery,
        "</buzz-turn>",
    ]
    assert sections == (standing if legacy else []) + turn
    # standing layers are recorded whatever the delivery path
    assert manifest == manifest_json(
        [
            lay(
                1, "platform_contract", "runtime", "base_prompt", "instructions", "configured", BASE
            ),
            lay(
                2,
                "persona_and_team_guidance",
                "agent_community",
                "agent_configuration",
                "instructions",
                "configured",
                "Be <kind>\n\n\x1c",
            ),
            lay(
                3,
                "core_memory",
                "agent_owner",
                "core_engram",
                "advisory_context",
                "session_start",
                "<core-memory>\nfacts & <stuff>\n</core-memory>",
            ),
            status_layer(status),
            instruction_layer(block, ev.id),
            delivery_layer(delivery),
        ]
    )


def test_raw_canvas_is_rendered_and_hashed_as_a_section() -> None:
    ev = sign(MORGAN, "go", [["h", CH]])
    obj = {
        "events": [item(ev)],
        "channel": {"name": "eng"},
        "standing": {"channelCanvas": "  [Channel Canvas]\nplan <a>  ", "base": " \t "},
    }
    sections, manifest = run(obj)
    canvas = "<channel-canvas>\n[Channel Canvas]\nplan &lt;a&gt;\n</channel-canvas>"
    assert sections[0] == canvas
    layers = json.loads(manifest)["layers"]
    assert [x["layer"] for x in layers] == [
        "channel_snapshot",
        "channel_canvas",
        "context_status",
        "current_instruction",
        "delivery_contract",
    ]
    assert layers[1] == lay(
        4, "channel_canvas", "channel", "channel_canvas", "shared_evidence", "session_start", canvas
    )


def _snapshot_of(name: str, description: str | None, type_: str | None = None) -> list[Any]:
    ev = sign(MORGAN, "x", [["h", CH]])
    obj = {"events": [item(ev)], "channel": {"name": name, "description": description}}
    if type_ is not None:
        obj["channel"]["type"] = type_  # type: ignore[index]
    _, manifest = run(obj)
    sections, _ = run(obj)
    return [sections[1], json.loads(manifest)["layers"]]


def test_channel_description_pieces_and_exactly_500_characters() -> None:
    desc = "a" * 250 + "\r\n \r\n" + "b" * 249 + "\n"
    ambient, layers = _snapshot_of("  Eng\r\nTeam \n", desc)
    snapshot = "Channel: Eng  Team\nDescription: " + "a" * 250 + " " + "b" * 249
    assert ambient.endswith(f"\n{snapshot}\n</ambient-context>")
    assert layers[0] == snapshot_layer(snapshot, truncated=False)


def test_channel_description_of_501_characters_is_cut_before_escaping() -> None:
    desc = "x" * 498 + " \r " + "&" + "yz"  # pieces: 498 x, "&yz" → 502 characters joined
    ambient, layers = _snapshot_of("Eng", desc)
    snapshot = "Channel: Eng\nDescription: " + "x" * 498 + " &amp;\u2026"
    assert ambient.endswith(f"\n{snapshot}\n</ambient-context>")
    assert layers[0] == snapshot_layer(snapshot, truncated=True)


def test_channel_description_of_501_characters_exactly() -> None:
    ambient, layers = _snapshot_of("", "d" * 501)
    snapshot = "Description: " + "d" * 500 + "\u2026"
    assert ambient.endswith(f"\n{snapshot}\n</ambient-context>")
    assert layers[0] == snapshot_layer(snapshot, truncated=True)


def test_dm_channel_with_long_description_is_not_truncated() -> None:
    ambient, layers = _snapshot_of("", "d" * 900, "dm")
    assert "Description" not in ambient
    assert layers[0]["layer"] == "context_status"  # nothing left: no snapshot


def test_blank_description_pieces_leave_only_the_name() -> None:
    ambient, layers = _snapshot_of("Eng", " \r\n\u3000\n")
    assert ambient.endswith("\nChannel: Eng\n</ambient-context>")
    assert layers[0] == snapshot_layer("Channel: Eng")


# ---------------------------------------------------------------------------------------------
# Slash commands

SLASH_LABELS = {
    "1" * 64: "Mo",
    "2" * 64: "\tMo Bot\x07 ",  # sanitized "Mo Bot": longer, tried first
    "3" * 64: "Morgan Lee",
    "4" * 64: "Zoë",
}


@pytest.mark.parametrize(
    ("content", "block"),
    [
        ("/deploy now  ", "/deploy now  "),
        ("\u00a0\n/start", "/start"),
        ("nostr:npub1abc @Morgan Lee /deploy now \n", "/deploy now \n"),
        ("nostr:nprofile1xyz\u3000/ok", "/ok"),
        ("nostr:nprofile1xyz/deploy", None),  # the token runs to whitespace
        ("@mo bot /x", "/x"),  # longest label first
        ("@MO /x y", "/x y"),
        ("@MORGAN LEE/deploy", None),  # label must be followed by whitespace or the end
        ("@Morgan Lee: /deploy", None),
        ("@morgan-lee.x/deploy", "/deploy"),  # handle run, nothing needs to follow it
        ("@.a/deploy", "/deploy"),
        ("@! /deploy", None),  # "@" then punctuation: the scan stops
        ("@ /deploy", None),
        ("@", None),
        ("@zoë /x", "/x"),
        ("@ZOË /x", None),  # ASCII case-insensitive only: "ZO" then "Ë /x"
        ("@a @b\t@c /9lives", "/9lives"),
        ("/é", None),
        ("/\u00b2", None),
        ("/", None),
        ("/ x", None),
        ("hello /x", None),
        ("@a\x1c/x", None),  # U+001C is not whitespace
        ("@Mo", None),
        ("npub1abc /x", None),
        ("nostr:note1abc /x", None),
    ],
)
def test_slash_command_block_in_the_compiled_turn(content: str, block: str | None) -> None:
    ev = sign(MORGAN, content, [["h", CH]])
    profiles = {k: {"label": v} for k, v in SLASH_LABELS.items()}
    sections, manifest = run({"events": [item(ev)], "profiles": profiles})
    rest = sections[1:] if block is not None else sections
    if block is not None:
        assert sections[0] == block
    assert rest[0] == "<buzz-turn>"
    assert len(rest) == 5
    assert [x["layer"] for x in json.loads(manifest)["layers"]] == [
        "context_status",
        "current_instruction",
        "delivery_contract",
    ]


# ---------------------------------------------------------------------------------------------
# The steer wrapper (docs/bot.md, "Steering")

NOTE = (
    "A new message arrived while you were working. Keep going with your current work and take "
    "the new message into account if it is relevant; if it is not, acknowledge it briefly and "
    "carry on."
)


def test_steer_wrapper_text_and_manifest() -> None:
    ev = sign(MORGAN, "/stop & <wait>", [["h", "other"], ["e", ROOT_ID, "", "root"]])
    steer = compile_steer(ev, channel_id=CH, channel_type="dm")
    status = (
        "Scope: dm\n"
        f"History: not loaded; retrieve: buzz messages thread --channel {CH} --event {ev.id}"
    )
    block = (
        f'<event type="mention" actor="{pk(MORGAN)}" event_id="{ev.id}" thread_root="{ROOT_ID}">\n'
        "Content: /stop &amp; &lt;wait&gt;\n</event>"
    )
    delivery = f'<delivery channel_id="{CH}" scope="dm" reply_to="{ev.id}" />'
    guidance = f"<continuation-guidance>{NOTE}</continuation-guidance>"
    assert steer.text == "\n".join(
        [
            '<buzz-turn-update mode="steer">',
            "<buzz-turn>",
            f"<ambient-context>\n{status}\n</ambient-context>",
            block,
            delivery,
            "</buzz-turn>",
            guidance,
            "</buzz-turn-update>",
        ]
    )
    wrapper = f'<buzz-turn-update mode="steer">\n{guidance}\n</buzz-turn-update>'
    assert steer.manifest.to_json() == manifest_json(
        [
            status_layer(status),
            instruction_layer(block, ev.id),
            delivery_layer(delivery),
            lay(
                8,
                "steer_delivery_contract",
                "turn",
                "native_steer_framing",
                "routing_constraint",
                "current",
                wrapper,
            ),
        ]
    )


# ---------------------------------------------------------------------------------------------
# The turn-input reader


def base_obj() -> dict[str, Any]:
    return {"events": [item(sign(MORGAN, "hi", [["h", CH]]))]}


def test_null_counts_as_absent_for_every_optional_member() -> None:
    ev = sign(MORGAN, "hi", [["h", CH]])
    plain = run(
        {
            "events": [item(ev)],
            "channel": {"name": "n"},
            "context": {"kind": "thread", "messages": [{"pubkey": "p", "content": "c"}]},
            "profiles": {pk(MORGAN): {}},
            "standing": {},
        }
    )
    nulls = run(
        {
            "events": [{"event": ev.to_dict(), "promptTag": None}],
            "cancelledEvents": None,
            "cancelReason": None,
            "channel": {"name": "n", "id": None, "type": None, "description": None},
            "context": {
                "kind": "thread",
                "total": None,
                "truncated": None,
                "messages": [{"pubkey": "p", "content": "c", "eventId": None, "timestamp": None}],
            },
            "contextHadDeliveredEvents": None,
            "profiles": {pk(MORGAN): {"label": None, "isAgent": None}},
            "standing": {
                "base": None,
                "system": None,
                "teamInstructions": None,
                "coreMemory": None,
                "huddleInstructions": None,
                "channelCanvas": None,
            },
            "systemPromptSupport": None,
            "standingContextSent": None,
            "unknownMember": {"anything": [1, 2.5, None]},
        }
    )
    assert nulls == plain
    assert run({"events": [item(ev)], "profiles": None, "standing": None}) == run(
        {"events": [item(ev)]}
    )


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o.update(events=None),
        lambda o: o["events"][0].update(event=None),
        lambda o: o["events"][0].pop("event"),
        lambda o: o.update(channel={"name": None}),
        lambda o: o.update(channel={"id": CH}),
        lambda o: o.update(context={"kind": None, "messages": []}),
        lambda o: o.update(context={"messages": []}),
        lambda o: o.update(context={"kind": "thread", "messages": None}),
        lambda o: o.update(context={"kind": "thread"}),
        lambda o: o.update(context={"kind": "channel", "messages": []}),
        lambda o: o.update(
            context={"kind": "thread", "messages": [{"pubkey": None, "content": ""}]}
        ),
        lambda o: o.update(context={"kind": "thread", "messages": [{"pubkey": "p"}]}),
        lambda o: o.update(context={"kind": "thread", "messages": [], "total": -1}),
        lambda o: o.update(context={"kind": "thread", "messages": [], "total": 1.0}),
        lambda o: o.update(context={"kind": "thread", "messages": [], "total": True}),
        lambda o: o.update(context={"kind": "thread", "messages": [], "truncated": 1}),
        lambda o: o.update(
            context={
                "kind": "thread",
                "messages": [{"pubkey": "p", "content": "c", "timestamp": 5}],
            }
        ),
        lambda o: o.update(profiles={"k": None}),
        lambda o: o.update(profiles={"k": {"isAgent": "yes"}}),
        lambda o: o.update(profiles=[]),
        lambda o: o.update(standing={"base": 1}),
        lambda o: o.update(systemPromptSupport="true"),
        lambda o: o.update(contextHadDeliveredEvents=0),
        lambda o: o["events"][0].update(promptTag=1),
        lambda o: o.update(events=[]),
        lambda o: o.update(cancelledEvents=[None]),
    ],
)
def test_wrong_shapes_raise_turn_input_error(mutate: Any) -> None:
    obj = base_obj()
    mutate(obj)
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))


@pytest.mark.parametrize(
    ("reason", "ok"),
    [
        ("interrupt", True),
        ("steer", True),
        ("Interrupt", False),
        ("", False),
        ("cancel", False),
        (1, False),
        ([], False),
    ],
)
def test_cancel_reason_values(reason: Any, ok: bool) -> None:
    obj = base_obj()
    obj["cancelReason"] = reason
    if ok:
        assert TurnInput.from_json(json.dumps(obj)).cancel_reason == reason
    else:
        with pytest.raises(TurnInputError):
            TurnInput.from_json(json.dumps(obj))


def pairs(*members: tuple[str, str]) -> str:
    """A JSON object written member by member (repeated keys allowed), values already JSON."""
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in members) + "}"


def _author_label(profiles_json: str) -> str:
    ev = sign(MORGAN, "hi", [["h", CH]])
    text = pairs(("events", json.dumps([item(ev)])), ("profiles", profiles_json))
    block = compile_turn(TurnInput.from_json(text)).sections[2]
    return block.split('author="')[1].split('"')[0]


def test_profile_keys_are_lowercased_and_the_later_key_wins() -> None:
    low, up = pk(MORGAN), pk(MORGAN).upper()
    first, second = '{"label": "First"}', '{"label": "Second"}'
    assert _author_label(pairs((up, first), (low, second))) == "Second"
    assert _author_label(pairs((low, first), (up, second))) == "Second"
    mixed = low[:10].upper() + low[10:]
    assert _author_label(pairs((mixed, first), (up, second))) == "Second"


def test_profile_collision_later_key_wins_even_when_a_key_repeats() -> None:
    # The later key *in the file* wins: a repeated exact key does not keep its first position.
    low, up = pk(MORGAN), pk(MORGAN).upper()
    text = pairs((low, '{"label": "X"}'), (up, '{"label": "Y"}'), (low, '{"label": "Z"}'))
    assert _author_label(text) == "Z"


def test_collision_with_is_agent_is_taken_from_the_later_key() -> None:
    ev = sign(SCOUT, "hi", [["h", CH]])
    low, up = pk(SCOUT), pk(SCOUT).upper()
    profiles = pairs((low, '{"isAgent": true}'), (up, "{}"))
    text = pairs(("events", json.dumps([item(ev)])), ("profiles", profiles))
    sections = compile_turn(TurnInput.from_json(text)).sections
    assert f'reply_to="{ev.id}"' in sections[-2]  # the later entry says "not an agent"


@pytest.mark.parametrize(
    "channel",
    [
        {"id": "", "name": "n"},
        {"id": "bad id", "name": "n"},
        {"id": "abc\n", "name": "n"},
        {"id": "x" * 129, "name": "n"},
        {"id": "é", "name": "n"},
        {"id": 5, "name": "n"},
    ],
)
def test_invalid_channel_id_never_falls_back(channel: dict[str, Any]) -> None:
    obj = base_obj()  # the event carries a valid h tag
    obj["channel"] = channel
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))


@pytest.mark.parametrize(
    "tags",
    [[], [["h", "dm-abc"]], [["h", "bad id"], ["h", CH]], [["h"], ["h", ""]]],
)
def test_no_valid_channel_id(tags: list[list[str]]) -> None:
    obj = {"events": [item(sign(MORGAN, "hi", tags))]}
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))
    obj["channel"] = {"name": "n"}
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))


def test_channel_id_comes_from_the_newest_event_and_explicit_ids_may_be_dm() -> None:
    older = sign(MORGAN, "a", [["h", "older"]], t=1)
    newer = sign(MORGAN, "b", [["h"], ["h", "newer"]], t=2)
    ti = TurnInput.from_json(json.dumps({"events": [item(older), item(newer)]}))
    assert 'channel_id="newer"' in compile_turn(ti).sections[-2]
    obj = {"events": [item(older)], "channel": {"id": "x" * 128, "name": ""}}
    assert (
        f'channel_id="{"x" * 128}"'
        in compile_turn(TurnInput.from_json(json.dumps(obj))).sections[-2]
    )
    obj = {"events": [item(older)], "channel": {"id": "dm-Z_9", "name": ""}}
    assert 'channel_id="dm-Z_9"' in compile_turn(TurnInput.from_json(json.dumps(obj))).sections[-2]


def _valid_text() -> str:
    return json.dumps(base_obj())


@pytest.mark.parametrize(
    "insert",
    [
        '"x": NaN',
        '"x": Infinity',
        '"x": -Infinity',
        '"x": [1, {"y": NaN}]',
        '"x": "\\ud800"',
        '"x": "\\udc00 tail"',
        '"\\ud800": 1',
        '"x": {"\\udfff": null}',
        '"profiles": {"\\ud800": {}}',
        '"channel": {"name": "a\\ud83d"}',
    ],
)
def test_nan_infinity_and_lone_surrogates_anywhere(insert: str) -> None:
    text = _valid_text()
    bad = "{" + insert + ", " + text[1:]
    with pytest.raises(TurnInputError):
        TurnInput.from_json(bad)
    with pytest.raises(TurnInputError):
        TurnInput.from_json(bad.encode())


def test_surrogate_pair_escapes_are_fine_and_raw_lone_surrogates_are_not() -> None:
    text = _valid_text()
    assert TurnInput.from_json('{"x": "\\ud83d\\ude00", ' + text[1:])
    with pytest.raises(TurnInputError):
        TurnInput.from_json('{"x": "\ud800", ' + text[1:])


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbf" + _valid_text().encode(),
        _valid_text().encode()[:-1] + b', "x": "\xff"}',
        b"",
        b"[]",
        b"null",
        b"{}",
        b'{"events": 5}',
        b"{" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        _valid_text().encode() + b"x",
    ],
)
def test_unreadable_files_raise_turn_input_error(data: bytes) -> None:
    with pytest.raises(TurnInputError):
        TurnInput.from_json(data)


@pytest.mark.parametrize("value", [None, 5, 1.5, ["{}"], {"events": []}])
def test_non_text_inputs_raise_turn_input_error(value: Any) -> None:
    with pytest.raises(TurnInputError):
        TurnInput.from_json(value)


def _not_on_curve() -> str:
    p = 2**256 - 2**32 - 977
    x = 1
    while pow((x**3 + 7) % p, (p - 1) // 2, p) == 1:
        x += 1
    return f"{x:064x}"


def _nip01_id(d: dict[str, Any]) -> str:
    data = [0, d["pubkey"], d["created_at"], d["kind"], d["tags"], d["content"]]
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def forged(kind: str) -> dict[str, Any]:
    d = sign(RILEY, "forged", [["h", CH]]).to_dict()
    if kind == "bad_id":
        d["content"] = "changed"
    elif kind == "bad_pubkey":
        d["pubkey"] = _not_on_curve()
        d["id"] = _nip01_id(d)
    elif kind == "bad_signature":
        d["sig"] = ("0" if d["sig"][0] != "0" else "1") + d["sig"][1:]
    return d


@pytest.mark.parametrize("reason", ["bad_id", "bad_pubkey", "bad_signature"])
@pytest.mark.parametrize("where", ["events", "cancelledEvents"])
def test_forged_events_raise_invalid_event_with_reason(reason: str, where: str) -> None:
    obj = base_obj()
    obj.setdefault(where, []).append({"event": forged(reason)})
    with pytest.raises(InvalidEvent) as info:
        TurnInput.from_json(json.dumps(obj))
    assert info.value.reason == reason
    assert not isinstance(info.value, TurnInputError)


@pytest.mark.parametrize(
    "shape_error",
    [
        lambda o: o.update(cancelReason="nope"),
        lambda o: o.update(channel={"id": "", "name": "n"}),
        lambda o: o.update(context={"kind": "thread", "messages": [], "total": -1}),
        lambda o: o.update(profiles={"k": {"label": 1}}),
        lambda o: o.update(standing={"base": "\ud800"}),
        lambda o: o["events"].append({"event": {**o["events"][0]["event"], "id": "A" * 64}}),
        lambda o: o["events"].append({"event": {**o["events"][0]["event"], "kind": 70000}}),
        lambda o: o.update(cancelledEvents=[{"event": {"id": "x"}}]),
        lambda o: o.update(cancelledEvents=[{"event": {**o["events"][0]["event"], "tags": [[]]}}]),
        lambda o: o.update(x=float("nan")),
    ],
)
@pytest.mark.parametrize("reason", ["bad_id", "bad_pubkey", "bad_signature"])
def test_shape_errors_win_over_forged_events(shape_error: Any, reason: str) -> None:
    obj = {"events": [{"event": forged(reason)}]}
    shape_error(obj)
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps(obj))


def test_a_forged_newest_event_without_a_channel_is_a_shape_error() -> None:
    d = forged("bad_signature")
    d["tags"] = []
    d["id"] = _nip01_id(d)
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps({"events": [{"event": d}]}))


def test_malformed_events_are_turn_input_errors_not_invalid_event() -> None:
    d = sign(MORGAN, "hi", [["h", CH]]).to_dict()
    d["id"] = d["id"].upper()
    with pytest.raises(TurnInputError):
        TurnInput.from_json(json.dumps({"events": [{"event": d}]}))


def test_errors_are_buzz_errors_and_value_errors() -> None:
    for cls in (TurnInputError, InvalidEvent, ManifestError):
        assert issubclass(cls, BuzzError)
        assert issubclass(cls, ValueError)


def test_timestamps_are_hashed_exactly_as_given() -> None:
    ev = sign(MORGAN, "hi", [["h", CH]])

    def version(ts: str) -> str:
        obj = {
            "events": [item(ev)],
            "context": {
                "kind": "thread",
                "messages": [{"pubkey": "p", "content": "c", "timestamp": ts}],
            },
        }
        layers = json.loads(run(obj)[1])["layers"]
        return next(x["version"] for x in layers if x["layer"] == "recent_thread_delta")

    a = version("2026-08-21T12:00:00+00:00")
    assert a == delta_version([["", "p", "2026-08-21T12:00:00+00:00", "c"]], "thread", 1, False)
    assert a != version("2026-08-21T12:00:00Z")


def test_public_signatures() -> None:
    assert list(inspect.signature(compile_turn).parameters) == ["turn_input"]
    assert list(inspect.signature(manifest_from_layers).parameters) == ["layers"]
    assert list(inspect.signature(Manifest.from_json).parameters) == ["text"]
    assert [f for f in Layer.__struct_fields__] == [
        "order",
        "layer",
        "scope",
        "source",
        "version",
        "authority",
        "freshness",
        "estimated_tokens",
        "truncated",
    ]


def test_compile_turn_accepts_its_argument_by_keyword() -> None:
    ti = TurnInput.from_json(_valid_text())
    assert compile_turn(turn_input=ti) == compile_turn(ti)


REF_LAYER = {
    "order": 7,
    "layer": "current_instruction",
    "scope": "turn",
    "source": "nostr_event",
    "version": "event-1",
    "authority": "authoritative",
    "freshness": "current",
    "estimatedTokens": 1,
    "truncated": False,
}


REF_HASH = "sha256:e6c77d04da70df30c632174621fcb8f23102c1b6df7fe14f02092d6466e6c115"


def test_reference_vectors() -> None:
    m = manifest_from_layers(
        [
            Layer(
                7,
                "current_instruction",
                "turn",
                "nostr_event",
                "event-1",
                "authoritative",
                "current",
                1,
                False,
            )
        ]
    )
    assert m.hash == REF_HASH
    layer_json = json.dumps(REF_LAYER, separators=(",", ":"))
    assert m.to_json() == f'{{"schemaVersion":1,"hash":"{REF_HASH}","layers":[{layer_json}]}}'
    assert (
        delta_version(
            [["a", "Morgan", "2026-08-21T12:00:00Z", "The deploy is failing."]], "thread", 1, False
        )
        == "sha256:5728d85e83fadfe02290936f2dfdb2273e88589e32b3139c32309002057391b0"
    )


def _manifest_text(change: dict[str, Any]) -> str:
    # A changed layer array gets its own (correct) hash: only the type error can reject it.
    layers = change.get("layers", [REF_LAYER])
    obj = json.loads(manifest_json(layers if isinstance(layers, list) else []))
    obj.update(change)
    return json.dumps(obj, ensure_ascii=False)


def test_manifest_from_json_ignores_extra_keys_and_keeps_non_ascii_raw() -> None:
    layer = {**REF_LAYER, "version": "ü", "extra": [1]}
    canonical = {k: v for k, v in layer.items() if k != "extra"}
    text = json.loads(manifest_json([canonical]))
    text["layers"] = [layer]
    text["more"] = True
    m = Manifest.from_json(json.dumps(text))
    assert m.hash_matches()
    assert m.to_json() == manifest_json([canonical])
    assert "ü" in m.to_json()


@pytest.mark.parametrize(
    "change",
    [
        {"schemaVersion": 2},
        {"schemaVersion": True},
        {"schemaVersion": 1.0},
        {"hash": "sha256:" + "0" * 64},
        {"hash": None},
        {"layers": None},
        {"layers": [{**REF_LAYER, "order": "7"}]},
        {"layers": [{**REF_LAYER, "order": 7.0}]},
        {"layers": [{**REF_LAYER, "estimatedTokens": 1.0}]},
        {"layers": [{**REF_LAYER, "truncated": 0}]},
        {"layers": [{k: v for k, v in REF_LAYER.items() if k != "freshness"}]},
        {"layers": [{**REF_LAYER, "version": None}]},
    ],
)
def test_manifest_from_json_rejects(change: dict[str, Any]) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_json(_manifest_text(change))


@pytest.mark.parametrize(
    "data", ["", "[]", "{", '{"schemaVersion":1}', "\ud800", b"\xff", None, 10**12, 1.5, ["{}"]]
)
def test_manifest_from_json_unreadable(data: Any) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_json(data)


def test_manifest_sort_is_stable_by_order() -> None:
    def mk(order: int, name: str) -> Layer:
        return Layer(order, name, "s", "src", "v", "a", "f", 0, False)

    m = manifest_from_layers([mk(8, "x"), mk(6, "b"), mk(1, "p"), mk(6, "a"), mk(8, "w")])
    assert [x.layer for x in m.layers] == ["p", "b", "a", "x", "w"]


def test_ledger_snapshot() -> None:
    base_ev = sign(MORGAN, "go", [["h", CH]])
    base = compile_turn(TurnInput.from_json(json.dumps({"events": [item(base_ev)]}))).manifest
    s1 = compile_steer(sign(MORGAN, "more", [["h", CH]], t=5), channel_id=CH).manifest
    s2 = compile_steer(sign(RILEY, "again", [["h", CH]], t=6), channel_id=CH).manifest
    ledger = TurnLedger()
    assert ledger.snapshot() is None
    ledger.accept_update(s1)
    assert ledger.snapshot() is None  # updates without a base describe no turn
    ledger.reset()
    ledger.set_base(base)
    assert ledger.snapshot() == base
    ledger.accept_update(s1)
    ledger.accept_update(s2)
    snap = ledger.snapshot()
    assert snap is not None
    expected = sorted(
        [*base.layers, *s1.layers, *s2.layers], key=lambda x: x.order
    )  # Python's sort is stable
    assert list(snap.layers) == expected
    canonical = json.dumps(
        [json.loads(Manifest(1, "", (x,)).to_json())["layers"][0] for x in expected],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert snap.hash == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert snap.hash_matches()
    ledger.reset()
    assert ledger.snapshot() is None


# ---------------------------------------------------------------------------------------------
# Labels and attribute escaping


def test_labels_are_sanitized_and_every_attribute_is_escaped() -> None:
    long = "  " + "a" * 63 + " b"  # trim, cut to 64 ("a"*63 + " "), trim again
    ev = sign(
        MORGAN,
        "x",
        [["h", CH], ["p", pk(RILEY)], ["p", ""], ["p", "q\"<&>'\t"], ["p", "1" * 64]],
    )
    obj = {
        "events": [item(ev, "@\n@a'b")],
        "profiles": {
            pk(MORGAN): {"label": 'Mo "the" <dev> & co\u0085'},
            pk(RILEY): {"label": long},
            "1" * 64: {"label": "\x07\x1b\u3000"},  # nothing left: no label
        },
        "context": {
            "kind": "thread",
            "messages": [
                {"pubkey": pk(MORGAN).upper(), "content": "m"},
                {"pubkey": "<x> & y", "content": "n"},
            ],
        },
    }
    sections, _ = run(obj)
    assert sections[2] == (
        f'<event type=" @a&apos;b" actor="{pk(MORGAN)}" '
        'author="Mo &quot;the&quot; &lt;dev&gt; &amp; co" '
        f'event_id="{ev.id}" mentions="{"a" * 63} ({pk(RILEY)}), , '
        f'q&quot;&lt;&amp;&gt;&apos; , {"1" * 64}">\n'
        "Content: x\n</event>"
    )
    assert sections[1].endswith(
        '<recent-thread-delta included="2" total="2" truncated="false">\n'
        'Mo "the" &lt;dev&gt; &amp; co: m\n'
        "&lt;x&gt; &amp; y: n\n"
        "</recent-thread-delta>\n</ambient-context>"
    )
    # an empty p value is a mention of a non-agent: human-facing
    assert sections[3] == f'<delivery channel_id="{CH}" scope="channel" reply_to="{ev.id}" />'


def test_empty_cancelled_list_is_no_cancellation() -> None:
    ev = sign(MORGAN, "/go", [["h", CH]])
    sections, manifest = run(
        {"events": [item(ev)], "cancelledEvents": [], "cancelReason": "interrupt"}
    )
    assert sections[0] == "/go"
    assert sections[4] == f'<delivery channel_id="{CH}" scope="channel" reply_to="{ev.id}" />'
    assert "interrupted_turn" not in manifest


def test_scope_dm_only_from_channel_type_dm() -> None:
    ev = sign(MORGAN, "x", [["h", CH], ["e", ROOT_ID, "", "root"]])
    for type_, scope in (("DM", "thread"), ("stream", "thread"), ("dm", "dm"), (None, "thread")):
        obj = {"events": [item(ev)], "channel": {"name": "", "type": type_}}
        assert f'scope="{scope}"' in run(obj)[0][3]


# ---------------------------------------------------------------------------------------------
# `buzz compile`: exit codes and the JSON output


def _buzz_compile(
    tmp_path: Any, capfd: pytest.CaptureFixture[str], text: str, *flags: str
) -> tuple[int, str]:
    from nostr_buzz.cli.app import main

    path = tmp_path / "turn.json"
    path.write_text(text, encoding="utf-8")
    code = main(["compile", str(path), *flags])
    return code, capfd.readouterr().out


def test_buzz_compile_exit_codes(tmp_path: Any, capfd: pytest.CaptureFixture[str]) -> None:
    assert _buzz_compile(tmp_path, capfd, _valid_text())[0] == 0
    for reason in ("bad_id", "bad_pubkey", "bad_signature"):
        obj: dict[str, Any] = {"events": [{"event": forged(reason)}]}
        assert _buzz_compile(tmp_path, capfd, json.dumps(obj))[0] == 4
        obj["cancelReason"] = "later"
        assert _buzz_compile(tmp_path, capfd, json.dumps(obj))[0] == 1
    for bad in ('{"events": []}', "not json", '{"x": NaN, "events": []}', '{"events": [{}]}'):
        assert _buzz_compile(tmp_path, capfd, bad)[0] == 1


def test_buzz_compile_json_output(tmp_path: Any, capfd: pytest.CaptureFixture[str]) -> None:
    ev = sign(MORGAN, "héllo", [["h", CH]])
    obj = {"events": [item(ev)], "channel": {"name": "ünï"}}
    sections, manifest = run(obj)
    for flags in (("--json",), ("--format", "json")):
        code, out = _buzz_compile(tmp_path, capfd, json.dumps(obj), *flags)
        assert code == 0
        expected = (
            '{"sections":'
            + json.dumps(sections, separators=(",", ":"), ensure_ascii=False)
            + ',"manifest":'
            + manifest
            + "}\n"
        )
        assert out == expected


# ---------------------------------------------------------------------------------------------
# Hostile files: only typed errors escape

_FULL_VALUES: list[Any] = [None, 0, -1, 1.5, True, "", "x", [], {}, [None], {"a": None}, "dm"]


def _full_obj() -> dict[str, Any]:
    ev = sign(MORGAN, "hi /x", [["h", CH], ["e", ROOT_ID, "", "root"], ["p", "ab"]])
    return {
        "events": [item(ev)],
        "cancelledEvents": [item(ev)],
        "cancelReason": "steer",
        "channel": {"id": CH, "name": "n", "type": "stream", "description": "d"},
        "context": {
            "kind": "thread",
            "total": 3,
            "truncated": True,
            "messages": [{"eventId": "e", "pubkey": "p", "timestamp": "t", "content": "c"}],
        },
        "contextHadDeliveredEvents": True,
        "profiles": {"ab": {"label": "L", "isAgent": True}},
        "standing": {"base": "b", "system": "s", "coreMemory": "c", "channelCanvas": "cc"},
        "systemPromptSupport": False,
        "standingContextSent": False,
    }


def _mutate(rng: random.Random, node: Any, depth: int = 0) -> None:
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    if not keys:
        return
    k = rng.choice(keys)
    child = node[k]
    if depth > 4 or not isinstance(child, (dict, list)) or rng.random() < 0.4:
        node[k] = rng.choice(_FULL_VALUES)
    else:
        _mutate(rng, child, depth + 1)


def test_mutated_files_raise_only_typed_errors() -> None:
    rng = random.Random(20261202)
    text = json.dumps(_full_obj()).encode()
    compile_turn(TurnInput.from_json(text))  # the unmutated file is valid
    for n in range(600):
        if n % 2:
            data = bytearray(text)
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            candidate: bytes | str = bytes(data)
        else:
            obj = _full_obj()
            _mutate(rng, obj)
            candidate = json.dumps(obj)
        with contextlib.suppress(BuzzError):
            compile_turn(TurnInput.from_json(candidate))


def test_slash_block_comes_before_legacy_standing_sections() -> None:
    ev = sign(MORGAN, "  /help me", [["h", CH]])
    obj = {"events": [item(ev)], "standing": {"base": "B", "huddleInstructions": " H "}}
    sections, manifest = run(obj)
    assert sections[:4] == [
        "/help me",
        "<base>\nB\n</base>",
        "<huddle-instructions>\nH\n</huddle-instructions>",
        "<buzz-turn>",
    ]
    layers = json.loads(manifest)["layers"]
    assert layers[:2] == [
        lay(1, "platform_contract", "runtime", "base_prompt", "instructions", "configured", "B"),
        lay(
            2,
            "persona_and_team_guidance",
            "agent_community",
            "agent_configuration",
            "instructions",
            "configured",
            "H",
        ),
    ]


# =================================================================================================
# Properties: whatever the text, the envelope keeps its shape.
# =================================================================================================


KEYS = [SecretKey.from_str(f"{i:02x}" * 32) for i in (0x21, 0x22, 0x23)]


PUBS = [k.public_key.hex for k in KEYS]


TOKENS = [
    "<",
    ">",
    "&",
    "&amp;",
    "&lt;",
    '"',
    "'",
    "\n",
    "\r",
    "\t",
    " ",
    "\u2028",
    "\u0085",
    "@",
    "/",
    "é",
    "</event>",
    "<event ",
    "</buzz-turn>",
    "<buzz-turn>",
    "</ambient-context>",
    "<delivery ",
    "Content: ",
    "</recent-thread-delta>",
    "</interrupted-turn>",
    "nostr:npub1x",
]


hostile = st.lists(st.sampled_from(TOKENS), max_size=12).map("".join)


texts = st.one_of(st.text(max_size=80), hostile)


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def unescape(s: str) -> str:
    return s.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


@st.composite
def turn_inputs(draw: st.DrawFn) -> TurnInput:
    contents = draw(st.lists(texts, min_size=1, max_size=3))
    actor = draw(st.sampled_from(KEYS))
    events = []
    for i, content in enumerate(contents):
        tags = [["h", "chan-1"]]
        tags += [["p", p] for p in draw(st.lists(st.sampled_from(PUBS), max_size=2))]
        event = sign_event(
            actor, kind=9, content=content, tags=tags, created_at=100 + i, aux_rand=bytes(32)
        )
        events.append(TurnEvent(event, draw(st.sampled_from(["@mention", "@@dm", "x"]))))
    cancelled = []
    if draw(st.booleans()):
        event = sign_event(
            actor,
            kind=9,
            content=draw(texts),
            tags=[["h", "chan-1"]],
            created_at=50,
            aux_rand=bytes(32),
        )
        cancelled.append(TurnEvent(event))
    profiles = {
        p: ProfileInfo(draw(st.none() | texts), draw(st.booleans()))
        for p in draw(st.lists(st.sampled_from(PUBS), unique=True))
    }
    context = None
    if draw(st.booleans()):
        context = TurnContext(
            kind=draw(st.sampled_from(["thread", "dm"])),
            messages=tuple(
                ContextMessage(draw(st.sampled_from([*PUBS, "<who>"])), draw(texts))
                for _ in range(draw(st.integers(0, 3)))
            ),
            truncated=draw(st.booleans()),
        )
    return TurnInput(
        events=tuple(events),
        cancelled_events=tuple(cancelled),
        cancel_reason=draw(st.sampled_from(["interrupt", "steer"])),
        channel=ChannelInfo(
            name=draw(texts),
            type=draw(st.sampled_from(["stream", "dm"])),
            description=draw(st.none() | texts),
        ),
        context=context,
        profiles=profiles,
        standing=Standing(
            base=draw(st.none() | texts),
            team_instructions=draw(st.none() | texts),
            workspace=draw(st.none() | texts | texts.map(lambda t: "/" + t)),
        ),
        system_prompt_support=draw(st.booleans()),
    )


@SETTINGS
@given(turn_inputs())
def test_the_workspace_layer_hashes_the_workspace_text_the_agent_gets(ti: TurnInput) -> None:
    compiled = compile_turn(ti)
    if ti.system_prompt_support:
        text = standing_text(ti.standing)
        end = text.find("\n</workspace>") + len("\n</workspace>")
        sent = [text[:end]] if text.startswith("<workspace>\n") else []
        assert "<workspace>" not in text[len(sent[0]) if sent else 0 :]
    else:
        before = compiled.sections[: compiled.sections.index("<buzz-turn>")]
        sent = [s for s in before if s.startswith("<workspace>")]
        assert "<workspace>" not in "".join(s for s in before if s not in sent)
    recorded = [x for x in compiled.manifest.layers if x.layer == "workspace"]
    assert [x.version for x in recorded] == [content_hash(block) for block in sent]


@SETTINGS
@given(turn_inputs())
def test_envelope_shape_holds_for_any_text(ti: TurnInput) -> None:
    sections = compile_turn(ti).sections
    start = sections.index("<buzz-turn>")
    assert sections[-1] == "</buzz-turn>"
    envelope = "\n".join(sections[start:])
    assert envelope.count("<buzz-turn>") == 1
    assert envelope.count("</buzz-turn>") == 1
    assert envelope.count("<ambient-context>") == 1
    assert envelope.count("</ambient-context>") == 1
    assert envelope.count("<delivery ") == 1
    instruction = sections[-3]
    assert instruction.count("<event ") == len(ti.events)
    assert envelope.count("<event ") == len(ti.events) + len(ti.cancelled_events)
    # Unescaping each Content gives back the laid-out text, in batch order.
    blocks = instruction.split("\n</event>")
    assert blocks[-1] == ""
    for block, item in zip(blocks[:-1], ti.events, strict=True):
        head, content = block.split("\nContent: ", 1)
        assert head.lstrip("\n").startswith("<event ") and "\n" not in head.lstrip("\n")
        # line breaks written as "\n", continuation lines holding a colon indented
        assert unescape(content) == message_lines(item.event.content)
    # Sections before <buzz-turn>: the raw slash command (a suffix of the content) and the
    # standing sections.
    if start > 0 and sections[0].startswith("/"):
        assert len(ti.events) == 1 and ti.events[0].event.content.endswith(sections[0])


@SETTINGS
@given(turn_inputs())
def test_compiling_is_deterministic(ti: TurnInput) -> None:
    first = compile_turn(ti)
    again = compile_turn(copy.deepcopy(ti))
    assert first == again
    assert first.manifest.hash_matches()
    assert [x.order for x in first.manifest.layers] == sorted(
        x.order for x in first.manifest.layers
    )


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_escapes_round_trip_and_neutralize(s: str) -> None:
    assert unescape(escape_text(s)) == s
    for char in "<>":
        assert char not in escape_text(s)
    attribute = escape_attribute(s)
    for char in "<>\"'\n\r\t":
        assert char not in attribute
