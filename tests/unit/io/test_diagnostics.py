"""The local observer feed (docs/bot.md "Local observer diagnostics")."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nostr_buzz.errors import SECRET_HINT
from nostr_buzz.io.diagnostics import DiagnosticRecord, DiagnosticsFeed, rfc3339_ms
from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers

T0 = datetime(2026, 12, 2, 15, 0, 0, 123456, tzinfo=UTC)
PROMPT = "<buzz-turn>\nthe secret plan of the user\n</buzz-turn>"


def _clock() -> Callable[[], datetime]:
    ticks = iter(range(1000))
    return lambda: T0 + timedelta(milliseconds=next(ticks))


def _manifest() -> Manifest:
    layer = Layer(
        order=7,
        layer="current_instruction",
        scope="turn",
        source="nostr_event",
        version="v1",
        authority="authoritative",
        freshness="current",
        estimated_tokens=3,
        truncated=False,
    )
    return manifest_from_layers([layer])


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_records_have_the_wire_shape_and_increasing_seq(tmp_path: Path) -> None:
    path = tmp_path / "state" / "diagnostics.jsonl"
    seen: list[DiagnosticRecord] = []
    with DiagnosticsFeed(path, clock=_clock(), callback=seen.append) as feed:
        ids = dict(channel_id="general", session_id="s-1", turn_id="t-1")
        feed.turn_started(["a" * 64, "b" * 64], **ids)
        feed.prompt_context_delivery(
            ["<base>\nx\n</base>", PROMPT],
            _manifest(),
            standing_context_included=True,
            event_delta_count=2,
            **ids,
        )
        feed.prompt_context_steer("injected", _manifest(), **ids)
        feed.turn_completed("success", "end_turn", **ids)
        feed.metric_queued("c" * 64, **ids)
        feed.metric_published("c" * 64, ["ws://127.0.0.1:7777"], **ids)
        feed.event_rejected("bad_signature", event_id="d" * 64)
    records = _lines(path)
    assert [r["kind"] for r in records] == [
        "turn_started",
        "prompt_context_delivery",
        "prompt_context_steer",
        "turn_completed",
        "metric_queued",
        "metric_published",
        "event_rejected",
    ]
    assert [r["seq"] for r in records] == list(range(1, 8))
    for record in records:
        assert list(record) == [
            "seq",
            "timestamp",
            "kind",
            "channelId",
            "sessionId",
            "turnId",
            "payload",
        ]
    assert records[0]["timestamp"] == "2026-12-02T15:00:00.123Z"
    assert records[1]["timestamp"] == "2026-12-02T15:00:00.124Z"
    delivery = records[1]["payload"]
    assert isinstance(delivery, dict)
    assert delivery["promptBytes"] == len(b"<base>\nx\n</base>") + len(PROMPT.encode())
    assert delivery["standingContextIncluded"] is True
    assert delivery["eventDeltaCount"] == 2
    assert delivery["contextManifest"] == json.loads(_manifest().to_json())
    assert records[3]["payload"] == {"outcome": "success", "stopReason": "end_turn"}
    assert records[5]["payload"] == {"eventId": "c" * 64, "relays": ["ws://127.0.0.1:7777"]}
    assert records[6]["channelId"] is None and records[6]["payload"]["reason"] == "bad_signature"  # type: ignore[index]
    # The callback saw the same records, in order.
    assert [r.seq for r in seen] == list(range(1, 8))
    assert "the secret plan" not in path.read_text(encoding="utf-8")


def test_prompt_text_only_with_the_flag(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    with DiagnosticsFeed(path, clock=_clock(), include_prompt_text=True) as feed:
        feed.prompt_context_delivery(
            [PROMPT],
            _manifest(),
            standing_context_included=False,
            event_delta_count=0,
            channel_id="c",
            session_id=None,
            turn_id=None,
        )
    assert _lines(path)[0]["payload"]["promptText"] == [PROMPT]  # type: ignore[index]


def test_seq_continues_after_a_restart_and_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    with DiagnosticsFeed(path, clock=_clock()) as feed:
        feed.emit("turn_started")
        feed.emit("turn_completed")
    with open(path, "ab") as fh:
        fh.write(b'{"seq": 3, "timest')  # a crash mid-write
    with DiagnosticsFeed(path, clock=_clock()) as feed:
        assert feed.seq == 2
        assert feed.emit("metric_queued").seq == 3


def test_secret_looking_values_are_never_written(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    nsec = "nsec1" + "q" * 58
    with DiagnosticsFeed(path, clock=_clock()) as feed:
        feed.emit("event_rejected", payload={"reason": nsec, "nested": [{"k": nsec}]})
    text = path.read_text(encoding="utf-8")
    assert nsec not in text
    assert _lines(path)[0]["payload"] == {"reason": SECRET_HINT, "nested": [{"k": SECRET_HINT}]}


def test_in_process_feed_without_a_file() -> None:
    seen: list[DiagnosticRecord] = []
    feed = DiagnosticsFeed(None, clock=_clock(), callback=seen.append)
    feed.turn_completed("failed", "error", channel_id="c", session_id="s", turn_id="t")
    feed.close()
    assert seen[0].kind == "turn_completed" and seen[0].payload["outcome"] == "failed"


def test_timestamps_need_an_aware_clock() -> None:
    assert rfc3339_ms(datetime(2026, 1, 2, 3, 4, 5, 999999, tzinfo=UTC)) == (
        "2026-01-02T03:04:05.999Z"
    )
    with pytest.raises(ValueError, match="aware"):
        rfc3339_ms(datetime(2026, 1, 2))
