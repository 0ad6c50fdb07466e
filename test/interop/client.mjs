// An MCP client built on the official TypeScript SDK. It connects to
// mcp-patch over stdio (spawning the binary) or streamable HTTP, lists the
// tools, and makes the tool calls given as JSON on the command line, then
// prints one JSON summary on stdout.
//
//   node client.mjs stdio <binary> '<calls json>' [args for serve…]
//   node client.mjs http <url> <token> '<calls json>'
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, ...rest] = process.argv.slice(2);
let transport;
let calls;
if (mode === "stdio") {
  calls = JSON.parse(rest[0]);
  transport = new StdioClientTransport({ command: target, args: ["serve", ...rest.slice(1)], stderr: "inherit" });
} else if (mode === "http") {
  const token = rest[0];
  calls = JSON.parse(rest[1]);
  transport = new StreamableHTTPClientTransport(new URL(target), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
} else {
  console.error("usage: client.mjs stdio|http …");
  process.exit(2);
}

const client = new Client({ name: "interop-client", version: "1.0.0" });
await client.connect(transport);
const listed = await client.listTools();
const summary = {
  server: client.getServerVersion(),
  instructions: client.getInstructions() ?? "",
  tools: listed.tools.map((t) => ({ name: t.name, annotations: t.annotations ?? null })),
  results: [],
};
for (const call of calls) {
  const res = await client.callTool({ name: call.name, arguments: call.arguments ?? {} });
  summary.results.push({
    name: call.name,
    isError: res.isError ?? false,
    structured: res.structuredContent ?? null,
    text: res.content?.[0]?.text ?? "",
  });
}
await client.close();
console.log(JSON.stringify(summary));
