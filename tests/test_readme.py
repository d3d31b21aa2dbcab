"""The README's Python examples run as written (against a real relay where they need one)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from relays import start_relay

from nostr_buzz import SecretKey, sign_event

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def _block(marker: str) -> str:
    found = [b for b in BLOCKS if marker in b]
    assert len(found) == 1, f"expected one README block containing {marker!r}"
    return found[0]


def test_the_pure_core_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    ns: dict[str, Any] = {}
    exec(_block("def next_turn"), ns)
    secret = SecretKey.from_str("07" * 32)
    good = sign_event(secret, kind=9, content="hi", tags=[["h", "engineering"]], created_at=5)
    ns["on_relay_frame"](good.to_json(), 1.0)
    ns["on_relay_frame"](good.to_json().replace('"hi"', '"ho"'), 1.0)
    assert "dropped: bad_id" in capsys.readouterr().out
    ns["next_turn"](2.0)
    snapshot = ns["ledger"].snapshot()
    assert snapshot is not None and snapshot.hash_matches()
    assert [layer.layer for layer in snapshot.layers][-2:] == [
        "current_instruction",
        "delivery_contract",
    ]


def test_the_plugin_example_builds_a_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the default state directory is ./.buzz
    source = _block("BuzzPlugin(config)")
    source = source.replace('"nsec1…"', repr(SecretKey.from_str("08" * 32).bech32))
    source = source.replace('"npub1…"', repr(SecretKey.from_str("09" * 32).public_key.bech32))
    ns: dict[str, Any] = {}
    exec(source, ns)
    assert ns["plugin"] is not None
    assert "nsec" not in repr(ns["config"])


async def test_the_relay_pool_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    relay = await start_relay()
    try:
        secret = SecretKey.from_str("0a" * 32)
        event = sign_event(
            secret, kind=9, content="ü <x>", tags=[["h", "engineering"]], created_at=9
        )
        from nostr_buzz import RelayPool

        assert (await RelayPool([relay.url]).publish(event)).ok
        source = _block("RelayPool([").replace("ws://127.0.0.1:7447", relay.url)
        source = source.replace("asyncio.run(main())", "")
        ns: dict[str, Any] = {}
        exec(source, ns)
        await ns["main"]()
        assert capsys.readouterr().out.strip() == event.to_json()
    finally:
        relay.stop()
