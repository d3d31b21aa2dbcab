"""Replay requests name only the authors the gate admits (replay against real relays is in
tests/e2e/bot/test_replay.py)."""

from __future__ import annotations

from nostr_buzz.bot.intake import Gate
from nostr_buzz.bot.replay import admissible_authors, listen_filters
from nostr_buzz.keys import SecretKey


def test_requests_name_only_the_authors_the_gate_admits() -> None:
    owner, friend, agent = (SecretKey(bytes([n]) * 32).public_key.hex for n in (1, 2, 3))

    def gate(mode: str) -> Gate:
        return Gate(agent, owner, frozenset({9}), frozenset(), True, mode, frozenset({friend}))  # type: ignore[arg-type]

    assert admissible_authors(gate("owner-only")) == [owner]
    assert admissible_authors(gate("allowlist")) == [owner, friend]
    assert admissible_authors(gate("anyone")) is None
    [flt] = listen_filters(gate("allowlist"), 100, ())
    assert flt.to_wire() == {"kinds": [9], "since": 100, "authors": [owner, friend], "#p": [agent]}
    assert listen_filters(gate("anyone"), 100, ())[0].authors is None
