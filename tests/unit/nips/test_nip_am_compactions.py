"""NIP-AM's optional ``compactions`` field (nips/NIP-AM.md): written only for a turn in which the
agent compacted, checked both ways, and invisible to a payload without it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from nostr_buzz.cli.metrics import render_csv
from nostr_buzz.errors import MetricError
from nostr_buzz.event import Event
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event, open_metric_event
from nostr_buzz.reports.metrics_report import OpenedMetric, build_report, open_metric
from tests.support.keys import AGENT, OWNER
from tests.support.metric_scenario import AGENT_A, metric
from tests.support.metric_scenario import OWNER as OWNER_OF_SCENARIO

BASE = MetricPayload(harness="claude", timestamp="2026-12-02T14:05:09.987Z")


def test_a_turn_that_compacted_says_so_and_reads_back() -> None:
    compacted = msgspec.structs.replace(BASE, compactions=2)
    assert json.loads(compacted.to_json())["compactions"] == 2
    sealed = build_metric_event(AGENT, OWNER.public_key, compacted)
    assert open_metric_event(OWNER, sealed).compactions == 2


def test_a_payload_without_it_keeps_its_bytes_and_reads_as_none() -> None:
    assert "compactions" not in BASE.to_json()
    assert BASE.to_json() == (
        '{"harness":"claude","timestamp":"2026-12-02T14:05:09.987Z","model":null,'
        '"channelId":null,"sessionId":null,"turnId":null,"turnSeq":null,"turn":null,'
        '"cumulative":null,"deltaReliable":true}'
    )
    assert MetricPayload.from_json(BASE.to_json()).compactions is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_a_writer_cannot_say_nonsense(bad: Any) -> None:
    with pytest.raises(MetricError, match="compactions"):
        msgspec.structs.replace(BASE, compactions=bad)


@pytest.mark.parametrize("bad", ["null", "0", "-3", "1.0", "true", '"2"'])
def test_a_reader_refuses_nonsense(bad: str) -> None:
    with pytest.raises(MetricError):
        MetricPayload.from_json(BASE.to_json()[:-1] + f',"compactions":{bad}}}')


def test_the_owners_report_shows_which_turns_compacted() -> None:
    payloads = [
        msgspec.structs.replace(BASE, session_id="s", turn_seq=n, compactions=c)
        for n, c in ((1, None), (2, 1), (3, None))
    ]
    report = build_report(opened([metric(AGENT_A, p) for p in payloads]))
    rows = sorted(report.turns, key=lambda r: r.turn_seq or 0)
    assert [r.compactions for r in rows] == [None, 1, None]
    csv = render_csv(report, turns=True).splitlines()
    column = csv[0].split(",").index("compactions")
    assert [line.split(",")[column] for line in csv[1:]] == ["", "1", ""]


def opened(events: list[Event]) -> list[OpenedMetric]:
    out = [open_metric(OWNER_OF_SCENARIO, event) for event in events]
    assert all(isinstance(m, OpenedMetric) for m in out), out
    return [m for m in out if isinstance(m, OpenedMetric)]
