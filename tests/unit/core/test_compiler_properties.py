"""Property tests for the compiler (docs/envelope.md): whatever the text, the envelope keeps its
shape."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nostr_buzz.core.compiler import compile_turn
from nostr_buzz.core.escape import escape_attribute, escape_text
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
from nostr_buzz.event import sign_event
from nostr_buzz.keys import SecretKey

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
        standing=Standing(base=draw(st.none() | texts), team_instructions=draw(st.none() | texts)),
        system_prompt_support=draw(st.booleans()),
    )


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
