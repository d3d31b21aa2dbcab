"""``[telemetry]``: a real ``buzz run`` on a real ``buzz relay`` exports each turn to an OTLP
receiver written here (a real HTTP server decoding the official protobufs): one
``invoke_agent`` span per turn with the GenAI attributes, the steers and permission requests
as its events, and the usage metrics; the credentials in its headers never reach the bot's
output or files; a back end that is stuck never holds a turn, and the bot still stops."""

from __future__ import annotations

import ast
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nostr_buzz.event import Event
from nostr_buzz.nips.nip_am import MetricPayload, open_metric_event
from tests.support.buzz_process import Lines, buzz, relay_process, run_bot
from tests.support.keys import AGENT, OWNER
from tests.support.otlp_receiver import attributes_of, otlp_receiver
from tests.support.scripted_agent import Scripted

WAIT = 30.0
#: A credential as Langfuse takes it (Basic base64(public:secret)): it must never be shown.
SECRET = "Basic cGstbGYtc2VjcmV0OnNrLWxmLXRvcC1zZWNyZXQ="
DEMO = f"{sys.executable} -m nostr_buzz.demo.agent --delay 0"


def telemetry_env(url: str, **more: str) -> dict[str, str]:
    return {
        "BUZZ_TELEMETRY_ENDPOINT": url,
        "BUZZ_TELEMETRY_HEADERS": f"Authorization={SECRET}",
        "BUZZ_TELEMETRY_SERVICE_NAME": "buzz-under-test",
        **more,
    }


def mention(relay: str, text: str, reply_to: str | None = None) -> str:
    """The owner's mention of the bot in channel ``eng``: its event id."""
    args = ["messages", "send", "--channel", "eng", "--mention", AGENT.public_key.bech32]
    args += ["--reply-to", reply_to] if reply_to is not None else []
    sent = buzz(*args, text, env={"BUZZ_RELAYS": relay, "BUZZ_PRIVATE_KEY": OWNER.bech32})
    assert sent.returncode == 0, sent.stderr
    return sent.stdout.decode().strip()


def metrics_on(relay: str) -> list[tuple[Event, MetricPayload]]:
    """The bot's metrics on the relay, opened with the owner's key."""
    found = buzz("req", "--kind", "44200", "--author", AGENT.public_key.hex, "--relay", relay)
    assert found.returncode == 0, found.stderr
    events = [Event.from_json(line) for line in found.stdout.decode().splitlines()]
    return [(e, open_metric_event(OWNER, e)) for e in events]


def stop(bot: subprocess.Popen[bytes], stderr: Lines) -> str:
    """SIGTERM, as a service manager stops the bot: all it said, once it has exited 0."""
    bot.send_signal(signal.SIGTERM)
    rest = stderr.rest(bot, WAIT)
    said = "".join(stderr.seen) + rest.decode()
    assert bot.returncode == 0, said
    assert "buzz: stopped" in said
    return said


@contextmanager
def telemetry_bot(
    tmp_path: Path, relay: str, url: str, command: str = DEMO, **more: str
) -> Iterator[tuple[subprocess.Popen[bytes], Lines]]:
    """``buzz run`` exporting to ``url``, once it has said it started; killed if still up."""
    env = telemetry_env(url, **more)
    bot = run_bot(
        relay, command, tmp_path / "state", agent=AGENT, owner=OWNER, cwd=tmp_path, env=env
    )
    try:
        assert bot.stderr is not None
        stderr = Lines(bot.stderr)
        stderr.until("buzz: agent ")
        yield bot, stderr
    finally:
        if bot.poll() is None:
            bot.kill()
            bot.wait()


def state_text(state: Path) -> str:
    """Every file the bot wrote in its state directory, as text (the database included)."""
    return "".join(
        p.read_bytes().decode("utf-8", "replace") for p in state.rglob("*") if p.is_file()
    )


def assert_secret_nowhere(said: str, state: Path) -> None:
    for shown in (said, state_text(state)):
        assert SECRET not in shown
        assert SECRET.split()[1] not in shown


