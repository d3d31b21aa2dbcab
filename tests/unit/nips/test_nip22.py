"""NIP-22: the tags of a kind 1111 answer keep the root scope and point at the parent."""

from __future__ import annotations

from nostr_buzz.event import sign_event
from nostr_buzz.nips import nip10, nip22
from tests.support.keys import ALICE, BOB

A = ALICE.public_key.hex
B = BOB.public_key.hex
ROOT_ID = "768ac8720cdeb59227cf95e98b66560ef03d8bc9a90d721779e76e68fb42f5e6"


def test_an_answer_to_a_comment_keeps_its_root_scope_and_names_the_comment_as_parent() -> None:
    comment = sign_event(
        ALICE,
        kind=1111,
        content="Great file!",
        tags=[
            ["E", ROOT_ID, "wss://example.relay", B],
            ["K", "1063"],
            ["P", B],
            ["e", ROOT_ID, "wss://example.relay", B],
            ["k", "1063"],
            ["p", B],
        ],
        created_at=1_700_000_000,
    )
    tags = nip22.reply_tags(comment)
    assert tags == [
        ["E", ROOT_ID, "wss://example.relay", B],
        ["K", "1063"],
        ["P", B],
        ["e", comment.id, "", A],
        ["k", "1111"],
        ["p", A],
    ]
    answer = sign_event(BOB, kind=1111, content="thanks", tags=tags, created_at=1_700_000_001)
    assert nip10.thread_ref(answer) == nip10.ThreadRef(ROOT_ID, comment.id)
    assert nip10.destination(answer) == nip10.destination(comment) == ROOT_ID


def test_an_answer_keeps_an_address_or_external_root_scope() -> None:
    address = f"30023:{B}:f9347ca7"
    comment = sign_event(
        ALICE,
        kind=1111,
        content="nice",
        tags=[["A", address, ""], ["K", "30023"], ["P", B], ["a", address], ["k", "30023"]],
        created_at=1_700_000_000,
    )
    assert nip22.reply_tags(comment)[:3] == [["A", address, ""], ["K", "30023"], ["P", B]]
    web = sign_event(
        ALICE,
        kind=1111,
        content="x",
        tags=[
            ["I", "https://abc.com/articles/1"],
            ["K", "web"],
            ["i", "https://abc.com/articles/1"],
        ],
        created_at=1_700_000_000,
    )
    assert nip22.reply_tags(web)[:2] == [["I", "https://abc.com/articles/1"], ["K", "web"]]


def test_a_comment_without_a_usable_root_or_another_kind_becomes_the_root() -> None:
    for tags in ([], [["E", "not-an-id"], ["K", "1"]], [["E", ROOT_ID]]):
        comment = sign_event(ALICE, kind=1111, content="?", tags=tags, created_at=1_700_000_000)
        assert nip22.reply_tags(comment, relay_hint="wss://r") == [
            ["E", comment.id, "wss://r", A],
            ["K", "1111"],
            ["P", A],
            ["e", comment.id, "wss://r", A],
            ["k", "1111"],
            ["p", A],
        ]
    post = sign_event(ALICE, kind=30023, content="article", created_at=1_700_000_000)
    assert nip22.reply_tags(post)[:3] == [["E", post.id, "", A], ["K", "30023"], ["P", A]]
