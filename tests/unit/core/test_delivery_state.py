"""Where an outbox entry stands on each relay it is meant for (core/delivery_state.py): pure."""

from __future__ import annotations

import pytest

from nostr_buzz.core.delivery_state import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    RelayRecord,
    after_answer,
    backoff_delay,
    complete,
    due_relays,
    next_attempt,
    waiting,
)

A, B, C = "wss://a.example", "wss://b.example", "wss://c.example"


def test_an_acceptance_is_for_good_and_a_later_failure_changes_nothing() -> None:
    taken = after_answer(None, A, ok=True, error=None, now=10.0, u=0.5)
    assert taken.accepted and taken.accepted_at == 10.0 and taken.state == "accepted"
    again = after_answer(taken, A, ok=False, error="error: down", now=20.0, u=0.5)
    assert again == taken


def test_each_failure_backs_the_relay_off_on_its_own() -> None:
    first = after_answer(None, B, ok=False, error="timeout", now=100.0, u=0.5)
    assert first.state == "failing" and first.attempts == 1 and first.last_error == "timeout"
    assert first.next_attempt == 100.0 + BACKOFF_BASE
    second = after_answer(first, B, ok=False, error="blocked: no", now=200.0, u=0.5)
    assert second.attempts == 2 and second.next_attempt == 200.0 + 2 * BACKOFF_BASE
    assert second.last_error == "blocked: no"
    # Then it accepts: the error is gone, the count of failures stays as the record of them.
    third = after_answer(second, B, ok=True, error=None, now=300.0, u=0.5)
    assert third.accepted and third.last_error is None and third.attempts == 2


def test_a_rate_limited_pause_holds_the_retry_back() -> None:
    record = after_answer(None, A, ok=False, error="rate-limited:", now=0.0, u=0.5, not_before=60.0)
    assert record.next_attempt == 60.0


def test_the_backoff_is_capped_and_jittered_within_twenty_percent() -> None:
    assert backoff_delay(1, 0.0) == pytest.approx(BACKOFF_BASE * 0.8)
    assert backoff_delay(1, 1.0) == pytest.approx(BACKOFF_BASE * 1.2)
    assert backoff_delay(40, 1.0) == BACKOFF_CAP


def test_waiting_due_and_complete_follow_the_relays_meant() -> None:
    records = [
        RelayRecord(A, accepted_at=1.0),
        RelayRecord(B, attempts=2, next_attempt=50.0, last_error="timeout"),
    ]
    assert waiting([A, B, C], records) == [B, C]
    # C was never tried: due at once; B only once its own backoff ends.
    assert due_relays([A, B, C], records, now=10.0) == [C]
    assert due_relays([A, B, C], records, now=50.0) == [B, C]
    assert next_attempt([A, B, C], records) == 0.0
    assert next_attempt([A, B], records) == 50.0
    assert next_attempt([A], records) is None
    assert not complete([A, B], records)
    assert complete([A], records)
    assert not complete([], records)  # nothing meant is nothing delivered


def test_a_relay_named_twice_counts_once() -> None:
    assert waiting([A, A, B], []) == [A, B]
    assert RelayRecord(A).state == "pending"
