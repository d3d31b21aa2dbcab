"""The turn ledger (docs/envelope.md "The turn ledger (steers)")."""

from __future__ import annotations

import json

from nostr_buzz.core.compiler import compile_steer, compile_turn
from nostr_buzz.core.ledger import TurnLedger
from nostr_buzz.core.turn_input import TurnInput
from nostr_buzz.event import sign_event
from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers
from tests.support import golden_gen
from tests.support.data import FIXTURES


def lay(order: int, name: str, version: str = "v") -> Layer:
    return Layer(order, name, "turn", "src", version, "evidence", "current", 1, False)


def base_manifest() -> Manifest:
    return manifest_from_layers([lay(1, "a"), lay(6, "b"), lay(7, "c"), lay(8, "d")])


def test_no_base_is_none() -> None:
    ledger = TurnLedger()
    assert ledger.snapshot() is None
    ledger.accept_update(manifest_from_layers([lay(8, "steer")]))
    assert ledger.snapshot() is None  # updates alone describe no turn


def test_base_alone_is_the_base() -> None:
    ledger = TurnLedger()
    ledger.set_base(base_manifest())
    assert ledger.snapshot() == base_manifest()


def test_updates_interleave_by_order_stably_and_change_the_hash() -> None:
    ledger = TurnLedger()
    ledger.set_base(base_manifest())
    before = ledger.snapshot()
    assert before is not None
    ledger.accept_update(manifest_from_layers([lay(6, "u6"), lay(8, "u8"), lay(7, "u7")]))
    after = ledger.snapshot()
    assert after is not None
    assert [(x.order, x.layer) for x in after.layers] == [
        (1, "a"),
        (6, "b"),
        (6, "u6"),
        (7, "c"),
        (7, "u7"),
        (8, "d"),
        (8, "u8"),
    ]
    assert after.hash != before.hash
    assert after.hash_matches()
    ledger.accept_update(manifest_from_layers([lay(7, "second")]))
    again = ledger.snapshot()
    assert again is not None
    assert [x.layer for x in again.layers if x.order == 7] == ["c", "u7", "second"]
    assert again.hash not in (before.hash, after.hash)
    assert Manifest.from_json(again.to_json()) == again


def test_reset_clears_base_and_updates() -> None:
    ledger = TurnLedger()
    ledger.set_base(base_manifest())
    ledger.accept_update(manifest_from_layers([lay(8, "steer")]))
    ledger.reset()
    assert ledger.snapshot() is None
    ledger.set_base(base_manifest())
    assert ledger.snapshot() == base_manifest()  # the old update is gone


def test_real_turn_with_an_injected_steer() -> None:
    """startedNewTurn / failed steers are the caller's job: it simply never calls accept_update."""
    raw = (FIXTURES / "turns" / "thread_reply_with_history.input.json").read_bytes()
    compiled = compile_turn(TurnInput.from_json(raw))
    event = sign_event(
        golden_gen.MORGAN,
        kind=9,
        content="Also check the canary.",
        tags=[["h", golden_gen.CHANNEL]],
        created_at=golden_gen.T0 + 130,
        aux_rand=bytes(32),
    )
    steer = compile_steer(event, channel_id=golden_gen.CHANNEL)
    ledger = TurnLedger()
    ledger.reset()
    ledger.set_base(compiled.manifest)
    ledger.accept_update(steer.manifest)
    snapshot = ledger.snapshot()
    assert snapshot is not None
    assert [x.order for x in snapshot.layers] == [1, 2, 3, 4, 6, 6, 6, 7, 7, 8, 8, 8]
    assert snapshot.layers[-1].layer == "steer_delivery_contract"
    assert snapshot.hash != compiled.manifest.hash
    assert json.loads(snapshot.to_json())["schemaVersion"] == 1
