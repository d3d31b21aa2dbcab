"""NIP-AM's optional ``compactions`` field (nips/NIP-AM.md): written only for a turn in which the
agent compacted, checked both ways, and invisible to a payload without it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from nostr_buzz.errors import MetricError
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event, open_metric_event
from tests.support.keys import AGENT, OWNER

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
