"""The OpenTelemetry sink against the tests' OTLP receiver (a real HTTP server decoding the
official protobufs): what a failed turn, a turn with its words exported, a steer's own turn
and a turn the stop cut short look like on the wire."""

from __future__ import annotations

import json

from nostr_buzz.core.ledger import MAX_RETRIEVALS
from nostr_buzz.core.telemetry import RetrievalSeen, Telemetry, TurnBegan, TurnEnded
from nostr_buzz.io.otel import OtelSink, provider_of
from nostr_buzz.nips.nip_am import TokenCounts
from tests.support.otlp_receiver import attributes_of, otlp_receiver

T = 1_800_000_000.0
ERROR = 2  # Status.STATUS_CODE_ERROR


def sink(url: str, **changes: object) -> OtelSink:
    telemetry = Telemetry(endpoint=url, **changes)  # type: ignore[arg-type]
    return OtelSink(
        telemetry,
        agent_id="ab" * 32,
        agent_name=lambda: "codex",
        request_model="gpt-5",
        in_process=False,
    )


async def test_each_way_a_turn_ends_is_one_span_on_the_wire() -> None:
    with otlp_receiver() as receiver:
        otel = sink(receiver.url, export_content=True, agent_name="ops-bot")
        otel.on_turn_started(TurnBegan("ok", "eng", False, T, ("e1",), ("why is it red?",)))
        otel.on_turn_finished(
            TurnEnded(
                "ok", "eng", False, T + 2, T, "success", model="gpt-5-2025", reply="flaky test"
            )
        )
        otel.on_turn_started(TurnBegan("bad", "eng", False, T))
        usage = TokenCounts(100, 0, 100, None)
        otel.on_turn_finished(
            TurnEnded("bad", "eng", False, T + 9, T, "failed", error_type="timeout", usage=usage)
        )
        # A steer's own turn: never started, finished with its own start time.
        otel.on_turn_finished(TurnEnded("own", "eng", False, T + 5, T + 3, "success"))
        otel.on_turn_started(TurnBegan("cut", "eng", False, T))
        await otel.aclose()  # the stop cuts the last turn short
    spans = {
        attributes_of(s.attributes)["nostr_buzz.turn.id"]: s for s in receiver.received.spans()
    }
    assert sorted(spans) == ["bad", "cut", "ok", "own"]
    ok = attributes_of(spans["ok"].attributes)
    assert spans["ok"].name == "invoke_agent ops-bot"
    assert (ok["gen_ai.request.model"], ok["gen_ai.response.model"]) == ("gpt-5", "gpt-5-2025")
    assert ok["gen_ai.provider.name"] == "openai"
    assert json.loads(ok["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "why is it red?"}]}
    ]
    assert json.loads(ok["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "flaky test"}]}
    ]
    assert spans["ok"].end_time_unix_nano - spans["ok"].start_time_unix_nano == 2_000_000_000
    bad = attributes_of(spans["bad"].attributes)
    assert spans["bad"].status.code == ERROR and bad["error.type"] == "timeout"
    assert bad["nostr_buzz.outcome"] == "failed"
    assert spans["own"].start_time_unix_nano == int((T + 3) * 1e9)
    cut = attributes_of(spans["cut"].attributes)
    assert spans["cut"].status.code == ERROR and cut["error.type"] == "abandoned"
    # The failed turn's duration carries its error type; its tokens count as used.
    durations = receiver.received.metric_points("gen_ai.client.operation.duration")
    assert sorted(a.get("error.type", "") for a, _ in durations) == ["", "", "timeout"]
    tokens = receiver.received.metric_points("gen_ai.client.token.usage")
    counted = [(a["gen_ai.token.type"], p.sum) for a, p in tokens]
    assert counted == [("input", 100.0), ("output", 0.0)]


async def test_metrics_off_sends_spans_only() -> None:
    with otlp_receiver() as receiver:
        otel = sink(receiver.url, metrics=False)
        otel.on_turn_finished(TurnEnded("t", "eng", False, T + 1, T, "success"))
        await otel.aclose()
    assert len(receiver.received.spans()) == 1
    assert receiver.received.metrics == []


async def test_every_retrieval_a_turn_may_record_stays_on_its_span() -> None:
    # More than the SDK's default of 128 events a span: a turn's retrievals are all there.
    with otlp_receiver() as receiver:
        otel = sink(receiver.url, metrics=False)
        otel.on_turn_started(TurnBegan("t", "eng", False, T))
        for index in range(MAX_RETRIEVALS):
            found = RetrievalSeen(
                "fetch_thread", "found", T + 1, "retrieved_event", "relay_event", f"{index:064x}"
            )
            otel.on_retrieval("t", found)
        otel.on_retrieval("t", RetrievalSeen("fetch_event", "not_found", T + 2, ref="ff" * 32))
        otel.on_turn_finished(TurnEnded("t", "eng", False, T + 3, T, "success"))
        await otel.aclose()
    [span] = receiver.received.spans()
    assert span.dropped_events_count == 0
    events = [attributes_of(e.attributes) for e in span.events]
    assert len(events) == MAX_RETRIEVALS + 1
    assert {e["gen_ai.tool.name"] for e in events[:-1]} == {"fetch_thread"}
    assert events[0]["nostr_buzz.retrieval.ref"] == "0" * 64
    assert events[-1] == {
        "gen_ai.tool.name": "fetch_event",
        "nostr_buzz.retrieval.outcome": "not_found",
        "nostr_buzz.retrieval.ref": "ff" * 32,
    }
    assert span.events[-1].name == "nostr_buzz.retrieval"
    assert span.events[-1].time_unix_nano == int((T + 2) * 1e9)


def test_the_provider_is_configured_or_known_from_the_harness() -> None:
    assert provider_of("claude", None) == "anthropic"
    assert provider_of("goose", None) == "_OTHER"
    assert provider_of("claude", "aws.bedrock") == "aws.bedrock"
