"""nak's verbs against a real relay (a ``buzz relay`` subprocess): event, req, verify, decode,
encode, and ``messages send --mention`` / ``-``."""

from __future__ import annotations

import io
import json
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from nostr_buzz.cli.app import main
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10, nip19
from tests.support.buzz_process import BUZZ, clean_env, relay_process

ALICE = SecretKey.from_str("a7" * 32)
BOB = SecretKey.from_str("b8" * 32)
WAIT = 30.0


@pytest.fixture(scope="module")
def relay() -> Iterator[str]:
    with relay_process() as url:
        yield url


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, relay: str) -> None:
    for name in ("BUZZ_RELAYS", "BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BUZZ_RELAYS", relay)
    monkeypatch.setenv("BUZZ_PRIVATE_KEY", ALICE.bech32)


def buzz(
    capsys: pytest.CaptureFixture[str],
    *argv: str,
    stdin: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8"))))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def events_of(out: str) -> list[Event]:
    return [Event.from_json(line) for line in out.splitlines()]


# --- event and req ---------------------------------------------------------------------------


def test_event_then_req_round_trip_with_tags(
    capsys: pytest.CaptureFixture[str], relay: str
) -> None:
    parent = "9f" * 32
    code, out, err = buzz(
        capsys,
        "event",
        "-k",
        "1",
        "-c",
        "round trip ü",
        "-t",
        "t=roundtrip",
        "-t",
        "x=one;two;three",
        "-p",
        BOB.public_key.bech32,
        "-e",
        nip19.encode("note", parent),
        "--created-at",
        "1700000100",
    )
    assert code == 0, err
    [event] = events_of(out)
    assert (event.kind, event.content, event.created_at) == (1, "round trip ü", 1_700_000_100)
    assert event.pubkey == ALICE.public_key.hex
    assert event.tags == (
        ("t", "roundtrip"),
        ("x", "one", "two", "three"),
        ("p", BOB.public_key.hex),
        ("e", parent),
    )
    assert f"{relay}: {event.id[:12]}: accepted" in err

    for query in (
        ["-k", "1", "-t", "t=roundtrip"],
        ["-a", ALICE.public_key.bech32, "-t", "x=one"],
        ["-i", event.id],
        ["-i", nip19.encode("nevent", event.id, relays=[relay]), "-l", "1"],
        ["--since", "1700000100", "--until", "1700000100", "-t", "t=roundtrip"],
    ):
        code, out, err = buzz(capsys, "req", *query)
        assert code == 0, (query, err)
        assert out == event.to_json() + "\n", query
    code, out, _ = buzz(capsys, "req", "-k", "1", "-t", "t=roundtrip", "-a", BOB.public_key.hex)
    assert (code, out) == (0, "")


def test_event_signs_exactly_what_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    """A raw tool: no tag added for what the text references, no ``@npub`` rewritten (the
    bot's replies, messages and canvases are tagged as clients tag them; this is not)."""
    text = f"ask @{BOB.public_key.bech32} about the #deploy and #Ship"
    code, out, err = buzz(capsys, "event", "-k", "1", "-c", text, "-t", "t=deploy")
    assert code == 0, err
    [event] = events_of(out)
    assert (event.content, event.tags) == (text, (("t", "deploy"),))


def test_event_templates_and_content_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = "\n".join(
        json.dumps({"kind": 7, "content": f"template {i}", "tags": [["t", "tpl"]]})
        for i in range(2)
    )
    code, out, err = buzz(
        capsys, "event", "-", "-t", "h=x", stdin=templates, monkeypatch=monkeypatch
    )
    assert code == 0, err
    made = events_of(out)
    assert [(e.kind, e.content, e.tags) for e in made] == [
        (7, f"template {i}", (("t", "tpl"), ("h", "x"))) for i in range(2)
    ]
    code, out, err = buzz(
        capsys, "event", "-c", "-", "-k", "1", stdin="from stdin\n", monkeypatch=monkeypatch
    )
    assert code == 0, err
    assert events_of(out)[0].content == "from stdin"
    # A bad template is bad input, named.
    code, out, err = buzz(capsys, "event", '{"kind": 1, "colour": "red"}')
    assert (code, out) == (1, "")
    assert "colour" in err


def test_req_filter_as_json_and_on_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, relay: str
) -> None:
    sent = [
        sign_event(ALICE, kind=30, content=f"f{i}", tags=[["t", f"stdin{i}"]], created_at=i)
        for i in range(2)
    ]
    for event in sent:
        template = {"kind": 30, "content": event.content, "tags": [list(t) for t in event.tags]}
        code, _, err = buzz(capsys, "event", json.dumps(template))
        assert code == 0, err
    lines = "\n".join(json.dumps({"kinds": [30], "#t": [f"stdin{i}"]}) for i in range(2))
    code, out, err = buzz(capsys, "req", "-", stdin=lines + "\n", monkeypatch=monkeypatch)
    assert code == 0, err
    assert sorted(e.content for e in events_of(out)) == ["f0", "f1"]
    code, out, _ = buzz(capsys, "req", json.dumps([{"kinds": [30], "#t": ["stdin1"]}]))
    assert [e.content for e in events_of(out)] == ["f1"]
    # The flags narrow a filter given as JSON.
    code, out, _ = buzz(capsys, "req", '{"kinds": [30]}', "-t", "t=stdin0")
    assert [e.content for e in events_of(out)] == ["f0"]
    code, out, err = buzz(capsys, "req", '{"kinds": [30], "colour": ["red"]}')
    assert (code, out) == (1, "")
    assert "colour" in err


