"""The bot's MCP tool server: streamable HTTP on 127.0.0.1, one bearer token per agent session
(docs/bot.md, "The agent's Nostr tools").

Built on the official MCP SDK (``mcp``, the ``acp`` extra) and served by uvicorn inside the
bot's own event loop.  A session is offered the server in ``session/new`` with its own token
(:meth:`McpToolServer.grant`): 32 random bytes, the whole capability — the agent's process gets
no key, configuration or relay credential, and a token names one session's grant, so a request
is answered for that grant and nothing else.  A request without a known token gets 401 before
the SDK sees it; a revoked token is unknown.  Tokens never appear in diagnostics or errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar

import uvicorn
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["SERVER_NAME", "McpToolServer", "ToolCall"]

#: The name the agent knows the server by (its tools are ``mcp__buzz__…`` in Claude Code).
SERVER_NAME: Final = "buzz"
G = TypeVar("G")
#: ``call(grant, tool name, arguments) → (JSON text, is an error)``.
ToolCall = Callable[[G, str, Mapping[str, Any]], Awaitable[tuple[str, bool]]]
_Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class _Server(uvicorn.Server):
    """uvicorn in the bot's loop: the bot keeps its own signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class McpToolServer(Generic[G]):
    """The tools ``tools`` ((name, description, JSON Schema) each), answered by ``call`` for
    the grant a request's token names; :meth:`start` binds a free port of 127.0.0.1."""

    def __init__(
        self,
        tools: Sequence[tuple[str, str, Mapping[str, Any]]],
        call: ToolCall[G],
        *,
        version: str = "0",
    ) -> None:
        self._tools = [
            types.Tool(name=name, description=text, inputSchema=dict(schema))
            for name, text, schema in tools
        ]
        self._call = call
        self._grants: dict[str, G] = {}
        self._mcp: Server[Any, Any] = Server(SERVER_NAME, version=version)
        self._mcp.list_tools()(self._list)  # type: ignore[no-untyped-call]
        self._mcp.call_tool(validate_input=False)(self._answer)
        self._manager = StreamableHTTPSessionManager(self._mcp, stateless=True, json_response=True)
        self._task: asyncio.Task[None] | None = None
        self._uvicorn: _Server | None = None
        self._port: int | None = None

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the tool server is not started")
        return f"http://127.0.0.1:{self._port}/mcp"

    async def start(self) -> None:
        if self._task is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._asgi,
            log_level="warning",
            lifespan="off",
            access_log=False,
            loop="none",
            interface="asgi3",
            proxy_headers=False,
        )
        self._uvicorn = server = _Server(config)
        self._task = asyncio.create_task(self._serve(server, sock), name="buzz-mcp-server")
        while not server.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # its error

    async def _serve(self, server: _Server, sock: socket.socket) -> None:
        async with self._manager.run():
            await server.serve(sockets=[sock])

    async def close(self) -> None:
        self._grants.clear()
        if self._task is None or self._uvicorn is None:
            return
        self._uvicorn.should_exit = True
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._task, 5)
        self._task = None

    # -- grants -------------------------------------------------------------------------

    def grant(self, grant: G) -> dict[str, Any]:
        """A new token for ``grant``; the ACP ``McpServer`` entry (type ``http``) that carries
        it as a bearer header."""
        token = secrets.token_urlsafe(32)
        self._grants[token] = grant
        return {
            "type": "http",
            "name": SERVER_NAME,
            "url": self.url,
            "headers": [{"name": "Authorization", "value": f"Bearer {token}"}],
        }

    def revoke(self, grant: G) -> None:
        """Every token of ``grant`` stops working."""
        for token in [t for t, g in self._grants.items() if g is grant]:
            del self._grants[token]

    def _grant_of(self, authorization: str | None) -> G | None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        for known, grant in self._grants.items():
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                return grant
        return None

    # -- HTTP and MCP -------------------------------------------------------------------

    async def _asgi(self, scope: Mapping[str, Any], receive: Any, send: _Send) -> None:
        if scope.get("type") != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        grant = self._grant_of(headers.get("authorization"))
        if grant is None or scope.get("path", "").rstrip("/") != "/mcp":
            status = 401 if grant is None else 404
            body = b'{"error":"unknown or revoked token"}' if grant is None else b"{}"
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        state = dict(scope.get("state") or {})
        state["buzz_grant"] = grant
        await self._manager.handle_request({**scope, "state": state}, receive, send)

    async def _list(self) -> list[types.Tool]:
        return self._tools

    async def _answer(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        request = self._mcp.request_context.request
        state = getattr(request, "state", None)
        grant = getattr(state, "buzz_grant", None) if state is not None else None
        if grant is None:  # never: the ASGI layer refused it
            text, error = '{"error":"no_grant"}', True
        else:
            text, error = await self._call(grant, name, arguments or {})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], isError=error
        )
