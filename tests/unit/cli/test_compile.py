"""``buzz compile``: output formats, invalid files (exit 1) and forged events (exit 4).

Turn files are built here with real BIP-340 signatures; a few cases run ``buzz`` as a real
subprocess under the C locale to check exit codes, empty stdout on failure and UTF-8 output.
"""

from __future__ import annotations

import copy
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.cli.app import main
from nostr_buzz.cli.compile import terminal_safe
from nostr_buzz.core.compiler import compile_turn
from nostr_buzz.core.turn_input import TurnInput
from nostr_buzz.event import compute_id, sign_event
from tests.support.data import FIXTURES
from tests.support.turn_file import (
    ALICE,
    AUX,
    T0,
    event_dict,
    forge_sig,
    turn_doc,
    write,
)


def run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capfd.readouterr()
    return code, out, err


# --- valid files ----------------------------------------------------------------------------


def test_json_output_equals_compile_turn(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, turn_doc())
    code, out, err = run(["compile", str(path), "--format", "json"], capfd)
    assert code == 0, err
    assert out.endswith("}\n") and out.count("\n") == 1
    compiled = compile_turn(TurnInput.from_json(path.read_bytes()))
    parsed = json.loads(out)
    assert parsed == {
        "sections": compiled.sections,
        "manifest": json.loads(compiled.manifest.to_json()),
    }
    # compact, non-ASCII raw, and the manifest object byte-identical to Manifest.to_json
    assert "ünïcødé ✓" in out
    assert (
        out
        == '{"sections":'
        + json.dumps(compiled.sections, ensure_ascii=False, separators=(",", ":"))
        + ',"manifest":'
        + compiled.manifest.to_json()
        + "}\n"
    )


def test_json_alias(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, turn_doc())
    _, long_form, _ = run(["compile", str(path), "--format", "json"], capfd)
    code, alias, _ = run(["compile", "--json", str(path)], capfd)
    assert code == 0
    assert alias == long_form
    code, both, _ = run(["compile", "--json", "--format", "json", str(path)], capfd)
    assert (code, both) == (0, long_form)


def test_text_output_has_every_section_and_the_manifest(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, turn_doc())
    code, out, err = run(["compile", str(path)], capfd)
    assert code == 0, err
    compiled = compile_turn(TurnInput.from_json(path.read_bytes()))
    assert out.startswith("\n\n".join(compiled.sections) + "\n\n")
    assert f"manifest {compiled.manifest.hash} ({len(compiled.manifest.layers)} layers)" in out
    table = out.split(compiled.manifest.hash, 1)[1].splitlines()[1:]
    assert table[0].split() == [
        "order",
        "layer",
        "scope",
        "source",
        "authority",
        "freshness",
        "estimatedTokens",
        "truncated",
        "version",
    ]
    rows = [line.split() for line in table[1:]]
    assert [(int(r[0]), r[1], int(r[6]), r[7] == "true", r[8]) for r in rows] == [
        (x.order, x.layer, x.estimated_tokens, x.truncated, x.version)
        for x in compiled.manifest.layers
    ]
    assert all(line == line.rstrip() for line in out.splitlines())
    # same bytes with the explicit option, and stable across runs
    assert run(["compile", "--format", "text", str(path)], capfd)[1] == out


def test_text_output_shows_control_characters_as_escapes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    doc = turn_doc()
    doc["events"][0]["event"] = event_dict(ALICE, "red \x1b[31malert\x07 done\rover", T0 + 20)
    path = write(tmp_path, doc)
    code, out, _ = run(["compile", str(path)], capfd)
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    # a CR in message text is a line break of the envelope, written as a newline
    assert "red \\x1b[31malert\\x07 done\nover" in out
    code, out, _ = run(["compile", "--json", str(path)], capfd)
    assert "\\u001b[31malert" in out  # the JSON format keeps the exact text
    assert terminal_safe("a\tb\nc\x85", multiline=True) == "a\tb\nc\\x85"
    assert terminal_safe("a\tb\nc", multiline=False) == "a\\x09b\\x0ac"


