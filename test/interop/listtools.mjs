// Times the official TypeScript SDK's Client.listTools against an MCP
// server over stdio: the request, the response's parse and the SDK
// compiling every tool's outputSchema for later validation. Each round is
// a fresh process and a fresh client, as a client starting up sees it.
// Then, when calls are given, it makes them on one more client: the SDK
// checks each structuredContent against its tool's outputSchema and
// throws when it does not validate.
//
//   node listtools.mjs <rounds> '<calls json>' <command> [args…]
//
// Prints one JSON object: {"rounds", "tools", "median_ms", "times_ms",
// "results": [{name, isError, status}]}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [roundsArg, callsArg, command, ...args] = process.argv.slice(2);
const rounds = Number(roundsArg);
if (!Number.isInteger(rounds) || rounds < 1 || !command) {
  console.error("usage: listtools.mjs <rounds> '<calls json>' <command> [args…]");
  process.exit(2);
}
const calls = JSON.parse(callsArg);

async function connect() {
  const client = new Client({ name: "listtools-bench", version: "1.0.0" });
  await client.connect(new StdioClientTransport({ command, args, stderr: "inherit" }));
  return client;
}

const times = [];
let tools = 0;
for (let i = 0; i < rounds; i++) {
  const client = await connect();
  const start = performance.now();
  const listed = await client.listTools();
  times.push(performance.now() - start);
  tools = listed.tools.length;
  await client.close();
}
const sorted = [...times].sort((a, b) => a - b);
const mid = Math.floor(sorted.length / 2);
const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;

const results = [];
if (calls.length > 0) {
  const client = await connect();
  await client.listTools();
  for (const call of calls) {
    const res = await client.callTool({ name: call.name, arguments: call.arguments ?? {} });
    results.push({ name: call.name, isError: res.isError ?? false, status: res.structuredContent?.status ?? null });
  }
  await client.close();
}
const round = (ms) => Math.round(ms * 100) / 100;
console.log(JSON.stringify({ rounds, tools, median_ms: round(median), times_ms: times.map(round), results }));
