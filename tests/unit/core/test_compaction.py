"""What a compaction costs the standing context: the pure decision and the compiler's output
(docs/envelope.md, "Compaction")."""

from __future__ import annotations

import msgspec
import pytest

from nostr_buzz.core.compaction import REDELIVERED_AFTER_COMPACTION, standing_redelivered
from nostr_buzz.core.compiler import compile_turn, standing_sections
from nostr_buzz.core.turn_input import ChannelInfo, Standing, TurnEvent, TurnInput
from nostr_buzz.event import sign_event
from nostr_buzz.reports.manifest_diff import diff_manifests
from tests.support.keys import OWNER

STANDING = Standing(
    workspace="/srv/work",
    base="Answer briefly.",
    persona="You are Pip.",
    core_memory="Morgan likes rain.",
    channel_canvas="Plans for the week.",
)
STANDING_LAYERS = {
    "workspace",
    "platform_contract",
    "persona_and_team_guidance",
    "core_memory",
    "channel_canvas",
}


def turn(**fields: object) -> TurnInput:
    event = sign_event(OWNER, kind=9, content="and now?", tags=[["h", "eng"]], created_at=1)
    return TurnInput(
        events=(TurnEvent(event),),
        channel=ChannelInfo(name="eng", id="eng"),
        standing=STANDING,
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("system_role", "sent", "now", "then", "again"),
    [
        (False, True, 1, 0, True),  # travelled in the conversation, compacted since
        (False, True, 1, 1, False),  # delivered again since the compaction
        (False, True, 0, 0, False),  # never compacted
        (False, False, 1, 0, False),  # not sent yet: this is its first delivery anyway
        (True, True, 3, 0, False),  # beside the conversation: it survived
    ],
)
def test_the_standing_sections_go_again_only_after_a_compaction_took_them(
    system_role: bool, sent: bool, now: int, then: int, again: bool
) -> None:
    decided = standing_redelivered(
        system_prompt_support=system_role,
        standing_context_sent=sent,
        compactions=now,
        compactions_at_delivery=then,
    )
    assert decided is again


def test_a_legacy_agent_gets_the_standing_sections_again_and_the_manifest_says_so() -> None:
    held = compile_turn(turn(standing_context_sent=True))
    again = compile_turn(turn(standing_context_sent=True, standing_redelivered=True))
    first = compile_turn(turn())
    sections = [text for _, text in standing_sections(STANDING)]
    assert held.sections[: len(sections)] != sections
    # Byte for byte what the session's first prompt carried.
    assert again.sections[: len(sections)] == first.sections[: len(sections)] == sections
    diff = diff_manifests(held.manifest, again.manifest)
    assert not diff.added and not diff.removed
    assert {c.layer: c.fields for c in diff.changed} == {
        layer: ("freshness",) for layer in STANDING_LAYERS
    }
    assert all(c.after.freshness == REDELIVERED_AFTER_COMPACTION for c in diff.changed)
    # The first delivery keeps its usual freshness, asked or not.
    assert compile_turn(turn(standing_redelivered=True)) == first


def test_a_system_role_keeps_its_standing_context_through_a_compaction() -> None:
    held = turn(system_prompt_support=True, standing_context_sent=True)
    assert compile_turn(msgspec.structs.replace(held, standing_redelivered=True)) == compile_turn(
        held
    )


def test_the_turn_input_file_names_it() -> None:
    ti = turn(standing_context_sent=True)
    document = {
        "events": [{"event": ti.events[0].event.to_dict()}],
        "channel": {"name": "eng", "id": "eng"},
        "standingContextSent": True,
        "standingRedelivered": True,
    }
    parsed = TurnInput.from_json(msgspec.json.encode(document).decode())
    assert parsed.standing_redelivered and parsed.standing_context_sent


def test_a_redelivered_layer_read_unconfirmed_stays_unconfirmed() -> None:
    unsure = msgspec.structs.replace(STANDING, unconfirmed=True)
    again = compile_turn(
        msgspec.structs.replace(
            turn(standing_context_sent=True, standing_redelivered=True), standing=unsure
        )
    )
    freshness = {lay.layer: lay.freshness for lay in again.manifest.layers}
    # A newer version may exist: that outranks the redelivery, which the others still show.
    assert freshness["core_memory"] == freshness["channel_canvas"] == "unconfirmed"
    assert freshness["workspace"] == freshness["platform_contract"] == REDELIVERED_AFTER_COMPACTION
