"""Telemetry's values and the runner's side of it: ``[telemetry]`` and ``Telemetry`` checked
where they are given, the credentials in the headers never shown, a private conversation never
named to the back end, and a sink that fails never failing a turn."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nostr_buzz.acp.types import PermissionRequest, SessionStart
from nostr_buzz.bot.intake import gate_of
from nostr_buzz.bot.outputs import TurnIds
from nostr_buzz.bot.running import Phase, RunningTurns, Turn
from nostr_buzz.bot.supervisor import ChannelSession, secret_values
from nostr_buzz.bot.telemetry import TurnTelemetry, conversation_key
from nostr_buzz.bot.tools import Grant, NostrTools
from nostr_buzz.config import ConfigSources, load_config_file
from nostr_buzz.core.ledger import retrieval_layer
from nostr_buzz.core.permission import PermissionDecision
from nostr_buzz.core.queue import DispatchQueue
from nostr_buzz.core.telemetry import Telemetry, TurnBegan, TurnEnded
from nostr_buzz.errors import ConfigError
from nostr_buzz.io.diagnostics import DiagnosticRecord, DiagnosticsFeed
from nostr_buzz.io.pool import RelayPool
from nostr_buzz.nips import nip10
from nostr_buzz.nips.nip_am import MetricPayload, TokenCounts
from tests.support.events import chat
from tests.support.keys import ALICE, OWNER, offline_config

SECRET = "Bearer sk-lf-0123456789abcdef"


def test_the_telemetry_table_is_read_with_its_credentials_hidden(tmp_path: Path) -> None:
    path = tmp_path / "buzz.toml"
    path.write_text(
        "[telemetry]\n"
        'endpoint = "https://cloud.langfuse.com/api/public/otel/"\n'
        f'headers = {{ Authorization = "{SECRET}" }}\n'
        "export_content = true\nmetrics = false\n",
        encoding="utf-8",
    )
    path.chmod(0o600)
    section = load_config_file(path).telemetry
    assert SECRET not in repr(section) and "Authorization" in repr(section)
    config = offline_config()
    sources = ConfigSources(config_path=path, environ={})
    assert sources.file.telemetry.headers == {"Authorization": SECRET}
    telemetry = Telemetry(**{k: getattr(section, k) for k in section.__struct_fields__})
    assert telemetry.endpoint == "https://cloud.langfuse.com/api/public/otel"  # base, no "/"
    assert SECRET not in repr(telemetry)
    with_it = offline_config(telemetry=telemetry)
    assert SECRET in secret_values(with_it)  # redacted from every diagnostic
    assert SECRET not in repr(with_it)
    assert config.telemetry is None


def test_a_world_readable_file_with_telemetry_headers_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "buzz.toml"
    path.write_text(f'[telemetry]\nheaders = {{ X-Api-Key = "{SECRET}" }}\n', encoding="utf-8")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=r"telemetry\.headers") as refused:
        load_config_file(path)
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"endpoint": "ftp://collector"}, "telemetry.endpoint"),
        ({"endpoint": "http://"}, "telemetry.endpoint"),
        ({"endpoint": f"https://pk:{SECRET}@collector"}, "no credentials in the URL"),
        ({"endpoint": "https://collector/?token=x"}, "no query"),
        ({"headers": {"Bad Name": SECRET}}, "telemetry.headers"),
        ({"headers": {"Authorization": SECRET + "\r\nX-Injected: 1"}}, "Authorization"),
        ({"headers": {"Authorization": 7}}, "Authorization"),
        ({"timeout": 0}, "telemetry.timeout"),
        ({"timeout": "10"}, "telemetry.timeout"),
        ({"metrics": "yes"}, "telemetry.metrics"),
        ({"service_name": ""}, "telemetry.service_name"),
    ],
)
def test_telemetry_values_are_checked_naming_the_field_never_the_credential(
    changes: dict[str, Any], named: str
) -> None:
    given = {"endpoint": "http://127.0.0.1:4318", **changes}
    with pytest.raises(ConfigError, match=named) as refused:
        Telemetry(**given)
    assert SECRET not in str(refused.value)


def test_the_agent_is_never_passed_the_telemetry_credentials(tmp_path: Path) -> None:
    path = tmp_path / "buzz.toml"
    path.write_text('[agent]\npass_env = ["BUZZ_TELEMETRY_HEADERS"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="holds telemetry credentials"):
        load_config_file(path)
    sources = ConfigSources(environ={"BUZZ_TELEMETRY_HEADERS": f"Authorization={SECRET}"})
    with pytest.raises(ConfigError, match="holds telemetry credentials") as refused:
        sources.pass_env(["BUZZ_TELEMETRY_HEADERS"])
    assert SECRET not in str(refused.value)


def test_plugin_config_takes_only_a_telemetry() -> None:
    with pytest.raises(ConfigError, match="PluginConfig telemetry: expected a Telemetry, got dict"):
        offline_config(telemetry={"endpoint": "http://127.0.0.1:4318"})


# -- the runner's side ------------------------------------------------------------------------


class Sink:
    """A sink that keeps what it is told (or raises, when ``broken``)."""

    def __init__(self, broken: bool = False) -> None:
        self.told: list[tuple[str, Any]] = []
        self.broken = broken
        self.closed = False

    def _keep(self, what: str, record: Any) -> None:
        if self.broken:
            raise RuntimeError(f"sink down ({SECRET})")
        self.told.append((what, record))

    def on_turn_started(self, turn: TurnBegan) -> None:
        self._keep("started", turn)

    def on_steer(self, turn_id: str, steer: Any) -> None:
        self._keep("steer", steer)

    def on_permission(self, turn_id: str, permission: Any) -> None:
        self._keep("permission", permission)

    def on_retrieval(self, turn_id: str, retrieval: Any) -> None:
        self._keep("retrieval", retrieval)

    def on_turn_finished(self, turn: TurnEnded) -> None:
        self._keep("finished", turn)

    async def aclose(self) -> None:
        self.closed = True


def payload(turn_id: str, outcome: str = "success", evidence: str = "prompt_response") -> Any:
    return MetricPayload(
        harness="claude",
        timestamp="2026-01-01T00:00:01.000Z",
        model="claude-sonnet",
        turn_id=turn_id,
        turn=TokenCounts(10, 2, 12, 0.5, cache_read_tokens=6),
        outcome=outcome,  # type: ignore[arg-type]
        terminal_evidence=evidence,  # type: ignore[arg-type]
        started_at="2026-01-01T00:00:00.000Z",
    )


def telemetry(sink: Sink, *, content: bool = False, key: bytes = b"k" * 32) -> TurnTelemetry:
    return TurnTelemetry(sink, None, key=key, export_content=content, clock=lambda: 100.0)


def test_a_public_turn_is_told_with_its_words_only_when_content_is_exported() -> None:
    event = chat(ALICE, content="what broke the deploy?")
    for content in (False, True):
        sink = Sink()
        tel = telemetry(sink, content=content)
        tel.started("t1", "room", [event])
        tel.committed(TurnIds("room", "s1", "t1"), "room", payload("t1"), "m1", "the cache")
        tel.ended("t1", cancelled=False)
        assert [what for what, _ in sink.told] == ["started", "finished"]
        began, ended = (record for _, record in sink.told)
        assert (began.conversation, began.event_ids, began.private) == ("room", (event.id,), False)
        assert began.inputs == (("what broke the deploy?",) if content else ())
        assert ended.reply == ("the cache" if content else None)
        assert (ended.metric_event_id, ended.session_id, ended.outcome) == ("m1", "s1", "success")
        assert ended.usage == TokenCounts(10, 2, 12, 0.5, cache_read_tokens=6)
        assert ended.error_type is None


def test_a_private_conversation_is_a_keyed_hash_and_none_of_its_words_are_told() -> None:
    channel = nip10.private_channel(ALICE.public_key.hex)
    event = chat(ALICE, content="my private question")
    sink = Sink()
    tel = telemetry(sink, content=True)  # even with content exported
    tel.started("t1", channel, [event])
    tel.steer("t1", chat(ALICE, content="and a secret detail"), "injected")
    tel.committed(TurnIds(channel, "s1", "t1"), channel, payload("t1"), "m1", "private answer")
    tel.ended("t1", cancelled=False)
    told = repr(sink.told)
    for leaked in (ALICE.public_key.hex, event.id, "my private question", "secret detail"):
        assert leaked not in told
    assert "private answer" not in told
    [began] = [r for what, r in sink.told if what == "started"]
    assert began.private and began.conversation.startswith(nip10.PRIVATE_CHANNEL_PREFIX)
    # The same key gives the same id (a restart keeps grouping); another key another id, so
    # the id cannot be recomputed from a guessed public key.
    assert telemetry(Sink(), key=b"k" * 32).conversation(channel) == began.conversation
    assert telemetry(Sink(), key=b"x" * 32).conversation(channel) != began.conversation


def test_the_conversation_key_is_made_once_and_kept_private(tmp_path: Path) -> None:
    key = conversation_key(tmp_path)
    assert len(key) == 32 and conversation_key(tmp_path) == key
    assert (tmp_path / "telemetry.key").stat().st_mode & 0o077 == 0


def test_a_failed_turn_names_its_error_type_and_steers_and_permissions_are_told() -> None:
    sink = Sink()
    tel = telemetry(sink)
    tel.started("t1", "room", [chat(OWNER)])
    request = PermissionRequest("sess", "rm -rf /", "execute", "call-1", True)
    tel.permission(
        SimpleNamespace(turn_id="t1"), request, PermissionDecision(False, "policy_rejects")
    )
    tel.steer("t1", chat(OWNER), "failed")
    failed = payload("t1", "failed", "timeout")
    tel.committed(TurnIds("room", None, "t1"), "room", failed, None, None)
    tel.ended("t1", cancelled=False)
    kinds = [what for what, _ in sink.told]
    assert kinds == ["started", "permission", "steer", "finished"]
    assert sink.told[1][1].approved is False and sink.told[1][1].tool_kind == "execute"
    assert sink.told[3][1].error_type == "timeout"


def test_a_retrieval_is_a_record_a_layer_and_a_private_one_names_no_id() -> None:
    notes = retrieval_layer("fetch_thread", "relay_event", "e1", "{}")
    reply = retrieval_layer("fetch_thread", "relay_event", "e2", "{}")
    mine = retrieval_layer("fetch_messages", "private_conversation", "e3", "{}")
    public, private = Sink(), Sink()
    for sink, channel in ((public, "room"), (private, nip10.private_channel(ALICE.public_key.hex))):
        tel, turn = telemetry(sink), SimpleNamespace(turn_id="t1")
        tel.retrieval(turn, "fetch_event", [notes])  # before the turn: nothing to tell
        tel.started("t1", channel, [chat(ALICE)])
        tel.retrieval(turn, "fetch_thread", [notes, reply])
        tel.retrieval(turn, "fetch_messages", [mine])
        tel.retrieval(turn, "fetch_event", [], "not_found", "e4")
    told = [r for what, r in public.told if what == "retrieval"]
    assert [(r.tool, r.outcome, r.ref) for r in told] == [
        ("fetch_thread", "found", "e1"),
        ("fetch_thread", "found", "e2"),
        ("fetch_messages", "found", "e3"),
        ("fetch_event", "not_found", "e4"),
    ]
    assert (told[0].layer, told[0].source) == ("retrieved_event", "relay_event")
    assert told[3].layer is None and told[3].source is None
    hidden = [r for what, r in private.told if what == "retrieval"]
    assert [(r.tool, r.outcome, r.source) for r in hidden] == [
        (r.tool, r.outcome, r.source) for r in told
    ]
    assert all(r.ref is None for r in hidden)


async def test_the_tools_tell_the_running_turn_of_a_failed_call_never_the_agents_words() -> None:
    turns = RunningTurns("owner", OWNER.public_key.hex)
    told: list[tuple[Any, ...]] = []
    turns.retrieved = lambda turn, *rest: told.append((turn.turn_id, *rest))
    config = offline_config()
    tools = NostrTools(RelayPool([]), gate_of(config), config.signer, turns, timeout=1.0)
    queue = DispatchQueue()
    queue.push(chat(OWNER, 1000, channel="room"), now=1.0)
    batch = queue.flush_next(2.0)
    assert batch is not None
    turn = Turn.of(batch)
    turn.session = ChannelSession(SessionStart("s1", "legacy"), "m1")
    turn.advance(Phase.LIVE)
    turns[batch.channel] = turn
    grant, stranger = Grant(batch.channel, turn.session), Grant(batch.channel, object())
    answers = [
        await tools.call(grant, "the vault code is 4412", {}),
        await tools.call(grant, "fetch_event", {"id": "the vault code is 4412"}),
        await tools.call(grant, "fetch_event", {}),
        await tools.call(stranger, "fetch_event", {"id": "aa" * 32}),  # another session's
    ]
    assert [a.error for a in answers] == ["invalid_argument"] * 3 + ["no_turn"]
    assert told == [
        (turn.turn_id, "_OTHER", (), "invalid_argument", None),
        (turn.turn_id, "fetch_event", (), "invalid_argument", None),
        (turn.turn_id, "fetch_event", (), "invalid_argument", None),
    ]


@pytest.mark.parametrize(
    ("how", "outcome", "error"),
    [
        ("cancelled", "cancelled", None),
        ("failed", "failed", "ValueError"),
        ("abandoned", "failed", "abandoned"),
    ],
)
def test_a_turn_with_no_metric_still_ends_its_record(how: str, outcome: str, error: str) -> None:
    sink = Sink()
    tel = telemetry(sink)
    tel.started("t1", "room", [chat(OWNER)])
    if how == "failed":
        tel.failed("t1", "ValueError")
    tel.ended("t1", cancelled=how == "cancelled")
    [(_, ended)] = [(w, r) for w, r in sink.told if w == "finished"]
    assert (ended.outcome, ended.error_type) == (outcome, error)


async def test_a_broken_sink_fails_no_turn_and_is_reported_once_without_the_credential(
    tmp_path: Path,
) -> None:
    records: list[DiagnosticRecord] = []
    feed = DiagnosticsFeed(None, clock=lambda: datetime.now(UTC), callback=records.append)
    tel = TurnTelemetry(Sink(broken=True), feed, key=b"k" * 32, clock=lambda: 1.0)
    for turn in ("t1", "t2"):
        tel.started(turn, "room", [chat(OWNER)])
        tel.ended(turn, cancelled=False)
    assert [(r.kind, r.payload) for r in records] == [
        ("telemetry_failed", {"error": "RuntimeError"})
    ]
    sink = Sink()
    tel = telemetry(sink)
    await tel.aclose()
    assert sink.closed and not tel.enabled
    tel.started("t3", "room", [chat(OWNER)])  # after the flush: nothing more is told
    assert sink.told == []
