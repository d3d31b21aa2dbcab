"""``buzz messages`` against real relays on 127.0.0.1.

The CLI is synchronous (each command runs its own ``asyncio.run``), so these are plain sync
tests calling ``main(argv)`` in-process, while the relays (nostr-sdk LocalRelay and the hostile
websockets relay) live on an event loop in a background thread.  A few cases run ``buzz`` as a
real subprocess.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nostr_buzz.event import Event, sign_event
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip10, nip19
from tests.support.cli import BackgroundLoop, buzz, dead_url, publish
from tests.support.hostile_relay import hostile_relay
from tests.support.keys import ALICE, BOB
from tests.support.relays import start_relay

pytestmark = pytest.mark.usefixtures("no_ambient_config")


@pytest.fixture(scope="module")
def relay_a(bg: BackgroundLoop) -> Iterator[str]:
    running = bg.call(start_relay())
    try:
        yield running.url
    finally:
        bg.call(running.close())


@pytest.fixture(scope="module")
def relay_b(bg: BackgroundLoop) -> Iterator[str]:
    running = bg.call(start_relay())
    try:
        yield running.url
    finally:
        bg.call(running.close())


TRICKY_EVENTS = [
    sign_event(ALICE, kind=1, content="ünïcødé ✓ 🐝 — 日本語 \u2028 end", created_at=1_700_000_001),
    sign_event(
        ALICE,
        kind=1,
        content='quotes " backslash \\ newline \n tab \t cr \r bell \x07 nul \x00 </script> /',
        created_at=1_700_000_002,
    ),
    sign_event(
        ALICE,
        kind=9,
        content="many tags",
        tags=[["h", "tags-test"]] + [["t", f"tag{i}", "x" * i, "ü"] for i in range(60)],
        created_at=1_700_000_003,
    ),
]


# --- raw -----------------------------------------------------------------------------------


@pytest.mark.parametrize("event", TRICKY_EVENTS, ids=["unicode", "escapes", "many-tags"])
def test_raw_prints_exactly_the_published_event(
    bg: BackgroundLoop, relay_a: str, capsys: pytest.CaptureFixture[str], event: Event
) -> None:
    publish(bg, relay_a, event)
    refs = [
        event.id,
        event.id.upper(),
        nip19.encode("note", event.id),
        nip19.encode("nevent", event.id, relays=[relay_a], author=event.pubkey, kind=event.kind),
    ]
    for ref in refs:
        code, out, err = buzz(capsys, "messages", "raw", "--event", ref, "--relay", relay_a)
        assert code == 0, err
        assert out == event.to_json() + "\n"
        assert out.count("\n") == 1


def test_raw_not_found_exits_3(relay_a: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = buzz(capsys, "messages", "raw", "--event", "ab" * 32, "--relay", relay_a)
    assert (code, out) == (3, "")
    assert "not found" in err


def test_raw_unreachable_relay_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    url = dead_url()
    code, out, err = buzz(
        capsys, "messages", "raw", "--event", "ab" * 32, "--relay", url, "--timeout", "2"
    )
    assert (code, out) == (2, "")
    assert url in err


def test_raw_one_dead_relay_does_not_hide_a_found_event(
    bg: BackgroundLoop, relay_a: str, capsys: pytest.CaptureFixture[str]
) -> None:
    event = sign_event(ALICE, kind=1, content="one dead relay", created_at=1_700_000_010)
    publish(bg, relay_a, event)
    code, out, _ = buzz(
        capsys, "messages", "raw", "--event", event.id, "--relay", dead_url(), "--relay", relay_a
    )
    assert (code, out) == (0, event.to_json() + "\n")


@pytest.fixture
def silent_relay() -> Iterator[str]:
    """A relay address that accepts TCP connections and never says a word (not even the
    WebSocket handshake): the worst kind of dead relay, one that costs a full timeout."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"ws://127.0.0.1:{server.getsockname()[1]}"


