"""A local server that plays the model for the real ACP adapters (127.0.0.1 only).

Two wire formats, both streamed as server-sent events:

* the Anthropic Messages API (``POST /v1/messages``), which claude-agent-acp's Claude Code
  reaches through ``ANTHROPIC_BASE_URL``;
* the OpenAI Responses API (``POST /v1/responses``), which codex-acp reaches through a
  ``[model_providers.mock]`` entry of ``$CODEX_HOME/config.toml``.

What the "model" says is decided from the newest user text of the request, so that every
answer can be traced back to its question:

* ``ASK:<word>`` → the answer text ``ANSWER:<word>`` (the last marker wins);
* ``SHELL:<command>;;`` → first a shell tool call running ``<command>``; once the tool's
  result is in the conversation, the text ``TOOL-DONE`` plus the answer;
* ``FAIL:<word>`` → an HTTP 400 error whose message contains ``<word>`` (once per word: a
  later request that still carries the marker is answered normally);
* ``MCP:<tool>:<argument>=<value>;;`` → first a call of the offered tool whose name ends with
  ``<tool>`` (an MCP tool: ``mcp__buzz__fetch_event`` in Claude Code), with that one argument;
  once its result is in the conversation (kept whole in :attr:`Seen.tool_output`), the text
  ``TOOL-DONE`` plus the answer;
* ``HOLD:<name>`` → the answer (after a tool call: the answer to its result) waits until the
  test calls :meth:`ModelServer.release`
  (bounded by ``hold_timeout``), so a turn can be kept running without timing guesses.

The server is also the adapters' HTTP(S) proxy (``HTTPS_PROXY``): any request for another
host is refused and recorded in :attr:`ModelServer.outbound`, so a test can prove that
nothing tried to leave the machine.

Requests that are not the conversation itself (Claude Code's side calls without tools, such
as title generation) get a short text answer.  Every request is recorded in
:attr:`ModelServer.requests`, whole, with the usage the server reported for it.  A usage with a
huge input (``Usage(input_tokens=990_000)``) makes claude-agent-acp and codex-acp compact their
context at the start of the next prompt (docs/acp-adapters.md, "Compaction").
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ASK = re.compile(r"ASK:([A-Za-z0-9_-]+)")
SHELL = re.compile(r"SHELL:(.+?);;", re.DOTALL)
MCP = re.compile(r"MCP:([A-Za-z0-9_]+):([A-Za-z0-9_]+)=(.*?);;", re.DOTALL)
HOLD = re.compile(r"HOLD:([A-Za-z0-9_-]+)")
FAIL = re.compile(r"FAIL:([A-Za-z0-9_-]+)")
#: What gemini-cli's non-streamed side calls get: the JSON its next-speaker check and its
#: model router parse.
GEMINI_SIDE_ANSWER = json.dumps(
    {"next_speaker": "user", "reasoning": "the mock is done", "model_choice": "flash"}
)


@dataclass
class Usage:
    """The token counts the server reports for each conversation request."""

    input_tokens: int = 100
    output_tokens: int = 20
    cache_read: int = 0
    cache_write: int = 0


@dataclass
class Seen:
    """One request the server answered."""

    api: str  # "messages" | "responses" | "gemini"
    main: bool  # a conversation request (it offered tools)
    user_text: str
    tool_result: bool  # the newest input is a tool's result
    answer: str
    tool_call: str | None
    usage: Usage | None
    #: What the conversation says the model answered before (its assistant/model turns).
    earlier_answers: str = ""
    #: The whole request as sent (system prompt and instructions included).
    body: str = ""
    #: The newest tool result's text, when the newest input is one.
    tool_output: str = ""


@dataclass
class _Tools:
    """The tools a request offers, the tools the model called since the question, and the
    request's text (where Claude Code lists the deferred tools it loads on demand)."""

    offered: tuple[str, ...] = ()
    called: tuple[str, ...] = ()
    body: str = ""

    def next_call(self, ending: str, param: str, value: str) -> tuple[str, dict[str, Any]] | None:
        """The next call for ``MCP:<ending>:<param>=<value>;;``: the tool itself once offered;
        before that, Claude Code's ``ToolSearch`` for it when it is deferred (what a model does
        for a tool listed but not loaded); None once the tool was called."""
        if any(name.endswith(ending) for name in self.called):
            return None
        full = next((name for name in self.offered if name.endswith(ending)), None)
        if full is not None:
            return full, {param: value.strip()}
        deferred = re.search(rf"mcp__[A-Za-z0-9_-]+__{ending}", self.body)
        if deferred and "ToolSearch" in self.offered and "ToolSearch" not in self.called:
            return "ToolSearch", {"query": f"select:{deferred.group(0)}", "max_results": 1}
        if "tool_search" in self.offered and "tool_search" not in self.called:
            return "tool_search", {"query": ending.replace("_", " "), "limit": 8}
        return None


