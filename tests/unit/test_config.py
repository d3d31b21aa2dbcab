"""Configuration: flags › BUZZ_* environment › buzz.toml, never merged; a strict file schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from nostr_buzz.cli.app import main
from nostr_buzz.config import (
    SETTINGS,
    BuzzConfig,
    ConfigSources,
    Setting,
    load_config_file,
    validate_relay_url,
)
from nostr_buzz.errors import BuzzError, ConfigError
from nostr_buzz.keys import SecretKey

NSEC = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
SECRET_HEX = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
NPUB = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
PUB_HEX = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"
OTHER = SecretKey.from_str("c3" * 32)

FULL = f"""
key_file = "secrets/agent.key"
owner = "{NPUB}"
relays = ["wss://relay.one.example", "ws://127.0.0.1:7777"]
write_relays = ["wss://relay.write.example"]
in_flight = "queue"
context_message_limit = 40
reply_mode = "agent"
state_dir = "/var/lib/buzz"

[agent]
command = "goose"
args = ["acp"]
env = {{ GOOSE_MODE = "auto" }}
pass_env = ["ANTHROPIC_API_KEY"]
cwd = "/srv/work"

[subscriptions]
channels = ["engineering-7f3a", "ops"]
kinds = [9, 1, 1111]
mentions_required = false

[gate]
mode = "allowlist"
allowlist = ["{PUB_HEX}"]
agents = ["{NPUB}"]

[timeouts]
relay = 5
idle = 300.5
hard = 3600

[context]
base = "context/base.md"
persona = "context/persona.md"
team_instructions = "context/team.md"
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)  # a file holding secret_key inline must be private
    return path


def test_empty_file_gives_every_default(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path / "buzz.toml", ""))
    assert config == BuzzConfig()
    assert config.in_flight == "steer"
    assert config.gate.mode == "owner-only"
    assert config.context_message_limit == 20
    assert config.reply_mode == "auto"
    assert config.subscriptions.mentions_required is True
    assert config.timeouts.idle == 620 and config.timeouts.hard == 7200


def test_full_file(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path / "buzz.toml", FULL))
    assert config.agent.command == "goose" and config.agent.args == ("acp",)
    assert config.agent.env == {"GOOSE_MODE": "auto"}
    assert config.agent.pass_env == ("ANTHROPIC_API_KEY",)
    assert config.subscriptions.kinds == (9, 1, 1111)
    assert config.gate.allowlist == (PUB_HEX,)
    assert config.timeouts.relay == 5.0
    assert config.context.team_instructions == "context/team.md"
    sources = ConfigSources(config_path=tmp_path / "buzz.toml", environ={})
    assert sources.relays(direction="read") == config.relays
    assert sources.relays(direction="write") == ("wss://relay.write.example",)
    assert sources.owner() is not None and sources.owner().hex == PUB_HEX  # type: ignore[union-attr]


