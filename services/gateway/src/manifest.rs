//! `GET /api/agent/capabilities` (public): the agent capabilities manifest, projected from the
//! route table ([`crate::routes::API_ROUTES`], handed to [`build`]) like the OpenAPI document.
//!
//! `{version, surfaceContract, surfaceToolContracts, mcpAdapter, requiredScopes, categories,
//! workflowPrompts, capabilities[]}`:
//! - `capabilities`: every registry entry, `{name, title, description, category, method, path,
//!   scope, scopes, actionMode, approvalPolicy, inputSchema, outputSchema, errorCodes,
//!   requestBodyShape, responseShape}`. `inputSchema` is one self-contained object schema of the
//!   arguments (path parameters, query parameters and body fields side by side, as a tool call
//!   sends them); `outputSchema` the success answer's schema (`null` when there is no JSON body).
//!   Both use only object subschemas (`{}` for any value; see
//!   [`pulse_capabilities::object_schemas`]).
//! - `surfaceToolContracts`: per surface, the allowlist of capabilities it may offer as
//!   request/response tools. Adding a capability to the registry does not publish it to MCP;
//!   adding its name to [`PULSE_MCP_TOOLS`] does.
//! - `workflowPrompts`: the workflow prompt catalogue; a prompt is listed only when every
//!   capability it needs is in the registry and in the MCP allowlist.
//! - `requiredScopes`: every scope the MCP tools need, for one token covering the surface.
//!
//! Built once per process, at start; the output is stable (registry order, scope table order).

use std::collections::BTreeSet;

use pulse_api::system::{
    Affordances, Capability, Category, CategoryEntry, Manifest, McpAdapter, PromptArgument,
    Surface, SurfaceContract, SurfaceToolContract, WorkflowPrompt,
};
use pulse_capabilities::object_schemas::to_object_subschemas;
use pulse_domain::Scope;
use schemars::generate::Contract;
use serde_json::{Map, Value, json};

use crate::openapi::resolve;

use crate::route::{Answer, RouteSpec};

/// The manifest format version; bumped on an incompatible change of its shape.
pub const MANIFEST_VERSION: u32 = 1;

/// The surface id of the MCP adapter.
pub const SURFACE_PULSE_MCP: &str = "pulse_mcp";

/// The request/response capabilities the MCP adapter may offer as tools, in offer order.
pub const PULSE_MCP_TOOLS: &[&str] = &[
    "get_patrol_control_status",
    "get_fleet_context",
    "get_resource_context",
    "list_resource_capabilities",
    "get_operator_state",
    "set_operator_state",
    "clear_operator_state",
    "list_findings",
    "acknowledge_finding",
    "snooze_finding",
    "dismiss_finding",
    "resolve_finding",
    "plan_action",
    "decide_action",
    "execute_action",
];

struct PromptSpec {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    arguments: &'static [(&'static str, &'static str, bool)],
    capabilities: &'static [&'static str],
}

const PROMPTS: &[PromptSpec] = &[
    PromptSpec {
        name: "pulse_triage_fleet",
        title: "Triage the fleet",
        description: "Read the fleet context and Patrol's open findings, then rank what needs attention first and why.",
        arguments: &[],
        capabilities: &[
            "get_fleet_context",
            "list_findings",
            "get_patrol_control_status",
        ],
    },
    PromptSpec {
        name: "pulse_investigate_resource",
        title: "Investigate a resource",
        description: "Read one resource's context (metrics, findings, recent actions) and explain what is wrong and what could be done, with the actions it advertises.",
        arguments: &[(
            "resourceId",
            "the resource to investigate (canonical id, source id, name or alias)",
            true,
        )],
        capabilities: &["get_resource_context", "list_resource_capabilities"],
    },
    PromptSpec {
        name: "pulse_review_finding",
        title: "Review a finding",
        description: "Review one Patrol finding against its resource's current context and recommend acknowledging, snoozing, dismissing or resolving it.",
        arguments: &[("finding_id", "the finding to review", true)],
        capabilities: &[
            "list_findings",
            "get_resource_context",
            "acknowledge_finding",
            "snooze_finding",
            "dismiss_finding",
            "resolve_finding",
        ],
    },
    PromptSpec {
        name: "pulse_operations_loop",
        title: "Patrol operations loop",
        description: "Orient with the Patrol control status, pick an issue from the findings, explain it from the resource context, plan a governed action, have it approved or rejected when policy requires, execute only when allowed, verify by re-reading status, context and findings, then resolve the finding.",
        arguments: &[],
        capabilities: &[
            "get_patrol_control_status",
            "get_fleet_context",
            "get_resource_context",
            "list_resource_capabilities",
            "list_findings",
            "plan_action",
            "decide_action",
            "execute_action",
            "resolve_finding",
        ],
    },
];

