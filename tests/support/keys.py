"""The cast of keys the tests share: fixed, so that runs are reproducible and failures repeat.

OWNER is the bot's owner, AGENT the bot's own key, ALICE, BOB and CAROL are people in a channel,
STRANGER someone nobody allowed.  NIP19_SECRET is the secret key of NIP-19's worked example (its
public key is NIP-19's example npub), for tests that compare against those published strings.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nostr_buzz.keys import SecretKey

if TYPE_CHECKING:
    from nostr_buzz.bot import PluginConfig

OWNER = SecretKey.from_str("0e" * 32)
AGENT = SecretKey.from_str("a7" * 32)
ALICE = SecretKey.from_str("a1" * 32)
BOB = SecretKey.from_str("b2" * 32)
CAROL = SecretKey.from_str("c3" * 32)
STRANGER = SecretKey.from_str("5e" * 32)
NIP19_SECRET = SecretKey.from_str(
    "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
)


def offline_config(**changes: Any) -> PluginConfig:
    """A plugin config of AGENT for OWNER that reaches no relay (unit tests decide with it)."""
    from dataclasses import replace

    from nostr_buzz.bot import PluginConfig

    base = PluginConfig(
        agent_secret=AGENT,
        owner=OWNER.public_key,
        read_relays=("ws://127.0.0.1:1",),
        write_relays=("ws://127.0.0.1:1",),
        agent_command="agent",
        state_dir=Path("unused"),
    )
    return replace(base, **changes)
