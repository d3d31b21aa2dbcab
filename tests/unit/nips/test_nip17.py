"""NIP-17 relay lists from strangers: the first three relays, never a local address unless
the sender is configured with it; replies to a chosen part of the room."""

from __future__ import annotations

import pytest

from nostr_buzz.nips import nip17
from tests.support.keys import ALICE, BOB, CAROL, STRANGER

NOW = 1_700_000_000


@pytest.mark.parametrize(
    "url",
    [
        "ws://127.0.0.1:7777",
        "ws://127.8.9.10",
        "ws://localhost:4869",
        "wss://LOCALHOST./",
        "ws://relay.localhost",
        "ws://[::1]:80",
        "ws://[::ffff:127.0.0.1]",
        "ws://10.0.0.5",
        "ws://172.16.0.1",
        "ws://172.31.255.255",
        "ws://192.168.1.1",
        "ws://169.254.169.254/latest",
        "ws://[fc00::1]",
        "ws://[fd12:3456::1]",
        "ws://[fe80::1]",
        "ws://0.0.0.0:8080",
        # the resolver reads these as 127.0.0.1 too, with no lookup
        "ws://2130706433",
        "ws://127.1",
        "ws://0x7f.0.0.1",
        "ws://0X7F000001",
        "ws://017700000001",
        "ws://0300.0250.1.1",
        "ws://3232235777",
        "ws://10.1",
        # as the WebSocket client resolves them: IDNA's NFKC, NAT64, carrier-grade NAT
        "ws://１２７.０.０.１:7777",
        "ws://ｌｏｃａｌｈｏｓｔ:4869",
        "ws://ⓛⓞⓒⓐⓛⓗⓞⓢⓣ",
        "ws://１６９.２５４.１６９.２５４",
        "ws://[64:ff9b::7f00:1]",
        "ws://100.64.0.1",
    ],
)
def test_loopback_private_and_link_local_hosts_are_local(url: str) -> None:
    assert nip17.is_local_address(url)


@pytest.mark.parametrize(
    "url",
    [
        "wss://relay.damus.io",
        "ws://172.32.0.1",
        "ws://8.8.8.8",
        "ws://[2001:db8::1]",
        "ws://localhost.example.com",
        "ws://cafe.bad",  # hex letters, still a name: not resolved
        "ws://134744072",  # 8.8.8.8
        "ws://1.2.3.4.5",
        "ws://127.0.0.256.example",
        "ws://08.1",  # not octal: a name
    ],
)
def test_public_addresses_and_other_host_names_are_not_local(url: str) -> None:
    assert not nip17.is_local_address(url)


def test_at_most_three_relays_are_used_in_the_list_order_without_repeats() -> None:
    listed = [
        "wss://a.example",
        "WSS://A.example:443/",
        "wss://b.example",
        "wss://c.example",
        "wss://d.example",
    ]
    assert nip17.dm_relays_to_use(listed, ()) == (
        "wss://a.example",
        "wss://b.example",
        "wss://c.example",
    )
    assert nip17.MAX_DM_RELAYS == 3


def test_an_attackers_local_relays_are_skipped_unless_they_are_configured() -> None:
    configured = ["ws://127.0.0.1:7000"]
    listed = [
        *(f"ws://127.0.0.1:{port}" for port in range(7001, 7200)),
        "ws://localhost:7000",  # the same port by another name: not the configured URL
        "ws://192.168.0.1",
        "ws://127.0.0.1:7000/",
        "wss://public.example",
    ]
    assert nip17.dm_relays_to_use(listed, configured) == (
        "ws://127.0.0.1:7000/",
        "wss://public.example",
    )
    assert nip17.dm_relays_to_use(listed, ()) == ("wss://public.example",)
    # None: the caller chose the receiver and asks for no local-address check (the CLI).
    assert nip17.dm_relays_to_use(listed, None) == tuple(listed[:3])


def test_a_reply_can_be_narrowed_to_part_of_the_room_and_keeps_its_e_tag() -> None:
    me = STRANGER.public_key.hex
    alice, bob, carol = (k.public_key.hex for k in (ALICE, BOB, CAROL))
    question = nip17.message(alice, [me, bob, carol], "hi all", created_at=NOW)
    whole = nip17.reply(me, question, "a", created_at=NOW + 1)
    assert nip17.receivers(whole) == [alice, bob, carol]
    narrowed = nip17.reply(me, question, "a", created_at=NOW + 1, to=[alice, "f" * 64])
    assert nip17.receivers(narrowed) == [alice]
    assert nip17.replied_to(narrowed) == question.id
    with pytest.raises(Exception, match="someone other than its sender"):
        nip17.reply(me, question, "a", created_at=NOW + 1, to=[])
