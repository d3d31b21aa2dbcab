"""``buzz manifest diff A B``: the three input forms, the report, bad input (1), forged hash (4)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.cli.app import main
from nostr_buzz.event import sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.manifest import manifest_from_layers
from tests.support.data import FIXTURES
from tests.support.manifests import BEFORE, edit_layer, layer, manifest_obj, write

AFTER = manifest_from_layers(
    [
        layer("platform_contract", "sha256:base", 1),
        layer("context_status", "sha256:status", 6),
        layer("recent_thread_delta", "sha256:delta", 6, tokens=40, truncated=True),
        layer("current_instruction", "event-2", 7, tokens=12),
        layer("delivery_contract", "sha256:delivery", 8),
    ]
)


def run(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capfd.readouterr()
    return code, out, err


def diff_json(a: Path, b: Path, capfd: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(["manifest", "diff", str(a), str(b), "--format", "json"], capfd)
    assert code == 0, err
    assert out.endswith("\n") and out.count("\n") == 1
    result: dict[str, Any] = json.loads(out)
    return result


def test_identical_manifests(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path, "a.json", BEFORE)
    b = write(tmp_path, "b.json", BEFORE)
    d = diff_json(a, b, capfd)
    assert d["hashChanged"] is False
    assert d["added"] == d["removed"] == d["changed"] == []
    assert d["commonPrefix"] == 5
    code, out, _ = run(["manifest", "diff", str(a), str(b)], capfd)
    assert code == 0
    assert out == (
        f"hash unchanged: {BEFORE.hash}\n"
        "layers: 5 -> 5 (5 unchanged); the first 5 are identical in both\n"
    )


def test_added_removed_and_changed(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path, "a.json", BEFORE)
    b = write(tmp_path, "b.json", AFTER)
    d = diff_json(a, b, capfd)
    assert d["hashChanged"] is True
    assert (d["hashBefore"], d["hashAfter"]) == (BEFORE.hash, AFTER.hash)
    assert [(x["layer"], x["occurrence"]) for x in d["added"]] == [("recent_thread_delta", 0)]
    assert d["added"][0]["after"]["estimatedTokens"] == 40
    assert [(x["layer"], x["occurrence"]) for x in d["removed"]] == [("interrupted_turn", 0)]
    assert [(x["layer"], x["fields"]) for x in d["changed"]] == [
        ("current_instruction", ["version", "estimatedTokens"])
    ]
    assert d["changed"][0]["before"]["version"] == "event-1"
    assert d["changed"][0]["after"]["version"] == "event-2"
    assert [x["layer"] for x in d["unchanged"]] == [
        "platform_contract",
        "context_status",
        "delivery_contract",
    ]

    code, out, _ = run(["manifest", "diff", str(a), str(b)], capfd)
    assert code == 0  # differing manifests are an answer, not an error
    assert out.splitlines() == [
        f"hash moved: {BEFORE.hash} -> {AFTER.hash}",
        "added    recent_thread_delta  order=6 version=sha256:delta estimatedTokens=40 "
        "truncated=true",
        "removed  interrupted_turn     order=6 version=sha256:cancelled estimatedTokens=10 "
        "truncated=false",
        "changed  current_instruction  version: event-1 -> event-2; estimatedTokens: 10 -> 12",
        "layers: 5 -> 5 (3 unchanged); the first 2 are identical in both",
    ]
    # --json is the same as --format json
    assert (
        run(["manifest", "diff", "--json", str(a), str(b)], capfd)[1]
        == json.dumps(d, separators=(",", ":"), ensure_ascii=False) + "\n"
    )


def test_duplicate_layer_names_show_their_occurrence(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    steer = [layer("steer_delivery_contract", f"sha256:s{i}", 8) for i in range(3)]
    a = write(tmp_path, "a.json", manifest_from_layers([*BEFORE.layers, steer[0], steer[1]]))
    b = write(tmp_path, "b.json", manifest_from_layers([*BEFORE.layers, steer[0], steer[2]]))
    d = diff_json(a, b, capfd)
    assert [(x["layer"], x["occurrence"], x["fields"]) for x in d["changed"]] == [
        ("steer_delivery_contract", 1, ["version"])
    ]
    out = run(["manifest", "diff", str(a), str(b)], capfd)[1]
    assert "changed  steer_delivery_contract[1]  version: sha256:s1 -> sha256:s2" in out


def test_compile_output_and_metric_payload_forms(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A compile output, a manifest file and a metric payload carrying the same manifest agree."""
    turn = FIXTURES / "turns" / "interrupted_steer.input.json"
    code, compiled, err = run(["compile", "--json", str(turn)], capfd)
    assert code == 0, err
    compile_out = write(tmp_path, "compiled.json", compiled.encode())
    manifest = json.loads(compiled)["manifest"]
    payload = {
        "harness": "goose",
        "timestamp": "2026-12-02T10:00:00.000Z",
        "model": None,
        "turn": {"inputTokens": 10, "outputTokens": 2, "totalTokens": 12, "costUsd": None},
        "deltaReliable": True,
        "contextManifest": manifest,
    }
    metric = write(tmp_path, "payload.json", payload)
    golden = FIXTURES / "turns" / "interrupted_steer.manifest.json"
    for a, b in [(compile_out, metric), (metric, golden), (golden, compile_out)]:
        d = diff_json(a, b, capfd)
        assert d["hashChanged"] is False and d["hashBefore"] == manifest["hash"]

    # another turn's compile output against the payload: the instruction changed
    other = FIXTURES / "turns" / "interrupted_interrupt.input.json"
    other_out = write(
        tmp_path, "other.json", run(["compile", "--json", str(other)], capfd)[1].encode()
    )
    d = diff_json(metric, other_out, capfd)
    assert d["hashChanged"] is True
    assert d["added"] or d["removed"] or d["changed"]


