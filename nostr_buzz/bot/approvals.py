"""Approvals: the owner decides an agent's permission request from any Nostr client
(docs/bot.md, "Permissions").

When the rule asks the owner (``permissions = "ask"``, or ``owner`` with someone else's words in
the session: :attr:`~nostr_buzz.core.permission.PermissionDecision.asks_owner`) and ``[agent]
ask_timeout`` is above 0, the bot sends the owner a NIP-17 private message naming the tool (its
title and kind), the channel, who triggered the turn and a short code.  The owner answers
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
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from nostr_buzz.acp.types import PermissionRequest
from nostr_buzz.core.permission import OwnerAnswer, PermissionDecision, answered
from nostr_buzz.errors import BuzzError
from nostr_buzz.event import Event
from nostr_buzz.io.diagnostics import DiagnosticsFeed
from nostr_buzz.io.private import dm_relays_of, send_private
from nostr_buzz.io.relay_lists import RelayDirectory
from nostr_buzz.nips import nip17, nip19

from .config import PluginConfig
from .outputs import TurnIds
from .privacy import tool_kind

__all__ = [
    "CODE_ALPHABET",
    "CODE_LENGTH",
    "Approvals",
    "Verdict",
    "new_code",
    "question_text",
    "tell_owner",
]

#: Digits and capitals without 0/O, 1/I/L: a code read on a phone is typed back right.
CODE_ALPHABET: Final = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH: Final = 6
#: The longest tool title quoted in a question (the agent writes it).
_TITLE_CHARS: Final = 300
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


def question_text(
    request: PermissionRequest,
    channel: str | None,
    triggers: Iterable[str],
    code: str,
    timeout: float,
) -> str:
    """The private message that asks the owner (``triggers``: hex pubkeys)."""
    title = (
        request.title if len(request.title) <= _TITLE_CHARS else request.title[:_TITLE_CHARS] + "…"
    )
    who = ", ".join(nip19.encode("npub", p) for p in dict.fromkeys(triggers)) or "(nobody)"
    return (
        "The agent asks for permission to run a tool.\n"
        f"Tool: {title}\n"
        f"Kind: {request.kind or 'unknown'}\n"
        f"Channel: {channel or '(none)'}\n"
        f"Turn triggered by: {who}\n"
        f"Answer !allow {code} or !deny {code} within {timeout:g} s; no answer rejects it."
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
        self._open: dict[str, _Question] = {}
        self._spent: deque[str] = deque(maxlen=_SPENT)
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
    ) -> PermissionDecision:
        """Ask the owner, wait (at most ``ask_timeout``) and give the final decision
        (``private``: a private conversation's turn, whose diagnostic names no title)."""
        code = new_code(self._open.keys() | set(self._spent))
        future: asyncio.Future[OwnerAnswer] = asyncio.get_running_loop().create_future()
        assert ids.turn_id is not None
        self._open[code] = _Question(request.session_id, ids.turn_id, request.tool_call_id, future)
        text = question_text(request, ids.channel_id, triggers, code, self.timeout)
        try:
            sent = await self._send(text)
            asked: dict[str, object] = {"toolKind": tool_kind(request.kind), "sent": sent}
            asked |= {} if private else {"title": request.title, "toolKind": request.kind}
            self._diagnostics.emit("permission_asked", **ids.as_kwargs(), payload=asked)
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

    async def _send(self, text: str) -> bool:
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
