"""An in-process agent that asks a model over plain HTTP: the Anthropic Messages API, streamed,
with the standard library only (urllib, in a thread).

    ANTHROPIC_API_KEY=… buzz run --agent-module examples.http_agent:from_environment

(run from the repository's root, or with this folder's parent on ``PYTHONPATH``), or in a
program: ``BuzzPlugin(config, agent=from_environment())``.  See docs/bot.md, "In-process
agents".

Environment:

* ``ANTHROPIC_API_KEY`` — required; sent as ``x-api-key`` and never logged or repeated in an
  error;
* ``ANTHROPIC_BASE_URL`` — default ``https://api.anthropic.com``;
* ``ANTHROPIC_MODEL`` — default ``claude-sonnet-4-5``;
* ``HTTP_AGENT_MAX_TOKENS`` — default 1024.

Each bot session is one conversation: the agent keeps its messages (and the standing text,
sent as ``system``) until the bot opens a new session.  It has no ``steer`` (a follow-up of the
same author cancels the turn and the bot runs both messages together) and no ``cancel`` (the
bot cancels the task; a request already sent finishes in its thread and is discarded).
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

from nostr_buzz import AgentReply, AgentTurn, TokenCounts

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_MODEL = "claude-sonnet-4-5"
API_VERSION = "2023-06-01"


class ModelError(RuntimeError):
    """The model API answered with an error (its status and message, never the key)."""


class HttpAgent:
    """One model behind the Messages API; conversations by bot session."""

    name = "http-agent"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        model: str = DEFAULT_MODEL,
        max_tokens: int = 1024,
        timeout: float = 300.0,
    ) -> None:
        self._api_key = api_key
        self.url = base_url.rstrip("/") + "/v1/messages"
        self.model = model
        self.max_tokens = max_tokens
        self.timeout = timeout
        self._system: dict[str, str] = {}
        self._history: dict[str, list[dict[str, Any]]] = {}

    def __repr__(self) -> str:  # never the key
        return f"HttpAgent(url={self.url!r}, model={self.model!r})"

    async def prompt(self, turn: AgentTurn) -> AgentReply:
        if turn.system is not None:
            self._system[turn.session_id] = turn.system
        history = self._history.setdefault(turn.session_id, [])
        question = {"role": "user", "content": turn.text}
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "stream": True,
            "messages": [*history, question],
        }
        if self._system.get(turn.session_id):
            body["system"] = self._system[turn.session_id]
        text, usage, model = await asyncio.to_thread(self._ask, body)
        history += [question, {"role": "assistant", "content": text}]  # only once answered
        return AgentReply(text, usage=usage, model=model)

    def _ask(self, body: dict[str, Any]) -> tuple[str, TokenCounts | None, str | None]:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={
                "content-type": "application/json",
                "x-api-key": self._api_key,
                "anthropic-version": API_VERSION,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return _read_stream(response)
        except urllib.error.HTTPError as exc:
            raise ModelError(f"the model API answered HTTP {exc.code}: {_message(exc)}") from None


def _events(lines: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    """The JSON ``data:`` of each server-sent event."""
    for raw in lines:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("data:"):
            data = json.loads(line[5:])
            if isinstance(data, dict):
                yield data


def _read_stream(lines: Iterable[bytes]) -> tuple[str, TokenCounts | None, str | None]:
    """The answer's text, its token counts and the model, from a Messages API stream."""
    parts: list[str] = []
    model: str | None = None
    counts: dict[str, int] = {}
    for event in _events(lines):
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            model = message.get("model")
            counts.update((k, v) for k, v in (message.get("usage") or {}).items() if type(v) is int)
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                parts.append(str(delta.get("text", "")))
        elif kind == "message_delta":
            counts.update((k, v) for k, v in (event.get("usage") or {}).items() if type(v) is int)
        elif kind == "error":
            raise ModelError(f"the model API failed mid-answer: {event.get('error')}")
    return "".join(parts), _usage(counts), model


def _usage(counts: dict[str, int]) -> TokenCounts | None:
    """The Messages API's counts as a metric's: ``input_tokens`` there leaves out the cached
    tokens, which a metric's input count includes."""
    if "input_tokens" not in counts or "output_tokens" not in counts:
        return None
    read = counts.get("cache_read_input_tokens", 0)
    write = counts.get("cache_creation_input_tokens", 0)
    given = counts["input_tokens"] + read + write
    return TokenCounts(
        input_tokens=given,
        output_tokens=counts["output_tokens"],
        total_tokens=given + counts["output_tokens"],
        cost_usd=None,
        cache_read_tokens=read,
        cache_write_tokens=write,
    )


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        error = json.loads(exc.read() or b"{}").get("error") or {}
    except ValueError:
        return exc.reason or "no message"
    return str(error.get("message") or exc.reason or "no message")[:300]


def from_environment() -> HttpAgent:
    """The agent the environment describes (see the module docstring)."""
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if not key:
        raise RuntimeError("set ANTHROPIC_API_KEY to the model API's key")
    return HttpAgent(
        key,
        base_url=os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL,
        model=os.environ.get("ANTHROPIC_MODEL") or DEFAULT_MODEL,
        max_tokens=int(os.environ.get("HTTP_AGENT_MAX_TOKENS") or 1024),
    )


if __name__ == "__main__":  # a module to load into a bot, not a program
    raise SystemExit(f"{__doc__.strip()}\n\nLoad it into a bot: see the first lines above.")
