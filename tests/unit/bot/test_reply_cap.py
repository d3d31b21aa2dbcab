"""The reply cap: checked in Python as in buzz.toml, and a cut reply says where it was cut."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from nostr_buzz.acp.types import TurnResult
from nostr_buzz.bot.config import PluginConfig
from nostr_buzz.bot.outputs import reply_text
from nostr_buzz.config import ConfigSources
from nostr_buzz.errors import ConfigError
from nostr_buzz.keys import SecretKey

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def result(reply: str, dropped: int = 0) -> TurnResult:
    return TurnResult(
        reply=reply,
        final_message=reply,
        usage=None,
        stop_reason="end_turn",
        outcome="success",
        terminal_evidence="prompt_response",
        native_stop_reason="end_turn",
        adapter_session_id="s",
        run_id=None,
        started_at=NOW,
        ended_at=NOW,
        reply_dropped_bytes=dropped,
    )


def test_a_cut_reply_ends_with_where_it_was_cut() -> None:
    assert reply_text(result("all of it")) == "all of it"
    cut = reply_text(result("é" * 4, dropped=1_234_567))
    assert cut == (
        "éééé\n\n[reply cut at 8 bytes: 1,234,567 more bytes of the agent's answer were left out]"
    )


@pytest.mark.parametrize("value", [0, 4095, 1_048_577, 2.5e5, "262144", True, None])
def test_plugin_config_checks_the_cap_as_buzz_toml_does(value: object, tmp_path: Path) -> None:
    base = {
        "agent_secret": SecretKey.generate(),
        "owner": SecretKey.generate().public_key,
        "read_relays": ("ws://127.0.0.1:1",),
        "write_relays": ("ws://127.0.0.1:1",),
        "agent_command": "agent",
    }
    assert PluginConfig(**base).max_reply_bytes == 256 * 1024  # type: ignore[arg-type]
    assert PluginConfig(max_reply_bytes=4096, **base).max_reply_bytes == 4096  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="PluginConfig max_reply_bytes: "):
        PluginConfig(max_reply_bytes=value, **base)  # type: ignore[arg-type]
    if isinstance(value, int) and not isinstance(value, bool):
        (tmp_path / "buzz.toml").write_text(f"[agent]\nmax_reply_bytes = {value}\n")
        with pytest.raises(ConfigError, match="max_reply_bytes"):
            ConfigSources(environ={}, cwd=tmp_path).file  # noqa: B018
