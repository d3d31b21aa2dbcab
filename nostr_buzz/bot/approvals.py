"""Approvals: the owner decides an agent's permission request from any Nostr client
(docs/bot.md, "Permissions").

When the rule asks the owner (``permissions = "ask"``, or ``owner`` with someone else's words in
the session: :attr:`~nostr_buzz.core.permission.PermissionDecision.asks_owner`) and ``[agent]
ask_timeout`` is above 0, the bot sends the owner a NIP-17 private message naming the tool (its
title and kind), the channel, who triggered the turn, everyone but the owner whose words
reached the turn or its session and where (:func:`~nostr_buzz.core.permission.speakers`), and
a short code.  What the agent or a sender wrote (title, kind, channel) is shown on one line
each, every hidden character (controls, line breaks, format and bidirectional characters) as
an escape, cut to a stated length (:func:`one_line`).  A turn asks at most ``[agent]
max_questions``: its further requests are rejected unasked (``ask_limit``) and, at the turn's
end, one more private message tells the owner how many (:meth:`Approvals.end_turn`).  The
owner answers
``!allow CODE`` or ``!deny CODE``, by private message or in a channel (mentioning the agent);
no answer within ``ask_timeout`` rejects, and so does the turn ending (or being cancelled)
first, or a question that could not be sent.

A code is 6 characters from an alphabet without look-alikes, drawn with :mod:`secrets`; it is
bound to one request of one turn of one agent session, works once and dies with its question.
Only the owner's answer counts: anyone else's is refused (``approval_refused``), as is an
unknown, expired or spent code.  No code reaches the diagnostics: ``permission_asked`` names
the tool (for a private conversation's turn its ACP kind only, :mod:`.privacy`) and the turn,
``approval_refused`` the reason and the answering event.  The question itself names the tool's
title even then: the owner cannot decide without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from nostr_buzz.acp.types import PermissionRequest
from nostr_buzz.core.permission import OwnerAnswer, Part, PermissionDecision, Speaker, answered
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.private import dm_relays_of, send_private
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.nips import nip17, nip19
from nostr_buzz.text.unicode import backslash_escape, is_hidden

from .config import PluginConfig
from .outputs import TurnIds
from .privacy import tool_kind

__all__ = [
    "CODE_ALPHABET",
    "CODE_LENGTH",
    "Approvals",
    "Verdict",
    "limit_note",
    "new_code",
    "one_line",
    "question_text",
    "tell_owner",
]

#: Digits and capitals without 0/O, 1/I/L: a code read on a phone is typed back right.
CODE_ALPHABET: Final = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH: Final = 6
#: The most characters (escapes included) of a tool's title, its kind and the channel shown in
#: a question (the agent and the senders write them).
TITLE_CHARS: Final = 300
KIND_CHARS: Final = 40
CHANNEL_CHARS: Final = 100
#: The most people a question names one by one in a line (the rest are counted).
_SPEAKERS_SHOWN: Final = 10
#: Where a speaker's words came in, as the question says it.
_WHERE: Final[dict[Part, str]] = {
    "batch": "this turn's messages",
    "cancelled": "interrupted messages this turn carries",
    "steer": "a message steered into this turn",
    "session": "an earlier turn of this session",
}
#: Line breaks and tabs shown as people write them; every other hidden character as \xNN,
#: \uNNNN or \UNNNNNNNN.
_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Spent codes remembered, so that a reuse is told apart from a wrong code.
_SPENT: Final = 256

Verdict = Literal["allow", "deny"]


async def tell_owner(
    config: PluginConfig, text: str, now: int, directory: RelayDirectory | None = None
) -> bool:
    """Send ``text`` to the owner privately (to its DM relays when it has a kind 10050, else
    to the write relays); True when a relay took the owner's copy.  The DM relays are read
    afresh, as a read of state (the newest kind 10050, not the fastest relay's): through
    ``directory`` (the bot's relays and relay lists) when given."""
    agent, owner = config.signer.public_key.hex, config.owner.hex
    try:
        rumor = nip17.message(agent, [owner], text, created_at=now)
        if directory is not None:
            relays = await directory.dm_relays([owner, agent], fresh=True, trusted=True)
        else:
            relays = await dm_relays_of(
                [owner, agent],
                config.read_relays,
                secret=config.signer,
                timeout=config.relay_timeout,
                configured=config.write_relays,
            )
        sent = await send_private(
            config.signer,
            rumor,
            write_relays=config.write_relays,
            dm_relays=relays,
            now=now,
            timeout=config.relay_timeout,
        )
    except BuzzError:
        return False
    return any(d.addressee == owner and d.result.ok for d in sent)


def new_code(taken: Collection[str] = ()) -> str:
    """A fresh code, none of ``taken``."""
    while True:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        if code not in taken:
            return code


def one_line(text: str, limit: int) -> tuple[str, bool]:
    """``text`` on one line: every hidden character (:func:`~nostr_buzz.text.unicode.is_hidden`:
    controls, line breaks, format and bidirectional characters) as an escape, cut to at most
    ``limit`` characters (an escape is never split); and whether it was cut.  What is not
    shown is not looked at: a title of megabytes costs no more than a short one."""
    shown: list[str] = []
    used = 0
    for c in text:
        piece = (_ESCAPES.get(c) or backslash_escape(c)) if is_hidden(c) else c
        used += len(piece)
        if used > limit:
            return "".join(shown), True
        shown.append(piece)
    return "".join(shown), False


def _field(name: str, text: str, limit: int) -> str:
    shown, cut = one_line(text, limit)
    if not cut:
        return f"{name}: {shown}"
    return f"{name} (cut to {len(shown)} characters, of {len(text)} in all): {shown}…"


def _first_few(said: list[str], separator: str) -> str:
    """At most ``_SPEAKERS_SHOWN`` of ``said``, the rest counted."""
    more = len(said) - _SPEAKERS_SHOWN
    return separator.join(said[:_SPEAKERS_SHOWN] + ([f"and {more} more"] if more > 0 else []))


def _speakers_line(speakers: Sequence[Speaker]) -> str:
    said = [
        f"{nip19.encode('npub', s.actor)} ({', '.join(_WHERE[p] for p in s.parts)})"
        for s in speakers
    ]
    return "Others whose words reached this turn or its session: " + (
        _first_few(said, "; ") or "none, only yours"
    )


def question_text(
    request: PermissionRequest,
    channel: str | None,
    triggers: Iterable[str],
    code: str,
    timeout: float,
    speakers: Sequence[Speaker] = (),
    last: bool = False,
) -> str:
    """The private message that asks the owner (``triggers``: hex pubkeys; ``speakers``: who
    else's words reached the turn or its session, and where; ``last``: the turn may ask no
    more)."""
    who = _first_few([nip19.encode("npub", p) for p in dict.fromkeys(triggers)], ", ")
    lines = [
        "The agent asks for permission to run a tool.",
        _field("Tool", request.title, TITLE_CHARS),
        _field("Kind", request.kind or "unknown", KIND_CHARS),
        _field("Channel", channel or "(none)", CHANNEL_CHARS),
        f"Turn triggered by: {who or '(nobody)'}",
        _speakers_line(speakers),
        f"Answer !allow {code} or !deny {code} within {timeout:g} s; no answer rejects it.",
    ]
    if last:
        lines.append(
            "This turn may ask no more: the agent's further requests in it are rejected "
            "without asking you."
        )
    return "\n".join(lines)


def limit_note(channel: str | None, unasked: int, limit: int) -> str:
    """The private message that tells the owner, at a turn's end, what it did not ask."""
    shown, _ = one_line(channel or "(none)", CHANNEL_CHARS)
    return (
        f"{unasked} more permission request(s) of the agent's turn in {shown} were rejected "
        f"without asking you: a turn asks at most {limit} question(s) ([agent] max_questions)."
    )


@dataclass(frozen=True)
class _Question:
    """One request put to the owner: what its code is bound to, and where its answer goes."""

    adapter_session_id: str
    turn_id: str
    request_id: str | None
    answer: asyncio.Future[OwnerAnswer]


class Approvals:
    """The questions put to the owner and their codes (see the module docstring)."""

    def __init__(
        self, config: PluginConfig, diagnostics: DiagnosticsFeed, clock: Callable[[], float]
    ) -> None:
        self.config = config
        self._clock = clock
        self.owner = config.owner.hex
        self.timeout = config.ask_timeout
        self._diagnostics = diagnostics
        self.max_questions = config.max_questions
        self._open: dict[str, _Question] = {}
        self._spent: deque[str] = deque(maxlen=_SPENT)
        #: Per running turn: the questions it put to the owner and the requests it could not
        #: ask (forgotten at the turn's end, :meth:`end_turn`).
        self._asked: dict[str, int] = {}
        self._unasked: dict[str, int] = {}
        #: How a question reaches the owner: the bot's outbox (``Delivery.tell_owner``: to
        #: every DM relay of the owner, each one until it accepts) once the bot has started;
        #: else :func:`tell_owner`.
        self.tell: Callable[[str], Awaitable[bool]] | None = None
        #: The bot's relay lists, through which the owner's DM relays are read (set once the
        #: bot's delivery exists; None: a one-shot lookup).
        self.directory: RelayDirectory | None = None

    @property
    def enabled(self) -> bool:
        return self.timeout > 0

    async def ask(
        self,
        request: PermissionRequest,
        decision: PermissionDecision,
        ids: TurnIds,
        triggers: Iterable[str],
        private: bool = False,
        speakers: Sequence[Speaker] = (),
    ) -> PermissionDecision:
        """Ask the owner, wait (at most ``ask_timeout``) and give the final decision
        (``private``: a private conversation's turn, whose diagnostic names no title;
        ``speakers``: who else's words reached the turn or its session).  Past the turn's
        ``max_questions`` the request is rejected without asking (``ask_limit``)."""
        assert ids.turn_id is not None
        turn_id = ids.turn_id
        asked = self._asked.get(turn_id, 0)
        if asked >= self.max_questions:
            self._unasked[turn_id] = self._unasked.get(turn_id, 0) + 1
            return answered(decision, "limit")
        self._asked[turn_id] = asked + 1
        last = asked + 1 == self.max_questions
        code = new_code(self._open.keys() | set(self._spent))
        future: asyncio.Future[OwnerAnswer] = asyncio.get_running_loop().create_future()
        self._open[code] = _Question(request.session_id, turn_id, request.tool_call_id, future)
        text = question_text(
            request, ids.channel_id, triggers, code, self.timeout, speakers, last=last
        )
        try:
            sent = await self._send(text)
            said: dict[str, object] = {"toolKind": tool_kind(request.kind), "sent": sent}
            said |= {} if private else {"title": request.title, "toolKind": request.kind}
            self._diagnostics.emit("permission_asked", **ids.as_kwargs(), payload=said)
            if not sent:
                return answered(decision, "unsent")
            try:
                async with asyncio.timeout(self.timeout):
                    return answered(decision, await asyncio.shield(future))
            except TimeoutError:
                return answered(decision, "timeout")
        finally:
            self._open.pop(code, None)
            self._spent.append(code)
            if not future.done():
                future.cancel()

    def end_turn(self, ids: TurnIds) -> Coroutine[Any, Any, None] | None:
        """The turn ended: forget what it asked; when it left requests unasked, the private
        message that tells the owner how many (to run; None: nothing to tell)."""
        turn_id = ids.turn_id or ""
        self._asked.pop(turn_id, None)
        unasked = self._unasked.pop(turn_id, 0)
        return self._tell_limit(ids, unasked) if unasked else None

    async def _tell_limit(self, ids: TurnIds, unasked: int) -> None:
        sent = await self._send(limit_note(ids.channel_id, unasked, self.max_questions))
        payload = {"unasked": unasked, "maxQuestions": self.max_questions, "sent": sent}
        self._diagnostics.emit("permission_limit", **ids.as_kwargs(), payload=payload)

    async def _send(self, text: str) -> bool:
        if self.tell is not None:
            return await self.tell(text)
        return await tell_owner(self.config, text, int(self._clock()), self.directory)

    def answer(self, event: Event, verdict: Verdict, code: str) -> bool:
        """An ``!allow``/``!deny`` seen in ``event``: True when it decided a question."""
        refused = None
        question = self._open.get(code.upper())
        if event.pubkey != self.owner:
            refused = "not_owner"
        elif question is None:
            refused = "code_spent" if code.upper() in self._spent else "unknown_code"
        elif question.answer.done():
            refused = "code_spent"
        if refused is not None or question is None:
            payload = {"reason": refused, "verdict": verdict, "eventId": event.id}
            if refused == "not_owner":
                payload["actor"] = event.pubkey
            self._diagnostics.emit("approval_refused", payload=payload)
            return False
        question.answer.set_result("allowed" if verdict == "allow" else "denied")
        return True

    def withdraw(self, turn_id: str) -> None:
        """The turn ended or is being cancelled: its open questions are rejected."""
        for question in list(self._open.values()):
            if question.turn_id == turn_id and not question.answer.done():
                with contextlib.suppress(asyncio.InvalidStateError):
                    question.answer.set_result("withdrawn")
