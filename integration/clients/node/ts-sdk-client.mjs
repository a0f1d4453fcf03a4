// A small MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// package.json), for integration/tests/test_clients.py: it connects over Streamable HTTP, runs the
// operations given on the command line and prints, one JSON object per line, what the SDK
// reported for each: its result, or its error as the SDK gives it to a program (class, message,
// code, data).
//
// Usage: node ts-sdk-client.mjs URL [--token TOKEN] OP...
// where OP is `list` (tools/list) or `call:NAME:JSON-ARGUMENTS` (tools/call).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const args = process.argv.slice(2);
let url;
let token;
const ops = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--token") token = args[++i];
  else if (url === undefined) url = args[i];
  else ops.push(args[i]);
}
if (url === undefined) {
  console.error("usage: node ts-sdk-client.mjs URL [--token TOKEN] OP...");
  process.exit(2);
}

function report(error) {
  const out = { class: error?.constructor?.name ?? typeof error, message: String(error?.message ?? error) };
  if (error?.code !== undefined) out.code = error.code;
  if (error?.data !== undefined) out.data = error.data;
  return out;
}

const headers = token === undefined ? {} : { Authorization: `Bearer ${token}` };
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const client = new Client({ name: "mcp-access-ts-sdk-test", version: "0.0.0" });
try {
  await client.connect(transport);
  console.log(JSON.stringify({
    op: "connect", ok: true, protocol: transport.protocolVersion ?? null,
    server: client.getServerVersion()?.name ?? null,
  }));
} catch (e) {
  console.log(JSON.stringify({ op: "connect", ok: false, error: report(e) }));
  process.exit(0);
}
for (const op of ops) {
  let line;
  try {
    if (op === "list") {
      const r = await client.listTools();
      line = { op, ok: true, tools: r.tools.map((t) => t.name) };
    } else if (op.startsWith("call:")) {
      const rest = op.slice(5);
      const colon = rest.indexOf(":");
      const name = colon < 0 ? rest : rest.slice(0, colon);
      const argsJson = colon < 0 ? "{}" : rest.slice(colon + 1);
      const r = await client.callTool({ name, arguments: JSON.parse(argsJson) });
      const text = (r.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("");
      line = { op, ok: true, text, is_error: r.isError ?? false };
    } else {
      console.error(`unknown operation ${op}: list or call:NAME:JSON`);
      process.exit(2);
    }
  } catch (e) {
    line = { op, ok: false, error: report(e) };
  }
  console.log(JSON.stringify(line));
}
await client.close();
