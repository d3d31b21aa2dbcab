"""In-process agents: a Python object instead of an ACP subprocess (docs/bot.md, "In-process
agents").

An in-process agent is any object with ``async def prompt(self, turn: AgentTurn) ->
AgentReply``, or a plain async function (or async callable object) of the turn,
``async def answer(turn: AgentTurn) -> AgentReply | str`` (:data:`AgentFunction`).  Either may
return the text alone (a ``str``: no usage, the configured model).  A class where its instance
is needed is refused when the bot is built.  Two methods are used when present:

* ``async def steer(self, turn: AgentTurn) -> bool`` — a message of the running turn's author
  arrived while ``prompt`` runs (``turn.sections`` is the one compiled steer, ``turn.system``
  None).  True: the running prompt took it into account (it is answered by this turn's
  reply); False (or an exception, or no answer within the request timeout): the bot cancels
  the turn and runs a new one with both messages.  Without ``steer`` the bot does the latter
  every time.
* ``async def cancel(self, turn: AgentTurn) -> None`` — stop the running ``prompt`` (``turn``
  is the one it was given); ``prompt`` should then return or raise soon (within the cancel
  grace, else its task is cancelled).  Without ``cancel`` the bot cancels the asyncio task
  running ``prompt``.

Plain values here, no I/O: the driver that calls the object is
:class:`nostr_buzz.io.inprocess.InProcessDriver`; ``buzz run --agent-module MODULE:ATTR`` loads
one with :func:`nostr_buzz.io.inprocess.load_agent`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from nostr_buzz.errors import ConfigError
from nostr_buzz.nips.nip_am import TokenCounts

__all__ = [
    "AgentFunction",
    "AgentModuleError",
    "AgentReply",
    "AgentTurn",
    "InProcessAgent",
    "parse_spec",
]

#: How the sections are joined in :attr:`AgentTurn.text` (as the standing text joins its own).
SECTION_SEPARATOR = "\n\n"


class AgentModuleError(ConfigError):
    """An ``[agent] module`` spec (``--agent-module``, ``BUZZ_AGENT_MODULE``) cannot be loaded
    as an in-process agent: malformed, its module not importable, its attribute missing, or
    the object has no ``async def prompt``."""


@dataclass(frozen=True)
class AgentTurn:
    """One prompt for an in-process agent: what an ACP agent would receive.

    ``sections`` are the compiled sections (each one ``text`` block of an ACP
    ``session/prompt``); ``system`` is the session's standing text on its first turn (again on
    the next one while no turn of the session has returned), else None; ``session_id`` is the
    bot's session (a new one after a cancel or a restart; one per thread under ``[sessions]
    scope = "thread"``), ``channel`` the queue channel the turn answers (the channel itself,
    never a thread's key).
    """

    sections: tuple[str, ...]
    system: str | None
    session_id: str
    channel: str

    @property
    def text(self) -> str:
        """The sections joined by blank lines, as one text."""
        return SECTION_SEPARATOR.join(self.sections)


@dataclass(frozen=True)
class AgentReply:
    """What ``prompt`` returns: the answer, its token counts when known (None: every counter
    of the metric is unknown, null), and the model that answered (else the configured
    ``[agent] model``)."""

    text: str
    usage: TokenCounts | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"AgentReply.text must be a str, not {type(self.text).__name__}")
        if self.usage is not None and not isinstance(self.usage, TokenCounts):
            raise TypeError(
                f"AgentReply.usage must be a nostr_buzz.TokenCounts or None, "
                f"not {type(self.usage).__name__}"
            )
        if self.model is not None and not isinstance(self.model, str):
            raise TypeError(f"AgentReply.model must be a str, not {type(self.model).__name__}")


@runtime_checkable
class InProcessAgent(Protocol):
    """The one required method (``steer`` and ``cancel`` are optional, see the module)."""

    async def prompt(self, turn: AgentTurn) -> AgentReply | str: ...


#: A plain async function of the turn, an agent as it is (its answer, or the text alone).
AgentFunction: TypeAlias = Callable[[AgentTurn], Awaitable[AgentReply | str]]


def parse_spec(spec: str) -> tuple[str, str]:
    """``"pkg.mod:attr"`` → ``("pkg.mod", "attr")`` (the attribute may be dotted)."""
    module, colon, attribute = spec.strip().partition(":")
    if not colon or not module.strip() or not attribute.strip():
        raise AgentModuleError(
            f"agent module {spec!r}: expected MODULE:ATTRIBUTE, e.g. mybot.agent:Agent "
            "(the attribute is the agent object or a factory that takes no argument)"
        )
    return module.strip(), attribute.strip()
