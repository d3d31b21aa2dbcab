"""In-process agents' values: the turn an agent gets, the reply it gives, the module spec."""

from __future__ import annotations

import pytest

from nostr_buzz import AgentModuleError, AgentReply, AgentTurn, ConfigError, TokenCounts
from nostr_buzz.agent import checked_counts, parse_spec


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


def test_counts_a_metric_cannot_carry_become_unknown() -> None:
    bad = TokenCounts(
        input_tokens=-1,
        output_tokens=True,  # a bool is not a count
        total_tokens=12,
        cost_usd=float("nan"),
        cache_read_tokens="3",  # type: ignore[arg-type]
        cache_write_tokens=0,
    )
    assert checked_counts(bad) == TokenCounts(
        input_tokens=None,
        output_tokens=None,
        total_tokens=12,
        cost_usd=None,
        cache_read_tokens=None,
        cache_write_tokens=0,
    )
    huge = TokenCounts(input_tokens=1, output_tokens=1, total_tokens=2, cost_usd=10**400)
    assert checked_counts(huge).cost_usd is None  # too large for a float
    assert checked_counts(TokenCounts(1, 2, 3, 0.5)) == TokenCounts(1, 2, 3, 0.5)


def test_a_spec_is_module_colon_attribute() -> None:
    assert parse_spec("pkg.mod:attr") == ("pkg.mod", "attr")
    assert parse_spec(" pkg.mod : make.agent ") == ("pkg.mod", "make.agent")
    for bad in ("pkg.mod", "pkg.mod:", ":attr", "", ":"):
        with pytest.raises(AgentModuleError, match="expected MODULE:ATTRIBUTE") as info:
            parse_spec(bad)
        assert isinstance(info.value, ConfigError)  # `buzz run` exits 1 for it
