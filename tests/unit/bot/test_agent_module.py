"""``[agent] module``: an in-process agent instead of the ACP command, from the file, the
``BUZZ_AGENT_MODULE`` variable or ``--agent-module``; a bad spec stops ``buzz run`` at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from nostr_buzz.bot import PluginConfig
from nostr_buzz.cli.app import main
from nostr_buzz.config import SETTINGS_BY_NAME, ConfigSources
from nostr_buzz.errors import ConfigError
from tests.support.keys import AGENT, OWNER


def config_file(tmp_path: Path, agent: str) -> Path:
    path = tmp_path / "buzz.toml"
    path.write_text(
        f'secret_key = "{AGENT.hex}"\nowner = "{OWNER.public_key.hex}"\n'
        f'relays = ["ws://127.0.0.1:1"]\n[agent]\n{agent}',
        encoding="utf-8",
    )
    path.chmod(0o600)  # it holds secret_key inline
    return path


def resolve(path: Path, environ: dict[str, str] | None = None, **flags: str) -> PluginConfig:
    sources = ConfigSources(config_path=path, environ=environ or {}, overrides=flags or None)
    return PluginConfig.from_sources(sources)


def test_the_module_comes_from_the_file_the_variable_and_the_flag(tmp_path: Path) -> None:
    setting = SETTINGS_BY_NAME["agent.module"]
    assert (setting.flag, setting.env) == ("--agent-module", "BUZZ_AGENT_MODULE")
    path = config_file(tmp_path, 'module = "mybot.agent:make"\n')
    settings = resolve(path)
    assert settings.agent_module == "mybot.agent:make" and settings.agent_command is None
    assert resolve(path, {"BUZZ_AGENT_MODULE": "env.mod:a"}).agent_module == "env.mod:a"
    flagged = resolve(path, {"BUZZ_AGENT_MODULE": "env.mod:a"}, **{"agent.module": "flag.mod:b"})
    assert flagged.agent_module == "flag.mod:b"
    assert resolve(config_file(tmp_path, 'command = "goose"\n')).agent_module is None


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        ("", "set \\[agent\\] command in buzz.toml \\(an ACP agent\\), or \\[agent\\] module"),
        ('command = "goose"\nmodule = "m:a"\n', "command and \\[agent\\] module are both set"),
        ('module = "m:a"\nuser = "buzzagent"\n', "user cannot apply to an in-process agent"),
    ],
)
def test_one_agent_and_no_user_for_an_in_process_one(
    tmp_path: Path, agent: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve(config_file(tmp_path, agent))


def test_buzz_run_with_a_bad_module_exits_1_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = config_file(tmp_path, "")
    monkeypatch.chdir(tmp_path)
    for spec, said in [
        ("no_colon_here", "expected MODULE:ATTRIBUTE"),
        ("surely_no_such_module_here:agent", "not found"),
        ("json:nothing_here", "has no attribute 'nothing_here'"),
        ("json:JSONDecoder", "JSONDecoder is not an in-process agent"),
    ]:
        code = main(["run", "--config", str(path), "--agent-module", spec])
        err = capsys.readouterr().err
        assert code == 1 and said in err, err
        assert not (tmp_path / ".buzz").exists()  # nothing started
