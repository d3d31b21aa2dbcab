"""What one relay sends, routed to whoever waits for it: the protocol state of a relay client.

:class:`RelayInbox` is a state machine without I/O.  The connection's reader hands it every
frame; it parses the frame into a typed NIP-01 message and routes it: an ``EVENT`` to the open
``REQ`` it names (io/relay_subs.py), an ``OK`` to the frame waiting for it (io/relay_ok.py),
``EOSE`` and ``CLOSED`` to the ``REQ`` they end, an ``AUTH`` challenge to the connection's
NIP-42 state (io/relay_auth.py).  What a frame leaves for the client to count or act on comes
back as a :class:`Heard`: a malformed frame (never fatal), an event that failed verification,
a ``NOTICE``, or a relay to cut off for flooding a ``REQ`` it was told to ``CLOSE``.  When the
connection ends, every waiter is told why.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

from nostr_buzz.nips import nip01
from nostr_buzz.nips.nip01 import Filter

from .relay_auth import Nip42
from .relay_ok import OkWaiters
from .relay_reads import eose_detail
from .relay_subs import (
    Budget,
    EndedSubscriptions,
    Flooding,
    SharedBudget,
    Subscription,
)

_counter = itertools.count(1)


@dataclass(frozen=True)
class Heard:
    """What one frame leaves for the client once routed: ``malformed`` (not a relay message
    for a request of this client), ``rejected`` (an event that failed verification, ``text``
    saying why), ``notice`` (the relay's ``NOTICE``, ``text``), or ``cut off`` (``text``: the
    relay floods a ``REQ`` it was told to ``CLOSE``; a kept connection would read it for ever).
    """

    kind: Literal["malformed", "rejected", "notice", "cut off"]
    text: str = ""


MALFORMED: Final = Heard("malformed")


class RelayInbox:
    """The ``REQ``s open on one relay client, the frames waiting for an ``OK``, and the current
    connection's NIP-42 state."""

    def __init__(self) -> None:
        self.subs: dict[str, Subscription] = {}
        self.ended = EndedSubscriptions()
        self.pending = OkWaiters()
        self.nip42 = Nip42()

    def connected(self) -> None:
        """A new connection: a challenge is good on its own connection only."""
        self.nip42 = Nip42()

    def open(
        self,
        filters: list[Filter],
        *,
        live: bool,
        budget: Budget,
        shared: SharedBudget | None = None,
        on_eose: Callable[[], None] | None = None,
    ) -> Subscription:
        """A new ``REQ``, routed to from now on (its frame is the client's to send)."""
        sub_id = f"buzz{next(_counter)}"
        sub = Subscription(sub_id, filters, live=live, budget=budget, shared=shared)
        sub.on_eose = on_eose  # before the REQ goes: its EOSE may come back at once
        self.subs[sub_id] = sub
        return sub

    def forget(self, sub: Subscription) -> bool:
        """Stop routing to ``sub`` (ended by the client); True when the relay still holds it
        open and is to be told ``CLOSE``."""
        if self.subs.pop(sub.id, None) is None:
            return False
        self.ended.add(sub)
        relay_ended = sub.end is not None and sub.end[0] in ("closed", "lost")
        sub.finish("lost", "closed by client")
        return not relay_ended

    def feed(self, frame: str | bytes) -> Heard | None:
        """One frame as read, routed; what it leaves for the client, if anything."""
        try:
            return self.dispatch(nip01.parse_relay_message(frame), len(frame))
        except Flooding as exc:
            return Heard("cut off", f"cut off: the relay sent {exc} for a REQ it was told to CLOSE")
        except Exception:  # a frame must never kill the reader; count it and go on
            return MALFORMED

    def dispatch(self, msg: nip01.RelayMessage, size: int = 0) -> Heard | None:
        """Route one message of ``size`` bytes (raises :class:`Flooding`, see :meth:`feed`)."""
        if isinstance(msg, nip01.EventMessage):
            sub = self.subs.get(msg.subscription_id)
            if sub is not None:
                reason = sub.receive(msg.event, size)
                return None if reason is None else Heard("rejected", reason)
            if (beyond := self.ended.charge(msg, size)) is not None:
                raise Flooding(beyond)
            return self._unknown(msg.subscription_id)
        if isinstance(msg, nip01.OkMessage):
            self.pending.resolve(msg)
        elif isinstance(msg, (nip01.EoseMessage, nip01.ClosedMessage)):
            sub = self.subs.get(msg.subscription_id)
            if sub is None:
                return self._unknown(msg.subscription_id)
            if isinstance(msg, nip01.ClosedMessage):
                sub.finish("closed", msg.message)
            elif not sub.live:
                sub.finish("eose", eose_detail(msg))
            elif sub.on_eose is not None:
                sub.on_eose()
        elif isinstance(msg, nip01.AuthMessage):
            self.nip42.challenged(msg.challenge)
        elif isinstance(msg, nip01.NoticeMessage):
            return Heard("notice", msg.message[:500])
        else:
            return MALFORMED
        return None

    def _unknown(self, sub_id: str) -> Heard | None:
        """A frame for no open ``REQ``: malformed when for a ``REQ`` we never opened (one we
        closed may still have frames in flight)."""
        return None if sub_id in self.ended else MALFORMED

    def fail_all(self, reason: str) -> None:
        """The connection ended: every open ``REQ`` and every frame waiting for an ``OK``."""
        for sub in list(self.subs.values()):
            sub.finish("lost", reason)
        self.pending.fail(reason)
