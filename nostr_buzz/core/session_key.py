"""What keys an agent session and the queue: the session scope (docs/bot.md, "Session scope").

With ``channel`` an event's key is its queue channel (:func:`nostr_buzz.nips.nip10.queue_channel`):
one session per channel.  With ``thread`` it is that channel and the event's destination (its
thread's root, or the event itself when it starts one), ``{channel}/{root}``, so the threads of
one channel run side by side, each in its own session; a private conversation's channel stays
one key (one session per conversation).  The queue treats a key as an opaque channel name;
what needs the real channel back (the metric, diagnostics) reads it with :func:`channel_of`.

A channel id never holds ``/`` (1-128 of ``A-Z a-z 0-9 _ -``, docs/events.md), nor does a
direct channel's name, so the key is read back unambiguously.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from nostr_buzz.core.choices import CHOICES, SessionScope, check_choice
from nostr_buzz.event import Event
from nostr_buzz.nips import nip10

__all__ = ["THREAD_SEPARATOR", "channel_of", "keyer", "session_key", "thread_of"]

#: Between a channel and its thread's root in a ``thread``-scoped key.
THREAD_SEPARATOR: Final = "/"


def session_key(event: Event, scope: SessionScope) -> str:
    """The key of ``event``'s agent session and queue under ``scope``."""
    channel = nip10.queue_channel(event)
    if scope == "channel" or nip10.is_private_channel(channel):
        return channel
    return channel + THREAD_SEPARATOR + nip10.destination(event)


def keyer(scope: SessionScope) -> Callable[[Event], str]:
    """:func:`session_key` under ``scope`` (checked against the one table of choices)."""
    checked = check_choice(scope, CHOICES["sessions.scope"], "sessions.scope")
    if checked == "channel":
        return nip10.queue_channel
    return lambda event: session_key(event, "thread")


def channel_of(key: str) -> str:
    """The queue channel a key belongs to (the key itself under ``channel`` scope)."""
    return key.partition(THREAD_SEPARATOR)[0]


def thread_of(key: str) -> str | None:
    """The thread root a ``thread``-scoped key names; None for a whole channel's key."""
    _, sep, root = key.partition(THREAD_SEPARATOR)
    return root if sep else None