@dataclass
class _Decision:
    text: str
    tool_call: str | None
    hold: str | None
    fail: str | None = None
    #: A tool to call by name (an MCP tool, or what loads it), with its arguments.
    mcp: tuple[str, dict[str, Any]] | None = None


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                text = block.get("text")
                if isinstance(text, str):
                    yield text


def _role_texts(messages: Any, role: str, content: Callable[[dict[str, Any]], Any]) -> str:
    """The texts of the conversation's messages of ``role`` (what the model said earlier)."""
    listed = messages if isinstance(messages, list) else []
    said = [
        text
        for m in listed
        if isinstance(m, dict) and m.get("role") == role
        for text in _texts(content(m))
    ]
    return "\n".join(said)


def _names(tools: Any) -> tuple[str, ...]:
    """The names of the tools a request offers."""
    names = []
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict):
            function = tool.get("function")
            nested = function.get("name") if isinstance(function, dict) else None
            name = tool.get("name") or nested or tool.get("type")
            if tool.get("type") == "namespace":  # codex: a server's tools, found by tool_search
                names += [f"{name}__{inner}" for inner in _names(tool.get("tools"))]
            names.append(name if isinstance(name, str) else "")
    return tuple(names)


def _output_text(output: Any) -> str:
    """A tool result's text: a string, or the texts of its content blocks."""
    return "\n".join(_texts(output))


def _leaves(value: Any) -> str:
    """Every string inside ``value`` (gemini-cli wraps a tool's text in its own objects)."""
    if isinstance(value, str):
        return value
    items = value.values() if isinstance(value, dict) else value
    if not isinstance(items, list | type({}.values())):
        return ""
    return "\n".join(text for item in items if (text := _leaves(item)))


def _has_tool_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


