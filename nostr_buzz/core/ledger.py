"""The turn ledger (docs/envelope.md, "The turn ledger (steers)").

One ledger per running turn records the manifest of the compiled prompt and of every steer the
agent accepted as ``injected``; :meth:`TurnLedger.snapshot` is what the terminal metric carries.
Which steers count is the caller's decision: failed, indeterminate and ``startedNewTurn`` steers
must simply never be passed to :meth:`TurnLedger.accept_update`.
"""

from __future__ import annotations

from nostr_buzz.manifest import Layer, Manifest, manifest_from_layers


class TurnLedger:
    """Base manifest plus accepted steer manifests of one running turn."""

    def __init__(self) -> None:
        self._base: Manifest | None = None
        self._updates: list[Manifest] = []

    def reset(self) -> None:
        """A new turn starts: forget the base and every update."""
        self._base = None
        self._updates = []

    def set_base(self, manifest: Manifest) -> None:
        """Record the manifest of the turn's compiled prompt."""
        self._base = manifest

    def accept_update(self, manifest: Manifest) -> None:
        """Record the manifest of a steer the agent accepted as ``injected``."""
        self._updates.append(manifest)

    def snapshot(self) -> Manifest | None:
        """Base layers + every accepted update's layers, stable-sorted by order and re-hashed.

        ``None`` without a base (updates alone describe no turn).
        """
        if self._base is None:
            return None
        layers: list[Layer] = list(self._base.layers)
        for update in self._updates:
            layers.extend(update.layers)
        return manifest_from_layers(layers)
