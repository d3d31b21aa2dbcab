"""The turn ledger (docs/envelope.md, "The turn ledger").

One ledger per running turn records the manifest of the compiled prompt, of every steer the
agent accepted as ``injected``, and one layer for each event the bot's tools handed to the agent
(:func:`retrieval_layer`); :meth:`TurnLedger.snapshot` is what the terminal metric carries.
Which steers count is the caller's decision: failed, indeterminate and ``startedNewTurn`` steers
must simply never be passed to :meth:`TurnLedger.accept_update`.
"""

from __future__ import annotations

from typing import Final, Literal

from nostr_buzz.manifest import Layer, Manifest, estimate_tokens, manifest_from_layers

__all__ = [
    "MAX_RETRIEVALS",
    "RETRIEVAL_ORDER",
    "RETRIEVED_CHANNEL",
    "RETRIEVED_EVENT",
    "TurnLedger",
    "retrieval_layer",
]

#: The layers of what a tool handed over mid-turn (docs/envelope.md, "Retrievals").
RETRIEVED_EVENT: Final = "retrieved_event"
RETRIEVED_CHANNEL: Final = "retrieved_channel"
#: After every layer the prompt and its steers carry: a retrieval comes later in the turn.
RETRIEVAL_ORDER: Final = 9
#: The most retrievals one turn records; a tool refuses to hand over more (the manifest never
#: leaves one out).
MAX_RETRIEVALS: Final = 200

#: ``relay_event``: a signed event as a relay served it; ``private_conversation``: a NIP-17
#: message of the session's own conversation (an unsigned rumor, on no relay); ``channel_state``:
#: a channel's metadata and canvas as the bot trusts them (a text, versioned by its hash).
RetrievalSource = Literal["relay_event", "private_conversation", "channel_state"]


def retrieval_layer(tool: str, source: RetrievalSource, version: str, text: str) -> Layer:
    """The layer of one handover: ``tool`` (the scope) gave the agent ``text``, which is the
    event ``version`` (its id) or, for ``channel_state``, the text whose ``sha256:`` hash is
    ``version``."""
    layer = RETRIEVED_CHANNEL if source == "channel_state" else RETRIEVED_EVENT
    return Layer(
        order=RETRIEVAL_ORDER,
        layer=layer,
        scope=tool,
        source=source,
        version=version,
        authority="evidence",
        freshness="retrieved",
        estimated_tokens=estimate_tokens(text),
        truncated=False,
    )


class TurnLedger:
    """Base manifest, accepted steer manifests and retrievals of one running turn."""

    def __init__(self) -> None:
        self._base: Manifest | None = None
        self._updates: list[Manifest] = []
        self._retrieved: dict[tuple[str, str], Layer] = {}

    def reset(self) -> None:
        """A new turn starts: forget the base, every update and every retrieval."""
        self._base = None
        self._updates = []
        self._retrieved = {}

    def set_base(self, manifest: Manifest) -> None:
        """Record the manifest of the turn's compiled prompt."""
        self._base = manifest

    def accept_update(self, manifest: Manifest) -> None:
        """Record the manifest of a steer the agent accepted as ``injected``."""
        self._updates.append(manifest)

    def room_for(self, layers: list[Layer]) -> bool:
        """Whether :meth:`retrieve` would take every one of ``layers`` (a base is set and
        the turn stays within :data:`MAX_RETRIEVALS`)."""
        new = {(layer.layer, layer.version) for layer in layers} - self._retrieved.keys()
        return self._base is not None and len(self._retrieved) + len(new) <= MAX_RETRIEVALS

    def retrieve(self, layers: list[Layer]) -> bool:
        """Record what a tool is handing over (an event handed over twice is one layer);
        False, recording nothing, when :meth:`room_for` says no."""
        if not self.room_for(layers):
            return False
        for layer in layers:
            self._retrieved.setdefault((layer.layer, layer.version), layer)
        return True

    def snapshot(self) -> Manifest | None:
        """Base layers + every accepted update's layers + every retrieval, stable-sorted by
        order and re-hashed.

        ``None`` without a base (updates alone describe no turn).
        """
        if self._base is None:
            return None
        layers: list[Layer] = list(self._base.layers)
        for update in self._updates:
            layers.extend(update.layers)
        layers.extend(self._retrieved.values())
        return manifest_from_layers(layers)
