//! pulse-mcp: the stdio MCP adapter over the gateway's `/api/agent/capabilities`.
//! Planned: the binary builds and says so, and exits 2; nothing else is implemented yet.
