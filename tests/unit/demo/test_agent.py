"""The demo agent's prompt summary, pure: event ids and the newest instruction (the agent over
real stdio is in tests/e2e/demo/test_agent.py)."""

from __future__ import annotations

from nostr_buzz.core.compiler import compile_steer
from nostr_buzz.demo.agent import summarize_prompt
from tests.support.demo_turns import demo_sections, general_event


def test_summarize_prompt_reads_ids_and_the_newest_instruction() -> None:
    sections, ids = demo_sections("one", "two\nlines")
    assert summarize_prompt(sections) == (ids, "two")
    steer = compile_steer(general_event("steered"), channel_id="general")
    assert summarize_prompt([steer.text])[1] == "steered"
    assert summarize_prompt(["no events"]) == ([], "")
