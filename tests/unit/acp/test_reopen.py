"""Continuing a session of an earlier agent process: what the agent advertises, what the
profile allows, and the frames (docs/acp-adapters.md, "Sessions that survive a restart")."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from nostr_buzz.acp import wire
from nostr_buzz.acp.profiles import CLAUDE, CODEX, GENERIC, GOOSE, reopen_method
from nostr_buzz.acp.types import SessionStart
from tests.unit.acp.test_wire import info

# What the pinned adapters advertise at ``initialize`` (docs/acp-adapters.md).
CLAUDE_CAPS = {"loadSession": True, "sessionCapabilities": {"resume": {}, "close": {}}}
GEMINI_CAPS = {"loadSession": True, "sessionCapabilities": {}}


def initialize(caps: dict[str, Any]) -> dict[str, Any]:
    return {"protocolVersion": 1, "agentCapabilities": caps, "agentInfo": {"name": "a"}}


@pytest.mark.parametrize(
    ("caps", "resume", "load"),
    [
        (CLAUDE_CAPS, True, True),
        (GEMINI_CAPS, False, True),
        ({}, False, False),
        ({"loadSession": False, "sessionCapabilities": {"resume": None}}, False, False),
        ({"sessionCapabilities": {"resume": True}}, False, False),  # a capability is an object
    ],
)
def test_initialize_says_whether_sessions_resume_or_load(
    caps: dict[str, Any], resume: bool, load: bool
) -> None:
    got = wire.agent_info(initialize(caps), 1)
    assert (got.session_resume, got.load_session) == (resume, load)


@pytest.mark.parametrize(
    ("profile", "resume", "load", "method"),
    [
        (CLAUDE, True, True, "resume"),  # no replay when the agent can do without
        (CODEX, True, True, "resume"),
        (GENERIC, False, True, "load"),  # gemini-cli
        (GOOSE, False, True, "load"),
        (GENERIC, False, False, None),  # the demo agent: a new session, standing context again
        (replace(CLAUDE, resumes_sessions=False), True, True, None),
    ],
)
def test_the_profile_and_the_advertisement_choose_how_a_session_is_continued(
    profile: Any, resume: bool, load: bool, method: str | None
) -> None:
    assert reopen_method(profile, info(session_resume=resume, load_session=load)) == method


@pytest.mark.parametrize(
    ("strategy", "standing", "field"),
    [
        ("claude_meta", "S", {"_meta": {"systemPrompt": {"append": "S"}}}),
        ("legacy", "S", {}),  # the history's first prompt holds it
        ("goose", "S", {}),  # set again after the load, by its own method
        ("claude_meta", "", {}),
    ],
)
def test_a_continued_session_gets_its_standing_context_where_it_travels_beside_the_history(
    strategy: Any, standing: str, field: dict[str, Any]
) -> None:
    params = wire.reopen_params("sess-1", "/work", standing, strategy, info())
    assert params == {"cwd": "/work", "mcpServers": [], "sessionId": "sess-1", **field}


def test_a_continued_session_never_gets_its_standing_sections_in_a_prompt_again() -> None:
    assert not SessionStart("s", "legacy").standing_context_sent
    assert SessionStart("s", "legacy", reopened="load").standing_context_sent
    assert SessionStart("s", "claude_meta", reopened="resume").standing_context_sent
