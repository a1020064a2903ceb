//! Pulse MCP: a thin projection of the gateway's capability manifest
//! (`GET /api/agent/capabilities`) onto the Model Context Protocol.
//!
//! [`McpServer`] answers JSON-RPC 2.0 requests. It keeps no tool table of its own:
//!
//! - `initialize`: the server's capabilities and instructions from the manifest's surface contract;
//! - `tools/list`: the capabilities the `pulse_mcp` surface contract allows, with their input
//!   schemas; `tools/call`: only those (any other name is refused with `tool_not_offered`), sent
//!   to the capability's route with the caller's token, path parameters in the path, body fields
//!   in a JSON body and the rest in the query; the API's answer is the tool's result, an API
//!   error `{error, message}` with `isError: true`;
//! - `resources/list` (`pulse://resource/<id>` from the fleet context) and `resources/read`
//!   (the resource context);
//! - `prompts/list` and `prompts/get`: the manifest's workflow prompts.
//!
//! Every request to the gateway carries `X-Pulse-Agent-Surface: pulse_mcp`. [`notifications`]
//! turns the gateway's agent events into MCP notifications.

pub mod notifications;

use serde_json::{Map, Value, json};

/// The surface id in the manifest's tool contracts.
pub const SURFACE: &str = "pulse_mcp";
/// The header that marks requests made for this surface.
pub const SURFACE_HEADER: &str = "x-pulse-agent-surface";
/// The MCP protocol revision answered when the client asks for one we do not know.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
const KNOWN_PROTOCOLS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];
const RESOURCE_PREFIX: &str = "pulse://resource/";

/// JSON-RPC error codes.
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INVALID_REQUEST: i64 = -32600;

/// An MCP server over one gateway and one token.
#[derive(Debug, Clone)]
pub struct McpServer {
    base_url: String,
    token: Option<String>,
    http: reqwest::Client,
    manifest: std::sync::Arc<Value>,
}

/// Why the manifest could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("cannot read the capability manifest: {0}")]
    Fetch(String),
}

