"""One factory for the signed chat events the tests push, route and reply to.

``chat(author, created_at)`` is a kind-9 message in channel "room" (an ``h`` tag) with content
unique to the test run, so two calls never make the same event unless a test passes the same
``content``.  ``thread`` makes it a marked NIP-10 reply to that root id; ``reply_to`` a reply to
that event (root and reply markers); ``mention`` adds a ``p`` tag; ``tags`` replaces them all.
Signatures use fixed auxiliary randomness, so the same arguments give the same event.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from nostr_buzz.event import Event, sign_event
from nostr_buzz.keys import PublicKey, SecretKey
from nostr_buzz.nips import nip10

T0 = 1_700_000_000
ROOM = "room"
AUX = bytes(32)

_serial = itertools.count()


def chat(
    author: SecretKey,
    created_at: int = T0,
    *,
    content: str | None = None,
    channel: str | None = ROOM,
    thread: str | None = None,
    reply_to: Event | None = None,
    mention: SecretKey | PublicKey | None = None,
    kind: int = 9,
    tags: Sequence[Sequence[str]] | None = None,
) -> Event:
    if tags is None:
        built: list[list[str]] = []
        if channel is not None:
            built.append(["h", channel])
        if thread is not None:
            built.append(["e", thread, "", "root"])
        if reply_to is not None:
            root = nip10.thread_ref(reply_to).root or reply_to.id
            built.append(["e", root, "", "root"])
            if root != reply_to.id:
                built.append(["e", reply_to.id, "", "reply"])
        if mention is not None:
            key = mention.public_key if isinstance(mention, SecretKey) else mention
            built.append(["p", key.hex])
        tags = built
    return sign_event(
        author,
        kind=kind,
        content=f"message {next(_serial)}" if content is None else content,
        tags=tags,
        created_at=created_at,
        aux_rand=AUX,
    )
