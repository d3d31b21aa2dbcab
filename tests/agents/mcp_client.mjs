// An MCP client that is not nostr-buzz's code: the official TypeScript SDK
// (@modelcontextprotocol/sdk, pinned in package.json), for the tests of the bot's tool server.
//
//   MCP_URL=http://127.0.0.1:PORT/mcp MCP_TOKEN=<bearer token> \
//     node mcp_client.mjs '[["fetch_event", {"id": "…"}], …]'
//   MCP_STDIO='{"command": …, "args": […], "env": {…}}' node mcp_client.mjs '[…]'
//
// The token comes from the environment, never the command line.  It connects over streamable
// HTTP with the token as a bearer header (or starts the stdio server MCP_STDIO names, with
// that environment, and speaks to it over its stdio), lists the tools, calls each (name, arguments) in
// turn and prints one JSON line: {"tools": [names], "calls": [{"isError": …, "text": …}]}.
// A failure to connect or list prints {"error": message} and exits 1.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = process.env.MCP_URL;
const token = process.env.MCP_TOKEN;
const stdio = process.env.MCP_STDIO ? JSON.parse(process.env.MCP_STDIO) : null;
const calls = JSON.parse(process.argv[2] || "[]");
if (!stdio && (!url || !token)) {
  console.error("usage: MCP_URL=URL MCP_TOKEN=TOKEN node mcp_client.mjs '[[name, args], …]'");
  process.exit(2);
}

const transport = stdio
  ? new StdioClientTransport({ command: stdio.command, args: stdio.args, env: stdio.env })
  : new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
const client = new Client({ name: "buzz-tests-ts-client", version: "1.0.0" });
try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const results = [];
  for (const [name, args] of calls) {
    const result = await client.callTool({ name, arguments: args });
    const text = result.content.filter((c) => c.type === "text").map((c) => c.text).join("");
    results.push({ isError: result.isError === true, text });
  }
  console.log(JSON.stringify({ tools: tools.map((t) => t.name), calls: results }));
  await client.close();
} catch (error) {
  console.log(JSON.stringify({ error: String(error && error.message ? error.message : error) }));
  process.exit(1);
}