impl McpServer {
    /// Reads the manifest from `base_url` (it needs no token).
    pub async fn connect(base_url: &str, token: Option<String>) -> Result<Self, ManifestError> {
        let base_url = base_url.trim_end_matches('/').to_owned();
        let mut surface = reqwest::header::HeaderMap::new();
        surface.insert(
            SURFACE_HEADER,
            reqwest::header::HeaderValue::from_static(SURFACE),
        );
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(120))
            .default_headers(surface)
            .build()
            .map_err(|e| ManifestError::Fetch(e.to_string()))?;
        let manifest = pulse_client::Client::with_http(&base_url, None, http.clone())
            .map_err(|e| ManifestError::Fetch(e.to_string()))?
            .capabilities()
            .await
            .map_err(|e| ManifestError::Fetch(format!("{base_url}: {e}")))?;
        // Tools are dispatched generically from the manifest's JSON (the gateway's own `/mcp`
        // endpoint hands it over as such); reading it typed first makes a changed manifest
        // shape break this build.
        let manifest =
            serde_json::to_value(manifest).map_err(|e| ManifestError::Fetch(e.to_string()))?;
        Ok(Self::with_manifest(
            base_url,
            token,
            http,
            std::sync::Arc::new(manifest),
        ))
    }

    /// A server over a manifest already at hand (the gateway's own `/mcp` endpoint).
    pub fn with_manifest(
        base_url: String,
        token: Option<String>,
        http: reqwest::Client,
        manifest: std::sync::Arc<Value>,
    ) -> Self {
        Self {
            base_url,
            token,
            http,
            manifest,
        }
    }

    /// The capability names the `pulse_mcp` surface may offer.
    fn allowlist(&self) -> Vec<&str> {
        self.manifest["surfaceToolContracts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["surfaceId"] == SURFACE)
            .and_then(|c| c["tools"].as_array())
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    }

    fn capability(&self, name: &str) -> Option<&Value> {
        self.manifest["capabilities"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == name)
    }

    fn instructions(&self) -> String {
        let summary = self.manifest["surfaceContract"]["summary"]
            .as_str()
            .unwrap_or("Pulse: governed infrastructure operations.");
        format!(
            "{summary}\nEvery tool acts with exactly the authority of the token this server was \
             started with. Changes are planned (plan_action) and run only after policy and, \
             usually, a human's approval; read the outcome again before claiming success."
        )
    }

    /// Answers one JSON-RPC message; `None` for a notification.
    pub async fn handle(&self, message: Value) -> Option<Value> {
        let id = message.get("id").cloned();
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return id.map(|id| rpc_error(id, INVALID_REQUEST, "not a JSON-RPC request"));
        };
        // Notifications get no answer.
        let id = id?;
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let result = match method {
            "initialize" => Ok(self.initialize(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(self.tools_list()),
            "tools/call" => self.tools_call(&params).await,
            "resources/list" => Ok(self.resources_list().await),
            "resources/read" => self.resources_read(&params).await,
            "resources/templates/list" => Ok(json!({"resourceTemplates": [{
                "uriTemplate": format!("{RESOURCE_PREFIX}{{id}}"),
                "name": "resource",
                "description": "One Pulse resource's context: metrics, findings, recent actions",
                "mimeType": "application/json",
            }]})),
            "prompts/list" => Ok(self.prompts_list()),
            "prompts/get" => self.prompts_get(&params),
            other => Err((METHOD_NOT_FOUND, format!("method {other} is not supported"))),
        };
        Some(match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => rpc_error(id, code, &message),
        })
    }

    fn initialize(&self, params: &Value) -> Value {
        let asked = params["protocolVersion"]
            .as_str()
            .unwrap_or(PROTOCOL_VERSION);
        let version = if KNOWN_PROTOCOLS.contains(&asked) {
            asked
        } else {
            PROTOCOL_VERSION
        };
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}},
            "serverInfo": {
                "name": self.manifest["mcpAdapter"]["serverName"].as_str().unwrap_or("pulse"),
                "version": env!("CARGO_PKG_VERSION"),
            },
            "instructions": self.instructions(),
        })
    }

    fn tools_list(&self) -> Value {
        let tools: Vec<Value> = self
            .allowlist()
            .into_iter()
            .filter_map(|name| self.capability(name))
            .map(|c| {
                let read_only = c["actionMode"] == "read";
                json!({
                    "name": c["name"],
                    "title": c["title"],
                    "description": c["description"],
                    "inputSchema": c["inputSchema"],
                    "annotations": {
                        "title": c["title"],
                        "readOnlyHint": read_only,
                        "destructiveHint": !read_only && c["approvalPolicy"] == "action_plan",
                        "openWorldHint": false,
                    },
                    "_meta": {
                        "pulse/method": c["method"],
                        "pulse/path": c["path"],
                        "pulse/scopes": c["scopes"],
                        "pulse/approvalPolicy": c["approvalPolicy"],
                    },
                })
            })
            .collect();
        json!({"tools": tools})
    }

    async fn tools_call(&self, params: &Value) -> Result<Value, (i64, String)> {
        let name = params["name"]
            .as_str()
            .ok_or((INVALID_PARAMS, "tools/call needs a tool name".to_owned()))?;
        let arguments = match &params["arguments"] {
            Value::Null => Map::new(),
            Value::Object(map) => map.clone(),
            _ => return Err((INVALID_PARAMS, "arguments must be an object".to_owned())),
        };
        if !self.allowlist().contains(&name) {
            return Ok(tool_error(
                "tool_not_offered",
                &format!(
                    "{name} is not a tool of this surface; tools/list names the ones it offers"
                ),
            ));
        }
        let Some(capability) = self.capability(name) else {
            return Ok(tool_error(
                "tool_not_offered",
                &format!("{name} is not in the manifest"),
            ));
        };
        let answer = self.call(capability, arguments).await;
        Ok(match answer {
            Ok((status, body)) if status < 400 => json!({
                "content": [{"type": "text", "text": body.to_string()}],
                "structuredContent": if body.is_object() { body.clone() } else { json!({"result": body}) },
                "isError": false,
            }),
            Ok((_, body)) => {
                let code = body["error"].as_str().unwrap_or("request_failed");
                let message = body["message"].as_str().unwrap_or("the request failed");
                tool_error(code, message)
            }
            Err(why) => tool_error("gateway_unreachable", &why),
        })
    }

    /// Sends a capability's request: path parameters in the path, body fields as JSON, the
    /// rest as the query.
    async fn call(
        &self,
        capability: &Value,
        mut arguments: Map<String, Value>,
    ) -> Result<(u16, Value), String> {
        let mut path = capability["path"].as_str().unwrap_or("/").to_owned();
        while let (Some(open), Some(close)) = (path.find('{'), path.find('}')) {
            let param = path[open + 1..close].to_owned();
            let value = arguments
                .remove(&param)
                .map(|v| match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                })
                .ok_or_else(|| format!("argument {param} is required"))?;
            path.replace_range(open..=close, &encode(&value));
        }
        let method = capability["method"].as_str().unwrap_or("GET");
        let body_fields: Vec<&str> = capability["requestBodyShape"]["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let takes_body = !capability["requestBodyShape"].is_null();
        let mut body = Map::new();
        let mut query: Vec<(String, String)> = Vec::new();
        for (key, value) in arguments {
            if takes_body && (body_fields.contains(&key.as_str()) || key == "body") {
                if key == "body" && body_fields.is_empty() {
                    if let Value::Object(whole) = value {
                        body.extend(whole);
                    }
                } else {
                    body.insert(key, value);
                }
            } else {
                let value = match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                query.push((key, value));
            }
        }
        if !query.is_empty() {
            let pairs: Vec<String> = query
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            path.push('?');
            path.push_str(&pairs.join("&"));
        }
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base_url))
            .header(SURFACE_HEADER, SURFACE);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if takes_body {
            request = request.json(&Value::Object(body));
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| e.to_string())?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, body))
    }

    async fn get(&self, path: &str) -> Result<(u16, Value), String> {
        let mut request = self
            .http
            .get(format!("{}{path}", self.base_url))
            .header(SURFACE_HEADER, SURFACE);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.unwrap_or(Value::Null)))
    }

    async fn resources_list(&self) -> Value {
        let resources: Vec<Value> = match self.get("/api/agent/fleet-context").await {
            Ok((200, body)) => body["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| {
                    let id = r["id"].as_str().or(r["resource_id"].as_str())?;
                    Some(json!({
                        "uri": format!("{RESOURCE_PREFIX}{id}"),
                        "name": r["name"].as_str().unwrap_or(id),
                        "description": format!(
                            "{} {}",
                            r["type"].as_str().unwrap_or("resource"),
                            r["health"].as_str().unwrap_or("")
                        ).trim().to_owned(),
                        "mimeType": "application/json",
                    }))
                })
                .collect(),
            _ => Vec::new(),
        };
        json!({"resources": resources})
    }

    async fn resources_read(&self, params: &Value) -> Result<Value, (i64, String)> {
        let uri = params["uri"]
            .as_str()
            .ok_or((INVALID_PARAMS, "resources/read needs a uri".to_owned()))?;
        let id = uri.strip_prefix(RESOURCE_PREFIX).ok_or((
            INVALID_PARAMS,
            format!("{uri} is not a {RESOURCE_PREFIX}<id> resource"),
        ))?;
        let (status, body) = self
            .get(&format!("/api/agent/resource-context/{}", encode(id)))
            .await
            .map_err(|e| (INVALID_PARAMS, e))?;
        if status >= 400 {
            return Err((
                INVALID_PARAMS,
                format!(
                    "{}: {}",
                    body["error"].as_str().unwrap_or("request_failed"),
                    body["message"].as_str().unwrap_or("")
                ),
            ));
        }
        Ok(json!({"contents": [{
            "uri": uri,
            "mimeType": "application/json",
            "text": body.to_string(),
        }]}))
    }

    fn prompts_list(&self) -> Value {
        let prompts: Vec<Value> = self.manifest["workflowPrompts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                json!({
                    "name": p["name"],
                    "title": p["title"],
                    "description": p["description"],
                    "arguments": p["arguments"],
                })
            })
            .collect();
        json!({"prompts": prompts})
    }

    fn prompts_get(&self, params: &Value) -> Result<Value, (i64, String)> {
        let name = params["name"]
            .as_str()
            .ok_or((INVALID_PARAMS, "prompts/get needs a name".to_owned()))?;
        let prompt = self.manifest["workflowPrompts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name)
            .ok_or((INVALID_PARAMS, format!("no prompt named {name}")))?;
        let mut text = format!(
            "{}\n\n{}",
            prompt["title"].as_str().unwrap_or(name),
            prompt["description"].as_str().unwrap_or("")
        );
        for argument in prompt["arguments"].as_array().into_iter().flatten() {
            let arg = argument["name"].as_str().unwrap_or("");
            match params["arguments"][arg].as_str() {
                Some(value) => text.push_str(&format!("\n{arg}: {value}")),
                None if argument["required"] == true => {
                    return Err((INVALID_PARAMS, format!("argument {arg} is required")));
                }
                None => {}
            }
        }
        let tools: Vec<&str> = prompt["capabilities"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        text.push_str(&format!("\n\nUse these tools: {}.", tools.join(", ")));
        Ok(json!({
            "description": prompt["description"],
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }))
    }
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// A tool result that failed: the API's error envelope, marked as an error.
fn tool_error(code: &str, message: &str) -> Value {
    let envelope = json!({"error": code, "message": message});
    json!({
        "content": [{"type": "text", "text": envelope.to_string()}],
        "structuredContent": envelope,
        "isError": true,
    })
}

/// A path segment or query value, percent-encoded but for unreserved characters and `:`
/// (resource ids hold `/`). The web UI's links use it too.
pub fn encode(value: &str) -> String {
    let mut out = String::new();
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}
