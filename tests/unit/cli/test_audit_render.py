"""``buzz audit``'s table and failure lines show the agent's words (layer names, channel,
timestamp from the payload) as escapes: a metric cannot drive the owner's terminal."""

from __future__ import annotations

from nostr_buzz.cli.audit import _failures, render_table
from nostr_buzz.reports.audit import LayerAudit, MetricAudit
from tests.support.hostile_metrics import ESCAPES, ESCAPES_SHOWN


def test_the_agents_words_are_escaped_in_the_table_and_the_failure_lines() -> None:
    layer = LayerAudit(7, ESCAPES, "ab" * 32, "no_rule", "an event id in a layer …")
    audit = MetricAudit(
        event_id="cd" * 32,
        agent="ef" * 32,
        timestamp=ESCAPES,
        channel_id=ESCAPES,
        manifest_hash="sha256:" + "0" * 64,
        manifest_valid=True,
        layers=(layer,),
        ok=False,
    )
    table = render_table([audit])
    [line] = _failures([audit])
    for text in (table, line):
        assert "\x1b" not in text and "\u202e" not in text and "\x9b" not in text
    assert ESCAPES_SHOWN in table and ESCAPES_SHOWN in line
    assert "NO_RULE" in table and "1 no_rule" in table
