//! pulse-mcp: the stdio MCP adapter over the gateway's `/api/agent/capabilities`.
//! It arrives with the MCP step; this crate holds its place in the workspace.
