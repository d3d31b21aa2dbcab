"""``buzz run --agent-module`` leaves the import path as it found it: a real ``buzz relay`` and a
real ``buzz run`` process (started like the installed ``buzz`` script, whose import path does
not hold the working directory: ``python -P``), with an in-process agent module in its working
directory.

The attacker can write a file into that directory after the bot started (``planted.py``): were
the directory still on ``sys.path``, any module the bot imported later and found nowhere else
would be that file.  The agent, running inside the bot, answers whether ``planted`` can be
imported; the answer is read from the relay.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from nostr_buzz.event import Event
from tests.support.buzz_process import Lines, buzz, clean_env, relay_process
from tests.support.keys import AGENT, OWNER

PROBE = """
import importlib.util
from pathlib import Path

from nostr_buzz import AgentReply


class Probe:
    async def prompt(self, turn):
        (Path.cwd() / "planted.py").write_text("raise SystemExit('planted')\\n")
        found = importlib.util.find_spec("planted") is not None
        return AgentReply("planted importable" if found else "planted not importable")


agent = Probe()
"""


def test_a_file_planted_next_to_the_agent_module_is_not_importable_by_the_bot(
    tmp_path: Path,
) -> None:
    (tmp_path / "probe_agent.py").write_text(textwrap.dedent(PROBE), encoding="utf-8")
    with relay_process() as relay:
        env = {
            "BUZZ_RELAYS": relay,
            "BUZZ_PRIVATE_KEY": AGENT.hex,
            "BUZZ_OWNER": OWNER.public_key.bech32,
        }
        argv = ["run", "--agent-module", "probe_agent:agent", "--state-dir", "state"]
        bot = subprocess.Popen(
            [sys.executable, "-P", "-m", "nostr_buzz", *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=clean_env(env),
            cwd=tmp_path,
        )
        try:
            assert bot.stderr is not None
            stderr = Lines(bot.stderr)
            stderr.until("buzz: agent ", timeout=60)  # a loaded machine starts slowly
            owner_env = {"BUZZ_RELAYS": relay, "BUZZ_PRIVATE_KEY": OWNER.bech32}
            to_eng = ["messages", "send", "--channel", "eng", "--mention", AGENT.public_key.hex]
            sent = buzz(*to_eng, "are you there?", env=owner_env)
            assert sent.returncode == 0, sent.stderr
            stderr.until("buzz: turn in eng")
            found = buzz("req", "-k", "9", "-a", AGENT.public_key.hex, env=owner_env)
        finally:
            bot.terminate()
            bot.communicate(timeout=30)
    assert found.returncode == 0, found.stderr
    replies = [Event.from_json(line) for line in found.stdout.decode().splitlines()]
    assert [r.content for r in replies] == ["planted not importable"]
