"""The real ACP adapters (claude-agent-acp, codex-acp, gemini-cli) wired to the local model server.

``make test`` installs the pinned npm packages into ``tests/agents/node_modules`` (``make
agents``).  A test that needs an adapter fails, never skips, when it is missing.

Each adapter gets a fresh home folder, its model endpoint pointed at
:class:`model_server.ModelServer`, telemetry, error reporting and update checks turned off,
and the model server as its HTTP(S) proxy so that any attempt to reach another host is
refused and recorded (``server.outbound``).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nostr_buzz.io.agent_driver import AgentDriver
from tests.support.model_server import ModelServer

BIN = Path(__file__).resolve().parents[1] / "agents" / "node_modules" / ".bin"
CLAUDE = "claude-agent-acp"
CODEX = "codex-acp"
GEMINI = "gemini"
#: gemini-cli speaks ACP only when asked (older versions: ``--experimental-acp``, which 0.61
#: still accepts, deprecated).
GEMINI_ARGS = ("--acp",)
GEMINI_MODEL = "gemini-2.5-flash"


def adapter(name: str) -> str:
    """The adapter's launcher, or a failed test saying how to install it."""
    path = BIN / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run `make agents` (npm ci in tests/agents)")
    return str(path)


def _common(server: ModelServer, home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    proxy = server.url
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HTTPS_PROXY": proxy,
        "HTTP_PROXY": proxy,
        "https_proxy": proxy,
        "http_proxy": proxy,
        "ALL_PROXY": proxy,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "npm_config_update_notifier": "false",
    }


def claude_env(server: ModelServer, home: Path) -> dict[str, str]:
    """claude-agent-acp (Claude Code underneath) talking only to the model server.

    Claude Code fetches its plugin blocklist from GitHub when its cached copy is more than an
    hour old, whatever the traffic settings say: a fresh, empty copy is put in place."""
    env = _common(server, home)
    plugins = home / ".claude" / "plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    fetched = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    (plugins / "blocklist.json").write_text(
        json.dumps({"fetchedAt": fetched, "plugins": []}), encoding="utf-8"
    )
    env.update(
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="sk-ant-test-not-a-key",
        CLAUDE_CONFIG_DIR=str(home / ".claude"),
        CLAUDE_CODE_PLUGIN_CACHE_DIR=str(plugins),
        DISABLE_TELEMETRY="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_BUG_COMMAND="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CODE_DISABLE_TERMINAL_TITLE="1",
    )
    return env


def codex_env(server: ModelServer, home: Path) -> dict[str, str]:
    """codex-acp with a ``[model_providers.mock]`` entry in ``$CODEX_HOME/config.toml``.

    No ``approval_policy``: codex 0.166 refuses ``"untrusted"``, and codex-acp passes each
    turn the policy of the session's mode, which the driver sets to ``read-only``."""
    env = _common(server, home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"""model = "gpt-5.5"
model_provider = "mock"
check_for_update_on_startup = false

[analytics]
enabled = false

# codex 0.166 fetches plugins and apps from chatgpt.com and GitHub unless told not to.
[features]
plugins = false
remote_plugin = false
plugin_discovery_prefetch = false
plugin_sharing = false
apps = false
tool_suggest = false
in_app_updates = false

[model_providers.mock]
name = "mock"
base_url = "{server.url}/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
""",
        encoding="utf-8",
    )
    env.update(CODEX_HOME=str(codex_home), RUST_LOG="warn")
    return env


def gemini_env(server: ModelServer, home: Path) -> dict[str, str]:
    """gemini-cli (``--acp``) with its Gemini API at the model server.

    ``GOOGLE_GEMINI_BASE_URL`` selects gemini-cli's "gateway" authentication, which sends the
    ``GEMINI_API_KEY`` as ``x-goog-api-key``; telemetry and update checks are off in
    ``~/.gemini/settings.json``."""
    env = _common(server, home)
    gemini = home / ".gemini"
    gemini.mkdir(parents=True, exist_ok=True)
    settings = {
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "model": {"name": GEMINI_MODEL},
    }
    (gemini / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    env.update(
        GOOGLE_GEMINI_BASE_URL=server.url,
        GEMINI_API_KEY="gemini-test-not-a-key",
        GEMINI_CLI_NO_RELAUNCH="true",  # no second node process with a bigger heap
    )
    return env


def adapter_env(name: str, server: ModelServer, home: Path) -> dict[str, str]:
    """The environment of adapter ``name`` (:data:`CLAUDE`, :data:`CODEX`, :data:`GEMINI`)."""
    envs = {CLAUDE: claude_env, CODEX: codex_env, GEMINI: gemini_env}
    return envs[name](server, home)


def adapter_args(name: str) -> tuple[str, ...]:
    """The adapter's arguments: gemini-cli speaks ACP only with ``--acp``."""
    return GEMINI_ARGS if name == GEMINI else ()


@asynccontextmanager
async def adapter_driver(
    name: str, server: ModelServer, tmp_path: Path, **kwargs: Any
) -> AsyncIterator[AgentDriver]:
    """A started driver of the adapter ``name`` against ``server``: its home in
    ``tmp_path / "home"``, its working folder ``tmp_path / "work"``, its log
    ``tmp_path / "agent.log"``; closed on the way out."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    driver = AgentDriver(
        adapter(name),
        adapter_args(name),
        env=adapter_env(name, server, tmp_path / "home"),
        cwd=str(work),
        log_path=tmp_path / "agent.log",
        shutdown_timeout=1.0,
        **kwargs,
    )
    await driver.start()
    try:
        yield driver
    finally:
        await driver.close()