/// A generator of self-contained schemas (definitions under `$defs`).
fn generator(contract: Contract) -> schemars::SchemaGenerator {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.contract = contract;
    settings.meta_schema = None;
    settings.into_generator()
}

fn with_defs(mut schema: Value, definitions: Map<String, Value>) -> Value {
    if !definitions.is_empty()
        && let Some(object) = schema.as_object_mut()
    {
        object.insert("$defs".to_owned(), Value::Object(definitions));
    }
    schema
}

fn names(values: &Value) -> Vec<String> {
    values
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// The arguments of a route as one object schema, and its request body's shape.
fn input(spec: &RouteSpec) -> (Value, Value) {
    let mut generator = generator(Contract::Deserialize);
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    for param in spec.path_params() {
        properties.insert(
            param.to_owned(),
            json!({"type": "string", "description": format!("path parameter {{{param}}}")}),
        );
        required.push(json!(param));
    }
    let mut merge = |schema: &Value, definitions: &Map<String, Value>| -> bool {
        let resolved = resolve(schema, definitions);
        let Some(props) = resolved.get("properties").and_then(Value::as_object) else {
            return false;
        };
        for (name, property) in props {
            properties.insert(name.clone(), property.clone());
        }
        if let Some(req) = resolved.get("required").and_then(Value::as_array) {
            required.extend(req.iter().cloned());
        }
        true
    };
    if let Some(query) = spec.query {
        let schema = query(&mut generator).to_value();
        merge(&schema, generator.definitions());
    }
    let mut body_shape = Value::Null;
    if let Some(body) = spec.body.map(|b| b.schema) {
        let schema = body(&mut generator).to_value();
        let resolved = resolve(&schema, generator.definitions()).clone();
        body_shape = json!({
            "contentType": "application/json",
            "fields": names(&resolved["properties"]),
            "required": resolved.get("required").cloned().unwrap_or_else(|| json!([])),
        });
        if !merge(&schema, generator.definitions()) {
            // A body without fixed fields travels whole, as `body`.
            properties.insert("body".to_owned(), schema);
            required.push(json!("body"));
        }
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    (
        with_defs(schema, generator.take_definitions(true)),
        body_shape,
    )
}

/// The success answer's schema and shape.
fn output(spec: &RouteSpec) -> (Value, Value) {
    match spec.response {
        Answer::Json { status, schema } | Answer::JsonEither { status, schema, .. } => {
            let mut generator = generator(Contract::Serialize);
            let root = schema(&mut generator).to_value();
            let resolved = resolve(&root, generator.definitions()).clone();
            let kind = match resolved.get("type").and_then(Value::as_str) {
                Some("array") => "array",
                Some("object") => "object",
                _ if resolved.get("properties").is_some() => "object",
                _ => "any",
            };
            let shape = json!({
                "status": status,
                "contentType": "application/json",
                "kind": kind,
                "fields": names(&resolved["properties"]),
            });
            (with_defs(resolved, generator.take_definitions(true)), shape)
        }
        Answer::Empty { status } => (Value::Null, json!({"status": status, "kind": "empty"})),
        Answer::EventStream { .. } => (
            Value::Null,
            json!({"status": 200, "contentType": "text/event-stream", "kind": "event_stream"}),
        ),
        Answer::Csv => (
            Value::Null,
            json!({"status": 200, "contentType": "text/csv", "kind": "document"}),
        ),
    }
}

fn capability(spec: &RouteSpec) -> Capability {
    let (mut input_schema, request_body_shape) = input(spec);
    let (mut output_schema, response_shape) = output(spec);
    // schemars derives `true` for an any-value field (`serde_json::Value`); clients built on the
    // MCP TypeScript SDK refuse a tool list holding one.
    to_object_subschemas(&mut input_schema);
    to_object_subschemas(&mut output_schema);
    let scopes: Vec<String> = spec.scopes.iter().map(|s| s.as_str().to_owned()).collect();
    Capability {
        name: spec.name.to_owned(),
        title: spec.title.to_owned(),
        description: spec.description.to_owned(),
        category: spec.category,
        method: spec.method.to_owned(),
        path: spec.path.to_owned(),
        scope: scopes.first().cloned(),
        scopes,
        action_mode: spec.action_mode,
        approval_policy: spec.approval_policy,
        input_schema,
        output_schema,
        error_codes: spec
            .error_codes()
            .iter()
            .map(|c| c.code().to_owned())
            .collect(),
        request_body_shape,
        response_shape,
    }
}

fn spec_named<'a>(routes: &'a [RouteSpec], name: &str) -> Option<&'a RouteSpec> {
    routes.iter().find(|r| r.name == name)
}

