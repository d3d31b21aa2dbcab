"""What an agent's compaction costs the standing context, decided without I/O
(docs/envelope.md, "Compaction").

A compaction replaces a session's conversation with a summary.  Standing context that travelled
beside the conversation (a system prompt, ``_meta``) survives it; standing sections that
travelled in the session's first prompt do not, so they are delivered again in the next one,
and the manifest says so with their freshness.
"""

from __future__ import annotations

from typing import Final

__all__ = ["REDELIVERED_AFTER_COMPACTION", "standing_redelivered"]

#: The freshness of a standing layer delivered again after the agent compacted the session.
REDELIVERED_AFTER_COMPACTION: Final = "redelivered_after_compaction"


def standing_redelivered(
    *,
    system_prompt_support: bool,
    standing_context_sent: bool,
    compactions: int,
    compactions_at_delivery: int,
) -> bool:
    """Whether this prompt carries the session's standing sections again: they travelled in
    the conversation (no system role), were delivered, and the agent has compacted since
    (``compactions``: the session's count now; ``compactions_at_delivery``: its count when the
    sections last went into a prompt that the agent answered)."""
    return (
        not system_prompt_support
        and standing_context_sent
        and compactions > compactions_at_delivery
    )
