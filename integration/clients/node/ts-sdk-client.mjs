// A small MCP client on the official TypeScript SDK (@modelcontextprotocol/sdk, pinned in
// package.json), for integration/tests/test_clients.py: it connects over Streamable HTTP, runs the
// operations given on the command line and prints, one JSON object per line, what the SDK
// reported for each: its result, or its error as the SDK gives it to a program (class, message,
// code, data).
//
// Usage: node ts-sdk-client.mjs URL [--token TOKEN | --oauth] OP...
// where OP is `list` (tools/list) or `call:NAME:JSON-ARGUMENTS` (tools/call). With --oauth the
// SDK's OAuth support authorizes: the authorization server must approve at once (it redirects
// back with a code, no login page); the program follows that redirect as a browser would and
// hands the code to the SDK (`finishAuth`), then repeats what the SDK refused.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const args = process.argv.slice(2);
let url;
let token;
let oauth;
const ops = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--token") token = args[++i];
  else if (args[i] === "--oauth") oauth = new MemoryOAuth();
  else if (url === undefined) url = args[i];
  else ops.push(args[i]);
}
if (url === undefined) {
  console.error("usage: node ts-sdk-client.mjs URL [--token TOKEN | --oauth] OP...");
  process.exit(2);
}

/** The SDK's OAuthClientProvider, in memory; `code` is the one the last authorization gave. */
function MemoryOAuth() {
  const state = {};
  return {
    code: undefined,
    redirectUrl: "http://127.0.0.1:9/callback",
    clientMetadata: {
      client_name: "mcp-access ts e2e", redirect_uris: ["http://127.0.0.1:9/callback"],
      grant_types: ["authorization_code"], response_types: ["code"], token_endpoint_auth_method: "none",
    },
    clientInformation: () => state.client,
    saveClientInformation(c) { state.client = c; },
    tokens: () => state.tokens,
    saveTokens(t) { state.tokens = t; },
    saveCodeVerifier(v) { state.verifier = v; },
    codeVerifier: () => state.verifier,
    async redirectToAuthorization(authorizationUrl) {
      const answer = await fetch(authorizationUrl, { redirect: "manual" });
      const back = new URL(answer.headers.get("location") ?? "http://invalid/");
      this.code = back.searchParams.get("code") ?? undefined;
    },
  };
}

/** `fn()`; once more after an authorization the SDK asked for (UnauthorizedError). */
async function authorized(fn, onAuthorized) {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof UnauthorizedError) || oauth?.code === undefined) throw e;
    const code = oauth.code;
    oauth.code = undefined;
    await transport.finishAuth(code);
    await onAuthorized?.();
    return await fn();
  }
}

function report(error) {
  const out = { class: error?.constructor?.name ?? typeof error, message: String(error?.message ?? error) };
  if (error?.code !== undefined) out.code = error.code;
  if (error?.data !== undefined) out.data = error.data;
  return out;
}

const headers = token === undefined ? {} : { Authorization: `Bearer ${token}` };
const newTransport = () => new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, authProvider: oauth });
let transport = newTransport();
const client = new Client({ name: "mcp-access-ts-sdk-test", version: "0.0.0" });
try {
  // A transport that met the 401 has started: the SDK's own examples connect a new one.
  await authorized(() => client.connect(transport), () => { transport = newTransport(); });
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
      const r = await authorized(() => client.listTools());
      line = { op, ok: true, tools: r.tools.map((t) => t.name) };
    } else if (op.startsWith("call:")) {
      const rest = op.slice(5);
      const colon = rest.indexOf(":");
      const name = colon < 0 ? rest : rest.slice(0, colon);
      const argsJson = colon < 0 ? "{}" : rest.slice(colon + 1);
      const r = await authorized(() => client.callTool({ name, arguments: JSON.parse(argsJson) }));
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
