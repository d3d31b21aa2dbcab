"""RelayPool refuses a badly configured URL as bad input before connecting anywhere (the pool
against real relays is in tests/e2e/io/test_pool.py)."""

from __future__ import annotations

import pytest

from nostr_buzz.errors import RelayError
from nostr_buzz.io.pool import RelayPool


def test_bad_configured_url_is_bad_input() -> None:
    with pytest.raises(RelayError, match="ws:// or wss://"):
        RelayPool(["ws://127.0.0.1:1", "http://relay.example"])
