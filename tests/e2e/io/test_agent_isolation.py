"""The agent cannot reach the bot's secrets: ``[agent] user`` runs it as another OS user.

A real ACP agent (the bundled demo agent) is started through the driver as a freshly created
OS user (the tests run as root, which may switch users).  Before speaking ACP it probes what it
can read and writes the answers to its stderr, which the driver appends to the agent log: the
bot's key file, ``/proc/<bot pid>/environ`` and the state files must all be refused, while a
world-readable control file next to them is readable (so the probe is not fooled by an
unreachable directory).  The agent's environment never holds ``BUZZ_PRIVATE_KEY``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nostr_buzz.errors import AgentError
from nostr_buzz.io.agent_driver import AgentDriver
from nostr_buzz.io.agent_group import GroupRecord
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.outbox import Outbox
from nostr_buzz.keys import SecretKey

AGENT_USER = "buzz-agent-test"
BOT_KEY = SecretKey.from_str("9a" * 32)
REPO = Path(__file__).resolve().parents[3]

PROBE = r"""
import json, os, sys
paths = json.loads(os.environ["PROBE_PATHS"])
def can_read(path):
    try:
        with open(path, "rb") as fh:
            fh.read(1)
        return True
    except OSError as exc:
        return type(exc).__name__
report = {name: can_read(path) for name, path in paths.items()}
report["bot_environ"] = can_read(f"/proc/{os.getppid()}/environ")
report["uid"] = os.getuid()
report["key_in_env"] = any("BUZZ_PRIVATE_KEY" in k for k in os.environ)
report["group_token"] = os.environ.get("BUZZ_AGENT_TOKEN")
print("PROBE " + json.dumps(report), file=sys.stderr, flush=True)
import runpy
sys.argv = ["agent"]
runpy.run_module("nostr_buzz.demo.agent", run_name="__main__")
"""


def interpreter_for_others() -> str:
    """A Python of this version that any user may run (root's own may sit in a 0700 home)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/{version}", f"/usr/local/bin/{version}", sys.executable):
        if os.path.exists(candidate) and all(
            os.stat(p).st_mode & 0o005 == 0o005 or os.stat(p).st_mode & 0o001
            for p in [*map(str, Path(candidate).resolve().parents), candidate]
        ):
            return candidate
    raise AssertionError(f"no {version} that other users may execute")


@pytest.fixture(scope="module")
def agent_user() -> Iterator[pwd.struct_passwd]:
    assert os.geteuid() == 0, "running the agent as another user needs root (as in CI)"
    created = False
    try:
        pwd.getpwnam(AGENT_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", AGENT_USER],
            check=True,
            capture_output=True,
        )
        created = True
    yield pwd.getpwnam(AGENT_USER)
    if created:
        subprocess.run(["userdel", AGENT_USER], check=False, capture_output=True)


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory anyone may enter, as a real deployment's would be (not a 0700 tmp)."""
    path = Path(tempfile.mkdtemp(prefix="buzz-isolation-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _clock() -> datetime:
    return datetime(2026, 12, 3, tzinfo=UTC)


async def test_an_agent_run_as_another_user_cannot_read_the_bots_secrets(
    agent_user: pwd.struct_passwd, public_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_umask = os.umask(0o022)
    try:
        key_file = public_dir / "agent.nsec"
        key_file.write_text(BOT_KEY.bech32 + "\n")
        key_file.chmod(0o600)
        control = public_dir / "README.txt"
        control.write_text("anyone may read this\n")
        state = public_dir / "state"
        with Outbox.in_state_dir(state), DiagnosticsFeed(state / "diag.jsonl", clock=_clock) as d:
            d.event_rejected("not from the owner")
        probe = public_dir / "probe.py"
        probe.write_text(PROBE)
        site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
        monkeypatch.setenv("BUZZ_PRIVATE_KEY", BOT_KEY.bech32)  # the bot's own environment
        paths = {
            "key_file": str(key_file),
            "control": str(control),
            "outbox": str(state / "metrics-outbox.sqlite3"),
            "diagnostics": str(state / "diag.jsonl"),
        }
        recorded: list[GroupRecord] = []
        driver = AgentDriver(
            interpreter_for_others(),
            [str(probe)],
            env_names=["BUZZ_PRIVATE_KEY"],  # asked for, and still never given
            env={"PROBE_PATHS": json.dumps(paths), "PYTHONPATH": f"{REPO}:{site}"},
            cwd=str(public_dir),
            log_path=state / "agent.log",
            user=AGENT_USER,
            on_spawn=recorded.append,
        )
        await driver.start()  # a real ACP handshake with the agent running as that user
        try:
            assert driver.alive
        finally:
            await driver.close()
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((state / "agent.log").stat().st_mode) == 0o600  # despite umask 022
    lines = (state / "agent.log").read_text().splitlines()
    [report] = [json.loads(line[6:]) for line in lines if line.startswith("PROBE ")]
    assert report["uid"] == agent_user.pw_uid
    assert report["control"] is True  # the probe works and the directory is reachable
    assert report["key_file"] == "PermissionError"
    assert report["bot_environ"] == "PermissionError"
    assert report["outbox"] == "PermissionError"
    assert report["diagnostics"] == "PermissionError"
    assert report["key_in_env"] is False
    # The group's token survives the user switch, so a leftover group can be recognised.
    [record] = recorded
    assert report["group_token"] == record.token and len(record.token) == 32


async def test_the_launcher_refuses_an_unknown_user(tmp_path: Path) -> None:
    driver = AgentDriver(
        sys.executable,
        ["-m", "nostr_buzz.demo.agent"],
        log_path=tmp_path / "agent.log",
        user="no-such-user-buzz",
        request_timeout=10,
    )
    with pytest.raises(AgentError, match="no OS user named 'no-such-user-buzz'"):
        await driver.start()
    await driver.close()
    assert not (tmp_path / "agent.log").exists()  # refused before anything was spawned


async def test_the_bot_runs_its_configured_agent_as_that_user(
    agent_user: pwd.struct_passwd, public_dir: Path
) -> None:
    """The same probe through the whole bot: ``agent_user`` from the configuration reaches the
    agent's spawn, the agent answers a mention, and it could read none of the bot's secrets."""
    from nostr_buzz.bot import BuzzPlugin, PluginConfig
    from nostr_buzz.bot.state import STATE_DB
    from nostr_buzz.event import sign_event
    from tests.support.bot_world import WAIT, Recorder
    from tests.support.relays import local_relay

    owner, agent = SecretKey.generate(), SecretKey.generate()
    key_file = public_dir / "agent.nsec"
    key_file.write_text(agent.bech32 + "\n")
    key_file.chmod(0o600)
    control = public_dir / "README.txt"
    control.write_text("anyone may read this\n")
    (public_dir / "probe.py").write_text(PROBE)
    state = public_dir / "state"
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    paths = {
        "key_file": str(key_file),
        "control": str(control),
        "state_db": str(state / STATE_DB),
        "diagnostics": str(state / "diagnostics.jsonl"),
    }
    async with local_relay() as relay:
        config = PluginConfig(
            agent_secret=agent,
            owner=owner.public_key,
            read_relays=(relay.url,),
            write_relays=(relay.url,),
            agent_command=interpreter_for_others(),
            agent_args=(str(public_dir / "probe.py"),),
            agent_env={"PROBE_PATHS": json.dumps(paths), "PYTHONPATH": f"{REPO}:{site}"},
            agent_cwd=str(public_dir),
            agent_user=AGENT_USER,
            state_dir=state,
            relay_timeout=3.0,
            coalesce_window=0.1,
        )
        rec = Recorder()
        async with BuzzPlugin(config, on_diagnostic=rec) as plugin:
            mention = sign_event(
                owner,
                kind=9,
                content="hello",
                tags=[["h", "eng"], ["p", agent.public_key.hex]],
                created_at=int(datetime.now(UTC).timestamp()),
            )
            await plugin.handle_event(mention)
            await rec.kind("reply_published", timeout=WAIT)
    assert (state / STATE_DB).exists() and (state / "diagnostics.jsonl").exists()
    lines = (state / "agent.log").read_text().splitlines()
    [report] = [json.loads(line[6:]) for line in lines if line.startswith("PROBE ")]
    assert report["uid"] == agent_user.pw_uid and report["control"] is True
    for secret in ("key_file", "bot_environ", "state_db", "diagnostics"):
        assert report[secret] == "PermissionError", (secret, report)
    assert report["key_in_env"] is False


PLANTER = r"""
import os, pathlib, sys
markers = pathlib.Path(os.environ["MARKERS"])
(markers / f"start-{os.getpid()}").write_text(f"{os.getuid()} {os.getcwd()}")
here = pathlib.Path.cwd()
if not (here / "sitecustomize.py").exists():  # first run: plant, then exit to be restarted
    payload = (
        "import os\n"
        f"open({str(markers)!r} + '/planted-%d' % os.getpid(), 'w').write(str(os.getuid()))\n"
    )
    (here / "nostr_buzz").mkdir()
    for name in ("nostr_buzz/__init__.py", "sitecustomize.py", "usercustomize.py", "typing.py"):
        (here / name).write_text(payload)
    (here / "zz-buzz.pth").write_text(payload.replace("\n", "; ").rstrip("; ") + "\n")
    sys.exit(3)
import runpy
sys.argv = ["agent"]
runpy.run_module("nostr_buzz.demo.agent", run_name="__main__")
"""


async def test_code_planted_in_the_agents_directory_never_runs_as_root(
    agent_user: pwd.struct_passwd, public_dir: Path
) -> None:
    """The agent (as its user) plants a package, ``sitecustomize``/``usercustomize``, a stdlib
    shadow and a ``.pth`` file in its working directory and exits; the restart goes through the
    launcher again (as root until it drops), which must import none of it."""
    work, markers = public_dir / "work", public_dir / "markers"
    for directory in (work, markers):
        directory.mkdir()
        os.chown(directory, agent_user.pw_uid, agent_user.pw_gid)
    (public_dir / "planter.py").write_text(PLANTER)
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    interpreter = interpreter_for_others()
    driver = AgentDriver(
        interpreter,
        [str(public_dir / "planter.py")],
        env={"MARKERS": str(markers), "PYTHONPATH": f"{REPO}:{site}"},
        cwd=str(work),
        log_path=public_dir / "state" / "agent.log",
        user=AGENT_USER,
        request_timeout=20,
    )
    with pytest.raises(AgentError):
        await driver.start()  # it planted its files and left
    assert (work / "nostr_buzz" / "__init__.py").exists()
    try:
        await driver.restart()  # the supervisor's restart: a real handshake this time
        restarted = driver.alive
    except AgentError:
        restarted = False
    finally:
        await driver.close()
    as_root = [p for p in markers.glob("planted-*") if p.read_text() == "0"]
    assert as_root == [], "the planted code ran as root"
    assert restarted
    starts = [p.read_text() for p in markers.glob("start-*")]
    # Both runs happened as the agent user, in its directory (entered after the drop).
    assert starts == [f"{agent_user.pw_uid} {work}"] * 2
    assert list(markers.glob("planted-*")) == []  # nothing planted ran, as root or otherwise
    # The plant is live code: a Python started in that directory as the agent imports it.
    subprocess.run(
        [interpreter, "-c", "import nostr_buzz"],
        cwd=work,
        user=agent_user.pw_uid,
        group=agent_user.pw_gid,
        extra_groups=[],
        env={},
        check=True,
        timeout=30,
    )
    planted = [p.read_text() for p in markers.glob("planted-*")]
    assert planted == [str(agent_user.pw_uid)]


REFUSAL_PROBE = r"""
import asyncio, sys
from nostr_buzz.errors import AgentError
from nostr_buzz.io.agent_driver import AgentDriver

async def main(interpreter, user, marker, log):
    command = f"open({marker!r}, 'w').write('spawned')"
    driver = AgentDriver(interpreter, ["-c", command], user=user, log_path=log, request_timeout=10)
    try:
        await driver.start()
    except AgentError as exc:
        print(str(exc))
    finally:
        await driver.close()

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.parametrize("attack", ["none", "owns_the_launcher", "group_writable_directory"])
def test_a_launcher_the_agent_user_could_change_is_refused_before_spawning(
    agent_user: pwd.struct_passwd, public_dir: Path, attack: str
) -> None:
    """An installation of nostr-buzz the agent user may write (its own launcher file, or a
    directory of it group-writable by the agent's group) would let the agent's next restart run
    its code as root: the bot refuses to spawn, saying which path and how to fix it."""
    install = public_dir / "install"
    shutil.copytree(
        REPO / "nostr_buzz", install / "nostr_buzz", ignore=shutil.ignore_patterns("__pycache__")
    )
    launcher = install / "nostr_buzz" / "io" / "run_as.py"
    if attack == "owns_the_launcher":
        os.chown(launcher, agent_user.pw_uid, -1)
    elif attack == "group_writable_directory":
        os.chown(install, -1, agent_user.pw_gid)
        install.chmod(0o775)
    markers = public_dir / "markers"
    markers.mkdir()
    os.chown(markers, agent_user.pw_uid, agent_user.pw_gid)
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    marker, log = markers / "spawned", public_dir / "state" / "agent.log"
    probe = [REFUSAL_PROBE, interpreter_for_others(), AGENT_USER, str(marker), str(log)]
    out = subprocess.run(
        [sys.executable, "-c", *probe],
        env={**os.environ, "PYTHONPATH": f"{install}:{site}"},
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    if attack == "none":  # the same copy, left root's: the agent is spawned (then fails ACP)
        assert marker.read_text() == "spawned" and "failed to initialize" in out
        return
    unsafe = launcher if attack == "owns_the_launcher" else install
    assert f"refusing to start the agent as {AGENT_USER!r}: it could write {unsafe}" in out
    assert "chmod go-w" in out
    assert not marker.exists() and not log.exists()


def _victim(root: Path) -> dict[str, tuple[int, str]]:
    """Each file under ``root`` with its mode and content (what must never change)."""
    return {
        str(p): (p.lstat().st_mode, p.read_text() if p.is_file() else "")
        for p in sorted([root, *root.rglob("*")])
    }


@pytest.mark.parametrize(
    ("attack", "message"),
    [
        ("symlinked_state_dir", "is a symbolic link: refusing it"),
        ("parent_owned_by_agent", f"is owned by '{AGENT_USER}'"),
        ("state_dir_owned_by_agent", f"is owned by '{AGENT_USER}'"),
        ("group_writable_state_dir", "may be written by group or others"),
        ("symlinked_diagnostics", "is a symbolic link: refusing to follow it"),
        ("symlinked_agent_log", "is a symbolic link: refusing to follow it"),
    ],
)
def test_a_state_directory_the_agent_user_could_redirect_is_refused(
    agent_user: pwd.struct_passwd, public_dir: Path, attack: str, message: str
) -> None:
    """``buzz run`` as root with ``[agent] user`` (the README's setup) and a state directory the
    agent's user could swap or has swapped for a symlink to root's files: the bot refuses to
    start, says how to fix it, and never writes or chmods anything outside its state."""
    from tests.support.buzz_process import buzz

    victim = public_dir / "victim"  # root's: what the symlinks point at
    victim.mkdir(mode=0o755)
    (victim / "diagnostics.jsonl").write_text("root's own file\n")
    (victim / "diagnostics.jsonl").chmod(0o644)
    before = _victim(victim)
    config = public_dir / "bot"
    config.mkdir(mode=0o755)
    (config / "agent.nsec").write_text(BOT_KEY.bech32 + "\n")
    (config / "agent.nsec").chmod(0o600)
    state_dir = "state"
    state = config / "state"
    if attack == "symlinked_state_dir":
        state.symlink_to(victim)
    elif attack == "parent_owned_by_agent":
        (config / "box").mkdir()
        os.chown(config / "box", agent_user.pw_uid, agent_user.pw_gid)
        state_dir, state = "box/state", config / "box" / "state"
        state.symlink_to(victim)  # what the agent's user may do there at any time
        os.lchown(state, agent_user.pw_uid, agent_user.pw_gid)
    elif attack == "state_dir_owned_by_agent":
        state.mkdir(mode=0o700)
        os.chown(state, agent_user.pw_uid, agent_user.pw_gid)
    elif attack == "group_writable_state_dir":
        state.mkdir()
        state.chmod(0o770)
    else:
        state.mkdir(mode=0o700)
        name = "diagnostics.jsonl" if attack == "symlinked_diagnostics" else "agent.log"
        (state / name).symlink_to(victim / "diagnostics.jsonl")
    (config / "buzz.toml").write_text(
        f'key_file = "agent.nsec"\nowner = "{SecretKey.generate().public_key.bech32}"\n'
        f'relays = ["ws://127.0.0.1:9"]\nstate_dir = "{state_dir}"\n'
        f'[agent]\ncommand = "{sys.executable}"\nargs = ["-m", "nostr_buzz.demo.agent"]\n'
        f'user = "{AGENT_USER}"\n'
    )
    result = buzz("run", "--config", str(config / "buzz.toml"), cwd="/", timeout=30)
    stderr = result.stderr.decode()
    assert _victim(victim) == before  # nothing outside the state directory touched
    assert result.returncode == 1, stderr
    assert message in stderr and ("chmod" in stderr or "remove it" in stderr), stderr


def test_a_key_on_the_command_line_is_refused_with_an_agent_user(tmp_path: Path) -> None:
    """The agent's user can read ``/proc/<bot pid>/cmdline``: ``--key`` would hand it the key."""
    from tests.support.buzz_process import buzz

    (tmp_path / "buzz.toml").write_text(
        f'owner = "{SecretKey.generate().public_key.bech32}"\nrelays = ["ws://127.0.0.1:9"]\n'
        f'[agent]\ncommand = "true"\nuser = "{AGENT_USER}"\n'
    )
    result = buzz("run", "--config", str(tmp_path / "buzz.toml"), "--key", BOT_KEY.bech32)
    stderr = result.stderr.decode()
    assert result.returncode == 1 and "/proc/PID/cmdline" in stderr and "--key-file" in stderr
    assert BOT_KEY.bech32 not in stderr
    assert not (tmp_path / ".buzz").exists()


async def test_the_agents_directory_is_entered_with_the_agents_rights(
    agent_user: pwd.struct_passwd, public_dir: Path
) -> None:
    """A directory only root may enter is not entered for the agent (the launcher changes into
    it after dropping to the agent's user, not before)."""
    closed = public_dir / "roots-only"
    closed.mkdir(mode=0o700)
    log = public_dir / "state" / "agent.log"
    driver = AgentDriver(
        interpreter_for_others(),
        ["-c", "pass"],
        cwd=str(closed),
        log_path=log,
        user=AGENT_USER,
        request_timeout=10,
    )
    with pytest.raises(AgentError):
        await driver.start()
    await driver.close()
    assert f"cannot enter the working directory '{closed}': Permission denied" in log.read_text()
