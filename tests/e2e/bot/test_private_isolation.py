"""A private conversation stays private inside the bot: a real relay, a real bot (in process, or
``buzz run`` as a process) and a real agent process.

* The owner's private message and the owner's public note run in separate agent sessions, and
  the note is compiled as public (never ``Scope: dm``).
* A hostile agent that repeats the private text in a tool call's title and kind and in its
  error: neither the diagnostics nor ``buzz run``'s stderr carry it; the same agent on a
  public turn still shows its title there (so the check can fail).
* A state directory of an earlier version, a private message queued in the owner's ``dm-``
  channel: the restarted bot answers it in the private channel.
* A wiped state directory: the owner's private messages from before the start, on the relay
  with their wraps inside the two-day look-back, are never answered; one sent after is.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

from nostr_buzz.bot.state import STATE_DB, BotStore
from nostr_buzz.core.queue import QueuedEvent
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip17, nip59
from tests.e2e.bot.test_private import running
from tests.support.bot_world import Recorder, World
from tests.support.buzz_process import Lines, buzz, relay_process, run_bot
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER
from tests.support.scripted_agent import Scripted


def wrap_to(
    sender: SecretKey, to: SecretKey, text: str, created_at: int, *, wrapped_at: int | None = None
) -> tuple[str, Event]:
    """A private message dated ``created_at`` (the rumor's date): its id and the wrap addressed
    to ``to``, dated up to two days earlier at random (``wrapped_at``: exactly then)."""
    rumor = nip17.message(sender.public_key.hex, [to.public_key.hex], text, created_at=created_at)
    if wrapped_at is None:
        return rumor.id, nip59.gift_wrap(sender, to.public_key, rumor, now=created_at)
    wrap = nip59.gift_wrap(sender, to.public_key, rumor, now=wrapped_at, randbelow=lambda _: 0)
    return rumor.id, wrap


def prompts(record: Path) -> list[tuple[str, str]]:
    """(session, prompt text) of every prompt the demo agent recorded."""
    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    return [(e["session"], "\n".join(e["prompt"])) for e in lines if "prompt" in e]


async def test_a_private_message_and_a_public_note_of_the_owner_never_share_a_session(
    world: World,
) -> None:
    rec = Recorder()
    record = world.tmp / "agent.jsonl"
    owner = world.owner.public_key.hex
    args = ("-m", "nostr_buzz.demo.agent", "--record", str(record))
    async with running(world, rec, agent_args=args, kinds=(9, 14, 1)):
        await rec.kind("dm_relays_published")
        dm_id, wrap = wrap_to(world.owner, world.agent, "the vault code is 4711", int(time.time()))
        await world.publish(wrap)
        await rec.kind("reply_published")
        note = chat(
            world.owner,
            int(time.time()),
            content="hello in public",
            channel=None,
            mention=world.agent,
            kind=1,
        )
        await world.publish(note)
        await rec.wait(lambda r: r.started_with(note.id) and len(r.of("reply_published")) >= 2)
        await rec.kind("metric_published", 2)
    [dm_turn], [note_turn] = rec.started_with(dm_id), rec.started_with(note.id)
    # Different queue channels, different sessions (the metric's and the agent's own).
    assert dm_turn.channel_id == f"dm-private-{owner}" and note_turn.channel_id == f"dm-{owner}"
    assert dm_turn.session_id != note_turn.session_id
    [(dm_session, dm_prompt)] = [p for p in prompts(record) if "vault code" in p[1]]
    [(note_session, note_prompt)] = [p for p in prompts(record) if "hello in public" in p[1]]
    assert dm_session != note_session
    assert "vault code" not in note_prompt
    # The note is public: scope channel, never dm; the private message is a DM.
    assert "Scope: channel" in note_prompt and 'scope="channel"' in note_prompt
    assert "Scope: dm" not in note_prompt and 'scope="dm"' not in note_prompt
    assert "Scope: dm" in dm_prompt
    [answer] = await world.query({"kinds": [1], "authors": [world.agent.public_key.hex]})
    assert note.id in answer.tag_values("e")
    # The metrics name the two channels and the two sessions; no channel's standing context
    # (canvas, huddle guidelines) was fetched for either.
    metrics = {m.triggering_event_ids: m for m in await world.metrics(2)}
    dm_metric, note_metric = metrics[(dm_id,)], metrics[(note.id,)]
    assert (dm_metric.channel_id, note_metric.channel_id) == (f"dm-private-{owner}", f"dm-{owner}")
    assert dm_metric.session_id != note_metric.session_id
    assert rec.of("standing_context_frozen") == []


def test_a_hostile_agent_cannot_echo_a_private_message_into_diagnostics_or_stderr(
    tmp_path: Path,
) -> None:
    secret = "vault-4711-private"
    agent = Scripted(tmp_path, {"turns": [{"then": "echo"}], "numbered_sessions": True})
    state = tmp_path / "state"
    with relay_process() as relay:
        owner_env = {"BUZZ_RELAYS": relay, "BUZZ_PRIVATE_KEY": OWNER.bech32}
        command = " ".join([sys.executable, *agent.args])
        bot = run_bot(relay, command, state, agent=AGENT, owner=OWNER, cwd=tmp_path)
        try:
            assert bot.stderr is not None
            stderr = Lines(bot.stderr)
            stderr.until("buzz: agent ")
            sent = buzz(
                "messages", "dm", "--to", AGENT.public_key.bech32, f"{secret} please", env=owner_env
            )
            assert sent.returncode == 0, sent.stderr
            private_failure = stderr.until("failed, will retry")
            assert f"dm-private-{OWNER.public_key.hex}" in private_failure
            # The public turn, same agent, same bot: its title and error do show.
            to_eng = ["messages", "send", "--channel", "eng", "--mention", AGENT.public_key.hex]
            public = buzz(*to_eng, "public-words here", env=owner_env)
            assert public.returncode == 0, public.stderr
            public_failure = stderr.until("buzz: turn in eng failed")
            assert "public-words here" in public_failure
        finally:
            bot.terminate()
            rest = stderr.rest(bot, 30)
    said = "".join(stderr.seen) + rest.decode()
    feed = [json.loads(line) for line in (state / "diagnostics.jsonl").read_text().splitlines()]
    # The agent did echo the private text (what it received, what it asked permission for).
    asked = [m for m in agent.received() if m.get("method") == "session/prompt"]
    assert any(secret in json.dumps(m) for m in asked)
    private = f"dm-private-{OWNER.public_key.hex}"
    decisions = [r for r in feed if r["kind"] == "permission_decision"]
    mine = [r for r in decisions if r["channelId"] == private]
    theirs = [r for r in decisions if r["channelId"] == "eng"]
    assert mine and theirs
    assert all("title" not in r["payload"] and r["payload"]["toolKind"] == "other" for r in mine)
    failed = [r for r in feed if r["kind"] == "turn_failed" and r["channelId"] == private]
    assert failed and all(r["payload"]["error"] == "JSON-RPC error -32603" for r in failed)
    assert secret not in json.dumps(feed) and secret not in said
    # Public turns are unchanged: the title, the kind and the error text are all there.
    assert theirs[0]["payload"]["title"] == "run public-words here"
    assert theirs[0]["payload"]["toolKind"] == "public-words here"
    assert "public-words here" in json.dumps([r for r in feed if r["kind"] == "turn_failed"])


async def test_a_wiped_state_directory_answers_no_private_message_sent_before_the_start(
    world: World,
) -> None:
    now = int(time.time())
    # The owner's private messages of the last two days (one just outside the clock skew),
    # their wraps inside the wrap filter's two-day look-back, one even dated just now.
    ages = ((36 * 3600, 40 * 3600), (3 * 3600, 5), (700, 700))
    old = [
        wrap_to(world.owner, world.agent, f"old message {i}", now - age, wrapped_at=now - back)
        for i, (age, back) in enumerate(ages)
    ]
    await world.publish(*(wrap for _, wrap in old))
    rec = Recorder()
    state = world.tmp / "state"
    assert not state.exists()  # fresh: no saved position, no remembered ids
    async with running(world, rec):
        replayed = await rec.kind("replay_completed")
        # The relay gave the bot every old wrap (it opened them and looked at the dates).
        assert replayed.payload["events"] >= len(old)
        new_id, wrap = wrap_to(world.owner, world.agent, "a new message", int(time.time()))
        await world.publish(wrap)
        await rec.wait(lambda r: r.started_with(new_id), what="the new message's turn")
        await rec.kind("reply_published")
    started = [i for r in rec.of("turn_started") for i in r.payload["triggeringEventIds"]]
    assert started == [new_id]
    assert [r.payload["inReplyTo"] for r in rec.of("reply_published")] == [new_id]


async def test_a_private_message_an_earlier_version_queued_with_public_notes_is_answered_apart(
    world: World,
) -> None:
    owner, now = world.owner.public_key.hex, int(time.time())
    dm_id, wrap = wrap_to(world.owner, world.agent, "queued before the upgrade", now)
    dm = nip59.open_gift_wrap(world.agent, wrap).as_event()
    store = BotStore(world.tmp / "state", agent_secret=world.agent)
    queue = store.journal.load_queue()
    assert queue.push(dm, now=now).accepted
    store.journal.record_push(queue, QueuedEvent(dm, "@mention", now), [], now)
    store.close()
    db = sqlite3.connect(world.tmp / "state" / STATE_DB)
    with db:  # what the previous version wrote: the author's shared dm- channel
        db.execute("UPDATE queued SET channel = ?", (f"dm-{owner}",))
        db.execute("UPDATE channels SET name = ?", (f"dm-{owner}",))
    db.close()
    rec = Recorder()
    async with running(world, rec):
        await rec.wait(lambda r: r.started_with(dm_id), what="the queued message's turn")
        replied = await rec.kind("reply_published")
    [started] = rec.started_with(dm_id)
    assert started.channel_id == f"dm-private-{owner}"
    assert replied.payload["private"] is True and replied.payload["inReplyTo"] == dm_id
    db = sqlite3.connect(world.tmp / "state" / STATE_DB)
    rows = db.execute("SELECT channel FROM queued").fetchall()
    db.close()
    assert all(channel != f"dm-{owner}" for (channel,) in rows)
