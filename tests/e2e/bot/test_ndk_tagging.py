"""What the bot builds is what NDK signs: NDK 3.0.3 (pinned in tests/agents, the library behind
its NIP-46 bunker) tags the references and hashtags of a text as it signs it
(tests/agents/ndk_sign.mjs signs as its bunker does).  For replies of each public kind whose
text holds every kind of reference (valid, broken, repeated, already tagged), NDK signs the
reply the bot built unchanged, and what it makes of the bare text is the same event."""

from __future__ import annotations

import json
import subprocess

import nostr_sdk

from nostr_buzz.core.reply import reply_form, reply_template
from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import SecretKey
from nostr_buzz.signer import EventTemplate, template
from tests.support.bunkers import AGENTS
from tests.unit.nips.test_nip27 import ID, hex_of, naddr, nevent, nprofile, npub

ALICE, BOB = nostr_sdk.Keys.generate(), nostr_sdk.Keys.generate()
NOTE = nostr_sdk.EventId.parse(ID).to_bech32()

TEXTS = [
    f"you wrote: nostr:{npub(ALICE)} what is the status?",
    f"@{npub(BOB)} and nostr:{nprofile(ALICE, 'wss://a.example')} twice nostr:{npub(BOB)}",
    f"quoting nostr:{NOTE} and nostr:{nevent(ALICE, 'wss://r.example/')} and nostr:{nevent(None)}",
    f"nostr:{naddr(BOB, 'post', 'wss://b.example')} nostr:{naddr(ALICE, 'x')} @{NOTE}",
    "#buzz #Buzz #buzz (#no) x#no #1. ## Heading\n# Title\n\u00a0#nbsp \ufeff#bom \x1c#fs #日本",
    f"broken: nostr:{npub(ALICE)[:-1]}x nostr:{npub(ALICE)}tail nostr:nsec1qqqq xnostr:{NOTE}",
    "no references at all",
]


def ndk_signs(templates: list[EventTemplate]) -> list[Event]:
    """What NDK makes of ``templates`` as it signs them."""
    given = [
        {"kind": t.kind, "content": t.content, "tags": t.tags, "created_at": t.created_at}
        for t in templates
    ]
    done = subprocess.run(
        ["node", "ndk_sign.mjs"],
        cwd=AGENTS,
        input=json.dumps(given),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [Event.from_dict(e) for e in json.loads(done.stdout)]


def replies() -> list[tuple[EventTemplate, EventTemplate]]:
    """A reply of each public kind to each text, as the bot builds it and bare (the tags of
    its form only, the text as the agent wrote it)."""
    agent, owner = SecretKey.generate(), SecretKey.generate()
    me = agent.public_key.hex
    targets = [
        sign_event(owner, kind=9, content="hi", tags=[["h", "eng"], ["p", me]], created_at=1),
        sign_event(owner, kind=1, content="hi", tags=[["p", hex_of(ALICE)]], created_at=1),
        sign_event(owner, kind=1111, content="hi", tags=[["K", "1"], ["E", ID]], created_at=1),
    ]  # fmt: skip
    out = []
    for target in targets:
        kind, tags = reply_form(me, target)
        for text in TEXTS:
            bare = template(kind=kind, content=text, tags=tags, created_at=2)
            out.append((reply_template(target, text, sender=me, created_at=2), bare))
    return out


def test_ndk_signs_each_reply_as_the_bot_built_it() -> None:
    built = [unsigned for unsigned, _ in replies()]
    for unsigned, event in zip(built, ndk_signs(built), strict=True):
        assert (event.kind, event.content, event.tags) == (
            unsigned.kind,
            unsigned.content,
            unsigned.tags,
        )
    assert any(("p", hex_of(ALICE)) in u.tags for u in built)
    assert any(u.content.startswith(f"nostr:{npub(BOB)}") for u in built)  # written as NDK does


def test_what_ndk_adds_to_a_bare_reply_is_what_the_bot_adds() -> None:
    pairs = replies()
    signed = ndk_signs([bare for _, bare in pairs])
    added = 0
    for (unsigned, bare), event in zip(pairs, signed, strict=True):
        assert event.content == unsigned.content
        assert sorted(event.tags) == sorted(unsigned.tags)
        added += len(event.tags) - len(bare.tags)
    assert added > 30  # the texts do call for tags
