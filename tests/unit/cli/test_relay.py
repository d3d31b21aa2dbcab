"""``buzz relay`` without its optional extra exits 1 with the install hint (the relay as a real
subprocess is in tests/e2e/cli/test_relay.py)."""

from __future__ import annotations

import re
import sys

import pytest

from nostr_buzz.cli.app import main

URL = re.compile(r"ws://127\.0\.0\.1:(\d+)")


def test_missing_relay_extra_exits_1_with_install_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "nostr_sdk", None)  # makes `import nostr_sdk` fail
    code = main(["relay"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert "pip install 'nostr-buzz[relay]'" in err