def test_raw_returns_the_first_valid_copy_without_waiting_for_a_silent_relay(
    bg: BackgroundLoop, relay_a: str, silent_relay: str, capsys: pytest.CaptureFixture[str]
) -> None:
    event = sign_event(ALICE, kind=1, content="first answer wins", created_at=1_700_000_011)
    publish(bg, relay_a, event)
    argv = ["messages", "raw", "--event", event.id, "--timeout", "10"]
    started = time.monotonic()
    code, out, err = buzz(capsys, *argv, "--relay", silent_relay, "--relay", relay_a)
    elapsed = time.monotonic() - started
    assert (code, out) == (0, event.to_json() + "\n"), err
    # The silent relay would hold the command for its whole 10 s timeout.
    assert elapsed < 1.0, elapsed


def test_raw_all_waits_for_every_relay(
    bg: BackgroundLoop, relay_a: str, silent_relay: str, capsys: pytest.CaptureFixture[str]
) -> None:
    event = sign_event(ALICE, kind=1, content="wait for all", created_at=1_700_000_012)
    publish(bg, relay_a, event)
    argv = ["messages", "raw", "--all", "--event", event.id, "--timeout", "0.5"]
    code, out, err = buzz(capsys, *argv, "--relay", silent_relay, "--relay", relay_a)
    assert (code, out) == (0, event.to_json() + "\n"), err


NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"


@pytest.mark.parametrize(
    "ref",
    [
        "zz",
        "ab" * 31,
        "ab" * 33,
        "g" * 64,
        "note1qqqq",
        nip19.encode("npub", "7e" * 32),
        nip19.encode("nprofile", "7e" * 32, relays=["wss://r.example"]),
        NSEC,
        NSEC.upper(),
        "",
    ],
)
def test_raw_malformed_id_exits_1(
    relay_a: str, capsys: pytest.CaptureFixture[str], ref: str
) -> None:
    code, out, err = buzz(capsys, "messages", "raw", "--event", ref, "--relay", relay_a)
    assert (code, out) == (1, "")
    assert err.startswith("buzz: ")
    if ref.lower().startswith("nsec"):
        assert "looks like a secret key" in err
        assert ref.lower() not in err.lower()
        assert "67dea2ed" not in err


def test_raw_without_any_relay_names_the_three_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = buzz(capsys, "messages", "raw", "--event", "ab" * 32)
    assert (code, out) == (1, "")
    for source in ("--relay", "BUZZ_RELAYS", "buzz.toml"):
        assert source in err


def test_raw_uses_nevent_hints_and_skips_unusable_ones(
    bg: BackgroundLoop, relay_a: str, relay_b: str, capsys: pytest.CaptureFixture[str]
) -> None:
    event = sign_event(BOB, kind=1, content="only on relay b", created_at=1_700_000_020)
    publish(bg, relay_b, event)
    # The author and kind in the nevent are wrong on purpose: they are hints, not filters.
    nevent = nip19.encode(
        "nevent",
        event.id,
        relays=["https://not-a-relay.example", "not a url", relay_b],
        author=ALICE.public_key.hex,
        kind=7,
    )
    code, out, err = buzz(capsys, "messages", "raw", "--event", nevent, "--relay", relay_a)
    assert (code, out) == (0, event.to_json() + "\n"), err
    # No configured relay at all: the hint alone is enough.
    code, out, err = buzz(capsys, "messages", "raw", "--event", nevent)
    assert (code, out) == (0, event.to_json() + "\n"), err
    # Without the hint, relay a alone does not have it.
    code, out, _ = buzz(capsys, "messages", "raw", "--event", event.id, "--relay", relay_a)
    assert (code, out) == (3, "")


