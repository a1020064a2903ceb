//! `pulse_read` in a Watch (and Investigation) run, read live through the agent-relay
//! (`relay.read`): `logs`, the bounded log tail of an in-scope service or app-container, and
//! `inspect`, the agent's compacted inspect projection of an in-scope app-container (spec
//! INV-13/14: state, flags, exit code, health results, restart count and policy, image identity;
//! never env values). No free-form exec, file or find: the run's policy offers only these two,
//! and anything else is refused here too.
//!
//! A read the relay cannot serve (agent not connected, timeout, no relay) makes the capability
//! unavailable for the rest of the run: later calls answer at once without another attempt.
//! Log text and inspect output are infrastructure output: they go back as JSON data, bounded.

use pulse_bus::relay_api::{RelayReadReply, RelayReadRequest};
use pulse_bus::{ClientError, ErrorCode, RelayClient};
use pulse_domain::agent_protocol::{LogSource, ReadOutput, ReadRequest, ReadResult};
use pulse_domain::resource::{Resource, ResourceType, truncate_chars};
use serde_json::{Map, Value, json};

use super::{RunLedger, ToolContext, count_arg, json_result, text_arg};
use crate::provider::{ToolCall, ToolResult};

/// The capability name of relay reads in the run's ledger.
pub const CAPABILITY: &str = "relay_read";
/// Lines asked for by default and at most.
pub const DEFAULT_LINES: usize = 50;
pub const MAX_LINES: usize = 200;
/// Bytes of log text asked for.
pub const MAX_BYTES: u32 = 16 * 1024;

/// The fields of the agent's compact inspect projection passed on to the model; anything else
/// in the relay's answer is dropped. The container id is left out: `resource_id` names it.
const INSPECT_FIELDS: [&str; 19] = [
    "name",
    "image",
    "image_id",
    "state",
    "running",
    "paused",
    "restarting",
    "oom_killed",
    "dead",
    "exit_code",
    "error",
    "health_status",
    "failing_streak",
    "health_results",
    "restart_count",
    "restart_policy",
    "started_at",
    "finished_at",
    "labels",
];
/// Bounds of an inspect answer: characters of a text value, entries of a list (the newest are
/// kept), entries of an object, and nesting below the projection's own fields.
const INSPECT_TEXT_CHARS: usize = 200;
const INSPECT_LIST_ITEMS: usize = 3;
const INSPECT_OBJECT_ENTRIES: usize = 8;
const INSPECT_DEPTH: usize = 2;

/// What `pulse_read` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Logs,
    Inspect,
}

impl Action {
    fn noun(self) -> &'static str {
        match self {
            Self::Logs => "these logs",
            Self::Inspect => "this container",
        }
    }
}

/// The relay read for `arguments`, and the in-scope resource it reads; an error message for
/// the model when the arguments do not name one.
fn plan<'a>(
    ctx: &'a ToolContext,
    arguments: &Value,
) -> Result<(&'a Resource, RelayReadRequest), String> {
    let action = match text_arg(arguments, "action") {
        Some("logs") => Action::Logs,
        Some("inspect") => Action::Inspect,
        _ => {
            return Err(
                "only actions logs and inspect are available in this run (no exec, file or find)"
                    .to_owned(),
            );
        }
    };
    let Some(id) = text_arg(arguments, "resource_id") else {
        return Err(match action {
            Action::Logs => {
                "resource_id is required: the canonical id of a service or app-container in scope"
            }
            Action::Inspect => {
                "resource_id is required: the canonical id of an app-container in scope"
            }
        }
        .to_owned());
    };
    let Some(resource) = ctx.in_scope(id) else {
        return Err(
            "resource_id is not a canonical id of a resource in this run's scope".to_owned(),
        );
    };
    let read = match (action, resource.resource_type) {
        (Action::Logs, ResourceType::Service) => log_tail(
            arguments,
            LogSource::Service {
                name: resource.source_id.clone(),
            },
        ),
        (Action::Logs, ResourceType::AppContainer) => log_tail(
            arguments,
            LogSource::Container {
                id: resource.source_id.clone(),
            },
        ),
        (Action::Logs, other) => {
            return Err(format!(
                "logs are read from services and app-containers, not a {other}"
            ));
        }
        (Action::Inspect, ResourceType::AppContainer) => ReadRequest::Inspect {
            container: resource.source_id.clone(),
        },
        (Action::Inspect, ResourceType::Service) => {
            return Err(
                "inspect is for app-containers, not a service; use action logs for its recent log lines"
                    .to_owned(),
            );
        }
        (Action::Inspect, other) => {
            return Err(format!("inspect is for app-containers, not a {other}"));
        }
    };
    Ok((
        resource,
        RelayReadRequest {
            agent_id: resource.agent_id.clone(),
            read,
        },
    ))
}

