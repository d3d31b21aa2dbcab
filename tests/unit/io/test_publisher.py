"""The outbox's bound: an entry no relay took is given up after ``give_up_after`` seconds of
the publisher's clock, reported once, and never sent again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nostr_buzz.errors import RelayError
from nostr_buzz.io.outbox import GIVE_UP_AFTER, Outbox
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.io.relay import Verdict
from tests.support.keys import AGENT, OWNER
from tests.unit.io.test_outbox import metric


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_an_entry_is_given_up_at_the_bound_and_never_listed_again(tmp_path: Path) -> None:
    clock = Clock(1_000.0)
    reports: list[PublishReport] = []
    event = metric()
    box = Outbox(tmp_path / "outbox.sqlite3")
    box.add(event, now=clock.now)
    # One refused attempt whose retry is not due before the bound, so the publisher never
    # sends (no socket in a unit test).
    refused = Verdict("ws://r", event.id, False, False, "", "no")
    box.record_attempt(event.id, 10.0**12, [refused])
    pub = MetricPublisher(
        AGENT, OWNER.public_key, box, ["ws://127.0.0.1:9"], clock=clock, on_report=reports.append
    )
    assert pub.give_up_after == GIVE_UP_AFTER == 7 * 86400

    clock.now += GIVE_UP_AFTER - 1
    assert asyncio.run(pub.flush()) == []
    assert box.pending_count() == 1 and reports == []

    clock.now += 1
    [report] = asyncio.run(pub.flush())
    assert report.given_up and not report.delivered and report.event == event
    assert report.attempts == 1
    assert report.error == "given up after 604800 s and 1 attempt(s); last error: ws://r: no"
    assert reports == [report]
    assert box.pending_count() == 0 and box.get(event.id) is None

    clock.now += GIVE_UP_AFTER
    assert asyncio.run(pub.flush()) == []
    assert reports == [report]
    box.close()


def test_the_bound_is_the_publishers_setting_and_none_keeps_entries(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox.sqlite3")
    event = metric()
    box.add(event, now=0.0, due=10.0**12)
    keep = MetricPublisher(
        AGENT,
        OWNER.public_key,
        box,
        ["ws://127.0.0.1:9"],
        clock=lambda: 10.0**9,
        give_up_after=None,
    )
    assert asyncio.run(keep.flush()) == [] and box.pending_count() == 1
    short = MetricPublisher(
        AGENT, OWNER.public_key, box, ["ws://127.0.0.1:9"], clock=lambda: 60.0, give_up_after=60
    )
    assert [r.event_id for r in asyncio.run(short.flush())] == [event.id]
    with pytest.raises(RelayError, match="give_up_after"):
        MetricPublisher(AGENT, OWNER.public_key, box, ["ws://x"], give_up_after=0)
    box.close()