def test_raw_authenticates_to_configured_relays_only(
    bg: BackgroundLoop, relay_a: str, capsys: pytest.CaptureFixture[str]
) -> None:
    guarded = bg.call(start_relay(auth="both"))
    try:
        event = sign_event(ALICE, kind=1, content="behind NIP-42", created_at=1_700_000_025)
        assert bg.call(RelayPool([guarded.url], secret=ALICE, timeout=5).publish(event)).ok
        # Listed by the user, with a key: the client answers the challenge.
        code, out, err = buzz(
            capsys,
            "messages",
            "raw",
            "--event",
            event.id,
            "--relay",
            guarded.url,
            "--key",
            BOB.hex,
        )
        assert (code, out) == (0, event.to_json() + "\n"), err
        # Only a hint: never authenticated to, so it does not finish (2); the key never leaks.
        nevent = nip19.encode("nevent", event.id, relays=[guarded.url])
        code, out, err = buzz(capsys, "messages", "raw", "--event", nevent, "--key", BOB.hex)
        assert (code, out) == (2, "")
        assert "auth-required" in err
        assert BOB.hex not in err
        # A configured relay that answers "not found" makes it a 3.
        code, out, _ = buzz(
            capsys, "messages", "raw", "--event", nevent, "--key", BOB.hex, "--relay", relay_a
        )
        assert (code, out) == (3, "")
    finally:
        bg.call(guarded.close())


@pytest.mark.parametrize("behaviour", ["forged_sig", "wrong_id", "other_event"])
def test_raw_good_relay_wins_over_a_forger_and_names_it(
    bg: BackgroundLoop,
    relay_a: str,
    capsys: pytest.CaptureFixture[str],
    behaviour: str,
) -> None:
    event = sign_event(ALICE, kind=1, content=f"good copy {behaviour}", created_at=1_700_000_030)
    publish(bg, relay_a, event)
    decoy = sign_event(BOB, kind=1, content="a decoy the forger serves", created_at=1)
    stored = [event] if behaviour == "forged_sig" else [decoy]
    forger = bg.enter(hostile_relay(behaviour, stored=stored))
    # --all waits for every relay, so the forger has surely answered and is named.
    code, out, err = buzz(
        capsys,
        "messages",
        "raw",
        "--all",
        "--event",
        event.id,
        "--relay",
        forger.url,
        "--relay",
        relay_a,
    )
    assert (code, out) == (0, event.to_json() + "\n")
    assert forger.url in err
    assert relay_a not in err


@pytest.mark.parametrize(
    ("behaviour", "check"),
    [
        ("forged_sig", "bad_signature"),
        ("wrong_id", "bad_id"),
        ("other_event", "match"),
    ],
)
def test_raw_only_a_forger_exits_4_and_never_prints_the_event(
    bg: BackgroundLoop,
    relay_a: str,
    capsys: pytest.CaptureFixture[str],
    behaviour: str,
    check: str,
) -> None:
    event = sign_event(ALICE, kind=1, content=f"forged {behaviour}", created_at=1_700_000_040)
    decoy = sign_event(BOB, kind=1, content="decoy", created_at=2)
    stored = [event] if behaviour == "forged_sig" else [decoy]
    forger = bg.enter(hostile_relay(behaviour, stored=stored))
    # relay_a answers "not found"; the forger's failure still takes precedence (exit 4 > 3).
    code, out, err = buzz(
        capsys, "messages", "raw", "--event", event.id, "--relay", relay_a, "--relay", forger.url
    )
    assert (code, out) == (4, "")
    assert forger.url in err
    assert check in err
    assert event.content not in err


