"""``buzz`` in process against relays: every failure leaves stdout empty, ``messages raw`` with its
relay flags, and a buzz.toml naming relays (and a key)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import cli


def buzz(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code, out, err = cli.buzz(capsys, *argv)
    if code != 0:
        assert out == "", f"stdout must be empty on exit {code}"
    return code, out, err


def raw(capsys: pytest.CaptureFixture[str], ref: str, *relays: str, timeout: str = "3"):  # type: ignore[no-untyped-def]
    args = ["messages", "raw", "--event", ref, "--timeout", timeout]
    for url in relays:
        args += ["--relay", url]
    return buzz(capsys, *args)


def write_toml(path: Path, relays: list[str], key: str | None = None) -> None:
    lines = [f"relays = {json.dumps(relays)}"]
    if key is not None:
        lines.append(f'secret_key = "{key}"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o600)  # it may hold secret_key inline
