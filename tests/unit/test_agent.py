"""In-process agents' values: the turn an agent gets, the reply it gives, the module spec."""

from __future__ import annotations

import pytest

from nostr_buzz import AgentModuleError, AgentReply, AgentTurn, ConfigError, TokenCounts
from nostr_buzz.agent import parse_spec


def test_a_turn_joins_its_sections_by_blank_lines() -> None:
    turn = AgentTurn(("<context>a</context>", "<instruction>b</instruction>"), None, "s", "eng")
    assert turn.text == "<context>a</context>\n\n<instruction>b</instruction>"
    assert AgentTurn((), "standing", "s", "eng").text == ""


def test_a_reply_carries_text_usage_and_model_and_refuses_other_types() -> None:
    usage = TokenCounts(input_tokens=3, output_tokens=2, total_tokens=5, cost_usd=None)
    reply = AgentReply("hi", usage=usage, model="m-1")
    assert (reply.text, reply.usage, reply.model) == ("hi", usage, "m-1")
    assert AgentReply("hi").usage is None and AgentReply("hi").model is None
    with pytest.raises(TypeError, match="text must be a str"):
        AgentReply(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"usage must be a nostr_buzz\.TokenCounts"):
        AgentReply("hi", usage={"input_tokens": 3})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model must be a str"):
        AgentReply("hi", model=7)  # type: ignore[arg-type]


def test_a_spec_is_module_colon_attribute() -> None:
    assert parse_spec("pkg.mod:attr") == ("pkg.mod", "attr")
    assert parse_spec(" pkg.mod : make.agent ") == ("pkg.mod", "make.agent")
    for bad in ("pkg.mod", "pkg.mod:", ":attr", "", ":"):
        with pytest.raises(AgentModuleError, match="expected MODULE:ATTRIBUTE") as info:
            parse_spec(bad)
        assert isinstance(info.value, ConfigError)  # `buzz run` exits 1 for it
