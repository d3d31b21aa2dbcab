"""Fetch the standing context a session starts with: channel canvas, core memory, guidelines.

One bounded read of state (3 s by default, :meth:`RelayPool.query_state`) asks every relay, and
the write relays of the authors, for the agent's core memory and, for a channel, its canvas and
huddle guidelines by trusted authors, and waits for each relay that serves: the newest version
counts, not the fastest relay's.  A relay that should have answered and did not makes the read
unconfirmed (said, never hidden).  The answer is frozen by the caller for the whole ACP
session: a canvas published later reaches the next session, never this one.

Core memory is shown decrypted when found; when *every* relay answered (EOSE) and none has one,
the agent gets a nudge telling it how to create one; when a relay failed or timed out and nothing
was found, the section is left out — never invented.  Nothing here raises on a network failure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from nostr_buzz.core.turn_input import Standing
from nostr_buzz.errors import BuzzError, StandingError
from nostr_buzz.keys import SecretKey
from nostr_buzz.local_signer import as_signer
from nostr_buzz.nips import standing as docs
from nostr_buzz.signer import Signer, SignerError
from nostr_buzz.text.unicode import is_blank

from .pool import PoolQueryResult, RelayPool

__all__ = ["STANDING_TIMEOUT", "MemoryState", "StandingFetch", "fetch_standing"]

#: Seconds allowed for the whole standing-context query (connect plus answer, per relay).
STANDING_TIMEOUT: Final = 3.0

#: ``found``: decrypted; ``none``: every relay said there is none (the nudge); ``unavailable``:
#: a relay failed or the stored memory could not be opened (the section is left out).
MemoryState = Literal["found", "none", "unavailable"]


@dataclass(frozen=True)
class StandingFetch:
    """What the relays gave for one session start (already in the compiler's input form)."""

    core_memory: str | None = None  # the rendered <core-memory> section
    memory_state: MemoryState = "unavailable"
    channel_canvas: str | None = None
    canvas_revision: str | None = None
    huddle_instructions: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)
    #: Each relay that should have answered and did not (URL: why): a newer version of what
    #: was found may be there.
    unconfirmed: tuple[str, ...] = field(default_factory=tuple)

    def apply(self, standing: Standing) -> Standing:
        """``standing`` (base, persona, team instructions from files) with these sections;
        a section the relays did not give keeps the configured value, if any."""
        return msgspec.structs.replace(
            standing,
            core_memory=_first(self.core_memory, standing.core_memory),
            channel_canvas=_first(self.channel_canvas, standing.channel_canvas),
            huddle_instructions=_first(self.huddle_instructions, standing.huddle_instructions),
            unconfirmed=bool(self.unconfirmed),
        )

    def describe(self) -> dict[str, Any]:
        """A diagnostic payload: which revision and which memory state, never the memory."""
        return {
            "canvasRevision": self.canvas_revision,
            "coreMemory": self.memory_state,
            "huddleInstructions": self.huddle_instructions is not None,
            "problems": list(self.problems),
            "unconfirmed": list(self.unconfirmed),
        }


def _first(fetched: str | None, configured: str | None) -> str | None:
    return fetched if fetched is not None else configured


def _every_relay_answered(result: PoolQueryResult) -> bool:
    return bool(result.per_relay) and all(
        r.finished and r.error is None for r in result.per_relay.values()
    )


def _relay_problems(result: PoolQueryResult) -> list[str]:
    return [
        f"{url}: {r.error or 'no answer'}"
        for url, r in result.per_relay.items()
        if not r.finished or r.error is not None
    ]


async def _core_memory(
    agent: Signer, result: PoolQueryResult, problems: list[str]
) -> tuple[str | None, MemoryState]:
    candidates = docs.select_core_memory(result.events, agent.public_key.hex)
    for event in candidates:
        try:
            text = await docs.open_core_memory_with(agent, event)
        except (StandingError, SignerError) as exc:
            problems.append(f"core memory {event.id}: {exc}")
            continue
        if not is_blank(text):
            return docs.core_memory_section(text), "found"
        candidates = []  # the newest memory was emptied on purpose: the same as none
        break
    if not candidates and _every_relay_answered(result):
        return docs.core_memory_section(docs.CORE_MEMORY_NUDGE), "none"
    return None, "unavailable"


async def fetch_standing(
    pool: RelayPool,
    agent: SecretKey | Signer,
    *,
    channel: str | None,
    trusted: Collection[str],
    timeout: float = STANDING_TIMEOUT,
    write_relays: Sequence[str] = (),
) -> StandingFetch:
    """Core memory, and for a channel its canvas and huddle guidelines by ``trusted`` authors.

    ``trusted`` holds hex public keys (the owner, the agent, configured keys; never a key a
    relay announces, which would let any read relay vouch for anyone).  With
    ``channel`` None (a private conversation) only core memory is asked for.
    ``write_relays``: the authors' NIP-65 write relays, asked and waited for too.
    """
    signer = as_signer(agent)  # core memory is decrypted through it
    agent_hex = signer.public_key.hex
    authors = frozenset(k.lower() for k in trusted)
    filters = [docs.core_memory_filter(agent_hex)]
    if channel is not None and authors:
        filters.append(docs.canvas_filter(channel, authors))
        filters.append(docs.huddle_guidelines_filter(channel, authors))
    try:
        result = await pool.query_state(filters, write_relays=write_relays, timeout=timeout)
    except (BuzzError, OSError) as exc:
        return StandingFetch(problems=(f"query failed: {exc}",))
    problems = _relay_problems(result)
    memory, state = await _core_memory(signer, result, problems)
    canvas = guidelines = None
    revision: str | None = None
    if channel is not None:
        chosen = docs.select_canvas(result.events, channel, authors)
        if chosen is not None:
            canvas, revision = docs.canvas_body(chosen, channel), chosen.id
        rules = docs.select_huddle_guidelines(result.events, channel, authors)
        if rules is not None:
            guidelines = docs.huddle_instructions(rules)
    return StandingFetch(
        core_memory=memory,
        memory_state=state,
        channel_canvas=canvas,
        canvas_revision=revision,
        huddle_instructions=guidelines,
        problems=tuple(problems),
        unconfirmed=tuple(f"{url}: {why}" for url, why in result.unconfirmed.items()),
    )