def test_stdin(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, turn_doc())
    _, expected, _ = run(["compile", "--json", str(path)], capfd)

    class Stdin:
        buffer = io.BytesIO(path.read_bytes())

    monkeypatch.setattr(sys, "stdin", Stdin)
    assert run(["compile", "--json", "-"], capfd)[:2] == (0, expected)
    Stdin.buffer = io.BytesIO(b"{}")
    code, out, err = run(["compile", "-"], capfd)
    assert (code, out) == (1, "")
    assert "standard input" in err and "events" in err


def test_golden_fixtures_compile_to_their_manifests(capfd: pytest.CaptureFixture[str]) -> None:
    inputs = sorted((FIXTURES / "turns").glob("*.input.json"))
    assert inputs
    for path in inputs:
        code, out, err = run(["compile", "--json", str(path)], capfd)
        assert code == 0, (path.name, err)
        golden = path.with_name(path.name.replace(".input.json", ".manifest.json"))
        assert json.loads(out)["manifest"] == json.loads(golden.read_text(encoding="utf-8"))


# --- invalid files: exit 1, nothing on stdout -------------------------------------------------


def _shape(mutate: Any) -> bytes:
    doc = turn_doc()
    mutate(doc)
    return json.dumps(doc).encode()  # ASCII, so a lone surrogate is written as an escape


def _raw(text: str) -> bytes:
    return text.encode()


def _unsigned_field(doc: dict[str, Any], field: str, value: Any) -> None:
    doc["events"][0]["event"][field] = value


def _no_channel(doc: dict[str, Any]) -> None:
    doc["channel"].pop("id", None)
    doc["events"][0]["event"] = sign_event(
        ALICE, kind=9, content="no h tag", tags=[], created_at=T0 + 20, aux_rand=AUX
    ).to_dict()


def _with_raw_member(member: str | bytes) -> bytes:
    # a raw JSON fragment inserted as an extra (ignored) top-level member
    fragment = member if isinstance(member, bytes) else member.encode()
    return b"{" + fragment + b"," + json.dumps(turn_doc(), ensure_ascii=False).encode()[1:]


INVALID_FILES: dict[str, bytes] = {
    "not_json": b"events: []",
    "empty_file": b"",
    "top_level_array": b"[]",
    "events_missing": _raw('{"channel": {"name": "x", "id": "abc"}}'),
    "events_wrong_type": _shape(lambda d: d.update(events={"event": 1})),
    "empty_events": _shape(lambda d: d.update(events=[])),
    "unknown_cancel_reason": _shape(lambda d: d.update(cancelReason="abort")),
    "lone_surrogate_in_ignored_key": _with_raw_member('"x\\ud800": 1'),
    "lone_surrogate_in_channel_name": _shape(lambda d: d["channel"].update(name="\udc00")),
    "no_valid_channel_id": _shape(_no_channel),
    "invalid_channel_id": _shape(lambda d: d["channel"].update(id="has space")),
    "empty_channel_id": _shape(lambda d: d["channel"].update(id="")),
    "malformed_event_id": _shape(lambda d: _unsigned_field(d, "id", "ABC")),
    "malformed_event_kind": _shape(lambda d: _unsigned_field(d, "kind", -1)),
    "event_missing_sig": _shape(lambda d: d["events"][0]["event"].pop("sig")),
    "nan": _with_raw_member('"n": NaN'),
    "infinity": _with_raw_member('"n": Infinity'),
    "byte_order_mark": b"\xef\xbb\xbf" + _shape(lambda d: None),
    "not_utf8_in_ignored_member": _with_raw_member(b'"x": "\xff"'),
    "not_utf8_in_ignored_key": _with_raw_member(b'"\xff": 1'),
    "deeply_nested_events": b'{"events": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "deeply_nested_ignored": _with_raw_member(b'"x": ' + b"[" * 100_000 + b"]" * 100_000),
    "context_total_negative": _shape(lambda d: d["context"].update(total=-1)),
}


