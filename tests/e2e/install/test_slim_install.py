"""``pip install nostr-buzz`` without extras: the library alone, in a fresh virtual environment.

The environment is new (no system site packages), the project is installed with its base
dependencies from pip's cache or the package index (never ``--no-deps``), and then: the agent
protocol's packages (acp, pydantic) and nostr-sdk are absent; typer and rich are there only as
pynostr's own dependencies (the library takes bech32 from pynostr) and the library never imports
them; every library export loads, the core path works (bech32 keys included), and ``buzz run``
names the extra to install.

The bot is there too: a ``BuzzPlugin`` whose agent is a plain async function, in that
environment, answers a mention published on a real relay (LocalRelay on 127.0.0.1) once, with
one metric that the owner opens; importing ``BuzzPlugin`` loads neither the agent protocol nor
pydantic, and an ACP agent command is refused at construction naming the extra.  The time
``from nostr_buzz import BuzzPlugin`` takes there (median of fresh processes) is printed, never
asserted: the machine may be busy.  What that import loads is asserted instead: nothing the
plugin needs only once made or started (:data:`RUNTIME_ONLY`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nostr_buzz.keys import SecretKey
from tests.support.bot_world import World
from tests.support.readme import ROOT
from tests.support.relays import RunningRelay

#: Exports that need the ``acp`` extra (the ACP agent's driver).
NEED_ACP = {"AgentDriver"}

#: What a plugin needs only once it is made or started, and so what ``from nostr_buzz import
#: BuzzPlugin`` must not load: the event loop, the relay pool and its WebSocket client, the
#: agent's supervisor and protocol, the queue, the state database, delivery and the outbox, the
#: compiler, telemetry, the metric codec and the cipher.
RUNTIME_ONLY = (
    "asyncio",
    "websockets",
    "sqlite3",
    "cryptography",
    "nostr_buzz.acp",
    "nostr_buzz.agent",
    "nostr_buzz.bot.context",
    "nostr_buzz.bot.delivery",
    "nostr_buzz.bot.state",
    "nostr_buzz.bot.supervisor",
    "nostr_buzz.bot.tasks",
    "nostr_buzz.bot.telemetry",
    "nostr_buzz.bot.tools",
    "nostr_buzz.bot.turn",
    "nostr_buzz.core.compiler",
    "nostr_buzz.core.queue",
    "nostr_buzz.core.telemetry",
    "nostr_buzz.io.diagnostics",
    "nostr_buzz.io.outbox",
    "nostr_buzz.io.pool",
    "nostr_buzz.io.publisher",
    "nostr_buzz.io.relay",
    "nostr_buzz.nips.nip_am",
)

#: Loads the plugin in a fresh process; prints the modules it loaded, then those a plugin made
#: with an in-process agent loaded besides.
LOADS = r"""
import json, sys, tempfile
from pathlib import Path
from nostr_buzz import BuzzPlugin, PluginConfig, SecretKey
imported = sorted(sys.modules)
async def answer(turn):
    return "hi"
config = PluginConfig(
    agent_secret=SecretKey.from_str("07" * 32), owner=SecretKey.from_str("08" * 32).public_key,
    read_relays=["ws://127.0.0.1:9"], write_relays=["ws://127.0.0.1:9"],
    state_dir=Path(tempfile.mkdtemp()),
)
BuzzPlugin(config, agent=answer)
print(json.dumps({"imported": imported, "made": sorted(set(sys.modules) - set(imported))}))
"""

#: A bot on the base install: its agent a plain async function; prints ``ready``, serves the
#: relay until one metric is published, then what it saw.
BOT = r"""
import asyncio, json, sys
from pathlib import Path
from nostr_buzz import AgentTurn, BuzzPlugin, ConfigError, PluginConfig, SecretKey

relay, agent_key, owner_npub, state = sys.argv[1:5]
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("acp", "pydantic"))

async def answer(turn: AgentTurn) -> str:
    return "pong 7" if "ping 7" in turn.text else "no ping in: " + turn.text[-300:]

async def main() -> dict:
    config = PluginConfig(
        agent_secret=SecretKey.from_str(agent_key), owner=owner_npub,
        read_relays=[relay], write_relays=[relay], state_dir=Path(state),
        relay_timeout=5.0, coalesce_window=0.1,
    )
    try:
        BuzzPlugin(PluginConfig(**{**vars(config), "agent_command": "some-acp-agent"}))
        acp_refused = ""
    except ConfigError as exc:
        acp_refused = str(exc)
    published = asyncio.Event()
    kinds = []
    def seen(record):
        kinds.append(record.kind)
        if record.kind == "metric_published":
            published.set()
    bot = BuzzPlugin(config, agent=answer, on_diagnostic=seen)
    running = asyncio.create_task(bot.run())
    print("ready", flush=True)
    await asyncio.wait_for(published.wait(), 60)
    bot.stop()
    await running
    return {"heavy": heavy, "acp_refused": acp_refused, "failed": kinds.count("turn_failed"),
            "later_heavy": sorted(m for m in sys.modules if m.split(".")[0] in ("acp", "pydantic"))}

