"""The agent edge stays in small parts, and its sans-I/O half does no I/O."""

from __future__ import annotations

from pathlib import Path

import nostr_buzz.acp
import nostr_buzz.io
from tests.support.sizes import oversized
from tests.unit.test_determinism import impurities

ACP = Path(nostr_buzz.acp.__file__).parent
IO = Path(nostr_buzz.io.__file__).parent


def test_no_class_over_450_lines_and_no_function_over_80() -> None:
    # io/relay.py has its own guard.
    modules = [*ACP.glob("*.py"), *(m for m in IO.glob("*.py") if m.name != "relay.py")]
    assert len(modules) > 10
    assert [line for module in sorted(modules) for line in oversized(module)] == []


def test_the_sans_io_part_reads_no_clock_and_awaits_nothing() -> None:
    for module in sorted(ACP.glob("*.py")):
        found = [f for f in impurities(module.read_text(encoding="utf-8")) if "datetime" not in f]
        assert found == [], module.name
        # datetime appears only as a type: the driver passes every moment in.
        assert "datetime.now" not in module.read_text(encoding="utf-8")