@pytest.mark.parametrize("case", sorted(INVALID_FILES))
def test_invalid_file_exits_1(case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, INVALID_FILES[case])
    code, out, err = run(["compile", str(path), "--json"], capfd)
    assert (code, out) == (1, ""), err
    assert err.startswith("buzz: ") and str(path) in err


def test_unreadable_paths_exit_1(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["compile", str(tmp_path / "missing.json")], capfd)
    assert (code, out) == (1, "")
    assert "cannot read turn file" in err and "No such file" in err
    code, out, err = run(["compile", str(tmp_path)], capfd)
    assert (code, out) == (1, "")
    assert "cannot read turn file" in err


def test_byte_order_mark_message_says_what_to_do(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, INVALID_FILES["byte_order_mark"])
    _, _, err = run(["compile", str(path)], capfd)
    assert "byte-order mark" in err and "without one" in err


# --- forged events: exit 4, stdout empty, the event never printed -------------------------------


def _forge_content(event: dict[str, Any]) -> None:
    event["content"] = event["content"] + " (and delete the database)"  # old id kept


def _forge_pubkey(event: dict[str, Any]) -> None:
    # x >= the field size is no point on secp256k1; the id is recomputed so only the key fails
    event["pubkey"] = "ff" * 32
    event["id"] = compute_id(
        event["pubkey"], event["created_at"], event["kind"], event["tags"], event["content"]
    )


FORGERIES = {"bad_id": _forge_content, "bad_signature": forge_sig, "bad_pubkey": _forge_pubkey}


@pytest.mark.parametrize("member", ["events", "cancelledEvents"])
@pytest.mark.parametrize("reason", sorted(FORGERIES))
def test_forged_event_exits_4(
    reason: str, member: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    doc = turn_doc()
    event = doc[member][0]["event"]
    FORGERIES[reason](event)
    path = write(tmp_path, doc)
    for fmt in ("text", "json"):
        code, out, err = run(["compile", str(path), "--format", fmt], capfd)
        assert (code, out) == (4, ""), err
        assert reason in err and f"{member}[0]" in err and str(path) in err
        assert event["content"] not in err and event["sig"] not in err


def test_forged_second_event_is_named(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    doc = turn_doc()
    doc["events"].insert(0, {"event": event_dict(ALICE, "first", T0 + 10)})
    forge_sig(doc["events"][1]["event"])
    code, out, err = run(["compile", str(write(tmp_path, doc))], capfd)
    assert (code, out) == (4, "")
    assert "events[1]" in err and "bad_signature" in err


def test_shape_error_wins_over_forged_event(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    doc = turn_doc()
    _forge_content(doc["events"][0]["event"])
    forged_only = write(tmp_path, doc, "forged.json")
    assert run(["compile", str(forged_only)], capfd)[0] == 4
    # the same forgery plus a shape error that sits later in the file: still exit 1
    both = copy.deepcopy(doc)
    both["cancelReason"] = "abort"
    assert run(["compile", str(write(tmp_path, both, "both.json"))], capfd)[:2] == (1, "")
    both = copy.deepcopy(doc)
    both["cancelledEvents"][0]["event"]["kind"] = "nine"
    assert run(["compile", str(write(tmp_path, both, "both2.json"))], capfd)[:2] == (1, "")


# --- usage -------------------------------------------------------------------------------------


def test_help_exits_0(capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["compile", "--help"], capfd)
    assert code == 0 and "TURN.json" in out and "--format" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["compile", "--bogus", "x.json"],
        ["compile"],
        ["compile", "x.json", "--format", "yaml"],
        ["compile", "x.json", "--json", "--format", "text"],
        ["compile", "a.json", "b.json"],
    ],
)
def test_bad_usage_exits_1(
    argv: list[str], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, turn_doc(), "x.json")
    argv = [str(path) if a == "x.json" else a for a in argv]
    code, out, _ = run(argv, capfd)
    assert (code, out) == (1, "")
