// An MCP server on the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// package.json) at its default settings: `createMcpExpressApp()` (bound to 127.0.0.1, so the
// SDK's DNS-rebinding protection checks the Host header) and a stateless Streamable HTTP
// transport per request, as the SDK's examples do. Tools: echo, get_weather.
//
// Usage: node ts-sdk-server.mjs PORT [PATH]   (PATH default /mcp)
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { createMcpExpressApp } from "@modelcontextprotocol/sdk/server/express.js";
import { z } from "zod";

const port = Number(process.argv[2]);
const path = process.argv[3] ?? "/mcp";
if (!Number.isInteger(port) || port <= 0) {
  console.error("usage: node ts-sdk-server.mjs PORT [PATH]");
  process.exit(2);
}

function server() {
  const s = new McpServer({ name: "ts-sdk-server", version: "1.0.0" });
  s.registerTool(
    "echo",
    { description: "Echo the text back.", inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  s.registerTool(
    "get_weather",
    { description: "Canned weather report.", inputSchema: { city: z.string() } },
    async ({ city }) => ({ content: [{ type: "text", text: `sunny in ${city}` }] }),
  );
  return s;
}

const app = createMcpExpressApp();
app.post(path, async (req, res) => {
  const s = server();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close();
    s.close();
  });
  await s.connect(transport);
  await transport.handleRequest(req, res, req.body);
});
app.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}${path}`));