class ModelServer:
    """A ThreadingHTTPServer on 127.0.0.1 with a random port; use as a context manager."""

    def __init__(
        self,
        *,
        delay: float = 0.0,
        usage: Usage | None = None,
        hold_timeout: float = 30.0,
        refuse: str | None = None,
    ) -> None:
        """``refuse``: every conversation request fails with this word (as ``FAIL:``)."""
        self.delay = delay
        self.refuse = refuse
        self.usage = usage or Usage()
        self.hold_timeout = hold_timeout
        self.requests: list[Seen] = []
        self.outbound: list[str] = []
        #: requests for paths this server does not play (404)
        self.unknown: list[str] = []
        self._failed: set[str] = set()
        self._holds: dict[str, threading.Event] = {}
        self._lock = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for event in self._holds.values():
            event.set()
        self._server.shutdown()
        self._server.server_close()

    # -- test controls ------------------------------------------------------------------

    def release(self, name: str) -> None:
        with self._lock:
            self._holds.setdefault(name, threading.Event()).set()

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> list[Seen]:
        """Wait (bounded) until ``predicate(requests)`` holds; return the requests."""
        with self._lock:
            if not self._lock.wait_for(lambda: predicate(self.requests), timeout):
                raise AssertionError(
                    f"the model server never saw what was expected: "
                    f"{[(s.user_text[-80:], s.answer) for s in self.requests]}"
                )
            return list(self.requests)

    def main_requests(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.requests if s.main]

    def holding(self, name: str) -> bool:
        """Whether a request is waiting on ``HOLD:name`` right now (or did)."""
        return any(s.main and f"HOLD:{name}" in s.user_text for s in self.requests)

    # -- what the model says ------------------------------------------------------------

    def _decide(
        self, user_text: str, tool_result: bool, main: bool, tools: _Tools | None = None
    ) -> _Decision:
        if not main:
            return _Decision("Buzz conversation", None, None)
        if self.refuse is not None:
            return _Decision(f"the mock refuses: {self.refuse}", None, None, self.refuse)
        fail = [word for word in FAIL.findall(user_text) if word not in self._failed]
        if fail:
            self._failed.add(fail[-1])
            return _Decision(f"the mock refuses: {fail[-1]}", None, None, fail[-1])
        asks = ASK.findall(user_text)
        answer = f"ANSWER:{asks[-1]}" if asks else "ANSWER:none"
        holds = HOLD.findall(user_text)
        shell = SHELL.findall(user_text)
        mcp = MCP.findall(user_text)
        call = (tools or _Tools()).next_call(*mcp[-1]) if mcp else None
        if call is not None:
            return _Decision("Let me look.", None, None, mcp=call)
        if shell and not tool_result:
            return _Decision("Let me run that.", shell[-1].strip(), None)
        if tool_result:  # a HOLD waits here, once the tool has run
            return _Decision(f"TOOL-DONE {answer}", None, holds[-1] if holds else None)
        return _Decision(answer, None, holds[-1] if holds else None)

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.requests.append(seen)
            self._lock.notify_all()

    def _wait(self, decision: _Decision) -> None:
        if self.delay:
            time.sleep(self.delay)
        if decision.hold is not None:
            with self._lock:
                event = self._holds.setdefault(decision.hold, threading.Event())
            event.wait(self.hold_timeout)

    # -- the two APIs -------------------------------------------------------------------

    def _messages(self, body: dict[str, Any]) -> tuple[Seen, Iterator[bytes]]:
        messages = body.get("messages") or []
        main = bool(body.get("tools"))
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        tool_result = bool(users) and _has_tool_result(users[-1])
        question = next((m for m in reversed(users) if not _has_tool_result(m)), None)
        user_text = "\n".join(_texts(question.get("content"))) if question else ""
        stream = functools.partial(self._messages_stream, body)
        earlier = _role_texts(messages, "assistant", lambda m: m.get("content"))
        start = messages.index(question) + 1 if question in messages else 0
        called = [
            b.get("name", "")
            for m in messages[start:]
            if isinstance(m, dict) and m.get("role") == "assistant"
            for b in (m.get("content") if isinstance(m.get("content"), list) else [])
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        tools = _Tools(_names(body.get("tools")), tuple(called), json.dumps(body))
        seen, chunks = self._answer(
            "messages", main, user_text, tool_result, stream, earlier, tools
        )
        if tool_result:
            blocks = [b for b in users[-1].get("content") or [] if isinstance(b, dict)]
            results = [b.get("content") for b in blocks if b.get("type") == "tool_result"]
            seen.tool_output = "\n".join(_output_text(r) for r in results)
        return seen, chunks

    def _answer(
        self,
        api: str,
        main: bool,
        user_text: str,
        tool_result: bool,
        stream: Callable[[_Decision, Usage], Iterator[bytes]],
        earlier: str = "",
        tools: _Tools | None = None,
    ) -> tuple[Seen, Iterator[bytes]]:
        """The decision on a request and its stream (none for a refusal); side calls get a
        small usage of their own."""
        decision = self._decide(user_text, tool_result, main, tools)
        usage = self.usage if main else Usage(5, 2)
        seen = Seen(
            api, main, user_text, tool_result, decision.text, decision.tool_call, usage, earlier
        )
        if decision.fail is not None:
            return seen, iter(())
        return seen, stream(decision, usage)

    def _messages_stream(
        self, body: dict[str, Any], decision: _Decision, usage: Usage
    ) -> Iterator[bytes]:
        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

        yield event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_{len(self.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "mock"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": usage.input_tokens,
                        "output_tokens": 1,
                        "cache_read_input_tokens": usage.cache_read,
                        "cache_creation_input_tokens": usage.cache_write,
                    },
                },
            },
        )
        self._wait(decision)
        yield event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        yield event(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": decision.text},
            },
        )
        yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
        stop = "end_turn"
        if decision.mcp is not None:
            stop = "tool_use"
            ending, arguments = decision.mcp
            block = {
                "type": "tool_use",
                "id": f"toolu_{len(self.requests)}",
                "name": ending,
                "input": {},
            }
            yield event(
                "content_block_start",
                {"type": "content_block_start", "index": 1, "content_block": block},
            )
            delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
            yield event(
                "content_block_delta", {"type": "content_block_delta", "index": 1, "delta": delta}
            )
            yield event("content_block_stop", {"type": "content_block_stop", "index": 1})
        elif decision.tool_call is not None:
            stop = "tool_use"
            yield event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {
                        "type": "tool_use",
                        "id": f"toolu_{len(self.requests)}",
                        "name": "Bash",
                        "input": {},
                    },
                },
            )
            yield event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(
                            {"command": decision.tool_call, "description": "Run it"}
                        ),
                    },
                },
            )
            yield event("content_block_stop", {"type": "content_block_stop", "index": 1})
        yield event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage.output_tokens},
            },
        )
        yield event("message_stop", {"type": "message_stop"})

    def _responses(self, body: dict[str, Any]) -> tuple[Seen, Iterator[bytes]]:
        items = body.get("input") or []
        tools = body.get("tools") or []
        main = bool(tools)
        tool_result = (
            bool(items)
            and isinstance(items[-1], dict)
            and items[-1].get("type") in ("function_call_output", "custom_tool_call_output")
        )
        user_text, asked = "", 0
        for index in range(len(items) - 1, -1, -1):
            item = items[index]
            if (
                isinstance(item, dict)
                and item.get("type", "message") == "message"
                and item.get("role") == "user"
            ):
                user_text, asked = "\n".join(_texts(item.get("content"))), index
                break
        called = [
            "tool_search" if i.get("type") == "tool_search_call" else str(i.get("name", ""))
            for i in items[asked:]
            if isinstance(i, dict) and i.get("type") in ("function_call", "tool_search_call")
        ]
        searched = [
            tool
            for i in items[asked:]
            if isinstance(i, dict) and i.get("type") == "tool_search_output"
            for tool in i.get("tools") or []
        ]
        offered = (*_names(tools), *_names(searched))
        view = _Tools(offered, tuple(called), json.dumps(body))
        decision = self._decide(user_text, tool_result, main, view)
        earlier = _role_texts(items, "assistant", lambda m: m.get("content"))
        seen = Seen(
            "responses",
            main,
            user_text,
            tool_result,
            decision.text,
            decision.tool_call,
            self.usage,
            earlier,
        )
        if tool_result:
            seen.tool_output = _output_text(items[-1].get("output"))
        if decision.fail is not None:
            return seen, iter(())
        return seen, self._responses_stream(tools, decision)

    def _responses_stream(self, tools: list[Any], decision: _Decision) -> Iterator[bytes]:
        n = len(self.requests)

        def event(data: dict[str, Any]) -> bytes:
            return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

        yield event({"type": "response.created", "response": {"id": f"resp_{n}"}})
        self._wait(decision)
        message = {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{n}",
            "content": [{"type": "output_text", "text": decision.text}],
        }
        yield event(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**message, "content": []},
            }
        )
        yield event(
            {
                "type": "response.output_text.delta",
                "item_id": f"msg_{n}",
                "output_index": 0,
                "content_index": 0,
                "delta": decision.text,
            }
        )
        yield event({"type": "response.output_item.done", "output_index": 0, "item": message})
        if decision.mcp is not None:
            ending, arguments = decision.mcp
            call = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": ending,
                "arguments": json.dumps(arguments),
            }
            namespace, _, short = ending.rpartition("__")
            if ending.startswith("mcp__") and namespace:  # a tool of a namespace it searched
                call.update(namespace=namespace, name=short)
            if ending == "tool_search":  # codex's search for deferred tools, run by codex
                call = {
                    "type": "tool_search_call",
                    "id": f"ts_{n}",
                    "call_id": f"call_{n}",
                    "execution": "client",
                    "status": "completed",
                    "arguments": arguments,
                }
            yield event({"type": "response.output_item.done", "output_index": 1, "item": call})
        elif decision.tool_call is not None:
            names = {t.get("name") for t in tools if isinstance(t, dict)}
            if "shell" in names:
                name, args = "shell", {"command": ["bash", "-lc", decision.tool_call]}
            elif "shell_command" in names:
                name, args = "shell_command", {"command": decision.tool_call}
            else:
                name, args = "exec_command", {"cmd": decision.tool_call}
            # What a model does for a command that writes: it asks to leave codex's sandbox
            # (codex-acp 2.6's read-only mode asks the client then).
            args.update(sandbox_permissions="require_escalated", justification="Run it")
            call = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": name,
                "arguments": json.dumps(args),
            }
            yield event({"type": "response.output_item.done", "output_index": 1, "item": call})
        u = self.usage
        yield event(
            {
                "type": "response.completed",
                "response": {
                    "id": f"resp_{n}",
                    "usage": {
                        "input_tokens": u.input_tokens + u.cache_read,
                        "input_tokens_details": {"cached_tokens": u.cache_read},
                        "output_tokens": u.output_tokens,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": u.input_tokens + u.cache_read + u.output_tokens,
                    },
                },
            }
        )

    def _gemini(self, body: dict[str, Any], model: str) -> tuple[Seen, Iterator[bytes]]:
        contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
        main = bool(body.get("tools"))

        def parts(content: dict[str, Any]) -> list[dict[str, Any]]:
            return [p for p in content.get("parts") or [] if isinstance(p, dict)]

        users = [c for c in contents if c.get("role", "user") == "user"]
        tool_result = bool(users) and any("functionResponse" in p for p in parts(users[-1]))
        question = next(
            (c for c in reversed(users) if not any("functionResponse" in p for p in parts(c))),
            None,
        )
        user_text = "\n".join(_texts(parts(question))) if question else ""
        stream = functools.partial(self._gemini_stream, model)
        earlier = _role_texts(contents, "model", parts)
        start = contents.index(question) + 1 if question is not None else 0
        called = [
            str(p["functionCall"].get("name", ""))
            for c in contents[start:]
            if c.get("role") == "model"
            for p in parts(c)
            if isinstance(p.get("functionCall"), dict)
        ]
        declared = [
            d
            for tool in body.get("tools") or []
            if isinstance(tool, dict)
            for d in tool.get("functionDeclarations") or []
        ]
        tools = _Tools(_names(declared), tuple(called), json.dumps(body))
        seen, chunks = self._answer("gemini", main, user_text, tool_result, stream, earlier, tools)
        if tool_result:
            responses = [p["functionResponse"] for p in parts(users[-1]) if "functionResponse" in p]
            seen.tool_output = _leaves(responses[-1].get("response")) if responses else ""
        return seen, chunks

    def _gemini_answer(self, decision: _Decision, usage: Usage, model: str) -> dict[str, Any]:
        """One ``GenerateContentResponse``: the text, then the shell call (gemini-cli's
        ``run_shell_command``); ``promptTokenCount`` includes the cached part."""
        parts: list[dict[str, Any]] = [{"text": decision.text}]
        if decision.tool_call is not None:
            call = {"name": "run_shell_command", "args": {"command": decision.tool_call}}
            parts.append({"functionCall": call})
        if decision.mcp is not None:
            name, arguments = decision.mcp
            parts.append({"functionCall": {"name": name, "args": arguments}})
        prompt = usage.input_tokens + usage.cache_read
        return {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": prompt,
                "cachedContentTokenCount": usage.cache_read,
                "candidatesTokenCount": usage.output_tokens,
                "totalTokenCount": prompt + usage.output_tokens,
            },
            "modelVersion": model,
        }

    def _gemini_stream(self, model: str, decision: _Decision, usage: Usage) -> Iterator[bytes]:
        self._wait(decision)
        yield f"data: {json.dumps(self._gemini_answer(decision, usage, model))}\n\n".encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _local_path(self) -> str | None:
                """The request's path on this server; None (recorded) for any other host."""
                path = self.path
                if path.startswith("/"):
                    return path
                own = (server.url, f"http://localhost:{server.port}")
                for prefix in own:
                    if path.startswith(prefix):
                        return path[len(prefix) :] or "/"
                with server._lock:
                    server.outbound.append(f"{self.command} {path}")
                self._json(403, {"error": {"message": "no network in tests"}})
                return None

            def do_CONNECT(self) -> None:
                if self.path in (f"127.0.0.1:{server.port}", f"localhost:{server.port}"):
                    self._json(400, {"error": {"message": "plain HTTP only"}})
                    return
                with server._lock:
                    server.outbound.append(f"CONNECT {self.path}")
                self._json(403, {"error": {"message": "no network in tests"}})

            def do_GET(self) -> None:
                path = self._local_path()
                if path is None:
                    return
                if path.rstrip("/").endswith("/models"):
                    self._json(200, {"data": [], "models": []})
                else:
                    server.unknown.append(f"{self.command} {path}")
                    self._json(404, {"error": {"type": "not_found", "message": path}})

            def do_HEAD(self) -> None:
                self._json(200, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                local = self._local_path()
                if local is None:
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "not JSON"}})
                    return
                path = local.split("?", 1)[0].rstrip("/")
                if path.endswith("/messages/count_tokens"):
                    self._json(200, {"input_tokens": 10})
                    return
                model = path.rsplit("/", 1)[-1].split(":", 1)[0]
                if path.endswith(":countTokens"):
                    self._json(200, {"totalTokens": 10})
                    return
                if path.endswith(":generateContent"):
                    # gemini-cli's side calls (next speaker, routing) want JSON text back
                    side = _Decision(GEMINI_SIDE_ANSWER, None, None)
                    self._json(200, server._gemini_answer(side, Usage(5, 2), model))
                    return
                if path.endswith(":streamGenerateContent"):
                    body["stream"] = True
                    seen, stream = server._gemini(body, model)
                elif path.endswith("/messages"):
                    seen, stream = server._messages(body)
                elif path.endswith("/responses"):
                    seen, stream = server._responses(body)
                else:
                    server.unknown.append(f"{self.command} {path}")
                    self._json(404, {"error": {"type": "not_found", "message": path}})
                    return
                if not body.get("stream"):
                    self._json(400, {"error": {"message": "only streaming is played"}})
                    return
                seen.body = raw.decode("utf-8", "replace")
                server._record(seen)
                if seen.answer.startswith("the mock refuses: "):
                    error = {"type": "invalid_request_error", "message": seen.answer}
                    self._json(400, {"type": "error", "error": error})
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                try:
                    for chunk in stream:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        return Handler
