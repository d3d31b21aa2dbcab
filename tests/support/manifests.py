"""Manifests for ``buzz manifest diff``: a layer builder, a base manifest and the file forms."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers


def layer(name: str, version: str, order: int, tokens: int = 10, truncated: bool = False) -> Layer:
    return Layer(order, name, "turn", "src", version, "evidence", "current", tokens, truncated)


BEFORE = manifest_from_layers(
    [
        layer("platform_contract", "sha256:base", 1),
        layer("context_status", "sha256:status", 6),
        layer("interrupted_turn", "sha256:cancelled", 6),
        layer("current_instruction", "event-1", 7),
        layer("delivery_contract", "sha256:delivery", 8),
    ]
)


def manifest_obj(m: Manifest) -> dict[str, Any]:
    obj: dict[str, Any] = json.loads(m.to_json())
    return obj


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    if isinstance(doc, bytes):
        path.write_bytes(doc)
    elif isinstance(doc, Manifest):
        path.write_text(doc.to_json(), encoding="utf-8")
    else:
        path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def edit_layer(obj: dict[str, Any]) -> None:
    obj["layers"][3]["version"] = "event-9"  # the stated hash is now stale
