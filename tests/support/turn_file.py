"""A turn-input file for ``buzz compile``: a steer turn with one cancelled event, a channel,
history and standing context, signed with real BIP-340 signatures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nostr_buzz.event import sign_event
from nostr_buzz.keys import SecretKey

ALICE = SecretKey.from_str("11" * 32)

BOT = SecretKey.from_str("22" * 32)

AUX = bytes(32)

CHANNEL = "engineering-7f3a"

T0 = 1_787_314_000


def event_dict(secret: SecretKey, content: str, created_at: int, **extra: Any) -> dict[str, Any]:
    tags = [["h", CHANNEL], ["p", BOT.public_key.hex]]
    return sign_event(
        secret, kind=9, content=content, tags=tags, created_at=created_at, aux_rand=AUX, **extra
    ).to_dict()


def turn_doc() -> dict[str, Any]:
    """A steer turn with one cancelled event, a channel, history and standing context."""
    return {
        "events": [
            {"event": event_dict(ALICE, "Restart only the canary, ünïcødé ✓", T0 + 20)},
        ],
        "cancelledEvents": [
            {"event": event_dict(ALICE, "Restart the <whole> fleet", T0), "promptTag": "@mention"}
        ],
        "cancelReason": "steer",
        "channel": {"name": "engineering", "type": "stream", "description": "Deploys & ops"},
        "context": {
            "kind": "thread",
            "total": 3,
            "truncated": True,
            "messages": [
                {"pubkey": ALICE.public_key.hex, "content": "The deploy is failing."},
            ],
        },
        "profiles": {
            ALICE.public_key.hex: {"label": "Alice"},
            BOT.public_key.hex: {"label": "Deploy Bot", "isAgent": True},
        },
        "standing": {"base": "You are a careful deploy agent.", "teamInstructions": "Be brief."},
        "systemPromptSupport": False,
        "standingContextSent": False,
    }


def write(tmp_path: Path, doc: Any, name: str = "turn.json") -> Path:
    path = tmp_path / name
    data = doc if isinstance(doc, bytes) else json.dumps(doc, ensure_ascii=False).encode()
    path.write_bytes(data)
    return path


def forge_sig(event: dict[str, Any]) -> None:
    sig = event["sig"]
    event["sig"] = sig[:-1] + ("0" if sig[-1] != "0" else "1")
