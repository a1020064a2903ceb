"""Pulse MCP through the official MCP Python SDK (pip package `mcp`).

Usage: python mcp_client_check.py stdio <pulse-mcp binary> <gateway url>
       python mcp_client_check.py http - <gateway url>     (the gateway's own /mcp endpoint)
The API token is read from PULSE_API_TOKEN; a second token lacking `actions:plan` from
PULSE_READONLY_TOKEN; the resource to plan on from PULSE_MCP_RESOURCE.

Checks: initialize (instructions from the manifest), tools/list against the manifest's allowlist,
get_fleet_context, list_findings, plan_action on a real resource (an approval card: action id,
plan hash), a capability outside the allowlist refused, a token lacking a scope answered with the
documented error, prompts/get pulse_operations_loop rendered, resources/list and resources/read.
Prints one line per check and exits non-zero on the first failure.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


def check(condition, what, detail=""):
    if not condition:
        print(f"FAIL {what}: {detail}", flush=True)
        sys.exit(1)
    print(f"ok   {what}", flush=True)


def tool_json(result):
    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
    return json.loads(text)


async def exercise(session, expected_tools, resource, readonly):
    init = await session.initialize()
    check("governed" in (init.instructions or "").lower() or "Pulse" in (init.instructions or ""),
          "initialize carries the surface contract's instructions", init.instructions)

    tools = await session.list_tools()
    names = [t.name for t in tools.tools]
    check(names == expected_tools, "tools/list is the manifest's pulse_mcp allowlist",
          f"{names} != {expected_tools}")

    fleet = await session.call_tool("get_fleet_context", {})
    check(not fleet.is_error, "get_fleet_context answers", fleet.content)
    body = tool_json(fleet)
    check(any(r.get("id") == resource or r.get("resource_id") == resource
              for r in body.get("resources", [])),
          "the fleet context lists the resource", json.dumps(body)[:300])

    findings = await session.call_tool("list_findings", {"include_resolved": "1"})
    check(not findings.is_error and "findings" in tool_json(findings), "list_findings answers",
          findings.content)

    plan = await session.call_tool("plan_action", {
        "resource_id": resource,
        "capability": "service.restart",
        "params": {"target": resource.rsplit(":", 1)[-1]},
        "reason": "planned through Pulse MCP",
        "severity": "warning",
    })
    planned = tool_json(plan)
    check(not plan.is_error and planned.get("plan_hash") and planned.get("action_id"),
          "plan_action returns an approval card (action id, plan hash)", planned)

    outside = await session.call_tool("create_token", {"name": "x", "scopes": ["admin"]})
    refused = tool_json(outside)
    check(outside.is_error and refused.get("error") == "tool_not_offered",
          "a capability outside the allowlist is refused by name", refused)

    prompt = await session.get_prompt("pulse_operations_loop", {})
    text = prompt.messages[0].content.text
    check("plan_action" in text and "get_patrol_control_status" in text,
          "prompts/get pulse_operations_loop renders", text)

    resources = await session.list_resources()
    uris = [str(r.uri) for r in resources.resources]
    check(f"pulse://resource/{resource}" in uris, "resources/list offers the resource", uris)
    read = await session.read_resource(f"pulse://resource/{resource}")
    check(resource in read.contents[0].text, "resources/read returns the resource context",
          read.contents[0].text[:200])

    if readonly is not None:
        denied = await readonly.call_tool("plan_action", {
            "resource_id": resource, "capability": "service.restart",
            "params": {"target": "x"}, "reason": "no scope", "severity": "warning",
        })
        body = tool_json(denied)
        check(denied.is_error and body.get("error") == "missing_scope",
              "a token lacking the scope gets missing_scope", body)


async def main():
    mode, binary, base_url = sys.argv[1], sys.argv[2], sys.argv[3]
    expected = json.loads(os.environ["PULSE_MCP_EXPECTED_TOOLS"])
    resource = os.environ["PULSE_MCP_RESOURCE"]
    if mode == "http":
        def client(token_env):
            return create_mcp_http_client(
                headers={"Authorization": f"Bearer {os.environ[token_env]}"})

        async with client("PULSE_API_TOKEN") as http, client("PULSE_READONLY_TOKEN") as http2:
            async with streamable_http_client(f"{base_url}/mcp", http_client=http) as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    async with streamable_http_client(f"{base_url}/mcp", http_client=http2) as s2:
                        async with ClientSession(s2[0], s2[1]) as readonly:
                            await readonly.initialize()
                            await exercise(session, expected, resource, readonly)
        print("all MCP checks passed", flush=True)
        return
    if mode != "stdio":
        raise SystemExit(f"unknown mode {mode}")

    def params(token_env):
        env = dict(os.environ)
        env["PULSE_API_TOKEN"] = os.environ[token_env]
        return StdioServerParameters(command=binary, args=["--base-url", base_url], env=env)

    async with stdio_client(params("PULSE_API_TOKEN")) as (read, write):
        async with ClientSession(read, write) as session:
            async with stdio_client(params("PULSE_READONLY_TOKEN")) as (r2, w2):
                async with ClientSession(r2, w2) as readonly:
                    await readonly.initialize()
                    await exercise(session, expected, resource, readonly)
    print("all MCP checks passed", flush=True)


asyncio.run(main())
