"""MetricPublisher without a socket: the outbox's bound (an entry no relay took is given up
after ``give_up_after`` seconds of the publisher's clock, reported once, and never sent again);
publish either raises or returns a receipt; the agent's key as a secret, a Signer or only its
public key.  Relays here are a pool factory (the publisher's documented seam) whose verdicts
the test writes; the wire is tested in tests/e2e/io/test_publisher.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nostr_buzz.errors import InvalidKey, MetricError, RelayError
from nostr_buzz.event import Event
from nostr_buzz.io.outbox import GIVE_UP_AFTER, Outbox
from nostr_buzz.io.pool import PublishResult
from nostr_buzz.io.publisher import MetricPublisher, PublishReport
from nostr_buzz.io.relay import Verdict
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import LocalSigner
from nostr_buzz.nips.nip_am import MetricPayload, build_metric_event, open_metric_event
from nostr_buzz.signer import EventTemplate, SignerError
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


class Relays:
    """A pool factory: each relay answers as the test says (``OK true`` or a refusal)."""

    def __init__(self, answers: dict[str, bool]) -> None:
        self.answers = answers
        self.sent: list[Event] = []

    def __call__(self) -> Relays:
        return self

    async def publish(
        self, event: Event, *, min_ok: int = 1, timeout: float | None = None
    ) -> PublishResult:
        self.sent.append(event)
        verdicts = {
            url: Verdict(url, event.id, ok, False, "" if ok else "blocked:", "" if ok else "no")
            for url, ok in self.answers.items()
        }
        return PublishResult(event.id, verdicts, min_ok)


def good_payload() -> MetricPayload:
    return MetricPayload(harness="goose", timestamp="2026-12-02T10:00:01.000Z", turn_seq=1)


def test_publish_returns_a_receipt_delivered_or_stored(tmp_path: Path) -> None:
    reports: list[PublishReport] = []
    relays = Relays({"ws://a": False, "ws://b": True})
    pub = MetricPublisher(
        AGENT, OWNER.public_key, tmp_path / "o.db", relays, on_report=reports.append
    )
    receipt = asyncio.run(pub.publish(good_payload()))
    assert receipt.delivered and receipt.stored and receipt.accepted_by == ["ws://b"]
    assert receipt.event is not None and relays.sent == [receipt.event]
    assert reports == [receipt] and pub.pending_count() == 0

    relays.answers = {"ws://a": False}
    kept = asyncio.run(pub.publish(good_payload()))
    assert kept.stored and not kept.delivered and kept.accepted_by == []
    assert kept.next_attempt is not None and kept.error == "ws://a: no"
    assert pub.pending_count() == 1
    pub.close()


def test_publish_raises_for_a_payload_it_cannot_publish_and_stores_nothing(
    tmp_path: Path,
) -> None:
    reports: list[PublishReport] = []
    relays = Relays({"ws://a": True})
    pub = MetricPublisher(
        AGENT, OWNER.public_key, tmp_path / "o.db", relays, on_report=reports.append
    )
    too_big = MetricPayload(harness="x" * 70_000, timestamp="2026-12-02T10:00:01.000Z")
    with pytest.raises(MetricError, match="65535"):
        asyncio.run(pub.publish(too_big))
    with pytest.raises(MetricError, match="MetricPayload"):
        asyncio.run(pub.publish({"harness": "goose"}))  # type: ignore[arg-type]
    assert relays.sent == [] and reports == [] and pub.pending_count() == 0
    pub.close()


def test_a_publisher_with_only_the_public_key_submits_what_was_signed_elsewhere(
    tmp_path: Path,
) -> None:
    relays = Relays({"ws://a": True})
    for agent in (AGENT.public_key, AGENT.public_key.bech32):
        pub = MetricPublisher(agent, OWNER.public_key, tmp_path / "o.db", relays)
        event = build_metric_event(AGENT, OWNER.public_key, good_payload())
        receipt = asyncio.run(pub.submit(event))
        assert receipt.delivered and receipt.event == event
        with pytest.raises(MetricError, match="only the agent's public key"):
            asyncio.run(pub.publish(good_payload()))
        # Another key's metric is not this agent's to store.
        stranger = build_metric_event(SecretKey.generate(), OWNER.public_key, good_payload())
        with pytest.raises(MetricError, match="signed by the agent"):
            asyncio.run(pub.submit(stranger))
        pub.close()


def test_a_signer_publishes_in_place_of_the_secret_key(tmp_path: Path) -> None:
    relays = Relays({"ws://a": True})
    pub = MetricPublisher(LocalSigner(AGENT), OWNER.public_key, tmp_path / "o.db", relays)
    receipt = asyncio.run(pub.publish(good_payload()))
    assert receipt.delivered and receipt.event is not None
    assert receipt.event.pubkey == AGENT.public_key.hex
    assert open_metric_event(OWNER, receipt.event) == good_payload()
    pub.close()


class KeySwappingSigner(LocalSigner):
    """A signer that signs with another key than the one it names."""

    def __init__(self) -> None:
        super().__init__(AGENT)
        self._other = LocalSigner(SecretKey.generate())

    async def sign_event(self, unsigned: EventTemplate) -> Event:
        return await self._other.sign_event(unsigned)


def test_a_signer_that_signs_with_another_key_is_refused(tmp_path: Path) -> None:
    relays = Relays({"ws://a": True})
    pub = MetricPublisher(KeySwappingSigner(), OWNER.public_key, tmp_path / "o.db", relays)
    with pytest.raises(SignerError, match="another key"):
        asyncio.run(pub.publish(good_payload()))
    assert relays.sent == [] and pub.pending_count() == 0
    pub.close()


@pytest.mark.parametrize("agent", ["nsec1notakey", "ab" * 31, 5, None])
def test_a_bad_agent_key_is_invalid_key_and_never_shown(tmp_path: Path, agent: object) -> None:
    with pytest.raises(InvalidKey) as info:
        MetricPublisher(agent, OWNER.public_key, tmp_path / "o.db", ["ws://a"])  # type: ignore[arg-type]
    assert "nsec1notakey" not in str(info.value)
    with pytest.raises(InvalidKey, match="owner"):
        MetricPublisher(AGENT, "npub1nope", tmp_path / "o.db", ["ws://a"])