const MCP_AFFORDANCES: Affordances = Affordances {
    tools: true,
    resources: true,
    prompts: true,
    capability_metadata: true,
};

fn surface_contract() -> SurfaceContract {
    let surface = |id: &str, title: &str, role: &str, affordances: Affordances| Surface {
        id: id.to_owned(),
        title: title.to_owned(),
        role: role.to_owned(),
        affordances,
    };
    SurfaceContract {
        summary:
            "Pulse Core owns inventory, findings, governed actions and audit; Patrol finds and \
                  investigates issues with the configured model; the Assistant and external agents \
                  (through Pulse MCP) read the same context and act only through governed plans."
                .to_owned(),
        surfaces: vec![
            surface(
                "pulse_core",
                "Pulse Core",
                "the HTTP API: the one owner of every capability listed here",
                Affordances {
                    tools: false,
                    resources: false,
                    prompts: false,
                    capability_metadata: true,
                },
            ),
            surface(
                "pulse_patrol",
                "Patrol",
                "finds and investigates issues; proposes actions, never runs them itself",
                Affordances {
                    tools: false,
                    resources: false,
                    prompts: false,
                    capability_metadata: false,
                },
            ),
            surface(
                SURFACE_PULSE_MCP,
                "Pulse MCP",
                "a thin adapter projecting the allowlisted capabilities to MCP tools, resources and prompts",
                MCP_AFFORDANCES,
            ),
        ],
    }
}

/// Builds the manifest from the tenant API's routes.
pub fn build(routes: &[RouteSpec]) -> Manifest {
    let capabilities: Vec<Capability> = routes.iter().map(capability).collect();
    let tools: Vec<&RouteSpec> = PULSE_MCP_TOOLS
        .iter()
        .filter_map(|name| spec_named(routes, name))
        .filter(|spec| !matches!(spec.response, Answer::EventStream { .. }))
        .collect();
    let excluded_streaming: Vec<String> = routes
        .iter()
        .filter(|r| matches!(r.response, Answer::EventStream { .. }))
        .map(|r| r.name.to_owned())
        .collect();
    let required: BTreeSet<Scope> = tools
        .iter()
        .flat_map(|spec| spec.scopes.iter().copied())
        .collect();
    let offered: BTreeSet<&str> = tools.iter().map(|spec| spec.name).collect();
    let workflow_prompts = PROMPTS
        .iter()
        .filter(|p| p.capabilities.iter().all(|c| offered.contains(c)))
        .map(|p| WorkflowPrompt {
            name: p.name.to_owned(),
            title: p.title.to_owned(),
            description: p.description.to_owned(),
            arguments: p
                .arguments
                .iter()
                .map(|(name, description, required)| PromptArgument {
                    name: (*name).to_owned(),
                    description: (*description).to_owned(),
                    required: *required,
                })
                .collect(),
            capabilities: p.capabilities.iter().map(|c| (*c).to_owned()).collect(),
        })
        .collect();
    Manifest {
        version: MANIFEST_VERSION,
        surface_contract: surface_contract(),
        surface_tool_contracts: vec![SurfaceToolContract {
            surface_id: SURFACE_PULSE_MCP.to_owned(),
            affordances: MCP_AFFORDANCES,
            tools: tools.iter().map(|spec| spec.name.to_owned()).collect(),
            excluded_streaming,
        }],
        mcp_adapter: McpAdapter {
            server_name: "pulse".to_owned(),
            command: "pulse-mcp".to_owned(),
            base_url_flag: "--base-url".to_owned(),
            base_url_default: "http://localhost:7655".to_owned(),
            token_env_flag: "--token-env".to_owned(),
            token_env_default: "PULSE_API_TOKEN".to_owned(),
            emit_notifications_flag: "--emit-notifications".to_owned(),
            transport: "stdio".to_owned(),
            client_config_families: vec!["mcpServers".to_owned(), "mcp".to_owned()],
            resource_uri_template: "pulse://resource/{id}".to_owned(),
        },
        required_scopes: required.iter().map(|s| s.as_str().to_owned()).collect(),
        categories: Category::ALL
            .iter()
            .map(|c| CategoryEntry {
                id: c.as_str().to_owned(),
                title: c.title().to_owned(),
                description: c.description().to_owned(),
            })
            .collect(),
        workflow_prompts,
        capabilities,
    }
}