def test_one_turn_is_one_invoke_agent_span_with_the_genai_attributes_and_the_usage_metrics(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with relay_process() as relay, otlp_receiver() as receiver:
        with telemetry_bot(tmp_path, relay, receiver.url) as (bot, stderr):
            asked = mention(relay, "please summarise the deploy")
            assert ": success, " in stderr.until("buzz: turn in eng")
            [(metric, payload)] = metrics_on(relay)
            said = stop(bot, stderr)
        spans = receiver.received.spans()
        assert len(spans) == 1, spans
        [span] = spans
        attrs = attributes_of(span.attributes)
        turn = payload.turn
        assert turn is not None and turn.input_tokens is not None
        assert turn.output_tokens is not None
        agent_name = attrs["gen_ai.agent.name"]
        assert span.name == f"invoke_agent {agent_name}"
        assert span.status.code != 2  # not ERROR
        assert {k: v for k, v in attrs.items() if k not in _VARYING} == {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.id": AGENT.public_key.hex,
            "gen_ai.conversation.id": "eng",
            "gen_ai.provider.name": "_OTHER",
            "gen_ai.usage.input_tokens": turn.input_tokens,
            "gen_ai.usage.output_tokens": turn.output_tokens,
            "gen_ai.response.finish_reasons": ["end_turn"],
            "nostr_buzz.outcome": "success",
            "nostr_buzz.turn.id": payload.turn_id,
            "nostr_buzz.session.id": payload.session_id,
            "nostr_buzz.event_ids": [asked],
            "nostr_buzz.metric.event_id": metric.id,
            "nostr_buzz.manifest.hash": payload.context_manifest.hash
            if payload.context_manifest
            else None,
        }
        assert agent_name == payload.harness
        assert attrs.get("nostr_buzz.usage.total_tokens") == turn.total_tokens
        assert "gen_ai.input.messages" not in attrs and "gen_ai.output.messages" not in attrs
        assert receiver.received.resources()[0]["service.name"] == "buzz-under-test"
        # The usage metrics, flushed when SIGTERM stopped the bot.
        tokens = {a["gen_ai.token.type"]: p for a, p in receiver.received.metric_points(_TOKENS)}
        assert {k: (p.count, p.sum) for k, p in tokens.items()} == {
            "input": (1, turn.input_tokens),
            "output": (1, turn.output_tokens),
        }
        [(duration_attrs, duration)] = receiver.received.metric_points(_DURATION)
        assert duration.count == 1 and duration.sum > 0
        assert duration_attrs["gen_ai.operation.name"] == "invoke_agent"
        assert receiver.received.metric_units() == {_TOKENS: "{token}", _DURATION: "s"}
        # Every export carried the header; the bot never showed it.
        assert {h.get("authorization") for h in receiver.received.headers} == {SECRET}
        assert_secret_nowhere(said, state)


_TOKENS = "gen_ai.client.token.usage"
_DURATION = "gen_ai.client.operation.duration"
#: Attributes compared on their own (the agent's name, the total, the cost).
_VARYING = frozenset({"gen_ai.agent.name", "nostr_buzz.usage.total_tokens", "nostr_buzz.cost_usd"})

#: A prompt that asks permission for a tool, then waits for a steer before it answers.
_CACHED_USAGE = {
    "inputTokens": 40,
    "outputTokens": 6,
    "totalTokens": 46,
    "cachedReadTokens": 30,
    "cachedWriteTokens": 5,
}


def test_a_steer_and_a_tool_permission_are_events_of_the_turns_span(tmp_path: Path) -> None:
    state = tmp_path / "state"
    agent = Scripted(
        tmp_path,
        {
            "meta": {"steering": {"supported": True}},
            "steer_method": "_session/steering",
            "steer_answer": {"result": {"outcome": "injected"}},
            "turns": [{"ask": "ls", "then": "wait", "usage": _CACHED_USAGE}],
        },
    )
    command = " ".join([sys.executable, *agent.args])
    with relay_process() as relay, otlp_receiver() as receiver:
        provider = {"BUZZ_TELEMETRY_PROVIDER": "anthropic"}
        with telemetry_bot(tmp_path, relay, receiver.url, command, **provider) as (bot, stderr):
            first = mention(relay, "long task: list the files")
            _wait(lambda: agent.tools_run() == ["ls"], "the approved tool")
            steer = mention(relay, "also the logs", reply_to=first)
            assert ": success, " in stderr.until("buzz: turn in eng")
            [(metric, payload)] = metrics_on(relay)
            receiver.wait_for("the turn's span", lambda r: len(r.spans()) >= 1)
            said = stop(bot, stderr)
    [span] = receiver.received.spans()
    attrs = attributes_of(span.attributes)
    assert attrs["nostr_buzz.metric.event_id"] == metric.id
    assert attrs["gen_ai.provider.name"] == "anthropic"
    turn = payload.turn
    assert turn is not None
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (
        turn.input_tokens,
        turn.output_tokens,
    )
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 30
    assert attrs["gen_ai.usage.cache_creation.input_tokens"] == 5
    events = [(e.name, attributes_of(e.attributes)) for e in span.events]
    assert events == [
        (
            "nostr_buzz.permission",
            {
                "nostr_buzz.permission.approved": True,
                "nostr_buzz.permission.reason": "owner_only",
                "nostr_buzz.permission.tool_kind": "execute",
                "gen_ai.tool.call.id": "call-1",
            },
        ),
        (
            "nostr_buzz.steer",
            {"nostr_buzz.steer.outcome": "injected", "nostr_buzz.event_id": steer},
        ),
    ]
    times = [e.time_unix_nano for e in span.events]
    assert span.start_time_unix_nano <= times[0] <= times[1] <= span.end_time_unix_nano
    assert_secret_nowhere(said, state)


def test_a_turn_still_running_at_sigterm_is_flushed_as_abandoned(tmp_path: Path) -> None:
    agent = Scripted(tmp_path, {"turns": [{"then": "silent"}]})  # never answers
    command = " ".join([sys.executable, *agent.args])
    with (
        relay_process() as relay,
        otlp_receiver() as receiver,
        telemetry_bot(tmp_path, relay, receiver.url, command) as (bot, stderr),
    ):
        mention(relay, "a long one")
        _wait(lambda: agent.requests("session/prompt"), "the prompt")
        assert receiver.received.spans() == []  # the turn runs: its span is open
        said = stop(bot, stderr)
    [span] = receiver.received.spans()  # ended and exported by the stop itself
    attrs = attributes_of(span.attributes)
    assert (attrs["error.type"], attrs["nostr_buzz.outcome"]) == ("abandoned", "failed")
    assert span.status.code == 2
    assert_secret_nowhere(said, tmp_path / "state")


def test_a_back_end_that_echoes_the_credentials_in_its_errors_never_gets_them_shown(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    with (
        relay_process() as relay,
        otlp_receiver("reject") as receiver,
        telemetry_bot(tmp_path, relay, receiver.url) as (bot, stderr),
    ):
        mention(relay, "hello")
        assert ": success, " in stderr.until("buzz: turn in eng")
        receiver.wait_for("an export", lambda r: r.posts >= 1)
        said = stop(bot, stderr)
    assert "Failed to export" in said  # the refusal is reported …
    assert_secret_nowhere(said, state)  # … without what the back end quoted
    sent = receiver.received.headers
    assert sent and all(h.get("authorization") == SECRET for h in sent)


def test_a_stuck_back_end_holds_no_turn_and_the_bot_still_stops(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with relay_process() as relay, otlp_receiver("hang") as receiver:
        timeout = {"BUZZ_TELEMETRY_TIMEOUT": "2"}
        with telemetry_bot(tmp_path, relay, receiver.url, **timeout) as (bot, stderr):
            for n in range(2):  # the second turn runs while the first's export is stuck
                mention(relay, f"question {n}")
                assert ": success, " in stderr.until("buzz: turn in eng")
            receiver.wait_for("a stuck export", lambda r: r.posts >= 1)
            assert len(metrics_on(relay)) == 2  # the replies' metrics went out all the same
            began = time.monotonic()
            said = stop(bot, stderr)
            # The flush is bounded by the export timeout (2 s) and a second: far under this.
            assert time.monotonic() - began < WAIT
    assert receiver.received.spans() == []
    assert_secret_nowhere(said, state)


def test_a_back_end_that_is_down_holds_no_turn(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with relay_process() as relay, telemetry_bot(tmp_path, relay, url) as (bot, stderr):
        mention(relay, "are you there?")
        assert ": success, " in stderr.until("buzz: turn in eng")
        assert len(metrics_on(relay)) == 1
        said = stop(bot, stderr)
    assert "Failed to export" in said  # said on stderr, the turn untouched
    assert_secret_nowhere(said, tmp_path / "state")


def _wait(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.05)


def test_telemetry_settings_are_checked_and_never_show_the_credentials(tmp_path: Path) -> None:
    base = {
        "BUZZ_PRIVATE_KEY": AGENT.hex,
        "BUZZ_OWNER": OWNER.public_key.hex,
        "BUZZ_RELAYS": "ws://127.0.0.1:9",
    }
    cases = [
        ({"BUZZ_TELEMETRY_ENDPOINT": "ftp://example.com"}, "telemetry.endpoint: expected an http"),
        (
            {"BUZZ_TELEMETRY_ENDPOINT": f"https://user:{SECRET.split()[1]}@example.com"},
            "no credentials in the URL",
        ),
        ({"BUZZ_TELEMETRY_TIMEOUT": "0"}, "BUZZ_TELEMETRY_TIMEOUT"),
    ]
    for env, fragment in cases:
        done = buzz("run", "--agent", DEMO, env={**base, **env}, cwd=str(tmp_path))
        err = done.stderr.decode()
        assert done.returncode == 1 and fragment in err, (env, err)
        assert SECRET.split()[1] not in err
    config = tmp_path / "buzz.toml"
    config.write_text(
        "[telemetry]\n"
        'endpoint = "http://127.0.0.1:9"\n'
        f'headers = {{ Authorization = "{SECRET}" }}\n',
        encoding="utf-8",
    )
    config.chmod(0o644)
    done = buzz("run", "--agent", DEMO, "--config", str(config), env=base, cwd=str(tmp_path))
    err = done.stderr.decode()
    assert done.returncode == 1 and "telemetry.headers" in err and "chmod 600" in err, err
    assert SECRET not in err
    # On the command line, readable by the agent's own user: refused with [agent] user.
    config.unlink()
    done = buzz(
        "run",
        "--agent",
        DEMO,
        "--agent-user",
        "nobody",
        "--telemetry-endpoint",
        "http://127.0.0.1:9",
        "--telemetry-headers",
        f"Authorization={SECRET}",
        env=base,
        cwd=str(tmp_path),
    )
    err = done.stderr.decode()
    assert done.returncode == 1 and "--telemetry-headers puts the bot's telemetry" in err, err
    assert SECRET not in err
    # The help says to keep the credentials off the command line.
    helped = buzz("run", "--help", env={"COLUMNS": "200"})
    assert "--telemetry-headers" in helped.stdout.decode()
    assert json.dumps(SECRET) not in helped.stdout.decode()


def test_the_bot_without_telemetry_never_imports_opentelemetry() -> None:
    def loaded(code: str) -> list[str]:
        listing = "print([m for m in sys.modules if 'opentelemetry' in m or m.endswith('otel')])"
        done = subprocess.run(
            [sys.executable, "-c", f"import sys\n{code}\n{listing}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return list(ast.literal_eval(done.stdout.strip()))

    assert loaded("import nostr_buzz, nostr_buzz.bot.telemetry, nostr_buzz.core.telemetry") == []
    # A bot without [telemetry] loads neither the SDK nor the exporter (the ACP library may
    # load the OpenTelemetry API for its own spans, which go nowhere unless the host says).
    bot = loaded(
        "from nostr_buzz import BuzzPlugin\n"
        "from tests.support.keys import offline_config\n"
        "offline_config()"
    )
    assert [m for m in bot if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))] == []
    assert "nostr_buzz.io.otel" not in bot