def buzz_event(relay: str, content: str) -> Event:
    done = subprocess.run(
        [*BUZZ, "event", "-k", "1", "-c", content, "-t", "t=streamed"],
        capture_output=True,
        stdin=subprocess.DEVNULL,  # else a piped stdin would be read as templates (nak's rule)
        env=clean_env({"BUZZ_RELAYS": relay, "BUZZ_PRIVATE_KEY": ALICE.hex}),
        timeout=WAIT,
        check=True,
    )
    return Event.from_json(done.stdout.decode())


def read_line(stream: IO[bytes], timeout: float = WAIT) -> bytes:
    """One line from a pipe, or b"" when none comes within ``timeout``."""
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else b""


def test_req_stream_prints_stored_then_live_events_until_sigterm(relay: str) -> None:
    env = clean_env({"BUZZ_RELAYS": relay})
    proc = subprocess.Popen(
        [*BUZZ, "req", "--stream", "-k", "1", "-t", "t=streamed"],
        bufsize=0,  # unbuffered, so that select() sees every line that is not read yet
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert proc.stdout is not None
        before = buzz_event(relay, "stored before")
        after = buzz_event(relay, "published while streaming")
        seen = [Event.from_json(read_line(proc.stdout)) for _ in range(2)]
        assert sorted(e.id for e in seen) == sorted([before.id, after.id])
        assert read_line(proc.stdout, 0.5) == b""  # each event once
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- decode / encode -------------------------------------------------------------------------


def test_decode_encode_round_trips_for_all_five(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pub, sec, eid = ALICE.public_key.hex, ALICE.hex, "ab" * 32
    cases = [
        (["npub", pub], {"type": "npub", "pubkey": pub}),
        (["nsec", sec], {"type": "nsec", "secret_key": sec}),
        (["note", eid], {"type": "note", "id": eid}),
        (
            ["nevent", eid, "--relay", "wss://r.example", "--author", pub, "--kind", "9"],
            {"type": "nevent", "id": eid, "relays": ["wss://r.example"], "author": pub, "kind": 9},
        ),
        (
            ["nprofile", pub, "--relay", "wss://a.example", "--relay", "wss://b.example"],
            {"type": "nprofile", "pubkey": pub, "relays": ["wss://a.example", "wss://b.example"]},
        ),
    ]
    for argv, decoded in cases:
        if argv[0] == "nsec":
            # A secret key is never an argument (other users can see those): stdin carries it.
            code, out, err = buzz(capsys, "encode", "nsec", stdin=sec, monkeypatch=monkeypatch)
            assert code == 0, err
            encoded = out.strip()
            code, out, err = buzz(capsys, "decode", stdin=encoded, monkeypatch=monkeypatch)
            assert (code, json.loads(out)) == (0, decoded), err
            for refused in (["encode", "nsec", sec], ["decode", encoded]):
                code, out, err = buzz(capsys, *refused)
                assert (code, out) == (1, "")
                assert sec not in err and encoded not in err
            continue
        code, out, err = buzz(capsys, "encode", *argv)
        assert code == 0, (argv, err)
        encoded = out.strip()
        assert encoded.startswith(argv[0] + "1")
        code, out, err = buzz(capsys, "decode", encoded)
        assert (code, json.loads(out)) == (0, decoded), err
        code, out, _ = buzz(capsys, "decode", "nostr:" + encoded)
        assert json.loads(out) == decoded
    # Several values at once, from stdin.
    code, out, _ = buzz(
        capsys, "encode", "note", stdin=f"{eid}\n{'cd' * 32}\n", monkeypatch=monkeypatch
    )
    notes = out.split()
    assert [nip19.decode(n)[1] for n in notes] == [eid, "cd" * 32]
    code, out, _ = buzz(capsys, "decode", stdin="\n".join(notes), monkeypatch=monkeypatch)
    assert [json.loads(line)["id"] for line in out.splitlines()] == [eid, "cd" * 32]


@pytest.mark.parametrize(
    "argv",
    [
        ["decode", "npub1invalid"],
        ["decode", "hello"],
        ["encode", "npub", "zz"],
        ["encode", "note", "ab" * 31],
        ["encode", "nsec", "npub1x"],
        ["encode", "nevent", "ab" * 32, "--author", "nope"],
    ],
)
def test_decode_encode_bad_input_exits_1(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = buzz(capsys, *argv)
    assert (code, out) == (1, "")
    assert err.startswith("buzz: ")


# --- verify ----------------------------------------------------------------------------------


def test_verify_passes_good_events_and_exits_4_naming_a_tampered_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = [sign_event(ALICE, kind=1, content=f"ok {i}", created_at=i) for i in range(3)]
    lines = "".join(e.to_json() + "\n" for e in good)
    code, out, err = buzz(capsys, "verify", stdin=lines, monkeypatch=monkeypatch)
    assert (code, out) == (0, lines), err
    assert err.count("valid: ") == 3
    code, out, _ = buzz(capsys, "verify", good[0].to_json())
    assert (code, out) == (0, good[0].to_json() + "\n")

    tampered = good[1].to_json().replace('"ok 1"', '"ok 9"')
    forged_sig = good[2].to_json().replace(good[2].sig, good[0].sig)
    stdin = good[0].to_json() + "\n" + tampered + "\n" + forged_sig + "\n"
    code, out, err = buzz(capsys, "verify", stdin=stdin, monkeypatch=monkeypatch)
    assert (code, out) == (4, "")
    assert f"invalid: event 2 (id {good[1].id}): bad_id" in err
    assert f"invalid: event 3 (id {good[2].id}): bad_signature" in err
    assert f"valid: event 1 (id {good[0].id})" in err
    assert "ok 9" not in err  # the event itself is never printed
    code, out, err = buzz(capsys, "verify", "not json")
    assert (code, out) == (4, "")
    assert "malformed" in err


# --- messages send --mention and - -----------------------------------------------------------


def test_send_mentions_and_reads_text_from_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    channel = "mention-test"
    code, out, err = buzz(
        capsys,
        "messages",
        "send",
        "--channel",
        channel,
        "--mention",
        BOB.public_key.bech32,
        "--mention",
        BOB.public_key.hex,  # the same key twice: one tag
        "--mention",
        SecretKey.from_str("c9" * 32).public_key.hex,
        "-",
        stdin="line one\nline two\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    code, out, err = buzz(capsys, "messages", "raw", "--event", out.strip())
    assert code == 0, err
    [sent] = events_of(out)
    assert sent.content == "line one\nline two"
    assert nip10.mentions(sent) == [
        BOB.public_key.hex,
        SecretKey.from_str("c9" * 32).public_key.hex,
    ]
    assert sent.tags[0] == ("h", channel)
    code, out, err = buzz(
        capsys, "messages", "send", "--channel", channel, "--mention", ALICE.bech32, "x"
    )
    assert (code, out) == (1, "")
    assert "secret key" in err and ALICE.bech32 not in err