/// `docs/mcp.md`: how to connect an MCP client, generated from the manifest (a test keeps the
/// published file in step).
pub fn mcp_setup_markdown(manifest: &Manifest) -> String {
    let adapter = &manifest.mcp_adapter;
    let tools = manifest
        .surface_tool_contracts
        .iter()
        .find(|c| c.surface_id == SURFACE_PULSE_MCP)
        .map(|c| c.tools.clone())
        .unwrap_or_default();
    let config = |family: &str| -> String {
        let server = match family {
            "mcp" => json!({
                "type": "local",
                "command": [adapter.command, adapter.base_url_flag, adapter.base_url_default],
                "environment": {adapter.token_env_default.clone(): "<your Pulse API token>"},
            }),
            _ => json!({
                "command": adapter.command,
                "args": [adapter.base_url_flag, adapter.base_url_default],
                "env": {adapter.token_env_default.clone(): "<your Pulse API token>"},
            }),
        };
        let mut root = Map::new();
        let mut servers = Map::new();
        servers.insert(adapter.server_name.clone(), server);
        root.insert(family.to_owned(), Value::Object(servers));
        serde_json::to_string_pretty(&Value::Object(root)).unwrap_or_default()
    };
    let mut out = String::from(
        "# Pulse MCP\n\nThis file is generated from the capability manifest \
         (`GET /api/agent/capabilities`, `services/gateway/src/manifest.rs`); a test keeps it in \
         step.\n\nExternal agents reach Pulse's governed capabilities over the Model Context \
         Protocol with exactly the authority of the API token they are given (`pulsectl token \
         create`; the scopes the tools need are listed below). Two ways in, one server:\n\n",
    );
    out.push_str(&format!(
        "- `{}` over stdio: `{} {} {}` with the token in `${}` (`{} <NAME>` changes the \
         variable); `{}` forwards the gateway's agent events as `notifications/<kind>`.\n",
        adapter.command,
        adapter.command,
        adapter.base_url_flag,
        adapter.base_url_default,
        adapter.token_env_default,
        adapter.token_env_flag,
        adapter.emit_notifications_flag,
    ));
    out.push_str(
        "- The gateway's own endpoint, streamable HTTP: `POST <gateway>/mcp` with \
         `Authorization: Bearer <token>`; nothing to install.\n\n",
    );
    for family in &adapter.client_config_families {
        let title = if family == "mcp" {
            "OpenCode (`opencode.json`)"
        } else {
            "Claude Desktop, Cursor and other `mcpServers` clients"
        };
        out.push_str(&format!(
            "## {title}\n\n```json\n{}\n```\n\n",
            config(family)
        ));
    }
    out.push_str("## Tools\n\n| tool | method and path | scopes |\n|---|---|---|\n");
    for name in &tools {
        if let Some(c) = manifest.capabilities.iter().find(|c| &c.name == name) {
            out.push_str(&format!(
                "| `{}` | `{} {}` | {} |\n",
                c.name,
                c.method,
                c.path,
                c.scopes
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    out.push_str(&format!(
        "\nA token covering every tool needs: {}. Any other capability is refused by name \
         (`tool_not_offered`); an API error comes back as `{{\"error\", \"message\"}}` with \
         `isError: true`.\n\n## Resources and prompts\n\nResources: `{}` (the fleet's \
         resources; reading one gives its context). Prompts: {}.\n",
        manifest
            .required_scopes
            .iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(", "),
        adapter.resource_uri_template,
        manifest
            .workflow_prompts
            .iter()
            .map(|p| format!("`{}`", p.name))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::API_ROUTES;

    fn build() -> Manifest {
        super::build(&API_ROUTES)
    }

    #[test]
    fn every_route_is_a_capability_and_every_tool_exists() {
        let manifest = build();
        assert_eq!(manifest.capabilities.len(), API_ROUTES.len());
        for name in PULSE_MCP_TOOLS {
            assert!(
                spec_named(&API_ROUTES, name).is_some(),
                "allowlisted {name} is no route"
            );
        }
        let contract = &manifest.surface_tool_contracts[0];
        assert_eq!(contract.tools.len(), PULSE_MCP_TOOLS.len());
        let prompts: Vec<&str> = manifest
            .workflow_prompts
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            prompts,
            [
                "pulse_triage_fleet",
                "pulse_investigate_resource",
                "pulse_review_finding",
                "pulse_operations_loop"
            ]
        );
        assert!(manifest.required_scopes.contains(&"ai:execute".to_owned()));
        assert!(
            manifest
                .required_scopes
                .contains(&"monitoring:read".to_owned())
        );
    }

    #[test]
    fn input_schemas_carry_path_query_and_body_fields() {
        let manifest = build();
        let by_name = |name: &str| {
            manifest
                .capabilities
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        let decide = by_name("decide_action");
        let props = &decide.input_schema["properties"];
        assert!(
            props["id"].is_object() && props["outcome"].is_object() && props["reason"].is_object()
        );
        let required = decide.input_schema["required"]
            .as_array()
            .expect("required");
        assert!(required.contains(&json!("id")) && required.contains(&json!("outcome")));
        let dismiss = by_name("dismiss_finding");
        let required = dismiss.input_schema["required"]
            .as_array()
            .expect("required");
        assert!(
            !required.contains(&json!("note")),
            "a defaulted field is optional"
        );
        let findings = by_name("list_findings");
        assert!(findings.input_schema["properties"]["include_resolved"].is_object());
        assert_eq!(findings.output_schema["type"], "object");
        assert!(findings.error_codes.contains(&"missing_scope".to_owned()));
        let revoke = by_name("revoke_token");
        assert!(revoke.output_schema.is_null());
    }

    fn assert_object_subschemas(what: &str, schema: &Value) {
        let booleans = pulse_capabilities::object_schemas::boolean_subschemas(schema);
        assert!(
            booleans.is_empty(),
            "{what}: boolean subschemas at {booleans:?}; use {{}} for any value"
        );
    }

    /// Every schema an MCP client reads, by the surface it reads it from: tools (as `tools/list`
    /// answers them on both transports), resources (the capabilities `resources/list` and
    /// `resources/read` answer from) and prompts (the capabilities each prompt drives), and every
    /// other capability of the manifest.
    #[tokio::test]
    async fn every_tool_resource_and_prompt_schema_uses_only_object_subschemas() {
        pulse_runtime::install_crypto_provider();
        let manifest = build();
        let by_name = |name: &str| {
            manifest
                .capabilities
                .iter()
                .find(|c| c.name == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        let server = pulse_mcp::McpServer::with_manifest(
            "http://127.0.0.1:9".to_owned(),
            None,
            reqwest::Client::new(),
            std::sync::Arc::new(serde_json::to_value(&manifest).expect("serializable")),
        );
        let listed = server
            .handle(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .await
            .expect("an answer");
        let tools = listed["result"]["tools"].as_array().expect("tools");
        assert_eq!(tools.len(), PULSE_MCP_TOOLS.len());
        for tool in tools {
            let name = tool["name"].as_str().expect("name");
            assert_eq!(tool["inputSchema"]["type"], "object", "{name}");
            assert_object_subschemas(&format!("tool {name} inputSchema"), &tool["inputSchema"]);
            assert_object_subschemas(&format!("tool {name} outputSchema"), &tool["outputSchema"]);
        }
        for name in ["get_fleet_context", "get_resource_context"] {
            let capability = by_name(name);
            assert_object_subschemas(&format!("resource via {name}"), &capability.input_schema);
            assert_object_subschemas(&format!("resource via {name}"), &capability.output_schema);
        }
        assert!(!manifest.workflow_prompts.is_empty());
        for prompt in &manifest.workflow_prompts {
            for name in &prompt.capabilities {
                let capability = by_name(name);
                let what = format!("prompt {} via {name}", prompt.name);
                assert_object_subschemas(&what, &capability.input_schema);
                assert_object_subschemas(&what, &capability.output_schema);
            }
        }
        for capability in &manifest.capabilities {
            assert_object_subschemas(&capability.name, &capability.input_schema);
            assert_object_subschemas(&capability.name, &capability.output_schema);
        }
        // The one that broke the TypeScript SDK's clients: a plan's params, now an object schema.
        let params = &by_name("plan_action").input_schema["properties"]["params"];
        assert!(params.is_object(), "{params}");
    }

    #[test]
    fn mcp_setup_doc_is_generated_from_the_manifest() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/mcp.md");
        if std::env::var_os("PULSE_UPDATE_DOCS").is_some() {
            std::fs::write(path, mcp_setup_markdown(&build())).unwrap();
        }
        let published = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            published,
            mcp_setup_markdown(&build()),
            "docs/mcp.md is stale; regenerate it with `PULSE_UPDATE_DOCS=1 cargo test -p pulse-gateway mcp_setup_doc`"
        );
    }

    #[test]
    fn first_capability_snapshot() {
        let manifest = serde_json::to_value(build()).expect("serializable");
        insta::assert_json_snapshot!("manifest_first_capability", manifest["capabilities"][0]);
    }
}
