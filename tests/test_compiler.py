"""The context compiler (docs/envelope.md): goldens, hand-written envelopes, layers, manifests,
inputs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from nostr_buzz.core.compiler import (
    STEER_NOTE,
    compile_steer,
    compile_turn,
    slash_command,
)
from nostr_buzz.core.escape import escape_attribute, escape_text
from nostr_buzz.core.manifest import Layer, Manifest, content_hash, manifest_from_layers
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
from tests import golden_gen
from tests.conftest import FIXTURES

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


def test_profile_keys_collide_ascii_lowercased_later_wins() -> None:
    obj = load_input("channel_top_level_mention")
    morgan = golden_gen.pk(golden_gen.MORGAN)
    obj["profiles"] = {morgan: {"label": "First"}, morgan.upper(): {"label": "Second"}}
    assert 'author="Second"' in compile_obj(obj).sections[2]
    obj["profiles"] = {morgan.upper(): {"label": "First"}, morgan: {"label": "Second"}}
    assert 'author="Second"' in compile_obj(obj).sections[2]


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
