"""The pure manifest diff: layers matched by (name, occurrence), fields, prefix, reordering."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from nostr_buzz.manifest import Layer, manifest_from_layers
from nostr_buzz.reports.manifest_diff import (
    AddedLayer,
    ChangedLayer,
    LayerKey,
    RemovedLayer,
    diff_manifests,
    keyed_layers,
)


def layer(
    name: str,
    version: str = "v1",
    *,
    order: int = 6,
    tokens: int = 10,
    truncated: bool = False,
    scope: str = "turn",
) -> Layer:
    return Layer(
        order=order,
        layer=name,
        scope=scope,
        source="src",
        version=version,
        authority="evidence",
        freshness="current",
        estimated_tokens=tokens,
        truncated=truncated,
    )


BASE = [
    layer("platform_contract", "sha256:base", order=1),
    layer("context_status", "sha256:status", order=6),
    layer("current_instruction", "event-1", order=7),
    layer("delivery_contract", "sha256:delivery", order=8),
]


def test_identical_manifests() -> None:
    m = manifest_from_layers(BASE)
    d = diff_manifests(m, m)
    assert d.identical and not d.hash_changed
    assert d.hash_before == d.hash_after == m.hash
    assert d.added == d.removed == d.changed == ()
    assert [k.layer for k in d.unchanged] == [x.layer for x in BASE]
    assert d.common_prefix == 4
    assert not d.reordered


def test_added_removed_and_changed() -> None:
    a = manifest_from_layers([*BASE, layer("interrupted_turn", "sha256:cancel", order=6)])
    after = list(BASE)
    after[2] = layer("current_instruction", "event-2", order=7, tokens=12)
    after.append(layer("recent_thread_delta", "sha256:delta", order=6, truncated=True))
    b = manifest_from_layers(after)
    d = diff_manifests(a, b)

    assert d.hash_changed and not d.identical
    assert d.added == (AddedLayer("recent_thread_delta", 0, after[-1]),)
    assert d.removed == (
        RemovedLayer("interrupted_turn", 0, layer("interrupted_turn", "sha256:cancel", order=6)),
    )
    (changed,) = d.changed
    assert changed == ChangedLayer(
        "current_instruction", 0, ("version", "estimatedTokens"), BASE[2], after[2]
    )
    assert changed.version_changed
    assert {k.layer for k in d.unchanged} == {
        "platform_contract",
        "context_status",
        "delivery_contract",
    }
    # b is sorted: platform_contract, context_status, recent_thread_delta, … → prefix of 2
    assert d.common_prefix == 2
    assert (d.layers_before, d.layers_after) == (5, 5)


def test_field_changes_other_than_version_are_named() -> None:
    a = manifest_from_layers([layer("channel_snapshot", "v", order=4)])
    b = manifest_from_layers([layer("channel_snapshot", "v", order=4, truncated=True, scope="x")])
    (changed,) = diff_manifests(a, b).changed
    assert changed.fields == ("scope", "truncated")
    assert not changed.version_changed


def test_duplicate_layer_names_are_matched_by_occurrence() -> None:
    first = layer("steer_delivery_contract", "sha256:one", order=8)
    second = layer("steer_delivery_contract", "sha256:two", order=8)
    third = layer("steer_delivery_contract", "sha256:three", order=8)
    assert [k for k, _ in keyed_layers([first, second, third])] == [
        LayerKey("steer_delivery_contract", 0),
        LayerKey("steer_delivery_contract", 1),
        LayerKey("steer_delivery_contract", 2),
    ]
    a = manifest_from_layers([*BASE, first, second])
    b = manifest_from_layers([*BASE, first, layer("steer_delivery_contract", "x", order=8), third])
    d = diff_manifests(a, b)
    assert [(c.layer, c.occurrence, c.fields) for c in d.changed] == [
        ("steer_delivery_contract", 1, ("version",))
    ]
    assert d.added == (AddedLayer("steer_delivery_contract", 2, third),)
    assert d.removed == ()
    assert LayerKey("steer_delivery_contract", 0) in d.unchanged


def test_reordering_within_one_order_value_is_reported() -> None:
    snapshot = layer("channel_snapshot", "s", order=4)
    canvas = layer("channel_canvas", "c", order=4)
    a = manifest_from_layers([snapshot, canvas])
    b = manifest_from_layers([canvas, snapshot])
    d = diff_manifests(a, b)
    assert d.hash_changed and d.reordered
    assert d.added == d.removed == d.changed == ()
    assert d.common_prefix == 0


def test_json_shape_is_camel_case() -> None:
    a = manifest_from_layers(BASE)
    b = manifest_from_layers([*BASE[:3], layer("delivery_contract", "new", order=8)])
    obj = msgspec.json.decode(msgspec.json.encode(diff_manifests(a, b)))
    assert obj["hashChanged"] is True
    assert obj["commonPrefix"] == 3
    assert obj["changed"][0]["fields"] == ["version"]
    assert obj["changed"][0]["before"]["estimatedTokens"] == 10
    assert set(obj) == {
        "hashBefore",
        "hashAfter",
        "hashChanged",
        "layersBefore",
        "layersAfter",
        "commonPrefix",
        "reordered",
        "added",
        "removed",
        "changed",
        "unchanged",
    }


names = st.sampled_from(["a", "b", "c", "ü"])
layers_st = st.lists(
    st.builds(
        layer,
        names,
        st.sampled_from(["v1", "v2"]),
        order=st.integers(1, 3),
        tokens=st.integers(0, 2),
        truncated=st.booleans(),
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(layers_st, layers_st)
def test_diff_accounts_for_every_layer(xs: list[Layer], ys: list[Layer]) -> None:
    a, b = manifest_from_layers(xs), manifest_from_layers(ys)
    d = diff_manifests(a, b)
    keys_a = dict(keyed_layers(a.layers))
    keys_b = dict(keyed_layers(b.layers))
    # every layer of b is added, changed or unchanged; every layer of a removed, changed or kept
    assert {LayerKey(x.layer, x.occurrence) for x in d.added} | {
        LayerKey(x.layer, x.occurrence) for x in d.changed
    } | set(d.unchanged) == set(keys_b)
    assert {LayerKey(x.layer, x.occurrence) for x in d.removed} | {
        LayerKey(x.layer, x.occurrence) for x in d.changed
    } | set(d.unchanged) == set(keys_a)
    for c in d.changed:
        assert keys_a[LayerKey(c.layer, c.occurrence)] == c.before
        assert keys_b[LayerKey(c.layer, c.occurrence)] == c.after
        assert c.fields
    for k in d.unchanged:
        assert keys_a[k] == keys_b[k]
    # the hash moves exactly when something is reported
    reported = bool(d.added or d.removed or d.changed or d.reordered)
    assert d.hash_changed == reported
    assert 0 <= d.common_prefix <= min(len(xs), len(ys))
    assert list(a.layers[: d.common_prefix]) == list(b.layers[: d.common_prefix])
    # the reverse diff swaps added and removed
    r = diff_manifests(b, a)
    assert [(x.layer, x.occurrence) for x in r.added] == [
        (x.layer, x.occurrence) for x in d.removed
    ]
    assert r.common_prefix == d.common_prefix