def test_stdin_for_one_side(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a = write(tmp_path, "a.json", BEFORE)
    b = write(tmp_path, "b.json", AFTER)
    expected = run(["manifest", "diff", str(a), str(b)], capfd)[1]
    with open(a, "rb") as stream:

        class Stdin:
            buffer = stream

        monkeypatch.setattr(sys, "stdin", Stdin)
        assert run(["manifest", "diff", "-", str(b)], capfd)[:2] == (0, expected)
    assert run(["manifest", "diff", "-", "-"], capfd)[:2] == (1, "")


def test_control_characters_in_layer_strings_are_escaped_in_text(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    a = write(tmp_path, "a.json", manifest_from_layers([layer("x\x1b[2J", "v\n1", 1)]))
    b = write(tmp_path, "b.json", manifest_from_layers([layer("x\x1b[2J", "v\r2", 1)]))
    code, out, _ = run(["manifest", "diff", str(a), str(b)], capfd)
    assert code == 0
    assert "x\\x1b[2J  version: v\\x0a1 -> v\\x0d2" in out
    assert "\x1b" not in out and "\r" not in out


def test_extra_members_are_ignored(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    obj = manifest_obj(BEFORE)
    obj["comment"] = "exported by hand"
    obj["layers"][0]["note"] = "not hashed"
    a = write(tmp_path, "a.json", obj)
    assert diff_json(a, write(tmp_path, "b.json", BEFORE), capfd)["hashChanged"] is False


# --- forged manifests: exit 4 ------------------------------------------------------------------


def _retag_hash(obj: dict[str, Any]) -> None:
    obj["hash"] = AFTER.hash


def _drop_layer(obj: dict[str, Any]) -> None:
    del obj["layers"][2]


@pytest.mark.parametrize("tamper", [_retag_hash, edit_layer, _drop_layer])
@pytest.mark.parametrize("form", ["manifest", "compile", "payload"])
def test_tampered_hash_exits_4(
    tamper: Any, form: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    obj = manifest_obj(BEFORE)
    tamper(obj)
    doc: dict[str, Any] = {
        "manifest": obj,
        "compile": {"sections": ["<buzz-turn>"], "manifest": obj},
        "payload": {
            "harness": "codex",
            "timestamp": "2026-12-02T10:00:00.000Z",
            "contextManifest": obj,
        },
    }[form]
    good = write(tmp_path, "good.json", BEFORE)
    bad = write(tmp_path, "tampered.json", doc)
    for argv in (
        ["manifest", "diff", str(good), str(bad)],
        ["manifest", "diff", str(bad), str(good)],
    ):
        code, out, err = run([*argv, "--json"], capfd)
        assert (code, out) == (4, ""), err
        assert str(bad) in err and "does not match its layers" in err
        assert str(good) not in err


def test_both_tampered_are_both_named(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    obj = manifest_obj(BEFORE)
    edit_layer(obj)
    a = write(tmp_path, "a.json", obj)
    b = write(tmp_path, "b.json", obj)
    code, out, err = run(["manifest", "diff", str(a), str(b)], capfd)
    assert (code, out) == (4, "")
    assert str(a) in err and str(b) in err


def test_bad_shape_wins_over_tampered_hash(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    obj = manifest_obj(BEFORE)
    edit_layer(obj)
    tampered = write(tmp_path, "tampered.json", obj)
    broken = write(tmp_path, "broken.json", b"{not json")
    assert run(["manifest", "diff", str(tampered), str(broken)], capfd)[:2] == (1, "")


# --- bad input: exit 1 -------------------------------------------------------------------------


def _manifest_with(mutate: Any) -> dict[str, Any]:
    obj = manifest_obj(BEFORE)
    mutate(obj)
    return obj


BAD_FILES: dict[str, Any] = {
    "not_json": b"sha256:abc",
    "empty": b"",
    "array": [],
    "unknown_object": {"hello": "world"},
    "text_compile_output": b"<buzz-turn>\n\nmanifest sha256:00",
    "layers_missing": _manifest_with(lambda o: o.pop("layers")),
    "hash_missing": _manifest_with(lambda o: o.pop("hash")),
    "order_as_string": _manifest_with(lambda o: o["layers"][0].update(order="1")),
    "tokens_as_float": _manifest_with(lambda o: o["layers"][0].update(estimatedTokens=10.0)),
    "truncated_as_int": _manifest_with(lambda o: o["layers"][0].update(truncated=0)),
    "version_missing": _manifest_with(lambda o: o["layers"][0].pop("version")),
    "schema_version_2": _manifest_with(lambda o: o.update(schemaVersion=2)),
    "compile_output_manifest_null": {"sections": [], "manifest": None},
    "payload_without_manifest": {"harness": "goose", "timestamp": "2026-12-02T10:00:00.000Z"},
    "payload_manifest_null": {"harness": "goose", "contextManifest": None},
    "nan": b'{"schemaVersion": NaN, "hash": "", "layers": []}',
    "byte_order_mark": b"\xef\xbb\xbf" + BEFORE.to_json().encode(),
    "not_utf8": b'{"x": "\xff", ' + BEFORE.to_json().encode()[1:],
    "deeply_nested": b'{"layers": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "lone_surrogate": b'{"x": "\\ud800", ' + BEFORE.to_json().encode()[1:],
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file_exits_1(case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.json", BEFORE)
    bad = write(tmp_path, f"{case}.json", BAD_FILES[case])
    for argv in (
        ["manifest", "diff", str(good), str(bad)],
        ["manifest", "diff", str(bad), str(good)],
    ):
        code, out, err = run(argv, capfd)
        assert (code, out) == (1, ""), err
        assert err.startswith("buzz: ") and str(bad) in err
    if case == "text_compile_output":
        assert "--format json" in err


def test_unreadable_paths_exit_1(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.json", BEFORE)
    for missing in (str(tmp_path / "missing.json"), str(tmp_path)):
        code, out, err = run(["manifest", "diff", str(good), missing], capfd)
        assert (code, out) == (1, "")
        assert "cannot read manifest file" in err and missing in err


def test_help_and_usage(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert run(["manifest", "diff", "--help"], capfd)[0] == 0
    assert run(["manifest", "--help"], capfd)[0] == 0
    good = str(write(tmp_path, "good.json", BEFORE))
    for argv in (
        ["manifest", "diff", good],
        ["manifest", "diff", good, good, "--bogus"],
        ["manifest", "diff", good, good, "--format", "csv"],
        ["manifest", "diff", good, good, "--json", "--format", "text"],
        ["manifest", "frobnicate"],
    ):
        assert run(argv, capfd)[:2] == (1, ""), argv


# --- as a real subprocess ----------------------------------------------------------------------


def test_signed_events_are_not_manifests(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # A common slip: passing a raw event (e.g. from `buzz messages raw`) instead of a payload.
    event = sign_event(SecretKey.from_str("33" * 32), kind=44200, content="x", created_at=1)
    path = write(tmp_path, "event.json", event.to_json().encode())
    code, out, err = run(["manifest", "diff", str(path), str(path)], capfd)
    assert (code, out) == (1, "")
    assert "not a manifest" in err