print(json.dumps(asyncio.run(main())), flush=True)
"""

CHECK = r"""
import importlib.util, json, sys
absent = {name: importlib.util.find_spec(name) is None
          for name in ("acp", "pydantic", "nostr_sdk")}
need_acp = set(json.loads(sys.argv[1]))
import nostr_buzz
loaded = [name for name in nostr_buzz.__all__ if name not in need_acp
          and getattr(nostr_buzz, name) is not None]
from nostr_buzz import (
    ChannelInfo, Event, MetricPayload, SecretKey, TokenCounts, TurnEvent, TurnInput,
    build_metric_event, compile_turn, metric_timestamp, open_metric_event, sign_event,
)
agent, owner = SecretKey.from_str("07" * 32), SecretKey.from_str("08" * 32)
mention = sign_event(owner, kind=9, content="hi", tags=[["h", "dev"]], created_at=5)
event = Event.from_json(mention.to_json())  # id and signature checked
turn = compile_turn(TurnInput(events=(TurnEvent(event),), channel=ChannelInfo(name="dev")))
payload = MetricPayload(
    harness="slim", timestamp=metric_timestamp(1_767_225_600), model=None, channel_id="dev",
    session_id="s", turn_id="t", turn_seq=1, turn=TokenCounts(input_tokens=1, output_tokens=2),
    outcome="success", context_manifest=turn.manifest,
)
sealed = build_metric_event(agent, owner.public_key, payload)
opened = open_metric_event(owner, sealed)
assert SecretKey.from_str(agent.bech32).public_key.bech32 == agent.public_key.bech32
unwanted = ("typer", "rich", "click", "tornado", "requests", "acp", "pydantic")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in unwanted)
print(json.dumps({"absent": absent, "loaded": len(loaded), "heavy": heavy,
                  "hash": opened.context_manifest.hash == turn.manifest.hash}))
"""


def _source_copy(to: Path) -> Path:
    """What a build of the worktree reads (so that the build leaves nothing in the worktree)."""
    to.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, to / name)
    shutil.copytree(
        ROOT / "nostr_buzz", to / "nostr_buzz", ignore=shutil.ignore_patterns("__pycache__")
    )
    return to


@pytest.fixture(scope="module")
def slim_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtual environment with the project installed without extras."""
    tmp_path = tmp_path_factory.mktemp("slim")
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = venv / "bin" / "python"
    source = _source_copy(tmp_path / "src")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(source)],
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    yield python


def test_a_plain_install_is_the_library_without_the_cli_and_the_agent_protocol(
    tmp_path: Path, slim_python: Path
) -> None:
    python, venv = slim_python, slim_python.parent.parent
    checked = subprocess.run(
        [str(python), "-c", CHECK, json.dumps(sorted(NEED_ACP))],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,  # not the worktree: the installed copy is what runs
    )
    assert checked.returncode == 0, checked.stderr.decode()
    report = json.loads(checked.stdout)
    assert all(report["absent"].values()), report["absent"]
    assert report["heavy"] == [] and report["hash"] is True
    import nostr_buzz

    assert report["loaded"] == len(nostr_buzz.__all__) - len(NEED_ACP)
    # An ACP agent is an extra: the script says which one, without a traceback.
    agent, owner = SecretKey.from_str("07" * 32), SecretKey.from_str("08" * 32)
    command = [str(venv / "bin" / "buzz"), "run", "--agent", "goose acp"]
    command += ["--owner", owner.public_key.bech32, "--relay", "ws://127.0.0.1:9"]
    buzz = subprocess.run(
        [*command, "--state-dir", str(tmp_path / "state")],
        capture_output=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "BUZZ_PRIVATE_KEY": agent.hex},
    )
    stderr = buzz.stderr.decode()
    assert buzz.returncode == 1 and buzz.stdout == b""
    assert "pip install 'nostr-buzz[acp]'" in stderr and "Traceback" not in stderr


