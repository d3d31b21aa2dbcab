"""Context manifests: content-addressed records of every layer a model saw (docs/envelope.md).

The canonical form is a cross-implementation contract: compact JSON of the layer array with
camelCase keys in the fixed order ``order, layer, scope, source, version, authority, freshness,
estimatedTokens, truncated``, non-ASCII raw, then SHA-256 rendered as ``sha256:<hex>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import msgspec

from nostr_buzz.errors import ManifestError
from nostr_buzz.text.unicode import utf8_document

SCHEMA_VERSION = 1


class Layer(msgspec.Struct, frozen=True, rename="camel"):
    """One context layer.  Field order is the canonical serialization order."""

    order: int
    layer: str
    scope: str
    source: str
    version: str
    authority: str
    freshness: str
    estimated_tokens: int
    truncated: bool


_encode = msgspec.json.Encoder().encode


def content_hash(text: str) -> str:
    """``sha256:`` + lowercase hex SHA-256 of the UTF-8 text."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """(characters + 3) // 4: a stable, tokenizer-free estimate."""
    return (len(text) + 3) // 4


def layers_hash(layers: Iterable[Layer]) -> str:
    """The canonical hash of an already ordered layer array."""
    return "sha256:" + hashlib.sha256(_encode(list(layers))).hexdigest()


class Manifest(msgspec.Struct, frozen=True, rename="camel"):
    """``{"schemaVersion": 1, "hash": …, "layers": [...]}``."""

    schema_version: int
    hash: str
    layers: tuple[Layer, ...]

    def to_json(self) -> str:
        return _encode(self).decode("utf-8")

    def hash_matches(self) -> bool:
        """Whether the stated hash is the hash of the layers."""
        return self.hash == layers_hash(self.layers)

    @classmethod
    def from_json(cls, text: str | bytes | bytearray | memoryview) -> Manifest:
        """Strictly read a manifest; bad shape or hash mismatch: :class:`ManifestError`."""
        try:
            manifest = msgspec.json.decode(utf8_document(text), type=Manifest)
        except TypeError:
            raise ManifestError("a manifest must be JSON text (str or bytes)") from None
        except (msgspec.DecodeError, UnicodeError) as exc:
            raise ManifestError(f"invalid manifest: {exc}") from None
        except RecursionError:
            raise ManifestError("invalid manifest: JSON nested too deeply") from None
        return cls.checked(manifest)

    @classmethod
    def from_obj(cls, obj: Any) -> Manifest:
        """Like :meth:`from_json` for an already decoded JSON object."""
        try:
            manifest = msgspec.convert(obj, type=Manifest)
        except msgspec.ValidationError as exc:
            raise ManifestError(f"invalid manifest: {exc}") from None
        return cls.checked(manifest)

    @staticmethod
    def checked(manifest: Manifest) -> Manifest:
        if manifest.schema_version != SCHEMA_VERSION:
            raise ManifestError(
                f"unsupported manifest schemaVersion {manifest.schema_version} (expected 1)"
            )
        if not manifest.hash_matches():
            raise ManifestError(
                f"manifest hash {manifest.hash} does not match its layers "
                f"({layers_hash(manifest.layers)})"
            )
        return manifest


def manifest_from_layers(layers: Iterable[Layer]) -> Manifest:
    """Stable-sort the layers by order and hash them."""
    ordered = tuple(sorted(layers, key=lambda layer: layer.order))
    return Manifest(SCHEMA_VERSION, layers_hash(ordered), ordered)
