"""RelayClient and the CLI's relay options without a relay: bad URLs are typed errors that never
repeat a secret, and the public signatures (the relays' side is in tests/e2e/io/test_relay.py)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import TypeVar

import pytest

from nostr_buzz.errors import BuzzError, RelayError
from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.io.relay import RelayClient
from nostr_buzz.keys import SecretKey
from tests.support.relay_cli import raw, write_toml
from tests.support.sizes import MAX_CLASS_LINES, oversized

# --- hostile relay: forged and wrong events are never returned -------------------------------


@pytest.mark.parametrize(
    "url", ["http://relay.example", "relay.example", "", "ws://", "wss://h:99999"]
)
def test_bad_urls_raise_a_buzz_error(url: str) -> None:
    with pytest.raises(RelayError) as info:
        RelayClient(url)
    assert isinstance(info.value, BuzzError)


# --- LocalRelay ------------------------------------------------------------------------------

# =================================================================================================
# Conformance: the relay client, the pool, NIP-42 and the buzz conventions (docs/cli.md), and
# docs/events.md's rules on event references and secret-free messages, checked from the text
# against scripted hostile relays.
# =================================================================================================


T = TypeVar("T")
ALICE = SecretKey.from_str("5c" * 32)
KEYS = ("id", "pubkey", "created_at", "kind", "tags", "content", "sig")
NOTE = sign_event(ALICE, kind=1, content="héllo / <b> \u2028 ünïcode 🐝", created_at=1_700_000_123)


def canonical(event: Event) -> str:
    """docs/events.md's canonical output, written independently of ``Event.to_json``."""
    d = event.to_dict()
    return json.dumps({k: d[k] for k in KEYS}, separators=(",", ":"), ensure_ascii=False)


# --- scripts ---------------------------------------------------------------------------------


# --- the CLI ------------------------------------------------------------------------------------


NSEC = ALICE.bech32

pytestmark = pytest.mark.usefixtures("no_ambient_config")


# --- configuration precedence ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["flag", "env", "toml"])
@pytest.mark.parametrize("url", ["http://relay.example", "relay.example", "wss://", "ftp://x"])
def test_non_websocket_relay_urls_are_bad_input(
    where: str, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if where == "env":
        monkeypatch.setenv("BUZZ_RELAYS", url)
    elif where == "toml":
        write_toml(Path("buzz.toml"), [url])
    code, _, _ = raw(capsys, NOTE.id, *([url] if where == "flag" else []))
    assert code == 1


# --- conventions --------------------------------------------------------------------------------


def test_public_signatures() -> None:
    params = inspect.signature(RelayPool).parameters
    assert "timeout" in params and "secret" in params
    assert "timeout" in inspect.signature(RelayClient).parameters


@pytest.mark.parametrize("url", [NSEC, NSEC.upper(), "http://" + NSEC, "wss://x:" + NSEC])
def test_relay_url_errors_never_repeat_a_secret(url: str) -> None:
    for make in (lambda: RelayPool([url]), lambda: RelayClient(url)):
        with pytest.raises(ValueError) as info:
            make()
        assert isinstance(info.value, BuzzError)
        assert NSEC not in str(info.value).lower()


def test_the_relay_client_stays_within_the_size_guards(tmp_path: Path) -> None:
    import nostr_buzz.io.relay

    # The client and its parts (io/relay_wire.py, io/relay_inbox.py, io/relay_subs.py, ...).
    parts = sorted(Path(nostr_buzz.io.relay.__file__).parent.glob("relay*.py"))
    assert len(parts) >= 7
    assert [line for part in parts for line in oversized(part)] == []
    # The guard sees what passes it: a class one line too long, and the long method in it.
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_CLASS_LINES - 1))
    long = tmp_path / "long.py"
    long.write_text(f"class Long:\n    def f(self) -> None:\n{body}", encoding="utf-8")
    assert oversized(long) == [
        f"long.py: class Long has {MAX_CLASS_LINES + 1} lines",
        f"long.py: function f has {MAX_CLASS_LINES} lines",
    ]
    assert oversized(long, class_lines=MAX_CLASS_LINES + 1, function_lines=MAX_CLASS_LINES) == []
