//! `pulse_read` in a Watch run: bounded `logs` of an in-scope service or app-container, read
//! live through the agent-relay (`relay.read`). No free-form exec, file or find: the run's
//! policy offers only `logs`, and anything else is refused here too.
//!
//! A read the relay cannot serve (agent not connected, timeout, no relay) makes the capability
//! unavailable for the rest of the run: later calls answer at once without another attempt.
//! Log text is infrastructure output: it goes back as JSON data, bounded.

use pulse_bus::BusError;
use pulse_bus::relay_api::{RelayReadReply, RelayReadRequest};
use pulse_domain::agent_protocol::{LogSource, ReadOutput, ReadRequest};
use pulse_domain::resource::{ResourceType, truncate_chars};
use serde_json::json;

use super::{RunLedger, ToolContext, count_arg, json_result, text_arg};
use crate::provider::{ToolCall, ToolResult};

/// The capability name of relay reads in the run's ledger.
pub const CAPABILITY: &str = "relay_read";
/// Lines asked for by default and at most.
pub const DEFAULT_LINES: usize = 50;
pub const MAX_LINES: usize = 200;
/// Bytes of log text asked for.
pub const MAX_BYTES: u32 = 16 * 1024;

/// Relay error codes that mean the agent cannot answer reads now.
const UNAVAILABLE_CODES: &[&str] = &["agent_not_connected", "agent_timeout", "rate_limited"];

pub async fn call(ctx: &ToolContext, ledger: &RunLedger, call: &ToolCall) -> ToolResult {
    let arguments = &call.arguments;
    match text_arg(arguments, "action") {
        Some("logs") => {}
        _ => {
            return ToolResult::error(
                &call.id,
                "only action logs is available in a Watch run (no exec, file or find)",
            );
        }
    }
    let Some(id) = text_arg(arguments, "resource_id") else {
        return ToolResult::error(
            &call.id,
            "resource_id is required: the canonical id of a service or app-container in scope",
        );
    };
    let Some(resource) = ctx.in_scope(id) else {
        return ToolResult::error(
            &call.id,
            "resource_id is not a canonical id of a resource in this run's scope",
        );
    };
    let source = match resource.resource_type {
        ResourceType::Service => LogSource::Service {
            name: resource.source_id.clone(),
        },
        ResourceType::AppContainer => LogSource::Container {
            id: resource.source_id.clone(),
        },
        other => {
            return ToolResult::error(
                &call.id,
                format!("logs are read from services and app-containers, not a {other}"),
            );
        }
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
    let lines = count_arg(arguments, "lines", DEFAULT_LINES, MAX_LINES);
    let request = RelayReadRequest {
        agent_id: resource.agent_id.clone(),
        read: ReadRequest::LogTail {
            source,
            max_lines: u32::try_from(lines).unwrap_or(u32::MAX),
            max_bytes: MAX_BYTES,
        },
    };
    let subject = bus.subjects().relay(&ctx.tenant, "read");
    let reply: Result<RelayReadReply, BusError> = bus
        .request(&ctx.tenant, &subject, &request, ctx.backend_timeout)
        .await;
    match reply {
        Ok(RelayReadReply(result)) => match result.output {
            ReadOutput::LogTail { lines, truncated } => {
                let grep = text_arg(arguments, "grep").map(str::to_lowercase);
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
            ReadOutput::Inspect { .. } => {
                ToolResult::error(&call.id, "the agent answered a different read")
            }
        },
        Err(BusError::Remote { code, message }) if code == "agent_refused" => ToolResult::error(
            &call.id,
            format!(
                "the agent could not read these logs: {}",
                truncate_chars(&message, 300)
            ),
        ),
        Err(BusError::Remote { code, .. }) if code == "invalid_request" => {
            ToolResult::error(&call.id, "the relay refused the read as invalid")
        }
        Err(error) => {
            let code = match &error {
                BusError::Remote { code, .. } if UNAVAILABLE_CODES.contains(&code.as_str()) => {
                    code.clone()
                }
                BusError::Remote { code, .. } => code.clone(),
                BusError::Timeout { .. } => "timeout".to_owned(),
                BusError::NoResponders { .. } => "no_relay".to_owned(),
                _ => "transport".to_owned(),
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
