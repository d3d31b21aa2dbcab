"""Layer 5: a thread checkpoint in a turn input (docs/envelope.md, "The thread checkpoint").

The golden ``thread_with_checkpoint`` pins the rendering; here: the section's place and
escaping, the layer's fields, that a turn input without a checkpoint (or with ``null``)
compiles byte for byte as before, the checks on the member (cheap-first), and ``buzz compile``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from nostr_buzz.cli.app import main
from nostr_buzz.core.compiler import LAYER_TABLE, compile_turn
from nostr_buzz.core.turn_input import ThreadCheckpointInput, TurnInput
from nostr_buzz.errors import TurnInputError
from tests.support.data import FIXTURES

TURNS = FIXTURES / "turns"
EVENT_ID = "9" * 64
COVERED = "8" * 64


def case(name: str = "thread_with_checkpoint") -> dict[str, Any]:
    obj: dict[str, Any] = json.loads((TURNS / f"{name}.input.json").read_bytes())
    return obj


def compiled(obj: dict[str, Any]) -> Any:
    return compile_turn(TurnInput.from_json(json.dumps(obj)))


def test_the_section_sits_between_the_snapshot_and_the_delta_and_is_escaped() -> None:
    obj = case()
    obj["threadCheckpoint"]["summary"] = "  a </thread-checkpoint> b & <c>\n"
    ambient = next(s for s in compiled(obj).sections if s.startswith("<ambient-context>"))
    lines = ambient.split("\n")
    opening = lines.index("<thread-checkpoint>")
    assert lines[opening - 1].startswith("Description:")
    assert lines[opening + 1] == "a &lt;/thread-checkpoint&gt; b &amp; &lt;c&gt;"
    assert lines[opening + 2] == "</thread-checkpoint>"
    assert lines[opening + 3].startswith("<recent-thread-delta ")


def test_the_layer_is_order_5_thread_scoped_and_versioned_by_the_event_id() -> None:
    obj = case()
    manifest = compiled(obj).manifest
    [layer] = [x for x in manifest.layers if x.layer == "thread_checkpoint"]
    assert (layer.order, layer.scope, layer.source) == (5, "thread", "thread_checkpoint_event")
    assert (layer.authority, layer.freshness) == ("advisory_context", "session_start")
    assert layer.version == obj["threadCheckpoint"]["eventId"]
    assert not layer.truncated
    orders = [x.order for x in manifest.layers]
    assert orders == sorted(orders) and LAYER_TABLE["thread_checkpoint"].order == 5


def test_without_a_checkpoint_nothing_changes() -> None:
    for name in ("thread_reply_with_history", "dm_thread", "legacy_first_turn"):
        plain = case(name)
        with_null = {**copy.deepcopy(plain), "threadCheckpoint": None}
        assert compiled(plain) == compiled(with_null)
        expected = (TURNS / f"{name}.manifest.json").read_text(encoding="utf-8")
        assert compiled(with_null).manifest.to_json() + "\n" == expected
    blank = case()
    blank["threadCheckpoint"]["summary"] = " \n\t "
    result = compiled(blank)
    assert all(x.layer != "thread_checkpoint" for x in result.manifest.layers)
    assert not any("<thread-checkpoint>" in s for s in result.sections)


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("eventId", "A" * 64),
        ("eventId", "a" * 63),
        ("coversThrough", "nope"),
        ("eventId", None),
        ("summary", 3),
    ],
)
def test_a_bad_checkpoint_is_a_turn_input_error_before_any_signature(
    member: str, value: object
) -> None:
    obj = case()
    obj["threadCheckpoint"][member] = value
    obj["events"][0]["event"]["sig"] = "0" * 128  # would fail verification: never reached
    with pytest.raises(TurnInputError, match=r"threadCheckpoint|thread_checkpoint"):
        TurnInput.from_json(json.dumps(obj))


def test_the_library_takes_it_and_checks_it() -> None:
    ti = TurnInput.from_json(json.dumps(case()))
    assert ti.thread_checkpoint is not None
    again = msgspec.structs.replace(
        ti, thread_checkpoint=ThreadCheckpointInput(EVENT_ID, COVERED, "Summary.")
    )
    [layer] = [x for x in compile_turn(again).manifest.layers if x.layer == "thread_checkpoint"]
    assert layer.version == EVENT_ID
    with pytest.raises(TurnInputError, match="eventId"):
        msgspec.structs.replace(ti, thread_checkpoint=ThreadCheckpointInput("x", COVERED, "s"))


def test_buzz_compile_takes_it(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "turn.json"
    path.write_text(json.dumps(case()), encoding="utf-8")
    assert main(["compile", "--json", str(path)]) == 0
    out = json.loads(capfd.readouterr().out)
    expected = (TURNS / "thread_with_checkpoint.manifest.json").read_text(encoding="utf-8")
    assert json.dumps(out["manifest"], separators=(",", ":"), ensure_ascii=False) + "\n" == expected
    assert any("<thread-checkpoint>" in s for s in out["sections"])


def test_the_history_after_a_checkpoint_starts_after_the_covered_event() -> None:
    from nostr_buzz.core.context import History, turn_context
    from tests.support.events import chat
    from tests.support.keys import ALICE, OWNER

    root = chat(OWNER, 1, content="root")
    middle = chat(ALICE, 2, content="middle", reply_to=root)
    newest = chat(OWNER, 3, content="newest", reply_to=root)
    history = History("thread", [root, middle, newest], 3, False)

    def shown(**kw: Any) -> list[str]:
        context = turn_context(history, in_batch={newest.id}, **kw)
        return [] if context is None else [m.content for m in context.messages]

    assert shown() == ["root", "middle"]
    assert shown(after=root.id) == ["middle"]
    assert shown(after=middle.id) == []  # nothing left: no history at all
    # A covered event the fetch did not return: nothing is left out for it.
    assert shown(after="f" * 64) == ["root", "middle"]
    context = turn_context(history, in_batch={newest.id}, after=root.id)
    assert context is not None and context.total == 3  # what the thread holds, as fetched


def test_the_summary_request_is_one_compiled_block_with_its_own_layer() -> None:
    from nostr_buzz.core.compiler import CHECKPOINT_REQUEST, compile_checkpoint_request
    from nostr_buzz.manifest import content_hash

    compiled = compile_checkpoint_request()
    [text] = compiled.sections
    assert text == f"<buzz-checkpoint-request>\n{CHECKPOINT_REQUEST}\n</buzz-checkpoint-request>"
    [layer] = compiled.manifest.layers
    assert (layer.order, layer.layer, layer.scope) == (7, "checkpoint_request", "session")
    assert layer.version == content_hash(text) and compiled.manifest.hash_matches()
    assert compile_checkpoint_request() == compiled  # pure
