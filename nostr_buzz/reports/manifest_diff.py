"""What changed between two context manifests (docs/envelope.md, "Tools built on the compiler").

The question it answers is the operator's when a provider's prompt cache stops hitting: which
layers were added, removed or changed version, and did the hash move.  A layer is identified by
its name and its occurrence index among the layers of that name (0 for the first), so a manifest
that carries a layer name twice is compared occurrence by occurrence.

Pure: it compares two :class:`Manifest` values and touches nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from nostr_buzz.manifest import Layer, Manifest

#: The compared fields, in canonical order, by their wire (camelCase) names.
LAYER_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("order", "order"),
    ("layer", "layer"),
    ("scope", "scope"),
    ("source", "source"),
    ("version", "version"),
    ("authority", "authority"),
    ("freshness", "freshness"),
    ("estimatedTokens", "estimated_tokens"),
    ("truncated", "truncated"),
)


class LayerKey(msgspec.Struct, frozen=True, rename="camel"):
    """A layer's identity across two manifests: its name and which occurrence of it."""

    layer: str
    occurrence: int


class AddedLayer(msgspec.Struct, frozen=True, rename="camel"):
    """A layer only the second manifest has: its name, which occurrence of that name, and
    the layer itself."""

    layer: str
    occurrence: int
    after: Layer


class RemovedLayer(msgspec.Struct, frozen=True, rename="camel"):
    """A layer only the first manifest has: its name, which occurrence of that name, and the
    layer itself."""

    layer: str
    occurrence: int
    before: Layer


class ChangedLayer(msgspec.Struct, frozen=True, rename="camel"):
    """A layer present in both manifests whose record differs.

    ``fields`` names the differing fields by their wire names, in canonical order; ``version``
    among them means the layer's content changed.
    """

    layer: str
    occurrence: int
    fields: tuple[str, ...]
    before: Layer
    after: Layer

    @property
    def version_changed(self) -> bool:
        return "version" in self.fields


class ManifestDiff(msgspec.Struct, frozen=True, rename="camel"):
    """The difference from manifest ``a`` (before) to manifest ``b`` (after).

    - ``added`` / ``changed`` follow ``b``'s layer order, ``removed`` follows ``a``'s;
    - ``reordered``: the layers present in both appear in a different relative order (possible
      among layers that share an ``order`` value), which moves the hash by itself;
    - ``common_prefix``: how many leading layers are identical records in both manifests, the
      part a prefix-based prompt cache could still reuse;
    - ``hash_changed``: the hashes differ.  Callers hash-check both manifests first
      (:meth:`Manifest.from_json`), so an unchanged hash means no layer differs.
    """

    hash_before: str
    hash_after: str
    hash_changed: bool
    layers_before: int
    layers_after: int
    common_prefix: int
    reordered: bool
    added: tuple[AddedLayer, ...]
    removed: tuple[RemovedLayer, ...]
    changed: tuple[ChangedLayer, ...]
    unchanged: tuple[LayerKey, ...]

    @property
    def identical(self) -> bool:
        return not self.hash_changed


def keyed_layers(layers: Iterable[Layer]) -> list[tuple[LayerKey, Layer]]:
    """Each layer with its (name, occurrence) key, in the given order."""
    seen: dict[str, int] = {}
    keyed: list[tuple[LayerKey, Layer]] = []
    for layer in layers:
        occurrence = seen.get(layer.layer, 0)
        seen[layer.layer] = occurrence + 1
        keyed.append((LayerKey(layer.layer, occurrence), layer))
    return keyed


def changed_fields(before: Layer, after: Layer) -> tuple[str, ...]:
    """Wire names of the fields that differ, in canonical order."""
    return tuple(
        wire for wire, attr in LAYER_FIELDS if getattr(before, attr) != getattr(after, attr)
    )


def diff_manifests(a: Manifest, b: Manifest) -> ManifestDiff:
    """Compare manifest ``a`` (before) with ``b`` (after)."""
    keyed_a = keyed_layers(a.layers)
    keyed_b = keyed_layers(b.layers)
    by_key_a = dict(keyed_a)
    by_key_b = dict(keyed_b)

    added: list[AddedLayer] = []
    changed: list[ChangedLayer] = []
    unchanged: list[LayerKey] = []
    for key, after in keyed_b:
        before = by_key_a.get(key)
        if before is None:
            added.append(AddedLayer(key.layer, key.occurrence, after))
            continue
        fields = changed_fields(before, after)
        if fields:
            changed.append(ChangedLayer(key.layer, key.occurrence, fields, before, after))
        else:
            unchanged.append(key)
    removed = [
        RemovedLayer(key.layer, key.occurrence, before)
        for key, before in keyed_a
        if key not in by_key_b
    ]

    common_in_a = [key for key, _ in keyed_a if key in by_key_b]
    common_in_b = [key for key, _ in keyed_b if key in by_key_a]

    prefix = 0
    for (_, before), (_, after) in zip(keyed_a, keyed_b, strict=False):
        if changed_fields(before, after):
            break
        prefix += 1

    return ManifestDiff(
        hash_before=a.hash,
        hash_after=b.hash,
        hash_changed=a.hash != b.hash,
        layers_before=len(a.layers),
        layers_after=len(b.layers),
        common_prefix=prefix,
        reordered=common_in_a != common_in_b,
        added=tuple(added),
        removed=tuple(removed),
        changed=tuple(changed),
        unchanged=tuple(unchanged),
    )
