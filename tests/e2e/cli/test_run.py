"""Talking to a running bot from the command line only: ``buzz run`` with the bundled demo
agent, a ``buzz relay``, and ``buzz messages send --mention`` as its owner.  The bot requires
mentions (the default): a message that mentions it gets an answer, ``!shutdown`` stops it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from nostr_buzz.event import Event
from nostr_buzz.nips import nip10
from tests.support.buzz_process import Lines, buzz, relay_process, run_bot
from tests.support.keys import AGENT, OWNER

WAIT = 30.0


def test_a_bot_that_requires_mentions_answers_send_mention_and_stops_on_shutdown(
    tmp_path: Path,
) -> None:
    with relay_process() as relay:
        owner_env = {"BUZZ_RELAYS": relay, "BUZZ_PRIVATE_KEY": OWNER.bech32}
        agent_cmd = f"{sys.executable} -m nostr_buzz.demo.agent --delay 0"
        bot = run_bot(relay, agent_cmd, tmp_path / "state", agent=AGENT, owner=OWNER, cwd=tmp_path)
        try:
            assert bot.stderr is not None
            stderr = Lines(bot.stderr)
            start = stderr.until("buzz: agent ")
            for part in (AGENT.public_key.bech32, relay, "nostr_buzz.demo.agent", "owner-only"):
                assert part in start
            assert "mentions required" in start and "in-flight policy: steer" in start

            # Not mentioned: the bot requires mentions and stays quiet.
            quiet = buzz("messages", "send", "--channel", "eng", "hello, anyone?", env=owner_env)
            assert quiet.returncode == 0, quiet.stderr
            sent = buzz(
                "messages",
                "send",
                "--channel",
                "eng",
                "--mention",
                AGENT.public_key.bech32,
                "please summarise the deploy",
                env=owner_env,
            )
            assert sent.returncode == 0, sent.stderr
            mention_id = sent.stdout.decode().strip()
            turn = stderr.until("buzz: turn in eng")
            assert mention_id[:12] in turn and ": success, " in turn
            assert re.search(r"\d+ tokens \(\d+ in, \d+ out\), \d+\.\d s$", turn), turn
            assert quiet.stdout.decode().strip()[:12] not in turn

            thread = buzz(
                "messages", "thread", "--channel", "eng", "--event", mention_id, env=owner_env
            )
            assert thread.returncode == 0, thread.stderr
            events = [Event.from_json(line) for line in thread.stdout.decode().splitlines()]
            replies = [e for e in events if e.pubkey == AGENT.public_key.hex]
            assert len(replies) == 1
            assert nip10.thread_ref(replies[0]).root == mention_id

            stop = buzz(
                "messages",
                "send",
                "--channel",
                "eng",
                "--mention",
                AGENT.public_key.hex,
                "!shutdown",
                env=owner_env,
            )
            assert stop.returncode == 0, stop.stderr
            stderr.until("owner command !shutdown")
            rest = stderr.rest(bot, WAIT)
            assert bot.returncode == 0, rest
            assert b"buzz: stopped" in rest
            assert AGENT.hex not in "".join(stderr.seen) + rest.decode()
        finally:
            if bot.poll() is None:
                bot.kill()
                bot.wait()


def test_run_reports_bad_settings_with_exit_1(tmp_path: Path) -> None:
    env = {"BUZZ_PRIVATE_KEY": AGENT.hex, "BUZZ_OWNER": OWNER.public_key.hex}
    env["BUZZ_RELAYS"] = "ws://127.0.0.1:9"
    cases = [
        (["run", "--agent", "x", "--in-flight", "sometimes"], "--in-flight"),
        (["run", "--agent", ""], "--agent"),
        (["run"], "agent command"),
        (["run", "--agent", "x", "--agent-command", "y"], "not both"),
        (["run", "--agent", "x", "--kind", "70000"], "--kind"),
    ]
    for argv, fragment in cases:
        done = buzz(*argv, env=env, cwd=str(tmp_path))
        assert (done.returncode, done.stdout) == (1, b""), (argv, done.stderr)
        assert fragment in done.stderr.decode(), (argv, done.stderr)
    done = buzz("run", "--agent", "x", env={**env, "BUZZ_SUBSCRIPTIONS_MENTIONS_REQUIRED": "maybe"})
    assert done.returncode == 1
    assert "BUZZ_SUBSCRIPTIONS_MENTIONS_REQUIRED" in done.stderr.decode()


def test_an_agent_that_cannot_start_exits_1_pointing_at_its_log(tmp_path: Path) -> None:
    env = {
        "BUZZ_PRIVATE_KEY": AGENT.hex,
        "BUZZ_OWNER": OWNER.public_key.hex,
        "BUZZ_RELAYS": "ws://127.0.0.1:9",
    }
    broken = f"{sys.executable} -c 'import sys; sys.stderr.write(\"no API key\"); sys.exit(3)'"
    done = buzz("run", "--agent", broken, env=env, cwd=str(tmp_path))
    assert (done.returncode, done.stdout) == (1, b"")
    err = done.stderr.decode()
    log = tmp_path / ".buzz" / "agent.log"
    assert "the agent exited (3)" in err and "could not be started" in err
    assert str(log) in err
    assert "no API key" in log.read_text(encoding="utf-8")
