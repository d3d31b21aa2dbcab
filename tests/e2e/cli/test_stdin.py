"""What ``buzz`` reads on stdin, run as real processes (docs/cli.md, "Standard input").

- a secret key (an nsec, or the configured key in hex, any case, JSON-escaped or not) in text
  piped or redirected from a file, in a template's content or tags or in a filter is refused
  before any relay is contacted, and never repeated;
- nak's rule: ``buzz event`` and ``buzz req`` use a template / filter piped on stdin when none
  is given, the flags overriding and extending it; stdin that is not JSON is bad input;
- a stranger's nevent naming 20 hint relays makes ``buzz`` contact at most 8 of them.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.event import Event
from nostr_buzz.io.pool import MAX_HINT_RELAYS
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip19
from tests.support.buzz_process import BUZZ, buzz, clean_env, relay_process
from tests.support.cli import BackgroundLoop
from tests.support.keys import BOB
from tests.support.relay_cli import write_toml
from tests.support.scripted_relay import Conn, ScriptedRelay

SECRET = SecretKey.from_str("7c" * 31 + "7d")
ESCAPED_HEX = "".join(f"\\u{ord(c):04x}" for c in SECRET.hex)  # JSON for the same characters


def leaked(text: str) -> bool:
    lowered = text.lower()
    return any(form in lowered for form in (SECRET.hex, SECRET.bech32, SECRET.hex[:32]))


async def answer(relay: ScriptedRelay, conn: Conn, msg: list[Any]) -> None:
    """An honest relay with nothing stored: OK to every EVENT, EOSE to every REQ."""
    if msg[0] == "EVENT":
        await conn.send(["OK", msg[1]["id"], True, ""])
    elif msg[0] == "REQ":
        await conn.send(["EOSE", msg[1]])


#: (argv, stdin, via a file): {nsec}, {hex}, {HEX} or {escaped} in them is where the key goes.
ATTACKS = {
    "send-nsec": (["messages", "send", "--channel", "eng", "-"], "my key: {nsec}", False),
    "send-hex-file": (["messages", "send", "--channel", "eng", "-"], "oops {HEX} x\n", True),
    "reply": (
        ["messages", "send", "--channel", "eng", "--reply-to", "ab" * 32, "-"],
        "{hex}",
        False,
    ),
    "dm": (["messages", "dm", "--to", BOB.public_key.bech32, "-"], "{hex}", False),
    "event-template-content": (["event", "-"], '{{"kind": 1, "content": "{hex}"}}', False),
    "event-template-tags": (["event", "-"], '{{"tags": [["x", "a", "{nsec}"]]}}', False),
    "event-piped-escaped": (["event"], '{{"content": "{escaped}"}}', False),
    "event-piped-second-line": (
        ["event", "-k", "1"],
        '{{"content": "harmless"}}\n{{"tags": [["{hex}"]]}}\n',
        True,
    ),
    "event-content": (["event", "-k", "1", "-c", "-"], "{nsec}", False),
    "event-argument-escaped": (["event", '{{"content": "{escaped}"}}'], "", False),
    "canvas-file": (["canvas", "set", "--channel", "eng"], "# notes\n\n{hex}\n", True),
    "mem": (["mem", "set", "core"], "remember {nsec}", False),
    "req-piped-filter": (["req"], '{{"authors": ["{hex}"]}}', False),
}

#: The same commands with harmless input: each contacts the relay (so the attacks can fail).
CONTROLS = {
    "send": (["messages", "send", "--channel", "eng", "-"], "plain words"),
    "dm": (["messages", "dm", "--to", BOB.public_key.bech32, "-"], "plain words"),
    "event-template": (["event", "-"], '{"kind": 1, "content": "plain", "tags": [["x", "y"]]}'),
    "event-piped": (["event"], '{"content": "plain"}'),
    "event-content": (["event", "-c", "-"], "plain words"),
    "canvas": (["canvas", "set", "--channel", "eng"], "# notes\n"),
    "mem": (["mem", "set", "core"], "remember the milk"),
    "req": (["req"], '{"kinds": [1]}'),
}


def env(relay: ScriptedRelay, key: str) -> dict[str, str]:
    return {"BUZZ_RELAYS": relay.url, "BUZZ_PRIVATE_KEY": key}


@pytest.mark.parametrize("name", ATTACKS)
def test_a_secret_key_on_stdin_is_refused_before_any_relay_is_contacted(
    bg: BackgroundLoop, tmp_path: Path, name: str
) -> None:
    forms = {
        "nsec": SECRET.bech32,
        "hex": SECRET.hex,
        "HEX": SECRET.hex.upper(),
        "escaped": ESCAPED_HEX,
    }
    template_argv, template, via_file = ATTACKS[name]
    argv = [a.format(**forms) for a in template_argv]
    text = template.format(**forms)
    relay = bg.relay(answer)
    stdin: bytes | Path = text.encode()
    if via_file:
        stdin = tmp_path / "input.txt"
        stdin.write_bytes(text.encode())
    done = buzz(*argv, env=env(relay, SECRET.bech32), stdin=stdin, cwd=str(tmp_path))
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (1, b""), err
    assert "looks like a secret key" in err and "nothing was sent" in err, err
    assert not leaked(err), err
    assert (relay.connections, relay.received) == (0, [])


def test_the_configured_key_from_a_config_file_is_refused_too(
    bg: BackgroundLoop, tmp_path: Path
) -> None:
    relay = bg.relay(answer)
    config = tmp_path / "buzz.toml"
    write_toml(config, [relay.url], key=SECRET.hex)
    template = json.dumps({"kind": 1, "content": "x", "tags": [["note", SECRET.hex.upper()]]})
    done = buzz("event", "--config", str(config), stdin=template.encode(), cwd=str(tmp_path))
    assert done.returncode == 1, done.stderr
    assert not leaked(done.stderr.decode())
    assert relay.connections == 0


@pytest.mark.parametrize("name", CONTROLS)
def test_the_same_commands_publish_harmless_input(
    bg: BackgroundLoop, tmp_path: Path, name: str
) -> None:
    argv, text = CONTROLS[name]
    relay = bg.relay(answer)
    done = buzz(*argv, env=env(relay, SECRET.bech32), stdin=text.encode(), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr.decode()
    assert relay.connections >= 1
    assert relay.frames("REQ" if name == "req" else "EVENT")


# --- nak's stdin: piped templates and filters --------------------------------------------------


@pytest.fixture(scope="module")
def real_relay() -> Iterator[str]:
    with relay_process() as url:
        yield url


def published(done: Any) -> list[Event]:
    assert done.returncode == 0, done.stderr.decode()
    return [Event.from_json(line) for line in done.stdout.decode().splitlines()]


def test_a_piped_template_is_published_as_given_and_a_piped_filter_honoured(
    real_relay: str, tmp_path: Path
) -> None:
    keys = {"BUZZ_RELAYS": real_relay, "BUZZ_PRIVATE_KEY": SECRET.hex}
    template = {"kind": 30, "content": "piped ü", "tags": [["t", "piped"]], "created_at": 1_700}
    [event] = published(buzz("event", env=keys, stdin=json.dumps(template).encode()))
    assert (event.kind, event.content, event.tags, event.created_at) == (
        30,
        "piped ü",
        (("t", "piped"),),
        1_700,
    )
    # The flags override the template's kind and add to its tags; pretty-printed JSON is one.
    pretty = json.dumps(template | {"content": "pretty"}, indent=2).encode()
    [flagged] = published(buzz("event", "-k", "31", "-t", "x=y", env=keys, stdin=pretty))
    assert (flagged.kind, flagged.content, flagged.tags) == (
        31,
        "pretty",
        (("t", "piped"), ("x", "y")),
    )
    # One template per line; an empty stdin leaves the flags alone.
    lines = "\n".join(json.dumps({"kind": 30, "content": f"line {i}"}) for i in range(2))
    assert [e.content for e in published(buzz("event", env=keys, stdin=lines.encode()))] == [
        "line 0",
        "line 1",
    ]
    [plain] = published(buzz("event", "-c", "flags only", env=keys, stdin=b""))
    assert (plain.kind, plain.content) == (1, "flags only")

    piped_filter = json.dumps({"kinds": [30], "#t": ["piped"]}).encode()
    assert published(buzz("req", env=keys, stdin=piped_filter)) == [event]
    everything = published(buzz("req", "-k", "30", "-k", "31", env=keys, stdin=b""))
    assert {event.id, flagged.id} <= {e.id for e in everything} and len(everything) >= 4
    # The flags are added to a piped filter.
    assert published(buzz("req", "-a", BOB.public_key.hex, env=keys, stdin=piped_filter)) == []


@pytest.mark.parametrize("command", ["event", "req"])
def test_a_terminal_on_stdin_is_never_read(bg: BackgroundLoop, command: str) -> None:
    """At a terminal the flags alone are used: nothing waits for a template or filter."""
    relay = bg.relay(answer)
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [*BUZZ, command, "-k", "1", *(["-c", "typed"] if command == "event" else [])],
            stdin=follower,
            capture_output=True,
            env=clean_env(env(relay, SECRET.bech32)),
            timeout=30,
            check=False,
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 0, done.stderr.decode()
    if command == "event":
        [(_, sent)] = relay.frames("EVENT")
        assert (sent["kind"], sent["content"]) == (1, "typed")
    else:
        [(_, _, asked)] = relay.frames("REQ")
        assert asked == {"kinds": [1]}


@pytest.mark.parametrize("command", ["event", "req"])
def test_stdin_that_is_not_json_is_bad_input_and_nothing_is_sent(
    bg: BackgroundLoop, tmp_path: Path, command: str
) -> None:
    relay = bg.relay(answer)
    done = buzz(command, env=env(relay, SECRET.bech32), stdin=b'{"kinds": [1]}\n{"kinds": [\n')
    err = done.stderr.decode()
    assert (done.returncode, done.stdout) == (1, b""), err
    assert "stdin line 2: not JSON" in err
    assert relay.connections == 0


# --- hint relays -----------------------------------------------------------------------------


def test_an_nevent_with_20_hints_makes_buzz_contact_at_most_8(
    bg: BackgroundLoop, tmp_path: Path
) -> None:
    configured = bg.relay(answer)
    hints = [bg.relay(answer) for _ in range(20)]
    junk = ["https://not-a-relay.example", "ws://"]  # skipped, never counted against the cap
    ref = nip19.encode("nevent", "ab" * 32, relays=[*junk, *(h.url for h in hints)])
    done = buzz(
        "messages", "raw", "--event", ref, "--all", "--timeout", "5",
        env={"BUZZ_RELAYS": configured.url}, cwd=str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 3, done.stderr.decode()  # every relay asked answered: not found
    assert configured.connections == 1
    assert [h.connections for h in hints] == [1] * MAX_HINT_RELAYS + [0] * (20 - MAX_HINT_RELAYS)