fn log_tail(arguments: &Value, source: LogSource) -> ReadRequest {
    let lines = count_arg(arguments, "lines", DEFAULT_LINES, MAX_LINES);
    ReadRequest::LogTail {
        source,
        max_lines: u32::try_from(lines).unwrap_or(u32::MAX),
        max_bytes: MAX_BYTES,
    }
}

pub async fn call(ctx: &ToolContext, ledger: &RunLedger, call: &ToolCall) -> ToolResult {
    let arguments = &call.arguments;
    let (resource, request) = match plan(ctx, arguments) {
        Ok(planned) => planned,
        Err(message) => return ToolResult::error(&call.id, message),
    };
    let action = match request.read {
        ReadRequest::LogTail { .. } => Action::Logs,
        ReadRequest::Inspect { .. } => Action::Inspect,
    };
    if ledger.is_unavailable(CAPABILITY) {
        return ToolResult::error(
            &call.id,
            "live reads are unavailable for the rest of this run; continue from the evidence you have",
        );
    }
    let Some(bus) = &ctx.bus else {
        ledger.mark_unavailable(CAPABILITY);
        return ToolResult::error(&call.id, "live reads are unavailable in this run");
    };
    let reply = RelayClient::new(bus.clone())
        .read(&ctx.tenant, &request, ctx.backend_timeout)
        .await;
    match reply {
        Ok(RelayReadReply(result)) => answer(call, resource, action, result),
        Err(ClientError::Remote {
            code: ErrorCode::AgentRefused,
            message,
        }) => ToolResult::error(
            &call.id,
            format!(
                "the agent could not read {}: {}",
                action.noun(),
                truncate_chars(&message, 300)
            ),
        ),
        Err(ClientError::Remote {
            code: ErrorCode::InvalidRequest,
            ..
        }) => ToolResult::error(&call.id, "the relay refused the read as invalid"),
        Err(error) => {
            let code = match &error {
                ClientError::Remote { code, .. } => code.code(),
                ClientError::Timeout { .. } => "timeout",
                ClientError::NoResponder { .. } => "no_relay",
                _ => "transport",
            };
            tracing::info!(resource_id = %resource.id, %error, "relay read unavailable; not retried in this run");
            ledger.mark_unavailable(CAPABILITY);
            ToolResult::error(
                &call.id,
                format!(
                    "live reads are unavailable ({code}) and will not be retried in this run; continue from the evidence you have"
                ),
            )
        }
    }
}

/// The model's view of the agent's answer to `action`.
fn answer(call: &ToolCall, resource: &Resource, action: Action, result: ReadResult) -> ToolResult {
    match (action, result.output) {
        (Action::Logs, ReadOutput::LogTail { lines, truncated }) => {
            let grep = text_arg(&call.arguments, "grep").map(str::to_lowercase);
            let lines: Vec<_> = lines
                .into_iter()
                .filter(|l| {
                    grep.as_deref()
                        .is_none_or(|g| l.text.to_lowercase().contains(g))
                })
                .map(|l| json!({"stream": l.stream, "text": truncate_chars(&l.text, 500)}))
                .collect();
            json_result(
                call,
                &json!({
                    "resource_id": resource.id.as_str(),
                    "read_at": result.read_at,
                    "truncated": truncated,
                    "lines": lines,
                }),
            )
        }
        (Action::Inspect, ReadOutput::Inspect { projection }) => {
            let Some(projection) = compact_inspect(&projection) else {
                return ToolResult::error(&call.id, "the agent answered an unreadable inspect");
            };
            json_result(
                call,
                &json!({
                    "resource_id": resource.id.as_str(),
                    "read_at": result.read_at,
                    "inspect": projection,
                }),
            )
        }
        _ => ToolResult::error(&call.id, "the agent answered a different read"),
    }
}

