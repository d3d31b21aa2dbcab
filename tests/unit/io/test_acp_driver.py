"""The ACP driver's standing text, pure: workspace and sections in order (the driver against real
agent subprocesses is in tests/e2e/io/test_acp_driver.py)."""

from __future__ import annotations

from msgspec.structs import replace

from nostr_buzz.core.turn_input import Standing
from nostr_buzz.io.acp_driver import standing_text

STANDING = Standing(base="Be brief.", persona="You are the demo agent.")


def test_standing_text_composes_workspace_and_sections() -> None:
    text = standing_text(replace(STANDING, workspace="/srv/a&b"))
    assert text == (
        "<workspace>\nYour working directory is /srv/a&amp;b. Keep the files you create and the "
        "repositories you clone there.\n</workspace>\n\n<base>\nBe brief.\n</base>\n\n"
        "<system>\nYou are the demo agent.\n</system>"
    )
    assert standing_text(replace(STANDING, workspace="/")).startswith("<base>")
    assert standing_text(replace(STANDING, workspace="relative/dir")).startswith("<base>")
    assert standing_text(Standing()) == ""


# =================================================================================================
# Conformance: the ACP harness checked from docs/bot.md, with tiny scripted JSON-RPC agents
# (tests/support/scripted_agent.py) that log every message they receive.
# =================================================================================================
