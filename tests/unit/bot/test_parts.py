"""The bot's decisions as pure functions: intake, the turn's phases, outputs, history selection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nostr_buzz.bot import PluginConfig, parse_shard, shard_of
from nostr_buzz.bot.intake import (
    Admit,
    Command,
    Gate,
    Refuse,
    advance,
    decide,
    gate_of,
    owner_command,
)
from nostr_buzz.bot.running import Phase, Turn
from nostr_buzz.core.context import select_dm_history, select_thread_history
from nostr_buzz.core.permission import TurnProvenance
from nostr_buzz.core.queue import DispatchQueue
from nostr_buzz.core.reply import chat_reply_tags as reply_tags
from nostr_buzz.event import Event
from nostr_buzz.keys import SecretKey
from nostr_buzz.nips import nip10
from tests.support.events import chat
from tests.support.keys import AGENT, OWNER, STRANGER, offline_config
from tests.support.sizes import MAX_FUNCTION_LINES, spans

FRIEND = SecretKey.from_str("33" * 32)


def msg(
    who: SecretKey,
    content: str = "hi",
    *,
    channel: str | None = "eng",
    reply_to: Event | None = None,
    mention: bool = True,
    at: int = 1000,
    kind: int = 9,
) -> Event:
    return chat(
        who,
        at,
        content=content,
        channel=channel,
        reply_to=reply_to,
        mention=AGENT if mention else None,
        kind=kind,
    )


def gate(**changes: object) -> Gate:
    return gate_of(offline_config(allowlist=frozenset({FRIEND.public_key.hex}), **changes))


def test_owner_commands_follow_leading_mentions_only() -> None:
    assert owner_command("!cancel") == "cancel"
    assert owner_command("nostr:npub1abc @bot  !shutdown now") == "shutdown"
    assert owner_command("please !cancel") is None
    assert owner_command("!cancelled") is None
    assert owner_command("@bot !new") == "new"
    assert owner_command("!newer") is None and owner_command("") is None
    assert owner_command("@bot !budget daily_usd 20") == "budget"


def test_decide_commands_refusals_shards_and_admission() -> None:
    g = gate()
    assert decide(msg(OWNER, "!cancel"), g, set()) == Command("cancel")
    # A command needs the owner and a mention; otherwise it is an ordinary message.
    assert decide(msg(FRIEND, "!cancel"), g, set()) == Refuse("author_not_owner")
    assert decide(msg(OWNER, "!cancel", mention=False), g, set()) == Refuse("not_mentioned")
    assert decide(msg(AGENT), g, set()) == Refuse("own_event")
    assert decide(msg(OWNER, kind=1), g, set()) == Refuse("kind_not_subscribed")
    assert decide(msg(OWNER), g, set()) == Admit("eng")
    assert decide(msg(OWNER, channel=None), g, set()) == Refuse("plaintext_direct_message")
    plaintext = gate(plaintext_dm=True)
    assert decide(msg(OWNER, channel=None), plaintext, set()) == Admit(f"dm-{OWNER.public_key.hex}")
    allow = gate(gate="allowlist")
    assert decide(msg(FRIEND), allow, set()) == Admit("eng")
    assert decide(msg(STRANGER), allow, set()) == Refuse("author_not_allowed")
    open_gate = gate(gate="anyone", mentions_required=False, channels=("eng",))
    assert decide(msg(STRANGER, mention=False), open_gate, set()) == Admit("eng")
    assert decide(msg(STRANGER, channel="ops"), open_gate, set()) == Refuse(
        "channel_not_subscribed"
    )
    bot = STRANGER.public_key.hex
    assert decide(msg(STRANGER, mention=False), open_gate, {bot}) == Refuse("agent_not_mentioning")
    assert decide(msg(STRANGER, channel=None, mention=False), open_gate, set()) == Refuse(
        "direct_without_mention"
    )


def test_decide_leaves_other_shards_events_silently_but_obeys_commands() -> None:
    events = [msg(OWNER, f"m{i}") for i in range(16)]
    g = gate(shard=parse_shard("1/2"))
    for event in events:
        mine = shard_of(nip10.destination(event), 2) == 1
        assert decide(event, g, set()) == (Admit("eng") if mine else Refuse(None))
    assert {decide(msg(OWNER, f"!cancel {i}"), g, set()) for i in range(8)} == {Command("cancel")}


def test_the_position_never_passes_the_clock() -> None:
    assert advance(None, 100, now=200.0) == 100
    assert advance(100, 90, now=200.0) == 100
    assert advance(100, 10_000, now=200.9) == 200  # a future date moves it to the clock only


async def test_a_turn_moves_forward_only_and_wakes_its_waiters() -> None:
    q = DispatchQueue()
    q.push(msg(OWNER), now=1.0)
    batch = q.flush_next(2.0)
    assert batch is not None
    turn = Turn.of(batch)
    assert (turn.phase, turn.channel_id, turn.channel_type) == (Phase.PREPARING, "eng", "stream")
    assert not turn.may_steer()  # nothing on the wire yet, and no session
    waiter = asyncio.create_task(turn.until(lambda t: t.phase >= Phase.ENDED))
    turn.advance(Phase.LIVE)
    await asyncio.sleep(0)
    assert not waiter.done()
    turn.advance(Phase.ENDED)
    assert await asyncio.wait_for(waiter, 1.0) is True
    assert await turn.until(lambda t: t.phase == Phase.SETTLED, timeout=0.01) is False
    with pytest.raises(RuntimeError):
        turn.advance(Phase.LIVE)


def test_a_turns_provenance_names_its_batch_its_cut_off_events_and_its_steers() -> None:
    q = DispatchQueue()
    q.push(msg(FRIEND, "cut off"), now=1.0)
    cut = q.flush_next(2.0)
    assert cut is not None
    q.requeue_cancelled(cut, "interrupt")
    q.push(msg(OWNER, "the owner's", at=1001), now=3.0)
    batch = q.flush_next(4.0)
    assert batch is not None
    turn = Turn.of(batch)
    turn.steer_actors.append(OWNER.public_key.hex)
    owner, friend = OWNER.public_key.hex, FRIEND.public_key.hex
    assert turn.provenance() == TurnProvenance((owner,), (friend,), (owner,))


def test_reply_tags_thread_the_answer_and_never_tag_the_agent() -> None:
    top = msg(OWNER, "top")
    assert reply_tags(top, AGENT.public_key.hex) == [
        ["h", "eng"],
        ["e", top.id, "", "root", OWNER.public_key.hex],
        ["p", OWNER.public_key.hex],
    ]
    reply = msg(FRIEND, "reply", reply_to=top)
    assert reply_tags(reply, AGENT.public_key.hex, root=top) == [
        ["h", "eng"],
        ["e", top.id, "", "root", OWNER.public_key.hex],
        ["e", reply.id, "", "reply", FRIEND.public_key.hex],
        ["p", OWNER.public_key.hex],
        ["p", FRIEND.public_key.hex],
    ]
    own = msg(AGENT, "mine", channel=None)
    assert reply_tags(own, AGENT.public_key.hex) == [
        ["e", own.id, "", "root", AGENT.public_key.hex]
    ]


def test_thread_and_dm_history_selection() -> None:
    root = msg(OWNER, "root", at=10)
    replies = [msg(FRIEND, f"r{i}", reply_to=root, at=11 + i) for i in range(4)]
    elsewhere = msg(FRIEND, "other channel", reply_to=root, channel="ops", at=20)
    history = select_thread_history([*reversed(replies), elsewhere, root], root.id, "eng", 2)
    assert history.messages == [root, replies[2], replies[3]]
    assert (history.total, history.truncated) == (5, True)
    dms = [msg(OWNER, f"d{i}", channel=None, at=30 + i) for i in range(3)]
    dm = select_dm_history([dms[2], dms[0], dms[1], root], 2)
    assert dm.messages == dms[1:] and (dm.total, dm.truncated) == (3, True)
    short = select_dm_history(dms[:1], 5)
    assert (short.total, short.truncated) == (1, False)


def test_only_the_running_batchs_own_authority_steers_or_interrupts() -> None:
    from nostr_buzz.bot.intake import in_flight_action

    task = msg(OWNER, "task")
    same_thread = msg(OWNER, "more", reply_to=task)
    assert in_flight_action("steer", task, same_thread) == "steer"
    assert in_flight_action("interrupt", task, same_thread) == "interrupt"
    assert in_flight_action("queue", task, same_thread) == "queue"
    other_person = msg(FRIEND, "mine", reply_to=task)
    other_thread = msg(OWNER, "unrelated")
    for policy in ("steer", "interrupt", "queue"):
        assert in_flight_action(policy, task, other_person) == "queue"  # type: ignore[arg-type]
        assert in_flight_action(policy, task, other_thread) == "queue"  # type: ignore[arg-type]


def test_the_queue_can_forget_a_delivered_id_so_it_is_queued_again() -> None:
    q = DispatchQueue()
    task, steer = msg(OWNER, "task"), msg(OWNER, "more", at=1001)
    q.push(task, now=1.0)
    batch = q.flush_next(2.0)
    assert batch is not None
    q.push(steer, now=3.0)
    assert q.steer_result(steer.id, "injected", 4.0) is not None
    assert q.push(steer, now=5.0).duplicate  # delivered into the running turn
    assert q.forget(steer.id) and not q.forget(steer.id)
    assert q.push(steer, now=6.0).accepted
    assert not q.is_remembered(steer.id) and q.pending("eng") == 1


def test_clock_skew_from_the_file_the_environment_and_the_flag(tmp_path: Path) -> None:
    from nostr_buzz.config import SETTINGS_BY_NAME, ConfigSources
    from nostr_buzz.errors import ConfigError

    setting = SETTINGS_BY_NAME["subscriptions.clock_skew"]
    assert (setting.flag, setting.env) == ("--clock-skew", "BUZZ_CLOCK_SKEW")
    config = tmp_path / "buzz.toml"
    config.write_text(
        f'secret_key = "{AGENT.hex}"\nowner = "{OWNER.public_key.hex}"\n'
        'relays = ["ws://127.0.0.1:1"]\n[agent]\ncommand = "agent"\n'
        "[subscriptions]\nclock_skew = 60\n",
        encoding="utf-8",
    )
    config.chmod(0o600)  # it holds secret_key inline

    def skew(environ: dict[str, str], flag: float | None = None) -> float:
        flags = {"subscriptions.clock_skew": flag} if flag is not None else None
        sources = ConfigSources(config_path=config, environ=environ, overrides=flags)
        return PluginConfig.from_sources(sources).clock_skew

    assert skew({}) == 60
    assert skew({"BUZZ_CLOCK_SKEW": "30"}) == 30
    assert skew({"BUZZ_CLOCK_SKEW": "30"}, flag=5) == 5
    for bad in ("soon", "-1", "inf", str(8 * 86400)):
        with pytest.raises(ConfigError):
            skew({"BUZZ_CLOCK_SKEW": bad})


def test_the_bot_stays_small_where_it_should() -> None:
    import nostr_buzz.bot

    package = Path(nostr_buzz.bot.__file__).parent
    for module in sorted(package.glob("*.py")):
        for span in spans(module):
            if span.kind == "function":
                assert span.lines <= MAX_FUNCTION_LINES, f"{span}"
            if span.kind == "class" and span.name == "BuzzPlugin":
                assert span.lines < 300, f"{span}: it should only wire the parts"
