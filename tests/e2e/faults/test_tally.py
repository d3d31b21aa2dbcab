"""The fault tests' own counting (procs.tally), on hand-made replies and metrics: a lost, a
twice-metered, an unreplied and a steered mention are each told apart, and a reply split into
parts counts once."""

from __future__ import annotations

from nostr_buzz.core.compiler import compile_steer
from nostr_buzz.event import Event, sign_event
from nostr_buzz.nips.nip_am import MetricPayload
from tests.support.fault_harness import Cast, mention, tally

CAST = Cast.generate()


def _metric(turn: str, *ids: str, steered: Event | None = None) -> MetricPayload:
    manifest = compile_steer(steered, channel_id="c").manifest if steered else None
    return MetricPayload(
        harness="demo",
        timestamp="2026-12-03T08:00:00.000Z",
        turn_id=turn,
        triggering_event_ids=ids,
        context_manifest=manifest,
    )


def _reply(target: Event, text: str = "answer") -> Event:
    tags = [["h", "c"], ["e", target.id, "", "root", target.pubkey]]
    return sign_event(CAST.agent, kind=9, content=text, tags=tags, created_at=target.created_at)


def _mentions(n: int) -> list[Event]:
    return [mention(CAST, CAST.owner, f"m{i}", channel="c") for i in range(n)]


def test_every_mention_answered_once_is_ok() -> None:
    a, b, steer = _mentions(3)
    metrics = [_metric("t1", a.id, b.id, steered=steer)]
    result = tally([a, b, steer], [], metrics, [_reply(b)])
    assert result.ok, result.summary()
    assert len(result.answered) == 3


def test_lost_twice_and_unreplied_mentions_are_told_apart() -> None:
    lost, twice, unreplied, fine = _mentions(4)
    metrics = [_metric("t1", twice.id), _metric("t2", twice.id), _metric("t3", unreplied.id)]
    metrics.append(_metric("t4", fine.id))
    replies = [_reply(twice), _reply(fine)]
    result = tally([lost, twice, unreplied, fine], [], metrics, replies)
    assert not result.ok
    assert (result.lost, result.twice, result.unreplied) == ([lost.id], [twice.id], [unreplied.id])
    assert result.answered == [fine.id]
    assert result.duplicate_metrics == 1
    assert result.metrics_without_reply == 1


def test_a_repeated_turn_id_and_a_second_reply_are_duplicates() -> None:
    (a,) = _mentions(1)
    result = tally([a], [], [_metric("t1", a.id), _metric("t1", a.id)], [_reply(a), _reply(a)])
    assert result.duplicate_metrics == 1 and result.extra_replies == 1
    assert not result.ok


def test_a_reply_split_into_parts_counts_once_and_refused_answers_are_caught() -> None:
    a, stranger = _mentions(2)
    parts = [_reply(a, "[1/2]\nfirst half"), _reply(a, "[2/2]\nsecond half")]
    assert tally([a], [], [_metric("t1", a.id)], parts).ok
    answered_stranger = tally([a], [stranger], [_metric("t1", a.id, stranger.id)], parts)
    assert answered_stranger.refused_answered == [stranger.id]
    assert not answered_stranger.ok
