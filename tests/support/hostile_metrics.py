"""Metrics a hostile sender can encrypt to the owner: a second agent's forged-but-valid metrics and
the owner's own agent key made to send absurd counters, formula-shaped model names, markup,
bidirectional text and terminal escape sequences; a stranger's metric for the owner's private
channel, which only the audit's author checks can refuse."""

from __future__ import annotations

import json

from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip44
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts, build_metric_event
from tests.support.audit_metrics import metric_for
from tests.support.keys import OWNER, STRANGER

MINE = SecretKey.from_str("5a" * 32)

FORMULA = "=cmd|' /C calc'!A0"

MARKUP = "[/x]"

BIDI = "gpt\u202eevil\u2066"

#: An OSC sequence that sets the terminal's title, a C1 CSI colour, zero-width and bidi text.
ESCAPES = "\x1b]0;owned\x07gpt\u200b\u2060\ufeff\u202e\x9b31m"

ESCAPES_SHOWN = "\\x1b]0;owned\\x07gpt\\u200b\\u2060\\ufeff\\u202e\\x9b31m"

TS = "2026-12-02T10:00:0{}.000Z"


def valid(agent: SecretKey, n: int, model: str, counts: TokenCounts, **extra: object) -> Event:
    payload = MetricPayload(
        harness="goose",
        timestamp=TS.format(n),
        model=model,
        turn=counts,
        **extra,  # type: ignore[arg-type]
    )
    return build_metric_event(agent, OWNER.public_key, payload)


def raw(agent: SecretKey, n: int, turn: dict[str, object]) -> Event:
    """A metric whose payload the builder would refuse, encrypted and signed by hand."""
    plaintext = json.dumps(
        {
            "harness": "goose",
            "timestamp": TS.format(n),
            "model": "m",
            "turn": turn,
            "deltaReliable": True,
        }
    )
    content = nip44.encrypt(plaintext, nip44.conversation_key(agent, OWNER.public_key.hex))
    tags = (("p", OWNER.public_key.hex), ("agent", agent.public_key.hex))
    return sign_event(agent, kind=44200, content=content, tags=tags, created_at=1_780_000_000 + n)


def hostile_metrics() -> list[Event]:
    c = TokenCounts
    return [
        valid(MINE, 1, FORMULA, c(100, 10, 110, 0.5)),
        valid(MINE, 2, MARKUP, c(200, 20, 220, 1.0)),
        valid(MINE, 3, BIDI, c(300, 30, 330, 1.5)),
        valid(MINE, 0, ESCAPES, c(0, 0, 0, 0.0)),
        # the largest valid values: still finite totals
        valid(MINE, 4, "big", c(2**53, 2**53, 2**53, 1e6)),
        # a cumulative cost that jumps by 10^9 in one turn: that turn's cost is unknown
        valid(
            MINE, 5, "cum", c(1, 1, 2, None), session_id="s", turn_seq=1, cumulative=c(1, 1, 2, 0.0)
        ),
        valid(
            MINE, 6, "cum", c(1, 1, 2, None), session_id="s", turn_seq=2, cumulative=c(2, 2, 4, 1e9)
        ),
        # forged but valid, from a key that is not the owner's agent
        valid(STRANGER, 7, "stolen", c(10**9, 10**9, 2 * 10**9, 999_999.0)),
        valid(STRANGER, 8, "-1+1", c(1, 1, 2, 0.1)),
        # absurd numbers: invalid metrics
        raw(
            MINE,
            9,
            {"inputTokens": 2**63 - 1, "outputTokens": 1, "totalTokens": None, "costUsd": None},
        ),
        raw(MINE, 10, {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2, "costUsd": 1.7e308}),
        raw(
            STRANGER, 11, {"inputTokens": 2**63, "outputTokens": 1, "totalTokens": 2, "costUsd": 0}
        ),
    ]


#: Markup an agent may put in the strings the HTML report shows: each would run a script, load
#: something or hide the page if it were not escaped.
HTML_INJECTIONS = {
    "model": "</svg><script>document.title='owned'</script>",
    "channel_id": '"><img src=x onerror="document.title=\'owned\'">',
    "session_id": '</table><style>body{display:none}</style><iframe src="https://x.invalid/">',
    "other_model": "<svg onload=\"document.title='owned'\">" + BIDI,
}


def html_injection_metrics() -> list[Event]:
    """Valid metrics from the owner's agent (MINE) whose strings are markup."""
    c = TokenCounts
    started = {"started_at": "2026-12-02T09:59:58.000Z"}
    return [
        valid(
            MINE,
            1,
            HTML_INJECTIONS["model"],
            c(100, 10, 110, 0.5, 40, 5),
            channel_id=HTML_INJECTIONS["channel_id"],
            session_id=HTML_INJECTIONS["session_id"],
            turn_seq=1,
            **started,
        ),
        valid(MINE, 2, HTML_INJECTIONS["other_model"], c(200, 20, 220, 1.0), **started),
    ]


def private_channel_forgery(rumor: Event, *, second: int = 0) -> Event:
    """A stranger's metric built like a bot's, encrypted to the owner, for a turn of the
    owner's private channel (``dm-private-{owner}``) that answered ``rumor``: its current
    instruction names a rumor id, which no relay can confirm or deny."""
    channel = nip10.private_channel(OWNER.public_key.hex)
    return metric_for(STRANGER, OWNER, rumor, channel=channel, second=second)