async def test_on_the_base_install_an_async_function_answers_a_mention_with_one_metric(
    relay: RunningRelay, tmp_path: Path, slim_python: Path
) -> None:
    world = World(relay, *(SecretKey.generate() for _ in range(3)), tmp_path)
    bot = await asyncio.create_subprocess_exec(
        str(slim_python),
        "-c",
        BOT,
        relay.url,
        world.agent.hex,
        world.owner.public_key.bech32,  # an npub where a public key is due
        str(tmp_path / "state"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,  # not the worktree: the installed copy is what runs
    )
    try:
        assert bot.stdout is not None
        line = await asyncio.wait_for(bot.stdout.readline(), 60)
        assert line == b"ready\n", line
        mention = world.message(world.owner, "ping 7")
        await world.publish(mention)
        out, err = await asyncio.wait_for(bot.communicate(), 90)
    finally:
        if bot.returncode is None:
            bot.kill()
            await bot.wait()
    assert bot.returncode == 0, err.decode()
    report = json.loads(out)
    assert report["heavy"] == [] and report["later_heavy"] == [] and report["failed"] == 0
    assert "pip install 'nostr-buzz[acp]'" in report["acp_refused"]
    replies = await world.query({"kinds": [9], "authors": [world.agent.public_key.hex]})
    assert [r.content for r in replies] == ["pong 7"]
    assert any(t[:2] == ("e", mention.id) for t in replies[0].tags)
    [metric] = await world.metrics()
    assert metric.outcome == "success" and metric.triggering_event_ids == (mention.id,)


def test_importing_the_bot_on_the_base_install_loads_no_agent_protocol(
    slim_python: Path, tmp_path: Path
) -> None:
    code = "from nostr_buzz import BuzzPlugin, PluginConfig, AgentTurn, AgentReply"
    done = subprocess.run(
        [
            str(slim_python),
            "-c",
            code + "; import sys; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('acp', 'pydantic')))",
        ],
        capture_output=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    )
    assert done.stdout.decode().strip() == "[]"
    timed = "import time; t = time.perf_counter(); from nostr_buzz import BuzzPlugin; "
    timed += "print((time.perf_counter() - t) * 1000)"
    runs = [
        float(
            subprocess.run(
                [str(slim_python), "-c", timed],
                capture_output=True,
                timeout=60,
                check=True,
                cwd=tmp_path,
            ).stdout
        )
        for _ in range(9)
    ]
    ms = statistics.median(runs)
    print(f"from nostr_buzz import BuzzPlugin on the base install: {ms:.0f} ms (median of 9)")
    assert ms > 0


def test_importing_the_plugin_loads_none_of_its_running_parts(
    slim_python: Path, tmp_path: Path
) -> None:
    # On the base install and in the test environment (every extra there): the import loads
    # the plugin and its configuration, nothing of RUNTIME_ONLY; making a plugin loads its
    # parts, so the list names modules that do exist and load.
    for python in (slim_python, Path(sys.executable)):
        done = subprocess.run(
            [str(python), "-c", LOADS], capture_output=True, timeout=60, check=True, cwd=tmp_path
        )
        loads = json.loads(done.stdout)
        imported, made = set(loads["imported"]), set(loads["made"])
        assert {"nostr_buzz.bot.plugin", "nostr_buzz.bot.config"} <= imported
        assert sorted(imported & set(RUNTIME_ONLY)) == [], python
        # What waits for start() (and the cipher for the first payload encrypted or opened):
        waiting = {"nostr_buzz.bot.delivery", "nostr_buzz.bot.turn", "nostr_buzz.io.publisher"}
        waiting |= {"nostr_buzz.bot.telemetry", "nostr_buzz.core.telemetry", "cryptography"}
        assert set(RUNTIME_ONLY) - made == waiting, python


def test_the_build_gives_the_license_as_an_spdx_expression_without_a_warning(
    tmp_path: Path,
) -> None:
    source = _source_copy(tmp_path / "src")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), "."],
        capture_output=True,
        timeout=300,
        check=False,
        cwd=source,
    )
    log = built.stdout.decode() + built.stderr.decode()
    assert built.returncode == 0, log
    assert "BuildBackendWarning" not in log and "license" not in log.lower(), log
    [wheel] = tmp_path.glob("nostr_buzz-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    assert "\nLicense-Expression: MIT\n" in metadata and "\nLicense: " not in metadata


def test_importing_the_bot_with_every_extra_installed_loads_none_of_them(tmp_path: Path) -> None:
    # The extras are installed here (the test venv): still, neither importing the bot nor making
    # one with an in-process agent loads them; only an ACP agent's start loads the agent
    # protocol and the MCP server, and only [telemetry] the OpenTelemetry SDK.
    heavy = {"acp", "pydantic", "mcp", "uvicorn", "starlette", "httpx", "opentelemetry"}
    done = subprocess.run(
        [sys.executable, "-c", LOADS], capture_output=True, timeout=60, check=True, cwd=tmp_path
    )
    loads = json.loads(done.stdout)
    assert "nostr_buzz.bot.tools" in loads["made"]  # the agent's tools, MCP server aside
    assert {m.split(".")[0] for m in loads["imported"] + loads["made"]} & heavy == set()
