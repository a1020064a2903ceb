//! The API's own descriptions and health: the capabilities manifest (`GET
//! /api/agent/capabilities`) and its categories, the fleet health report (`GET /api/health`),
//! and the error envelope every error answers with.

use std::collections::BTreeMap;

use pulse_capabilities::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The error envelope every error answers with.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorEnvelope {
    /// The stable error code (see `docs/api/errors.md`).
    pub error: ErrorCode,
    /// What went wrong and what to do, for people.
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
pub struct ServiceHealth {
    pub ready: bool,
    pub instances: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, JsonSchema)]
pub struct HealthReport {
    pub status: String,
    pub services: BTreeMap<String, ServiceHealth>,
}

/// The group a capability is listed under.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    System,
    Context,
    Inventory,
    Patrol,
    Assistant,
    Findings,
    Actions,
    Settings,
    Tokens,
    Audit,
    /// The platform operator's API (not a tenant capability; not in [`Category::ALL`], which
    /// lists the manifest's categories).
    Platform,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::System,
        Category::Context,
        Category::Inventory,
        Category::Patrol,
        Category::Assistant,
        Category::Findings,
        Category::Actions,
        Category::Settings,
        Category::Tokens,
        Category::Audit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::System => "system",
            Category::Context => "context",
            Category::Inventory => "inventory",
            Category::Patrol => "patrol",
            Category::Assistant => "assistant",
            Category::Findings => "findings",
            Category::Actions => "actions",
            Category::Settings => "settings",
            Category::Tokens => "tokens",
            Category::Audit => "audit",
            Category::Platform => "platform",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Category::System => "System",
            Category::Context => "Agent context",
            Category::Inventory => "Inventory",
            Category::Patrol => "Patrol",
            Category::Assistant => "Pulse Assistant",
            Category::Findings => "Findings",
            Category::Actions => "Governed actions",
            Category::Settings => "Settings",
            Category::Tokens => "API tokens",
            Category::Audit => "Audit",
            Category::Platform => "Platform operator",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Category::System => "Service health and the API's own descriptions.",
            Category::Context => {
                "Read-only context for external agents: the fleet, one resource, what can be done to it, and Patrol's counts."
            }
            Category::Inventory => "Resources, their alerts and capacity forecasts.",
            Category::Patrol => "Patrol runs, status, preflight and the run event stream.",
            Category::Assistant => {
                "Chat with Pulse Assistant over the governed tools, and its sessions."
            }
            Category::Findings => "Patrol findings and the operator actions on them.",
            Category::Actions => {
                "Governed actions: plan, decide, execute, and their audit; remediation locks."
            }
            Category::Settings => "The tenant's AI settings.",
            Category::Tokens => "API tokens of the tenant.",
            Category::Audit => "The tenant's hash-chained audit log.",
            Category::Platform => {
                "Tenants of a hosted installation: create, suspend, resume, delete, users and \
                 quotas (platform-operator token only)."
            }
        }
    }
}

/// Whether a capability reads or changes state (upstream `actionMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionMode {
    Read,
    Mixed,
    Write,
}

impl ActionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionMode::Read => "read",
            ActionMode::Mixed => "mixed",
            ActionMode::Write => "write",
        }
    }
}

/// What authorizes a capability (upstream `approvalPolicy`): its scope alone, or a governed
/// action plan (plan, then a decision where policy requires one, then execution).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalPolicy {
    ScopeOnly,
    ActionPlan,
}

impl ApprovalPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::ScopeOnly => "scope_only",
            ApprovalPolicy::ActionPlan => "action_plan",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub version: u32,
    pub surface_contract: SurfaceContract,
    pub surface_tool_contracts: Vec<SurfaceToolContract>,
    pub mcp_adapter: McpAdapter,
    /// Every scope the Pulse MCP tools need, in the scope table's order.
    pub required_scopes: Vec<String>,
    pub categories: Vec<CategoryEntry>,
    pub workflow_prompts: Vec<WorkflowPrompt>,
    pub capabilities: Vec<Capability>,
}

/// How Pulse's surfaces relate, and what each may offer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SurfaceContract {
    pub summary: String,
    pub surfaces: Vec<Surface>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Surface {
    pub id: String,
    pub title: String,
    pub role: String,
    pub affordances: Affordances,
}

/// What a surface may offer its client.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Affordances {
    pub tools: bool,
    pub resources: bool,
    pub prompts: bool,
    pub capability_metadata: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SurfaceToolContract {
    pub surface_id: String,
    pub affordances: Affordances,
    /// The capability names the surface may offer (and execute) as tools; nothing else.
    pub tools: Vec<String>,
    /// Streaming capabilities, never offered as request/response tools.
    pub excluded_streaming: Vec<String>,
}

/// How to run the MCP adapter.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpAdapter {
    pub server_name: String,
    pub command: String,
    pub base_url_flag: String,
    pub base_url_default: String,
    pub token_env_flag: String,
    pub token_env_default: String,
    pub emit_notifications_flag: String,
    pub transport: String,
    /// Client configuration families: `mcpServers` (Claude-style) and `mcp` (OpenCode).
    pub client_config_families: Vec<String>,
    pub resource_uri_template: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CategoryEntry {
    pub id: String,
    pub title: String,
    pub description: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowPrompt {
    pub name: String,
    pub title: String,
    pub description: String,
    pub arguments: Vec<PromptArgument>,
    /// The capabilities the prompt's workflow calls.
    pub capabilities: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptArgument {
    pub name: String,
    pub description: String,
    pub required: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Capability {
    pub name: String,
    pub title: String,
    pub description: String,
    pub category: Category,
    pub method: String,
    pub path: String,
    /// The first required scope (`null` for a public route); `scopes` has all of them.
    pub scope: Option<String>,
    pub scopes: Vec<String>,
    pub action_mode: ActionMode,
    pub approval_policy: ApprovalPolicy,
    pub input_schema: Value,
    pub output_schema: Value,
    pub error_codes: Vec<String>,
    pub request_body_shape: Value,
    pub response_shape: Value,
}
