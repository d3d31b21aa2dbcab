"""The bot's tool server over stdio, for an agent that takes no HTTP MCP server: a stdio MCP
server that relays every request to the bot's own server (docs/bot.md, "The agent's Nostr
tools").

The bot offers it as the session's MCP server ``buzz`` with the command ``python -P
…/nostr_buzz/io/mcp_bridge.py`` (by path: ``-P`` keeps this file's directory off the import path)
and two environment variables, ``BUZZ_MCP_URL`` and ``BUZZ_MCP_TOKEN``: the session's
capability, never on a command line.  The agent starts it as its own user; it needs nothing of
the bot's — no key, no configuration, no relay — and can do nothing the token does not allow.
It imports the MCP SDK and the standard library only.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

__all__ = ["TOKEN_VARIABLE", "URL_VARIABLE", "main"]

URL_VARIABLE = "BUZZ_MCP_URL"
TOKEN_VARIABLE = "BUZZ_MCP_TOKEN"


async def relay(url: str, token: str) -> None:
    """Serve stdio until it closes, each request answered by the bot's server at ``url``."""
    from mcp import ClientSession, types
    from mcp.client.streamable_http import streamablehttp_client
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        streamablehttp_client(url, headers=headers) as (read, write, _),
        ClientSession(read, write) as upstream,
    ):
        await upstream.initialize()
        server: Server[Any, Any] = Server("buzz")

        async def tools() -> list[types.Tool]:
            return (await upstream.list_tools()).tools

        async def call(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
            return await upstream.call_tool(name, arguments)

        server.list_tools()(tools)  # type: ignore[no-untyped-call]
        server.call_tool(validate_input=False)(call)
        async with stdio_server() as (stdin, stdout):
            await server.run(stdin, stdout, server.create_initialization_options())


def main() -> int:
    url, token = os.environ.get(URL_VARIABLE), os.environ.get(TOKEN_VARIABLE)
    if not url or not token:
        print(f"mcp_bridge: {URL_VARIABLE} and {TOKEN_VARIABLE} must be set", file=sys.stderr)
        return 2
    try:
        asyncio.run(relay(url, token))
    except Exception as exc:  # the agent's log says why, never the token
        print(f"mcp_bridge: {type(exc).__name__}: the bot's tool server refused", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
