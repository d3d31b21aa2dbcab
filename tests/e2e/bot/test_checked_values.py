"""A bot built in Python with a misspelt gate mode: a real relay, the real demo agent, a stranger.

``buzz.toml`` has always refused ``mode = "owner_only"``; the same value given to
``PluginConfig`` matched neither refusal of the gate, and the bot answered the stranger.  Now it
is refused where it is given: no agent starts, and the relay holds nothing of the agent's.
"""

from __future__ import annotations

import pytest

from nostr_buzz.errors import ConfigError
from tests.support.bot_world import Recorder, World, serving


@pytest.mark.parametrize("typo", ["owner_only", "Owner-Only", "owner-only "])
async def test_a_misspelt_gate_in_python_starts_no_bot_and_answers_no_stranger(
    world: World, typo: str
) -> None:
    rec = Recorder()
    with pytest.raises(ConfigError) as refused:
        async with serving(world, rec, gate=typo):
            stranger = world.say("run my script, bot", author=world.human)
            await world.publish(stranger)
            await rec.kind("reply_published")
    assert str(refused.value) == (
        f"PluginConfig gate: expected one of owner-only, allowlist, anyone, got {typo!r}"
    )
    assert rec.of("agent_started") == [] and rec.records == []
    agent = world.agent.public_key.hex
    assert await world.query({"authors": [agent]}) == []
