"""The agent's Nostr tools with the agent isolated under ``[agent] user``: claude-agent-acp runs
as another OS user (the tests run as root, which may switch users), with nothing of the bot's
key, configuration or relay credentials; the model fetches a signed event through the bot's
tool server all the same.  The attacker is the model: it runs a shell command that tries to
read the bot's key file, its configuration and the bot's environment, and every read is
refused."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.adapters.test_nostr_tools import asked, publish, retrieved, tool_output
from tests.support.adapter_bot import bot_world, running
from tests.support.real_adapters import CLAUDE, adapter_env

AGENT_USER = "buzz-agent-tools"


@pytest.fixture
def isolated() -> Iterator[tuple[pwd.struct_passwd, Path]]:
    """An OS user with a home of its own, and a directory anyone may enter (as a deployment's
    would be) holding the bot's state; both removed afterwards."""
    assert os.geteuid() == 0, "running the agent as another user needs root (as in CI)"
    base = Path(tempfile.mkdtemp(prefix="buzz-tools-", dir="/tmp"))
    base.chmod(0o755)
    home = base / "home"
    created = False
    try:
        pwd.getpwnam(AGENT_USER)
    except KeyError:
        argv = ["useradd", "--system", "--home-dir", str(home), "--shell", "/usr/sbin/nologin"]
        subprocess.run([*argv, AGENT_USER], check=True, capture_output=True)
        created = True
    user = pwd.getpwnam(AGENT_USER)
    try:
        yield user, base
    finally:
        if created:
            subprocess.run(["userdel", AGENT_USER], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def owned_by(path: Path, user: pwd.struct_passwd) -> None:
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in [*dirs, *files])]:
            os.chown(name, user.pw_uid, user.pw_gid)


async def test_an_isolated_agent_fetches_through_the_bot_and_reads_none_of_its_secrets(
    isolated: tuple[pwd.struct_passwd, Path],
) -> None:
    user, base = isolated
    (base / "world").mkdir(mode=0o700)
    async with bot_world(base / "world") as bot:
        # The agent's own home and working directory, its adapter's settings in them.
        env = adapter_env(CLAUDE, bot.server, Path(user.pw_dir))
        work = base / "work"
        work.mkdir()
        owned_by(Path(user.pw_dir), user)
        owned_by(work, user)
        # The bot's key file and configuration, as `buzz run` would have them.
        secrets_dir = base / "bot"
        secrets_dir.mkdir(mode=0o700)
        key_file = secrets_dir / "agent.nsec"
        key_file.write_text(bot.agent.bech32 + "\n")
        config = secrets_dir / "buzz.toml"
        config.write_text(f'[agent]\nuser = "{AGENT_USER}"\n[relays]\nread = ["{bot.relay.url}"]\n')
        for path in (key_file, config):
            path.chmod(0o600)
        state = base / "state"
        earlier = bot.message("the deploy is at noon")
        await publish(bot, earlier)
        changes = {"agent_env": env, "agent_cwd": str(work), "agent_user": AGENT_USER}
        async with running(bot, CLAUDE, state_dir=state, **changes) as plugin:
            probe = f"cat {key_file} {config} /proc/{os.getpid()}/environ {state}/*; id -u"
            said = await asked(bot, plugin, f"SHELL:{probe};;", "probe")
            assert said.endswith("TOOL-DONE ANSWER:probe")
            said = await asked(bot, plugin, f"MCP:fetch_event:id={earlier.id};;", "one")
            assert said.endswith("TOOL-DONE ANSWER:one")
            metrics = await bot.metrics(2)
    found = tool_output(bot, "ASK:one")
    assert found["event"] == json.loads(earlier.to_json()) and found["gate"] == "admitted"
    assert retrieved(metrics[-1]) == [("fetch_event", "relay_event", earlier.id)]
    # the model's own shell: it ran as the agent's user, and every read was refused
    [shell] = [
        s for s in bot.server.main_requests() if s.tool_result and "ASK:probe" in s.user_text
    ]
    said = shell.tool_output
    assert said.count("Permission denied") >= 4, said
    assert str(user.pw_uid) in said.split()
    secret = bot.agent
    for seen in bot.server.requests:  # nothing of the key reached the model, in any request
        assert secret.bech32 not in seen.body and secret.hex not in seen.body
