"""A small world of metrics for the owner's reader and ``buzz metrics``.

``scenario()`` holds two agents, three sessions over two days, created_at deliberately out of
turn order, a decreasing cumulative counter, a manifest with a wrong hash, and four forged
metrics that must be ignored and counted.  ``publish_all`` puts events on a relay.
"""

from __future__ import annotations

from dataclasses import dataclass

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.keys import SecretKey
from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers
from nostr_buzz.nips import nip44
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, build_metric_event
from tests.support.keys import OWNER

OTHER_OWNER = SecretKey.from_str("0f" * 32)
AGENT_A = SecretKey.from_str("a1" * 32)
AGENT_B = SecretKey.from_str("b2" * 32)

LAYER = Layer(0, "system", "global", "harness", "v1", "host", "static", 40, False)
GOOD_MANIFEST = manifest_from_layers([LAYER])
TAMPERED_MANIFEST = Manifest(1, "sha256:" + "0" * 64, (LAYER,))


def counts(i: int | None, o: int | None, t: int | None, c: float | None) -> TokenCounts:
    return TokenCounts(i, o, t, c)


def metric(agent: SecretKey, payload: MetricPayload, owner: SecretKey = OWNER) -> Event:
    return build_metric_event(agent, owner.public_key, payload)


@dataclass
class Scenario:
    valid: list[Event]
    forged: list[Event]
    elsewhere: list[Event]  # for another owner: relays never return them for our #p

    @property
    def all(self) -> list[Event]:
        return self.valid + self.forged + self.elsewhere


def forged_metrics() -> list[Event]:
    p = MetricPayload(harness="goose", timestamp="2026-12-02T09:00:00.000Z", model="m")
    honest = metric(AGENT_A, p)
    two_owners = sign_event(
        AGENT_A,
        kind=44200,
        content=honest.content,
        tags=(
            ("p", OWNER.public_key.hex),
            ("p", OTHER_OWNER.public_key.hex),
            ("agent", AGENT_A.public_key.hex),
        ),
        created_at=honest.created_at,
    )
    impersonating = sign_event(
        AGENT_A,
        kind=44200,
        content=honest.content,
        tags=(("p", OWNER.public_key.hex), ("agent", AGENT_B.public_key.hex)),
        created_at=honest.created_at + 1,
    )
    for_someone_else = metric(AGENT_A, p, owner=OTHER_OWNER)
    undecryptable = sign_event(
        AGENT_A,
        kind=44200,
        content=for_someone_else.content,
        tags=(("p", OWNER.public_key.hex), ("agent", AGENT_A.public_key.hex)),
        created_at=honest.created_at + 2,
    )
    key = nip44.conversation_key(AGENT_A, OWNER.public_key)
    not_a_payload = sign_event(
        AGENT_A,
        kind=44200,
        content=nip44.encrypt('{"harness":"","timestamp":"nope"}', key),
        tags=(("p", OWNER.public_key.hex), ("agent", AGENT_A.public_key.hex)),
        created_at=honest.created_at + 3,
    )
    return [two_owners, impersonating, undecryptable, not_a_payload]


def scenario() -> Scenario:
    # Agent A, session a1 (goose-style running totals).  Timestamps run backwards while
    # turnSeq runs forwards, so created_at order is the reverse of turn order.
    a1 = [
        MetricPayload(
            harness="goose",
            timestamp="2026-12-02T12:00:00.000Z",
            model="model-a",
            session_id="a1",
            turn_seq=1,
            turn=counts(100, 10, 110, 0.01),
            cumulative=counts(100, 10, 110, 0.01),
            context_manifest=GOOD_MANIFEST,
        ),
        MetricPayload(
            harness="goose",
            timestamp="2026-12-02T11:00:00.000Z",
            model="model-a",
            session_id="a1",
            turn_seq=2,
            turn=counts(None, None, None, None),  # the publisher could not tell …
            cumulative=counts(250, 30, 280, 0.03),  # … but the reader can
            delta_reliable=False,
            context_manifest=TAMPERED_MANIFEST,
        ),
        MetricPayload(
            harness="goose",
            timestamp="2026-12-02T10:00:00.000Z",
            model="model-a",
            session_id="a1",
            turn_seq=3,
            turn=counts(7, 7, 7, 0.7),  # stale report; the counters went down: unknown
            cumulative=counts(200, 40, 240, 0.04),
        ),
    ]
    # Agent B: per-turn (standard) usage over two days, one turn without a cost.
    b = [
        MetricPayload(
            harness="codex",
            timestamp="2026-12-01T23:59:59.999Z",
            model="model-b",
            session_id="b1",
            turn_seq=1,
            turn=counts(1000, 100, 1100, 0.5),
        ),
        MetricPayload(
            harness="codex",
            timestamp="2026-12-02T00:00:00.000Z",
            model="model-b",
            session_id="b1",
            turn_seq=2,
            turn=counts(2000, 200, 2200, None),
        ),
        MetricPayload(
            harness="codex",
            timestamp="2026-12-02T08:00:00.000Z",
            model="model-b",
            turn=counts(1, 2, 3, 0.25),  # no session: reported as is
        ),
    ]
    valid = [metric(AGENT_A, p) for p in a1] + [metric(AGENT_B, p) for p in b]
    elsewhere = [metric(AGENT_A, a1[0], owner=OTHER_OWNER)]
    return Scenario(valid, forged_metrics(), elsewhere)


async def publish_all(url: str, events: list[Event]) -> None:
    pool = RelayPool([url], timeout=5)
    for event in events:
        assert (await pool.publish(event)).ok
