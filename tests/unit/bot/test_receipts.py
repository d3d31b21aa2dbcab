"""Session receipts: when a restarted bot may continue a channel's agent session, and what the
state database keeps of it (docs/bot.md, "Sessions that survive a restart")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.bot.receipts import REMEMBERED_DELIVERED, SessionReceipt, resume_refusal
from nostr_buzz.bot.state import BotStore
from nostr_buzz.core.turn_input import Standing

RECEIPT = SessionReceipt(
    session_id="sess-1",
    agent="claude-agent-acp",
    agent_version="0.101.0",
    strategy="claude_meta",
    standing=Standing(persona="be brief", workspace="/work"),
    started_at=1_700_000_000.5,
    actors=("a" * 64,),
    delivered=("e" * 64,),
)


@pytest.mark.parametrize(
    ("in_turn", "agent", "method", "why"),
    [
        (False, ("claude-agent-acp", "0.101.0"), "resume", None),
        (False, ("claude-agent-acp", "0.101.0"), "load", None),
        # A crash while the agent had the prompt: its session may hold half an exchange that
        # the queue runs again.
        (True, ("claude-agent-acp", "0.101.0"), "resume", "indeterminate"),
        (False, ("claude-agent-acp", "0.102.0"), "resume", "agent_changed"),
        (False, ("codex-acp", "0.101.0"), "resume", "agent_changed"),
        (False, ("claude-agent-acp", "0.101.0"), None, "not_supported"),
    ],
)
def test_when_a_receipt_may_be_continued(
    in_turn: bool, agent: tuple[str, str], method: Any, why: str | None
) -> None:
    assert resume_refusal(RECEIPT, in_turn, *agent, method) == why


def test_a_receipt_is_in_a_turn_from_before_the_prompt_until_the_success_commits(
    tmp_path: Path,
) -> None:
    store = BotStore(tmp_path / "state")
    receipts = store.receipts
    assert receipts.get("eng") is None
    receipts.begin_turn("eng", RECEIPT)
    assert receipts.get("eng") == (RECEIPT, True)
    done = SessionReceipt(**{**_fields(RECEIPT), "delivered": ("e" * 64, "f" * 64)})
    with store.transaction(durable=True):
        receipts.complete_turn("eng", done)
    store.close()
    again = BotStore(tmp_path / "state")  # what a restarted bot reads
    assert again.receipts.get("eng") == (done, False)
    assert again.receipts.get("other") is None
    again.receipts.drop("eng")
    assert again.receipts.get("eng") is None
    again.close()


def test_a_receipt_remembers_the_newest_delivered_events_only(tmp_path: Path) -> None:
    store = BotStore(tmp_path / "state")
    many = tuple(f"{n:064x}" for n in range(REMEMBERED_DELIVERED + 5))
    store.receipts.begin_turn("eng", SessionReceipt(**{**_fields(RECEIPT), "delivered": many}))
    found = store.receipts.get("eng")
    assert found is not None and found[0].delivered == many[5:]
    store.close()


def test_an_unreadable_receipt_means_a_new_session(tmp_path: Path) -> None:
    store = BotStore(tmp_path / "state")
    store.receipts.begin_turn("eng", RECEIPT)
    with store.transaction():
        store._db.execute("UPDATE sessions SET receipt = '{\"sessionId\": 7}'")
    assert store.receipts.get("eng") is None
    store.close()


def _fields(receipt: SessionReceipt) -> dict[str, Any]:
    return {f: getattr(receipt, f) for f in receipt.__struct_fields__}


def test_a_channels_top_level_new_drops_its_threads_receipts_and_no_one_elses(
    tmp_path: Path,
) -> None:
    # Channel ids may hold "_" and "-": a LIKE pattern would let "e_g" reach "eng"'s threads.
    store = BotStore(tmp_path / "state")
    keys = ["eng", "eng/" + "a" * 64, "eng/" + "b" * 64, "eng2/" + "c" * 64, "e_g", "e_g/x"]
    for key in keys:
        store.receipts.begin_turn(key, RECEIPT)
    with store.transaction():
        store.receipts.drop_channel("e_g")
    assert [k for k in keys if store.receipts.get(k) is not None] == keys[:4]
    with store.transaction():
        store.receipts.drop_channel("eng")
    assert [k for k in keys if store.receipts.get(k) is not None] == ["eng2/" + "c" * 64]
    store.close()