def test_unknown_keys_are_all_named(tmp_path: Path) -> None:
    text = (
        'relay = ["wss://x.example"]\n[agent]\ncomand = "goose"\n[gate]\nmode = "anyone"\nx = 1\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config_file(write(tmp_path / "buzz.toml", text))
    message = str(info.value)
    for key in ("relay", "agent.comand", "gate.x"):
        assert key in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("context_message_limit = 0", "context_message_limit"),
        ('in_flight = "later"', "in_flight"),
        ("[timeouts]\nidle = -1", "timeouts.idle"),
        ('relays = "wss://one.example"', "relays"),
        ("[subscriptions]\nkinds = [70000]", "subscriptions.kinds"),
        ('[subscriptions]\nchannels = ["no spaces"]', "subscriptions.channels[0]"),
        ('relays = ["https://relay.example"]', "relays"),
        ('write_relays = ["ws://"]', "write_relays"),
        ('[gate]\nmode = "allowlist"', "gate.allowlist"),
        ('[gate]\ntrusted = ["npub1nope"]', "gate.trusted[0]"),
        ('owner = "not a key"', "owner"),
        (f'secret_key = "{SECRET_HEX}"\nkey_env = "K"', "at most one"),
        ("this is = not toml", "invalid TOML"),
    ],
)
def test_invalid_files(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_file(write(tmp_path / "buzz.toml", text))
    assert fragment in str(info.value)
    assert isinstance(info.value, BuzzError)


@pytest.mark.parametrize(
    "text",
    [
        f'owner = "{NSEC}"',  # a secret where a public key belongs
        f"secret_key = {NSEC}",  # not even valid TOML
        f'[gate]\nmode = "allowlist"\nallowlist = ["{NSEC}"]',
        f'relays = ["{NSEC}"]',
    ],
)
def test_errors_never_repeat_a_secret(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_file(write(tmp_path / "buzz.toml", text))
    assert NSEC not in str(info.value)
    assert NSEC[5:25] not in str(info.value)


def test_repr_hides_the_secret(tmp_path: Path) -> None:
    config = load_config_file(write(tmp_path / "buzz.toml", f'secret_key = "{NSEC}"'))
    assert NSEC not in repr(config) and "hidden" in repr(config)


def test_relays_first_source_wins_never_merged(tmp_path: Path) -> None:
    write(tmp_path / "buzz.toml", 'relays = ["wss://file.example"]')
    env = {"BUZZ_RELAYS": "wss://env1.example, wss://env2.example,"}
    sources = ConfigSources(environ=env, cwd=tmp_path)
    assert sources.relays(["wss://flag.example"]) == ("wss://flag.example",)
    assert sources.relays() == ("wss://env1.example", "wss://env2.example")
    for blank in ("", "   ", ",", " , "):
        sources = ConfigSources(environ={"BUZZ_RELAYS": blank}, cwd=tmp_path)
        assert sources.relays() == ("wss://file.example",)
    assert ConfigSources(environ={}, cwd=tmp_path / "nowhere").relays() == ()


def test_no_relays_names_three_sources(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        ConfigSources(environ={}, cwd=tmp_path).require_relays()
    for source in ("--relay", "BUZZ_RELAYS", "buzz.toml"):
        assert source in str(info.value)


@pytest.mark.parametrize("bad", ["http://x.example", "x.example", "ws://", "wss://h:99999", ""])
def test_bad_relay_urls(bad: str) -> None:
    with pytest.raises(ConfigError):
        validate_relay_url(bad, source="--relay")
    with pytest.raises(ConfigError):
        ConfigSources(environ={"BUZZ_RELAYS": f"wss://ok.example,{bad or 'ws:'}"}).relays()


def test_key_sources_in_order(tmp_path: Path) -> None:
    keyfile = write(tmp_path / "agent.key", f"  {NSEC}\n")
    keyfile.chmod(0o600)
    write(tmp_path / "buzz.toml", f'key_file = "{keyfile.name}"')
    file_only = ConfigSources(environ={}, cwd=tmp_path)
    assert file_only.require_secret_key().hex == SECRET_HEX
    env = ConfigSources(environ={"BUZZ_PRIVATE_KEY": OTHER.bech32}, cwd=tmp_path)
    assert env.require_secret_key() == OTHER
    assert env.require_secret_key(SECRET_HEX.upper()).hex == SECRET_HEX
    # key_env: the file names the variable that holds the key.
    write(tmp_path / "buzz.toml", 'key_env = "AGENT_KEY"')
    assert ConfigSources(environ={"AGENT_KEY": NSEC}, cwd=tmp_path).require_secret_key().hex == (
        SECRET_HEX
    )
    with pytest.raises(ConfigError, match="AGENT_KEY"):
        ConfigSources(environ={}, cwd=tmp_path).secret_key()
    with pytest.raises(ConfigError, match="BUZZ_PRIVATE_KEY"):
        ConfigSources(environ={}, cwd=tmp_path / "none").require_secret_key()


def test_key_file_problems_do_not_leak(tmp_path: Path) -> None:
    write(tmp_path / "buzz.toml", 'key_file = "missing.key"')
    with pytest.raises(ConfigError, match=r"missing\.key"):
        ConfigSources(environ={}, cwd=tmp_path).secret_key()
    broken = NSEC[:-1] + "6"
    write(tmp_path / "bad.key", broken).chmod(0o600)
    write(tmp_path / "buzz.toml", 'key_file = "bad.key"')
    with pytest.raises(ConfigError) as info:
        ConfigSources(environ={}, cwd=tmp_path).secret_key()
    assert broken not in str(info.value) and "bad.key" in str(info.value)


def test_an_inline_secret_key_in_a_file_others_can_read_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "buzz.toml", f'secret_key = "{NSEC}"\nowner = "{NPUB}"\n')
    for mode in (0o644, 0o640, 0o604, 0o620):
        config.chmod(mode)
        with pytest.raises(ConfigError) as info:
            load_config_file(config)
        message = str(info.value)
        assert f"mode {mode:04o}" in message and f"chmod 600 {config}" in message
        assert "secret_key" in message and NSEC not in message and SECRET_HEX not in message
        with pytest.raises(ConfigError):
            ConfigSources(environ={}, cwd=tmp_path).owner()  # any use of the file refuses it
    # The CLI maps it to the configuration exit code and never echoes the key.
    for name in ("BUZZ_PRIVATE_KEY", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    code = main(["keys", "show"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "") and "mode 0620" in err and NSEC not in err
    config.chmod(0o600)
    assert load_config_file(config).secret_key == NSEC
    assert main(["keys", "show"]) == 0 and PUB_HEX in capsys.readouterr().out
    # Without an inline key the same file may be world-readable (owner and relays are public).
    write(config, f'owner = "{NPUB}"\n').chmod(0o644)
    assert ConfigSources(environ={}, cwd=tmp_path).require_owner().hex == PUB_HEX


def test_owner_sources(tmp_path: Path) -> None:
    write(tmp_path / "buzz.toml", f'owner = "{NPUB}"')
    assert ConfigSources(environ={}, cwd=tmp_path).require_owner().hex == PUB_HEX
    other = OTHER.public_key
    env = ConfigSources(environ={"BUZZ_OWNER": other.bech32}, cwd=tmp_path)
    assert env.require_owner() == other
    assert env.require_owner(PUB_HEX).hex == PUB_HEX
    with pytest.raises(ConfigError) as info:
        ConfigSources(environ={"BUZZ_OWNER": NSEC}, cwd=tmp_path).owner()
    assert "looks like a secret key" in str(info.value) and NSEC not in str(info.value)


def test_permissions_sources_default_owner(tmp_path: Path) -> None:
    assert ConfigSources(environ={}, cwd=tmp_path).permissions() == "owner"
    write(tmp_path / "buzz.toml", '[agent]\npermissions = "allow"')
    assert ConfigSources(environ={}, cwd=tmp_path).permissions() == "allow"
    env = ConfigSources(environ={"BUZZ_AGENT_PERMISSIONS": "reject"}, cwd=tmp_path)
    assert env.permissions() == "reject"
    assert env.permissions("Owner") == "owner"
    flag = ConfigSources(environ={}, cwd=tmp_path, overrides={"agent.permissions": "allow"})
    assert flag.permissions() == "allow"
    with pytest.raises(ConfigError, match="--permissions: expected one of owner, allow, reject"):
        env.permissions("sometimes")
    with pytest.raises(ConfigError, match="BUZZ_AGENT_PERMISSIONS"):
        ConfigSources(environ={"BUZZ_AGENT_PERMISSIONS": "always"}, cwd=tmp_path).permissions()
    write(tmp_path / "buzz.toml", '[agent]\npermissions = "always"')
    with pytest.raises(ConfigError, match="permissions"):
        ConfigSources(environ={}, cwd=tmp_path).permissions()


def test_pass_env_flags_add_to_the_file(tmp_path: Path) -> None:
    write(tmp_path / "buzz.toml", '[agent]\npass_env = ["ANTHROPIC_API_KEY", "HTTPS_PROXY"]')
    sources = ConfigSources(environ={}, cwd=tmp_path)
    assert sources.pass_env() == ("ANTHROPIC_API_KEY", "HTTPS_PROXY")
    assert sources.pass_env(["ANTHROPIC_BASE_URL", "HTTPS_PROXY"]) == (
        "ANTHROPIC_API_KEY",
        "HTTPS_PROXY",
        "ANTHROPIC_BASE_URL",
    )
    with pytest.raises(ConfigError, match="--pass-env: 'A=B' is not an environment variable"):
        sources.pass_env(["A=B"])
    with pytest.raises(ConfigError, match="--pass-env: BUZZ_PRIVATE_KEY holds the bot's secret"):
        sources.pass_env(["BUZZ_PRIVATE_KEY"])
    write(tmp_path / "buzz.toml", '[agent]\npass_env = ["1BAD"]')
    with pytest.raises(ConfigError, match=r"agent\.pass_env"):
        ConfigSources(environ={}, cwd=tmp_path).pass_env()


def test_config_path_sources(tmp_path: Path) -> None:
    elsewhere = write(tmp_path / "other.toml", 'relays = ["wss://other.example"]')
    write(tmp_path / "buzz.toml", 'relays = ["wss://cwd.example"]')
    assert ConfigSources(environ={}, cwd=tmp_path).relays() == ("wss://cwd.example",)
    via_env = ConfigSources(environ={"BUZZ_CONFIG": str(elsewhere)}, cwd=tmp_path)
    assert via_env.relays() == ("wss://other.example",)
    via_flag = ConfigSources(
        config_path=tmp_path / "buzz.toml", environ={"BUZZ_CONFIG": str(elsewhere)}
    )
    assert via_flag.relays() == ("wss://cwd.example",)
    with pytest.raises(ConfigError, match="not found"):
        ConfigSources(config_path=tmp_path / "absent.toml", environ={})
    with pytest.raises(ConfigError, match="not found"):
        ConfigSources(environ={"BUZZ_CONFIG": str(tmp_path / "absent.toml")})


def test_cli_reports_config_errors_with_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("BUZZ_RELAYS", "BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "buzz.toml", f'secret_key = "{NSEC}"\nbogus = true\n')
    code = main(["keys", "show"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert "bogus" in err and NSEC not in err
    code = main(["messages", "raw", "--event", "ab" * 32, "--config", str(tmp_path / "no.toml")])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert "not found" in err


# --- every setting as a flag and a BUZZ_* variable -------------------------------------------


def _sample(setting: Setting) -> tuple[str, object]:
    """A value that differs from the default, as variable text and as the parsed value."""
    from typing import Literal, get_args, get_origin

    if setting.name.split(".")[-1] in ("allowlist", "agents", "trusted"):  # key lists
        return f"{PUB_HEX}, {NPUB}", (PUB_HEX, NPUB)
    if setting.name == "signer.bunker":
        return BUNKER_ENV, BUNKER_ENV
    if setting.name == "agent.max_reply_bytes":  # bounded: 4096 to 1 MiB
        return "8192", 8192
    if setting.name == "telemetry.endpoint":  # an http(s) URL
        return "http://env.example:4318", "http://env.example:4318"
    base = setting.base
    if get_origin(base) is Literal:
        choice = get_args(base)[-1]
        return choice, choice
    if get_origin(base) is tuple:
        if "int" in str(get_args(base)[0]):
            return "1, 7", (1, 7)
        return "alpha, beta", ("alpha", "beta")
    if get_origin(base) is dict:
        return "A=1, B=x=y", {"A": "1", "B": "x=y"}
    if base is bool:
        return ("no", False) if setting.default else ("yes", True)
    if base is int:
        return "7", 7
    if base is float:
        return "3.5", 3.5
    return "some-value", "some-value"


def _flag_sample(setting: Setting, env_value: object) -> tuple[object, object]:
    """A flag value unlike the variable's, as typer passes it and as the config holds it."""
    from typing import Literal, get_args, get_origin

    base = setting.base
    if setting.name.split(".")[-1] in ("allowlist", "agents", "trusted"):  # key lists
        return [PUB_HEX], (PUB_HEX,)
    if setting.name == "signer.bunker":
        return BUNKER_FLAG, BUNKER_FLAG
    if setting.name == "agent.max_reply_bytes":
        return 16384, 16384
    if setting.name == "telemetry.endpoint":
        return "https://flag.example/otel", "https://flag.example/otel"
    if get_origin(base) is Literal:
        choice = next(c for c in get_args(base) if c != env_value)
        return choice, choice
    if get_origin(base) is tuple:
        if "int" in str(get_args(base)[0]):
            return [2], (2,)
        return ["gamma"], ("gamma",)
    if get_origin(base) is dict:
        return ["C=3"], {"C": "3"}
    if base is bool:
        return not env_value, not env_value
    if base is int:
        return 8, 8
    if base is float:
        return 4.5, 4.5
    return "flag-value", "flag-value"


def _value(config: BuzzConfig, name: str) -> object:
    value: object = config
    for part in name.split("."):
        value = getattr(value, part)
    return value


BUNKER_ENV = f"bunker://{PUB_HEX}?relay=wss://env.example&secret=env-secret"
BUNKER_FLAG = f"bunker://{PUB_HEX}?relay=wss://flag.example&secret=flag-secret"
GROUPED = {"secret_key", "key_file", "key_env", "owner", "relays", "read_relays", "write_relays"}


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.name not in GROUPED], ids=str)
def test_every_setting_comes_from_its_variable_and_its_flag_wins(
    tmp_path: Path, setting: Setting
) -> None:
    text, expected = _sample(setting)
    assert expected != setting.default
    assert setting.env.startswith("BUZZ_")
    assert _value(ConfigSources(environ={}, cwd=tmp_path).file, setting.name) == setting.default
    from_env = ConfigSources(environ={setting.env: text}, cwd=tmp_path).file
    assert _value(from_env, setting.name) == expected
    # The flag beats the variable (given as the CLI would: lists as lists).
    flag_value, parsed = _flag_sample(setting, expected)
    both = ConfigSources(
        environ={setting.env: text}, cwd=tmp_path, overrides={setting.name: flag_value}
    )
    assert _value(both.file, setting.name) == parsed
    # Blank counts as unset.
    assert _value(ConfigSources(environ={setting.env: " "}, cwd=tmp_path).file, setting.name) == (
        setting.default
    )


def test_every_setting_has_a_run_flag() -> None:
    from typer.testing import CliRunner

    from nostr_buzz.cli.app import app

    help_text = CliRunner().invoke(app, ["run", "--help"], prog_name="buzz").output
    for setting in SETTINGS:
        assert f"{setting.flag} " in help_text or f"{setting.flag} /" in help_text, setting.flag
        assert f"${setting.env}" in help_text.replace("\n", "").replace(" ", ""), setting.env


def test_grouped_settings_pick_one_source(tmp_path: Path) -> None:
    write(tmp_path / "buzz.toml", 'read_relays = ["wss://file-read.example"]\nkey_env = "NOPE"\n')
    (tmp_path / "k.nsec").write_text(NSEC, encoding="utf-8")
    (tmp_path / "k.nsec").chmod(0o600)
    env = {"BUZZ_KEY_FILE": "k.nsec", "BUZZ_WRITE_RELAYS": "wss://env-write.example"}
    sources = ConfigSources(environ=env, cwd=tmp_path)
    # The environment's key_file wins over the file's key_env (relative to the working dir).
    import os

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert sources.require_secret_key().hex == SECRET_HEX
    finally:
        os.chdir(here)
    assert sources.relays(direction="write") == ("wss://env-write.example",)
    assert sources.relays(direction="read") == ("wss://file-read.example",)
    flagged = ConfigSources(
        environ=env, cwd=tmp_path, overrides={"read_relays": ["wss://flag-read.example"]}
    )
    assert flagged.relays(direction="read") == ("wss://flag-read.example",)
    with pytest.raises(ConfigError, match=r"--key-file.*--key-env|--key-env.*--key-file"):
        ConfigSources(
            environ={}, cwd=tmp_path, overrides={"key_file": "a", "key_env": "B"}
        ).secret_key()
    with pytest.raises(ConfigError, match="BUZZ_SUBSCRIPTIONS_KINDS"):
        _ = ConfigSources(environ={"BUZZ_SUBSCRIPTIONS_KINDS": "9,x"}, cwd=tmp_path).file
    with pytest.raises(ConfigError, match="BUZZ_IN_FLIGHT"):
        _ = ConfigSources(environ={"BUZZ_IN_FLIGHT": "sometimes"}, cwd=tmp_path).file


def test_buzz_run_rejects_bad_permissions_and_pass_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("BUZZ_RELAYS", "BUZZ_PRIVATE_KEY", "BUZZ_OWNER", "BUZZ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("BUZZ_AGENT_PERMISSIONS", raising=False)
    monkeypatch.chdir(tmp_path)
    write(
        tmp_path / "buzz.toml",
        f'secret_key = "{NSEC}"\nowner = "{NPUB}"\nrelays = ["ws://127.0.0.1:9"]\n'
        '[agent]\ncommand = "true"\n',
    )
    for flags, problem in (
        (
            ["--permissions", "sometimes"],
            "--permissions: expected one of owner, allow, reject, ask, got 'sometimes'",
        ),
        (["--pass-env", "A-B"], "--pass-env: 'A-B' is not an environment variable name"),
    ):
        code = main(["run", *flags])
        out, err = capsys.readouterr()
        assert (code, out) == (1, "")
        assert problem in err


def test_config_and_the_relay_client_share_one_relay_url_check() -> None:
    from nostr_buzz.errors import RelayError
    from nostr_buzz.nips.relay_url import check_relay_url

    for bad in ("http://x.example", "ws://", "wss://h:99999", "wss://nsec1abc.example:x"):
        with pytest.raises(RelayError) as direct:
            check_relay_url(bad)
        with pytest.raises(ConfigError) as configured:
            validate_relay_url(bad, source="--relay")
        assert str(configured.value) == f"--relay: {direct.value}"
        assert "nsec1" not in str(configured.value)
    assert validate_relay_url(" wss://ok.example ", source="x") == "wss://ok.example"


# --- [signer] bunker: the agent's key in a NIP-46 bunker --------------------------------------

BUNKER_SECRET = "do-not-show-this"
BUNKER = f"bunker://{PUB_HEX}?relay=wss://bunker.example&secret={BUNKER_SECRET}"


def test_the_bunker_comes_from_its_flag_its_variable_or_the_file(tmp_path: Path) -> None:
    write(tmp_path / "buzz.toml", f'[signer]\nbunker = "{BUNKER}"\ntimeout = 12\n')
    uri = ConfigSources(environ={}, cwd=tmp_path).bunker()
    assert uri is not None and uri.secret == BUNKER_SECRET
    assert uri.relays == ("wss://bunker.example",) and uri.remote_signer.hex == PUB_HEX
    assert ConfigSources(environ={}, cwd=tmp_path).file.signer.timeout == 12
    other = BUNKER.replace("bunker.example", "env.example")
    from_env = ConfigSources(environ={"BUZZ_BUNKER": other}, cwd=tmp_path).bunker()
    assert from_env is not None and from_env.relays == ("wss://env.example",)
    assert ConfigSources(environ={}, cwd=tmp_path / "none").bunker() is None
    assert BUNKER_SECRET not in repr(ConfigSources(environ={}, cwd=tmp_path).file.signer)
    (tmp_path / "buzz.toml").chmod(0o644)  # the bunker's secret must not be readable by others
    with pytest.raises(ConfigError, match=r"holds signer\.bunker's secret") as caught:
        ConfigSources(environ={}, cwd=tmp_path).bunker()
    assert BUNKER_SECRET not in str(caught.value)


def test_a_bad_bunker_is_a_config_error_that_never_shows_its_secret(tmp_path: Path) -> None:
    bad = BUNKER.replace("wss://", "https://")
    with pytest.raises(ConfigError) as caught:
        ConfigSources(environ={"BUZZ_BUNKER": bad}, cwd=tmp_path).file  # noqa: B018
    assert "signer.bunker" in str(caught.value) and BUNKER_SECRET not in str(caught.value)
    path = write(tmp_path / "buzz.toml", f'[signer]\nbunker = "{bad}"\n')
    with pytest.raises(ConfigError) as caught:
        ConfigSources(config_path=path, environ={})
    assert str(path) in str(caught.value) and BUNKER_SECRET not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        ConfigSources(environ={}, cwd=tmp_path / "none").bunker(bad)
    assert "--bunker" in str(caught.value) and BUNKER_SECRET not in str(caught.value)


def test_a_bunker_and_a_secret_key_are_refused_together(tmp_path: Path) -> None:
    key = tmp_path / "agent.key"
    write(key, SecretKey.generate().hex)
    key.chmod(0o600)
    path = write(tmp_path / "buzz.toml", f'key_file = "agent.key"\n[signer]\nbunker = "{BUNKER}"\n')
    with pytest.raises(ConfigError, match=r"key_file or signer\.bunker, not both"):
        ConfigSources(config_path=path, environ={})
    env = {"BUZZ_BUNKER": BUNKER, "BUZZ_PRIVATE_KEY": SecretKey.generate().hex}
    with pytest.raises(ConfigError, match="given twice") as caught:
        ConfigSources(environ=env, cwd=tmp_path / "none").bunker()
    assert BUNKER_SECRET not in str(caught.value)