def test_raw_flag_beats_env_beats_file(
    relay_a: str,
    bg: BackgroundLoop,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    event = sign_event(ALICE, kind=1, content="precedence", created_at=1_700_000_050)
    publish(bg, relay_a, event)
    argv = ["messages", "raw", "--event", event.id, "--timeout", "2"]
    (tmp_path / "buzz.toml").write_text(f'relays = ["{relay_a}"]\n', encoding="utf-8")
    assert buzz(capsys, *argv)[0] == 0  # the file alone
    monkeypatch.setenv("BUZZ_RELAYS", dead_url())
    assert buzz(capsys, *argv)[0] == 2  # env wins over the file, never merged with it
    monkeypatch.setenv("BUZZ_RELAYS", "  ")
    assert buzz(capsys, *argv)[0] == 0  # blank counts as unset
    monkeypatch.setenv("BUZZ_RELAYS", f"{dead_url()}, {relay_a}")
    assert buzz(capsys, *argv)[0] == 0  # comma-separated
    monkeypatch.setenv("BUZZ_RELAYS", relay_a)
    assert buzz(capsys, *argv, "--relay", dead_url())[0] == 2  # the flag wins over env


@pytest.mark.parametrize("bad", ["http://127.0.0.1:1", "127.0.0.1:7000", "ws://", NSEC])
def test_bad_relay_url_exits_1(capsys: pytest.CaptureFixture[str], bad: str) -> None:
    code, out, err = buzz(capsys, "messages", "raw", "--event", "ab" * 32, "--relay", bad)
    assert (code, out) == (1, "")
    assert NSEC not in err


# --- send / thread / get -------------------------------------------------------------------


def _lines(out: str) -> list[Event]:
    return [Event.from_json(line) for line in out.splitlines()]


def test_send_then_thread_and_get_show_tags(
    relay_a: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = "engineering-7f3a"
    monkeypatch.setenv("BUZZ_RELAYS", relay_a)
    send = ["messages", "send", "--channel", channel]
    code, out, err = buzz(capsys, *send, "--key", ALICE.bech32, "deploy is red ü")
    assert code == 0, err
    root_id = out.strip()
    assert len(root_id) == 64
    code, out, err = buzz(
        capsys, *send, "--key", BOB.hex, "--reply-to", nip19.encode("note", root_id), "looking"
    )
    assert code == 0, err
    reply_id = out.strip()
    code, out, err = buzz(
        capsys, *send, "--key", ALICE.hex, "--reply-to", reply_id, "--json", "thanks <3"
    )
    assert code == 0, err
    sent = json.loads(out)
    nested_id = sent["id"]
    assert sent["accepted"] == [relay_a]
    assert Event.from_dict(sent["event"]).id == nested_id

    code, out, err = buzz(capsys, "messages", "thread", "--channel", channel, "--event", reply_id)
    assert code == 0, err
    thread = _lines(out)
    assert [e.id for e in thread] == [root_id, reply_id, nested_id]
    root, reply, nested = thread
    assert root.content == "deploy is red ü"
    for event in thread:
        assert event.kind == 9
        assert event.tags[0] == ("h", channel)
        assert nip10.channel(event) == channel
    assert [t for t in root.tags if t[0] in ("e", "p")] == []
    assert reply.tags[1:] == (
        ("e", root_id, relay_a, "root", ALICE.public_key.hex),
        ("p", ALICE.public_key.hex),
    )
    assert nested.tags[1:] == (
        ("e", root_id, relay_a, "root", ALICE.public_key.hex),
        ("e", reply_id, relay_a, "reply", BOB.public_key.hex),
        ("p", BOB.public_key.hex),  # Alice wrote it: she is not tagged in her own message
    )
    assert nip10.thread_ref(nested) == (root_id, reply_id)
    assert nip10.thread_ref(reply) == (root_id, root_id)
    assert nip10.mentions(nested) == [BOB.public_key.hex]

    # The same thread from its root, and from the nested reply.
    for start in (root_id, nested_id):
        code, out, _ = buzz(capsys, "messages", "thread", "--channel", channel, "--event", start)
        assert [e.id for e in _lines(out)] == [root_id, reply_id, nested_id]

    code, out, err = buzz(capsys, "messages", "get", "--channel", channel)
    assert code == 0, err
    assert [e.id for e in _lines(out)] == [root_id, reply_id, nested_id]
    assert out.splitlines()[0] == root.to_json()
    code, out, _ = buzz(capsys, "messages", "get", "--channel", channel, "--limit", "2")
    # Which two are "most recent" is the relay's call when all three share a second; the
    # output still holds exactly two of them, oldest (then thread order) first.
    order = [root_id, reply_id, nested_id]
    limited = [e.id for e in _lines(out)]
    assert len(limited) == 2 and set(limited) <= set(order)
    assert limited == sorted(limited, key=order.index)
    code, out, _ = buzz(capsys, "messages", "get", "--channel", channel, "--format", "table")
    assert code == 0
    rows = out.splitlines()
    assert len(rows) == 3
    assert root_id[:12] in rows[0]
    assert "deploy is red ü" in rows[0]
    # Another channel sees none of it.
    code, out, _ = buzz(capsys, "messages", "get", "--channel", "elsewhere")
    assert (code, out) == (0, "")


def test_get_and_thread_skip_forged_events(
    bg: BackgroundLoop, relay_a: str, capsys: pytest.CaptureFixture[str]
) -> None:
    channel = "forged-list"
    good = sign_event(
        ALICE, kind=9, content="real", tags=[["h", channel]], created_at=1_700_000_060
    )
    publish(bg, relay_a, good)
    forger = bg.enter(hostile_relay("forged_sig", stored=[good]))
    code, out, err = buzz(
        capsys, "messages", "get", "--channel", channel, "--relay", forger.url, "--relay", relay_a
    )
    assert (code, out) == (0, good.to_json() + "\n")
    assert forger.url in err


def test_send_when_no_relay_accepts_exits_2(
    bg: BackgroundLoop, capsys: pytest.CaptureFixture[str]
) -> None:
    refuser = bg.enter(hostile_relay("ok_empty_id"))
    code, out, err = buzz(
        capsys,
        "messages",
        "send",
        "--channel",
        "c1",
        "--key",
        ALICE.hex,
        "--relay",
        refuser.url,
        "--relay",
        dead_url(),
        "--timeout",
        "2",
        "hello",
    )
    assert (code, out) == (2, "")
    assert "blocked" in err
    assert refuser.url in err
    assert ALICE.hex not in err


def test_send_needs_a_key_and_a_valid_channel(
    relay_a: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = buzz(capsys, "messages", "send", "--channel", "c1", "--relay", relay_a, "x")
    assert (code, out) == (1, "")
    assert "BUZZ_PRIVATE_KEY" in err
    for channel in ("dm-abc", "has space", "x" * 129, ""):
        code, out, _ = buzz(
            capsys,
            "messages",
            "send",
            "--channel",
            channel,
            "--relay",
            relay_a,
            "--key",
            ALICE.hex,
            "x",
        )
        assert (code, out) == (1, ""), channel
    # A bad secret key in the environment is reported without being repeated.
    bad = ALICE.bech32[:-1] + ("q" if ALICE.bech32[-1] != "q" else "p")
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", bad)
    code, out, err = buzz(capsys, "messages", "send", "--channel", "c1", "--relay", relay_a, "x")
    assert (code, out) == (1, "")
    assert "BUZZ_PRIVATE_KEY" in err
    assert bad not in err and bad[5:20] not in err


def test_thread_of_a_missing_event_exits_3(
    relay_a: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = buzz(
        capsys, "messages", "thread", "--channel", "c1", "--event", "cd" * 32, "--relay", relay_a
    )
    assert (code, out) == (3, "")


# --- real subprocesses ---------------------------------------------------------------------


def _run_buzz(
    *argv: str, env_extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUZZ_")}
    env.update({"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": ""})
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "nostr_buzz", *argv],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_subprocess_raw_writes_utf8_under_the_c_locale(bg: BackgroundLoop, relay_a: str) -> None:
    event = TRICKY_EVENTS[0]
    publish(bg, relay_a, event)
    done = _run_buzz("messages", "raw", "--event", event.id, env_extra={"BUZZ_RELAYS": relay_a})
    assert done.returncode == 0, done.stderr
    assert done.stdout == (event.to_json() + "\n").encode("utf-8")


def test_subprocess_failures_leave_stdout_empty(relay_a: str) -> None:
    cases = [
        (["messages", "raw", "--event", "nope", "--relay", relay_a], 1),
        (["messages", "raw", "--event", "ef" * 32, "--relay", relay_a], 3),
        (["messages", "raw", "--event", "ef" * 32, "--relay", dead_url(), "--timeout", "2"], 2),
        (["messages", "raw", "--relay", relay_a], 1),  # missing --event: not the parser's 2
        (["messages", "raw", "--event", "ef" * 32, "--bogus"], 1),
    ]
    for argv, expected in cases:
        done = _run_buzz(*argv)
        assert (done.returncode, done.stdout) == (expected, b""), (argv, done.stderr)
        assert b"Traceback" not in done.stderr
