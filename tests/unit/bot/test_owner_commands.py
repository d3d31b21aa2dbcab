"""When the owner's command is obeyed: ordered per kind, never older than the run's start minus
the clock skew (docs/bot.md, "Owner commands")."""

from __future__ import annotations

from nostr_buzz.bot.intake import Command, command_kind, command_of, stale_command
from nostr_buzz.core.queue import DispatchQueue
from nostr_buzz.event import Event
from nostr_buzz.nips import nip10
from tests.support.events import chat
from tests.support.keys import OWNER


def said(text: str, created_at: int = 1_000, channel: str = "room") -> tuple[Command, Event]:
    event = chat(OWNER, created_at, content=text, channel=channel)
    command = command_of(text)
    assert command is not None
    return command, event


def test_a_budget_is_ordered_per_cap_a_cancel_per_channel() -> None:
    assert command_kind(*said("!budget daily_usd 0.5")) == "budget:daily_usd"
    assert command_kind(*said("!budget monthly_usd 9")) == "budget:monthly_usd"
    assert command_kind(*said("!budget")) == "budget:"
    cancel, event = said("!cancel", channel="ops")
    assert command_kind(cancel, event) == f"cancel:{nip10.queue_channel(event)}"
    assert command_kind(*said("!new", channel="a")) != command_kind(*said("!new", channel="b"))
    # Each code answers its one question once: the approvals see to it (bot/approvals.py).
    assert command_kind(*said("!allow ab12")) is None
    assert command_kind(*said("!shutdown")) == "shutdown"
    long = command_kind(*said("!budget " + "x" * 500 + " 1"))
    assert (
        long is not None and len(long) <= len("budget:") + 64
    )  # a stranger-sized word never grows the memory


def test_only_a_newer_command_than_the_last_of_its_kind_is_obeyed() -> None:
    _, older = said("!budget daily_usd 100", created_at=1_000)
    _, newer = said("!budget daily_usd 0.5", created_at=1_010)
    assert stale_command(newer, None, floor=900) is None
    assert stale_command(older, (newer.created_at, newer.id), floor=900) == "command_not_newer"
    assert stale_command(newer, (newer.created_at, newer.id), floor=900) == "command_not_newer"
    assert stale_command(newer, (older.created_at, older.id), floor=900) is None


def test_within_one_second_the_id_orders_commands() -> None:
    _, a = said("!budget daily_usd 1", created_at=1_000)
    _, b = said("!budget daily_usd 2", created_at=1_000)
    first, second = sorted([a, b], key=lambda e: e.id)
    assert stale_command(second, (first.created_at, first.id), floor=0) is None
    assert stale_command(first, (second.created_at, second.id), floor=0) == "command_not_newer"


def test_a_command_older_than_the_start_minus_the_skew_is_never_obeyed() -> None:
    _, event = said("!shutdown", created_at=1_000)
    assert stale_command(event, None, floor=1_001) == "command_before_start"
    assert stale_command(event, None, floor=1_000) is None


def test_the_queue_remembers_an_event_answered_elsewhere_without_queueing_it() -> None:
    queue = DispatchQueue()
    event = chat(OWNER, 1_000, content="hello")
    assert not queue.knows(event.id)
    queue.remember(event.id)
    assert queue.knows(event.id) and queue.push(event, now=1.0).duplicate
    assert queue.channel_names() == []
