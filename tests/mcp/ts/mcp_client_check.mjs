// Pulse MCP through the official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`, pinned in
// package.json and package-lock.json), the client most desktop and IDE agents are built on. The
// SDK validates every answer with its own schemas (a tool list with one schema it does not accept
// is refused whole), so each check below passes only when the SDK took Pulse's answer.
//
// Usage: node mcp_client_check.mjs stdio <pulse-mcp binary> <gateway url>
//        node mcp_client_check.mjs http - <gateway url>     (the gateway's own /mcp endpoint)
// Environment (set by tests/e2e/tests/mcp_ts_sdk.rs):
//   PULSE_API_TOKEN           the token the client acts with
//   PULSE_MCP_RESOURCE        a resource of the fleet (its id)
//   PULSE_MCP_EXPECTED_TOOLS  the manifest's pulse_mcp allowlist, as a JSON array
//
// Checks: initialize (the server's name and instructions), tools/list equal to the allowlist,
// every tool's input schema compiled by the SDK's own JSON Schema validator, a read-only
// tools/call (get_fleet_context, its arguments checked against its schema first),
// resources/list and resources/read, prompts/list and prompts/get. Prints one line per check and
// exits 1 at the first failure, naming it.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";

const CALL_MS = 60_000;
let step = "arguments";

const fail = (what, detail) => {
  console.log(`FAIL ${what}: ${detail}`);
  process.exit(1);
};
const check = (condition, what, detail = "") => {
  if (!condition) fail(what, typeof detail === "string" ? detail : JSON.stringify(detail));
  console.log(`ok   ${what}`);
};
const need = (name) => {
  const value = process.env[name];
  if (!value) fail("environment", `${name} is not set`);
  return value;
};
const text = (result) =>
  (result.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("");

const [mode, binary, baseUrl] = process.argv.slice(2);
const token = need("PULSE_API_TOKEN");
const resource = need("PULSE_MCP_RESOURCE");
const expectedTools = JSON.parse(need("PULSE_MCP_EXPECTED_TOOLS"));

let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({
    command: binary,
    args: ["--base-url", baseUrl],
    env: { PULSE_API_TOKEN: token },
    stderr: "inherit",
  });
} else if (mode === "http") {
  transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
} else {
  fail("arguments", `unknown mode ${mode} (stdio or http)`);
}

const client = new Client({ name: "pulse-mcp-ts-sdk-check", version: "1.0.0" });
const options = { timeout: CALL_MS };

try {
  step = "initialize";
  await client.connect(transport, options);
  const server = client.getServerVersion();
  check(server?.name === "pulse", "initialize names the server", server);
  const instructions = client.getInstructions() ?? "";
  check(instructions.includes("Pulse"), "initialize carries the surface contract's instructions",
    instructions);
  const capabilities = client.getServerCapabilities() ?? {};
  check(capabilities.tools && capabilities.resources && capabilities.prompts,
    "the server offers tools, resources and prompts", capabilities);

  step = "tools/list";
  const { tools } = await client.listTools(undefined, options);
  const names = tools.map((t) => t.name);
  check(JSON.stringify(names) === JSON.stringify(expectedTools),
    "tools/list (validated by the SDK) is the manifest's pulse_mcp allowlist",
    `${JSON.stringify(names)} != ${JSON.stringify(expectedTools)}`);
  // The validator the SDK checks tool schemas with: each input schema must compile in it.
  const validator = new AjvJsonSchemaValidator();
  const validators = new Map();
  for (const tool of tools) {
    try {
      validators.set(tool.name, validator.getValidator(tool.inputSchema));
    } catch (error) {
      fail(`the SDK's validator compiles ${tool.name}'s input schema`, error.message);
    }
  }
  console.log(`ok   the SDK's validator compiles all ${tools.length} input schemas`);

  step = "tools/call";
  const readOnly = tools.find((t) => t.name === "get_fleet_context");
  check(readOnly?.annotations?.readOnlyHint === true, "get_fleet_context is marked read-only",
    readOnly?.annotations);
  const args = {};
  const valid = validators.get("get_fleet_context")(args);
  check(valid.valid, "the call's arguments are valid by the tool's schema", valid.errorMessage);
  const fleet = await client.callTool({ name: "get_fleet_context", arguments: args }, undefined,
    options);
  check(!fleet.isError, "tools/call get_fleet_context answers", text(fleet).slice(0, 300));
  const body = JSON.parse(text(fleet));
  check((body.resources ?? []).some((r) => r.id === resource || r.resource_id === resource),
    "the fleet context lists the resource", JSON.stringify(body).slice(0, 300));
  check(fleet.structuredContent && typeof fleet.structuredContent === "object",
    "the answer carries structured content", fleet.structuredContent);

  step = "resources";
  const uri = `pulse://resource/${resource}`;
  const { resources } = await client.listResources(undefined, options);
  check(resources.some((r) => r.uri === uri), "resources/list offers the resource",
    resources.map((r) => r.uri));
  const read = await client.readResource({ uri }, options);
  const contents = read.contents?.[0];
  check(contents?.uri === uri && (contents?.text ?? "").includes(resource),
    "resources/read returns the resource context", (contents?.text ?? "").slice(0, 300));

  step = "prompts";
  const { prompts } = await client.listPrompts(undefined, options);
  check(prompts.some((p) => p.name === "pulse_operations_loop"),
    "prompts/list offers pulse_operations_loop", prompts.map((p) => p.name));
  const loop = await client.getPrompt({ name: "pulse_operations_loop", arguments: {} }, options);
  const loopText = loop.messages?.[0]?.content?.text ?? "";
  check(loopText.includes("plan_action") && loopText.includes("get_patrol_control_status"),
    "prompts/get pulse_operations_loop renders", loopText.slice(0, 300));
  const investigate = await client.getPrompt(
    { name: "pulse_investigate_resource", arguments: { resourceId: resource } }, options);
  const investigateText = investigate.messages?.[0]?.content?.text ?? "";
  check(investigateText.includes(resource),
    "prompts/get pulse_investigate_resource takes its argument", investigateText.slice(0, 300));
} catch (error) {
  // The SDK throws when an answer fails its schemas: say which step and why.
  fail(`${step} (over ${mode})`, error?.stack ?? String(error));
} finally {
  await client.close().catch(() => {});
}
console.log(`all MCP checks passed over ${mode}`);