/// The projection's [`INSPECT_FIELDS`], bounded; `None` when it is not an object.
fn compact_inspect(projection: &Value) -> Option<Value> {
    let fields = projection.as_object()?;
    let kept: Map<String, Value> = INSPECT_FIELDS
        .iter()
        .filter_map(|name| {
            fields
                .get(*name)
                .map(|v| ((*name).to_owned(), bounded(v, INSPECT_DEPTH)))
        })
        .collect();
    Some(Value::Object(kept))
}

/// `value` with text cut, lists cut to their newest entries, objects to their first entries and
/// nesting below `depth` dropped.
fn bounded(value: &Value, depth: usize) -> Value {
    match value {
        Value::String(text) => Value::String(truncate_chars(text, INSPECT_TEXT_CHARS)),
        Value::Array(_) | Value::Object(_) if depth == 0 => Value::Null,
        Value::Array(items) => {
            let skip = items.len().saturating_sub(INSPECT_LIST_ITEMS);
            Value::Array(
                items[skip..]
                    .iter()
                    .map(|v| bounded(v, depth - 1))
                    .collect(),
            )
        }
        Value::Object(entries) => Value::Object(
            entries
                .iter()
                .take(INSPECT_OBJECT_ENTRIES)
                .map(|(k, v)| (truncate_chars(k, INSPECT_TEXT_CHARS), bounded(v, depth - 1)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use pulse_domain::TenantId;
    use pulse_domain::patrol::run::RunId;
    use pulse_domain::resource::{Health, ResourceId};
    use pulse_test_support::db::TestDb;

    use super::super::test_support::{call as tool_call, resource};
    use super::*;

    const CONTAINER: &str = "9d2e1f0a3b4c45d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e";

    fn container(host: &str, source_id: &str) -> Resource {
        Resource {
            id: ResourceId::app_container(host, source_id),
            resource_type: ResourceType::AppContainer,
            source_id: source_id.to_owned(),
            name: "shop-api-1".to_owned(),
            ..resource(host, "shop-api-1", Health::Unhealthy)
        }
    }

    async fn context(db: &TestDb) -> ToolContext {
        let mut host = resource("h1", "h1", Health::Healthy);
        host.id = ResourceId::of(ResourceType::Host, "h1", "h1");
        host.resource_type = ResourceType::Host;
        ToolContext {
            store: db.store().clone(),
            bus: None,
            tenant: TenantId::new("acme").expect("tenant id"),
            run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
            scope: Arc::new(vec![
                resource("h1", "web", Health::Unhealthy),
                container("h1", CONTAINER),
                host,
            ]),
            backend_timeout: Duration::from_millis(200),
        }
    }

    #[tokio::test]
    async fn inspect_is_planned_for_in_scope_containers_only() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let ctx = context(&db).await;
        let container_id = ResourceId::app_container("h1", CONTAINER);

        let (resource, request) = plan(
            &ctx,
            &json!({"action": "inspect", "resource_id": container_id.as_str()}),
        )
        .map_err(anyhow::Error::msg)?;
        assert_eq!(resource.id, container_id);
        assert_eq!(
            request,
            RelayReadRequest {
                agent_id: "h1".to_owned(),
                read: ReadRequest::Inspect {
                    container: CONTAINER.to_owned()
                },
            }
        );

        // A service is refused with the way to its evidence; so is any other type.
        let service = plan(
            &ctx,
            &json!({"action": "inspect", "resource_id": "service:h1:web"}),
        )
        .expect_err("a service is not inspected");
        assert!(
            service.contains("inspect is for app-containers, not a service")
                && service.contains("use action logs"),
            "{service}"
        );
        let host = ResourceId::of(ResourceType::Host, "h1", "h1");
        let host = plan(
            &ctx,
            &json!({"action": "inspect", "resource_id": host.as_str()}),
        )
        .expect_err("a host is not inspected");
        assert!(
            host.contains("not a host") && !host.contains("logs"),
            "{host}"
        );

        // Ids outside the scope, missing ids and other actions are refused.
        let other_host = ResourceId::app_container("h2", CONTAINER);
        for (arguments, expected) in [
            (
                json!({"action": "inspect", "resource_id": other_host.as_str()}),
                "not a canonical id of a resource in this run's scope",
            ),
            (
                json!({"action": "inspect", "resource_id": CONTAINER}),
                "not a canonical id of a resource in this run's scope",
            ),
            (json!({"action": "inspect"}), "id of an app-container"),
            (
                json!({"action": "exec", "resource_id": container_id.as_str()}),
                "only actions logs and inspect",
            ),
        ] {
            let refused = plan(&ctx, &arguments).expect_err("refused");
            assert!(refused.contains(expected), "{arguments}: {refused}");
        }

        // Logs of the same container still read its log tail.
        let (_, logs) = plan(
            &ctx,
            &json!({"action": "logs", "resource_id": container_id.as_str(), "lines": 5}),
        )
        .map_err(anyhow::Error::msg)?;
        assert_eq!(
            logs.read,
            ReadRequest::LogTail {
                source: LogSource::Container {
                    id: CONTAINER.to_owned()
                },
                max_lines: 5,
                max_bytes: MAX_BYTES,
            }
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_unavailable_relay_answers_inspect_like_logs() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let ctx = context(&db).await;
        let ledger = RunLedger::new();
        let container_id = ResourceId::app_container("h1", CONTAINER);
        let inspect = tool_call(
            "pulse_read",
            json!({"action": "inspect", "resource_id": container_id.as_str()}),
        );
        let first = call(&ctx, &ledger, &inspect).await;
        assert!(first.is_error && first.content.contains("unavailable"));
        assert_eq!(ledger.unavailable(), [CAPABILITY]);
        let logs = tool_call(
            "pulse_read",
            json!({"action": "logs", "resource_id": "service:h1:web"}),
        );
        let second = call(&ctx, &ledger, &logs).await;
        assert!(
            second.is_error && second.content.contains("rest of this run"),
            "{}",
            second.content
        );
        Ok(())
    }

    #[test]
    fn the_inspect_answer_keeps_only_the_projection_fields_bounded() {
        let results: Vec<Value> = (1..=5)
            .map(|n| json!({"exit_code": n, "output": "down"}))
            .collect();
        let projection = json!({
            "id": CONTAINER,
            "state": "running",
            "exit_code": 0,
            "restart_count": 2,
            "health_status": "unhealthy",
            "error": "x".repeat(1000),
            "health_results": results,
            "env": ["DB_PASSWORD=hunter2"],
            "labels": {"com.docker.compose.service": "api"},
        });
        let kept = compact_inspect(&projection).expect("an object");
        assert_eq!(kept["state"], "running");
        assert_eq!(kept["exit_code"], 0);
        assert_eq!(kept["restart_count"], 2);
        assert_eq!(kept["health_status"], "unhealthy");
        assert_eq!(kept["labels"]["com.docker.compose.service"], "api");
        assert_eq!(
            kept["error"].as_str().map(|e| e.chars().count()),
            Some(INSPECT_TEXT_CHARS)
        );
        let exits: Vec<_> = kept["health_results"]
            .as_array()
            .expect("health results")
            .iter()
            .map(|r| r["exit_code"].clone())
            .collect();
        assert_eq!(exits, [json!(3), json!(4), json!(5)], "the newest kept");
        assert!(kept.get("env").is_none() && kept.get("id").is_none());
        assert!(!kept.to_string().contains("hunter2"));
        assert_eq!(compact_inspect(&json!("running")), None);
    }
}
