"""Asking the owner: the commands that answer, the codes, what a question decides, and the
session's idle timeout while it waits (no relay here: the question's send is the one edge
replaced; tests/e2e/bot/test_approvals.py sends it for real)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from nostr_buzz.acp.facts import PromptSent
from nostr_buzz.acp.profiles import GENERIC
from nostr_buzz.acp.state import Session, Timeouts
from nostr_buzz.acp.types import PermissionRequest
from nostr_buzz.bot.approvals import (
    CODE_ALPHABET,
    CODE_LENGTH,
    TITLE_CHARS,
    Approvals,
    new_code,
    one_line,
    question_text,
)
from nostr_buzz.bot.config import PluginConfig
from nostr_buzz.bot.intake import Command, decide, gate_of
from nostr_buzz.bot.outputs import TurnIds
from nostr_buzz.config import ConfigSources
from nostr_buzz.core.permission import (
    PermissionDecision,
    Speaker,
    TurnProvenance,
    answered,
    speakers,
)
from nostr_buzz.core.permission import decide as rule
from nostr_buzz.errors import ConfigError, MetricError
from nostr_buzz.io.diagnostics import DiagnosticRecord, DiagnosticsFeed
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59
from nostr_buzz.nips.nip_am import MetricPayload
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER, STRANGER, offline_config

ASKING = PermissionDecision(False, "not_owner", "batch", STRANGER.public_key.hex)
REQUEST = PermissionRequest("sess-1", "touch x", "execute", "call-1", True)
IDS = TurnIds("eng", "metric-session", "turn-1")


def test_allow_and_deny_need_exactly_one_code_and_anyones_is_a_command_never_queued() -> None:
    gate = gate_of(offline_config())
    said = {
        "!allow K7M2QX": Command("allow", "K7M2QX"),
        "nostr:npub1abc  !deny k7m2qx": Command("deny", "k7m2qx"),
    }
    for text, command in said.items():
        for author in (OWNER, STRANGER):  # a stranger's answer is refused later, not queued
            assert decide(chat(author, 1, content=text, mention=AGENT), gate, set()) == command
    for text in ("!allow", "!allow A B", "please !allow K7M2QX"):
        assert not isinstance(
            decide(chat(OWNER, 1, content=text, mention=AGENT), gate, set()), Command
        )
    # Not addressed to the agent: no command at all.
    assert not isinstance(decide(chat(OWNER, 1, content="!allow K7M2QX"), gate, set()), Command)
    # A stranger's other commands are no commands.
    assert decide(chat(STRANGER, 1, content="!cancel", mention=AGENT), gate, set()) != Command(
        "cancel"
    )


def test_the_owner_commands_by_private_message_too() -> None:
    def private(text: str) -> nip59.PrivateEvent:
        rumor = nip17.message(OWNER.public_key.hex, [AGENT.public_key.hex], text, created_at=9)
        return nip59.open_gift_wrap(
            AGENT, nip59.gift_wrap(OWNER, AGENT.public_key, rumor, now=9)
        ).as_event()

    gate = gate_of(offline_config())
    assert decide(private("!allow K7M2QX"), gate, set()) == Command("allow", "K7M2QX")
    assert decide(private("!cancel"), gate, set()) == Command("cancel")


def test_codes_are_six_unambiguous_characters_never_one_taken() -> None:
    codes = {new_code() for _ in range(200)}
    assert all(len(c) == CODE_LENGTH and set(c) <= set(CODE_ALPHABET) for c in codes)
    assert not set(CODE_ALPHABET) & set("01OIL")
    assert len(codes) > 190
    taken = {new_code() for _ in range(50)}
    assert new_code(taken) not in taken


def test_the_rule_asks_under_ask_and_only_allow_approves() -> None:
    owner = OWNER.public_key.hex
    turn = TurnProvenance(batch=(owner,))
    assert rule("ask", owner, turn, {owner}) == PermissionDecision(False, "ask")
    assert rule("ask", owner, None, ()).reason == "no_live_turn"  # nothing to ask about
    assert rule("ask", owner, turn, {owner}).asks_owner
    assert rule("owner", owner, TurnProvenance(batch=(STRANGER.public_key.hex,)), ()).asks_owner
    assert not rule("owner", owner, turn, {owner}).asks_owner
    assert not rule("reject", owner, turn, {owner}).asks_owner
    said = {
        a: answered(ASKING, a)
        for a in ("allowed", "denied", "timeout", "withdrawn", "unsent", "limit")
    }
    assert [d.approve for d in said.values()] == [True, False, False, False, False, False]
    assert said["limit"].reason == "ask_limit"
    assert said["allowed"].payload() == {
        "reason": "owner_allowed",
        "part": "batch",
        "actor": STRANGER.public_key.hex,
    }


class Quiet(Approvals):
    """Approvals whose question goes nowhere (the relay is the e2e test's)."""

    sent: list[str]

    async def _send(self, text: str) -> bool:
        self.sent.append(text)
        return True


def approvals(tmp_path: Path, timeout: float = 5.0) -> tuple[Quiet, list[DiagnosticRecord]]:
    records: list[DiagnosticRecord] = []
    feed = DiagnosticsFeed(
        tmp_path / "d.jsonl", clock=lambda: datetime.now(UTC), callback=records.append
    )
    quiet = Quiet(offline_config(ask_timeout=timeout), feed, lambda: 1000.0)
    quiet.sent = []
    return quiet, records


async def test_a_code_works_once_for_the_owner_only(tmp_path: Path) -> None:
    quiet, records = approvals(tmp_path)
    asking = asyncio.create_task(quiet.ask(REQUEST, ASKING, IDS, [STRANGER.public_key.hex]))
    while not quiet.sent:
        await asyncio.sleep(0)
    [text] = quiet.sent
    code = text.split("!allow ")[1][:CODE_LENGTH]
    assert "Tool: touch x\nKind: execute\nChannel: eng\n" in text
    assert STRANGER.public_key.bech32 in text
    assert not quiet.answer(chat(STRANGER, 1, content="x"), "allow", code)
    assert not quiet.answer(
        chat(OWNER, 1, content="x"), "allow", "ZZZZZZ" if code != "ZZZZZZ" else "YYYYYY"
    )
    assert quiet.answer(chat(OWNER, 2, content="x"), "allow", code.lower())
    decided = await asking
    assert decided.approve and decided.reason == "owner_allowed"
    assert not quiet.answer(chat(OWNER, 3, content="x"), "deny", code)
    refused = [r.payload["reason"] for r in records if r.kind == "approval_refused"]
    assert refused == ["not_owner", "unknown_code", "code_spent"]
    assert code not in repr([r.payload for r in records])


async def test_silence_rejects_at_the_timeout_and_a_cancel_withdraws(tmp_path: Path) -> None:
    quiet, _ = approvals(tmp_path, timeout=0.05)
    assert (await quiet.ask(REQUEST, ASKING, IDS, [])).reason == "ask_timeout"
    quiet, _ = approvals(tmp_path)
    asking = asyncio.create_task(quiet.ask(REQUEST, ASKING, IDS, []))
    while not quiet.sent:
        await asyncio.sleep(0)
    quiet.withdraw("another-turn")
    assert not asking.done()
    quiet.withdraw(IDS.turn_id or "")
    assert (await asking).reason == "ask_withdrawn"


def test_the_idle_timeout_waits_while_the_owner_is_asked() -> None:
    session = Session(GENERIC, Timeouts(idle=10.0, hard=100.0))
    session.receive(PromptSent(), 0.0)
    assert session.deadline() == 10.0
    session.ask_started()
    assert session.deadline() == 100.0  # the hard timeout still runs
    session.ask_ended(50.0)
    assert session.deadline() == 60.0


def test_the_metric_counts_decisions_and_leaves_them_out_when_there_were_none() -> None:
    base = MetricPayload(harness="goose", timestamp="2026-12-04T10:00:00.000Z")
    assert "permissions" not in base.to_json()
    counted = msgspec.structs.replace(base, permissions_approved=1, permissions_rejected=2)
    wire = msgspec.json.decode(counted.to_json())
    assert (wire["permissionsApproved"], wire["permissionsRejected"]) == (1, 2)
    assert MetricPayload.from_json(counted.to_json()) == counted
    with pytest.raises(MetricError):
        msgspec.structs.replace(base, permissions_rejected=-1)
    with pytest.raises(MetricError):
        MetricPayload.from_json(base.to_json()[:-1] + ',"permissionsApproved":null}')


def test_a_question_shows_hidden_characters_as_escapes_on_one_line_cut_to_a_stated_length() -> None:
    assert one_line("git status\n# ok\r\tx", 100) == ("git status\\n# ok\\r\\tx", False)
    # bidirectional overrides, zero-width and other controls: escaped, never rendered
    assert one_line("a\u202eb\u200bc\x1bd\u2028e", 100) == (
        "a\\u202eb\\u200bc\\x1bd\\u2028e",
        False,
    )
    # cut to the limit, an escape never split
    assert one_line("ab\ncd", 3) == ("ab", True)
    assert one_line("x" * 400, TITLE_CHARS) == ("x" * TITLE_CHARS, True)
    assert one_line("x" * 10_000_000, 5) == ("xxxxx", True)  # the rest never looked at
    title = "ls" + "\n" * 200 + "rm -rf /"
    request = PermissionRequest("sess-1", title, "exe\u202ecute", "c", True)
    text = question_text(request, "eng\nChannel: fake", [OWNER.public_key.hex], "K7M2QX", 5)
    lines = text.split("\n")
    assert len(lines) == 7, lines
    cut = f"Tool (cut to {TITLE_CHARS} characters, of 210 in all): "
    assert lines[1] == cut + "ls" + "\\n" * 149 + "…"
    assert lines[2] == "Kind: exe\\u202ecute"
    assert lines[3] == "Channel: eng\\nChannel: fake"
    assert lines[5] == "Others whose words reached this turn or its session: none, only yours"


def test_the_question_names_everyone_but_the_owner_and_where_their_words_came_in() -> None:
    owner, stranger, other = OWNER.public_key.hex, STRANGER.public_key.hex, AGENT.public_key.hex
    turn = TurnProvenance(batch=(owner, stranger), cancelled=(other,), steers=(stranger,))
    found = speakers(owner, turn, {owner, other})
    assert found == (
        Speaker(stranger, ("batch", "steer")),
        Speaker(other, ("cancelled", "session")),
    )
    assert speakers(owner, TurnProvenance(batch=(owner,)), {owner}) == ()
    text = question_text(REQUEST, "eng", [owner], "K7M2QX", 5, found, last=True)
    assert (
        f"{STRANGER.public_key.bech32} (this turn's messages, a message steered into this turn); "
        f"{AGENT.public_key.bech32} (interrupted messages this turn carries, "
        "an earlier turn of this session)"
    ) in text
    assert text.endswith("rejected without asking you.")


async def test_a_turn_asks_at_most_max_questions_and_the_rest_are_told_once_it_ends(
    tmp_path: Path,
) -> None:
    quiet, records = approvals(tmp_path, timeout=0.01)
    quiet.max_questions = 2
    other = TurnIds("eng", "metric-session", "turn-2")
    reasons = [(await quiet.ask(REQUEST, ASKING, IDS, [])).reason for _ in range(5)]
    assert reasons == ["ask_timeout"] * 2 + ["ask_limit"] * 3
    assert (await quiet.ask(REQUEST, ASKING, other, [])).reason == "ask_timeout"  # its own count
    assert len(quiet.sent) == 3 and "may ask no more" in quiet.sent[1]
    assert quiet.end_turn(other) is None  # nothing unasked: nothing to tell
    note = quiet.end_turn(IDS)
    assert note is not None
    await note
    assert quiet.sent[-1].startswith("3 more permission request(s) of the agent's turn in eng")
    [limited] = [r for r in records if r.kind == "permission_limit"]
    assert limited.payload == {"unasked": 3, "maxQuestions": 2, "sent": True}
    assert quiet.end_turn(IDS) is None  # forgotten once told
    assert (await quiet.ask(REQUEST, ASKING, IDS, [])).reason == "ask_timeout"


def test_a_question_names_ten_people_a_line_and_counts_the_rest() -> None:
    many = [SecretKey.generate().public_key.hex for _ in range(30)]
    crowd = [Speaker(p, ("batch",)) for p in many]
    text = question_text(REQUEST, "eng", many, "K7M2QX", 5, crowd)
    triggered, others = text.split("\n")[4:6]
    assert triggered.count("npub1") == 10 and triggered.endswith(", and 20 more")
    assert others.count("npub1") == 10 and others.endswith("; and 20 more")
    assert len(text) < 3000


def test_max_questions_comes_from_buzz_toml_and_is_checked_in_python_too(tmp_path: Path) -> None:
    environ = {
        "BUZZ_PRIVATE_KEY": AGENT.hex,
        "BUZZ_OWNER": OWNER.public_key.hex,
        "BUZZ_RELAYS": "wss://relay.example",
        "BUZZ_AGENT_COMMAND": "agent",
    }
    default = PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path))
    assert default.max_questions == 3
    (tmp_path / "buzz.toml").write_text("[agent]\nmax_questions = 5\n")
    assert (
        PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path)).max_questions == 5
    )
    for bad in ("0", "101", '"many"'):
        (tmp_path / "buzz.toml").write_text(f"[agent]\nmax_questions = {bad}\n")
        with pytest.raises(ConfigError, match="max_questions"):
            PluginConfig.from_sources(ConfigSources(environ=environ, cwd=tmp_path))
    for wrong in (0, 101, "3", True):
        with pytest.raises(ConfigError, match="max_questions"):
            offline_config(max_questions=wrong)
