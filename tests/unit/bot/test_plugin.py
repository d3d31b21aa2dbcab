"""The bot plugin's pure parts: shard parsing and stable assignment, and ``buzz run`` without
configuration is bad input (the bot end to end is in tests/e2e/bot/test_plugin.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.bot import parse_shard, shard_of
from nostr_buzz.errors import ConfigError


def test_shard_parsing_and_stable_assignment() -> None:
    assert parse_shard("1/3").index == 1
    for bad in ("3/3", "x", "1/0", "-1/2"):
        with pytest.raises(ConfigError):
            parse_shard(bad)
    ids = [f"{i:064x}" for i in range(200)]
    shards = [shard_of(d, 4) for d in ids]
    assert set(shards) == {0, 1, 2, 3}
    assert shards == [shard_of(d, 4) for d in ids]  # stable


def test_buzz_run_without_configuration_is_bad_input(tmp_path: Path, monkeypatch: Any) -> None:
    from nostr_buzz.cli.app import main

    for name in ("BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_RELAYS", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["run"]) == 1
    assert main(["run", "--config", str(tmp_path / "missing.toml")]) == 1
    assert main(["run", "--shard", "2/2"]) == 1


# =================================================================================================
# Conformance: the bot plugin checked from docs/bot.md (steering, diagnostics, metrics),
# with scripted agents or the demo agent.
# =================================================================================================
