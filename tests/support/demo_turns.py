"""Turns for the demo agent: events in channel "general" compiled into sections."""

from __future__ import annotations

from nostr_buzz.core.compiler import compile_turn
from nostr_buzz.core.turn_input import ChannelInfo, Standing, TurnEvent, TurnInput
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from tests.support.events import chat


def general_event(content: str, created_at: int = 1_800_000_000) -> Event:
    return chat(SecretKey.generate(), created_at, content=content, channel="general")


def demo_sections(*contents: str, standing: Standing | None = None) -> tuple[list[str], list[str]]:
    events = [general_event(c, 1_800_000_000 + i) for i, c in enumerate(contents)]
    compiled = compile_turn(
        TurnInput(
            events=tuple(TurnEvent(e) for e in events),
            channel=ChannelInfo(name="general", id="general"),
            standing=standing or Standing(),
        )
    )
    return compiled.sections, [e.id for e in events]
