//! `patrol_clear_signal`: the model judges one deterministic signal of a resource (a problem
//! triage flag or a firing alert) expected and benign, with evidence. It writes nothing durable:
//! the clear is recorded in the run's ledger, counts towards the run's all-clear accounting
//! ([`crate::tools::signals`]) and is listed in the run's analysis, so an operator sees every
//! signal the model waved through and why.

use serde_json::json;

use pulse_capabilities::ToolName;
use pulse_domain::resource::truncate_chars;

use super::{RunLedger, blank_field, json_result, signature, text_arg};
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// Characters kept of the evidence and reason of a clear.
const MAX_TEXT: usize = 500;

pub fn clear(ledger: &RunLedger, call: &ToolCall) -> ToolResult {
    let signature = signature(call);
    if ledger.was_accepted(&signature) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "this signal was already cleared in this run; it is not repeated",
        );
    }
    if let Some(field) = blank_field(ToolName::PatrolClearSignal, &call.arguments) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            format!("the clear was refused: {field} must not be empty"),
        );
    }
    let (Some(resource_id), Some(signal), Some(evidence), Some(reason)) = (
        text_arg(&call.arguments, "resource_id"),
        text_arg(&call.arguments, "signal"),
        text_arg(&call.arguments, "evidence"),
        text_arg(&call.arguments, "reason"),
    ) else {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "the clear was refused: resource_id, signal, evidence and reason are required",
        );
    };
    let book = ledger.signals();
    if !book.has(resource_id, signal) {
        ledger.reject();
        let known = book.of(resource_id);
        let message = if known.is_empty() {
            format!("the clear was refused: {resource_id} carries no signal in this run")
        } else {
            format!(
                "the clear was refused: {resource_id} carries {} in this run, not {signal}",
                known.join(", ")
            )
        };
        return ToolResult::error(&call.id, message);
    }
    ledger.accept_clear(
        signature,
        resource_id.to_owned(),
        signal.to_owned(),
        format!(
            "{} ({})",
            truncate_chars(reason, MAX_TEXT),
            truncate_chars(evidence, MAX_TEXT)
        ),
    );
    json_result(
        call,
        &json!({"cleared": true, "resource_id": resource_id, "signal": signal}),
    )
}
