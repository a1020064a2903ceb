//! `pulse_query` in a Watch run: `search`, `get`, `list` and `health` over the canonical
//! resources the run covers (read at start). Other actions answer an error result: topology
//! and config are not part of the Watch detection view.
//!
//! Resource text (names, labels, statuses) comes from the infrastructure; results are JSON, so
//! it stays data, and each row is bounded.

use pulse_domain::resource::{Health, Resource, truncate_chars};
use serde_json::{Value, json};

use super::{ToolContext, count_arg, json_result, text_arg};
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// Rows in one answer.
pub const MAX_ROWS: usize = 50;
/// Rows in a `search` or `list` answer without an explicit `limit`: the seed already lists
/// every id (flagged ones in full), so a page is a closer look, not the inventory again.
pub const DEFAULT_ROWS: usize = 3;
/// Characters kept of each text field.
const FIELD_CHARS: usize = 160;
/// Labels kept per row.
const MAX_LABELS: usize = 8;

/// One resource as the model sees it. The canonical id is `resource_id`.
pub fn row(resource: &Resource) -> Value {
    let labels: serde_json::Map<String, Value> = resource
        .labels
        .iter()
        .take(MAX_LABELS)
        .map(|(k, v)| {
            (
                truncate_chars(k, FIELD_CHARS),
                Value::String(truncate_chars(v, FIELD_CHARS)),
            )
        })
        .collect();
    json!({
        "resource_id": resource.id.as_str(),
        "type": resource.resource_type.as_str(),
        "name": truncate_chars(&resource.name, FIELD_CHARS),
        "status": resource.status,
        "health": resource.health,
        "restart_count": resource.restart_count,
        "parent": resource.parent.as_ref().map(|p| p.as_str()),
        "observed_at": resource.observed_at,
        "labels": labels,
    })
}

/// One resource in a `search`/`list` page: id, state and labels; the name and type only when
/// the id does not already show them. `get` answers the full [`row`].
pub fn compact_row(resource: &Resource) -> Value {
    let id = resource.id.as_str();
    let kind = resource.resource_type.as_str();
    let mut entry = json!({
        "resource_id": id,
        "status": resource.status,
        "health": resource.health,
    });
    if !id.starts_with(&format!("{kind}:")) {
        entry["type"] = json!(kind);
    }
    if id.rsplit(':').next() != Some(resource.name.as_str()) {
        entry["name"] = json!(truncate_chars(&resource.name, FIELD_CHARS));
    }
    if let Some(restarts) = resource.restart_count.filter(|n| *n > 0) {
        entry["restart_count"] = json!(restarts);
    }
    let labels: serde_json::Map<String, Value> = resource
        .labels
        .iter()
        .take(MAX_LABELS)
        .map(|(k, v)| {
            (
                truncate_chars(k, FIELD_CHARS),
                Value::String(truncate_chars(v, FIELD_CHARS)),
            )
        })
        .collect();
    if !labels.is_empty() {
        entry["labels"] = Value::Object(labels);
    }
    entry
}

fn matches(resource: &Resource, query: &str) -> bool {
    let q = query.to_lowercase();
    resource.id.as_str().to_lowercase().contains(&q)
        || resource.name.to_lowercase().contains(&q)
        || resource.source_id.to_lowercase().contains(&q)
        || resource
            .aliases
            .iter()
            .any(|a| a.to_lowercase().contains(&q))
}

fn of_type<'a>(resources: &'a [Resource], arguments: &Value) -> Vec<&'a Resource> {
    let wanted = text_arg(arguments, "resource_type");
    resources
        .iter()
        .filter(|r| wanted.is_none_or(|t| r.resource_type.as_str() == t))
        .collect()
}

/// A bounded page of compact rows, resources that are not healthy first, with the count of
/// rows left out.
fn page(mut rows: Vec<&Resource>, arguments: &Value) -> Value {
    rows.sort_by_key(|r| r.health == Health::Healthy);
    let total = rows.len();
    let offset = arguments
        .get("offset")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let limit = count_arg(arguments, "limit", DEFAULT_ROWS, MAX_ROWS);
    let shown: Vec<Value> = rows
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(compact_row)
        .collect();
    let omitted = total.saturating_sub(offset).saturating_sub(shown.len());
    let mut page = json!({"total": total, "omitted": omitted, "resources": shown});
    if offset > 0 {
        page["offset"] = json!(offset);
    }
    page
}

pub async fn call(ctx: &ToolContext, call: &ToolCall) -> ToolResult {
    let arguments = &call.arguments;
    let Some(action) = text_arg(arguments, "action") else {
        return ToolResult::error(&call.id, "action is required");
    };
    let scope = ctx.scope.as_slice();
    match action {
        "get" => {
            let Some(id) = text_arg(arguments, "resource_id") else {
                return ToolResult::error(&call.id, "get needs resource_id");
            };
            // Exact canonical id first, then an unambiguous name, source id or alias.
            if let Some(resource) = ctx.in_scope(id) {
                return json_result(call, &row(resource));
            }
            let named: Vec<&Resource> = scope
                .iter()
                .filter(|r| r.name == id || r.source_id == id || r.aliases.iter().any(|a| a == id))
                .collect();
            match named.as_slice() {
                [one] => json_result(call, &row(one)),
                [] => ToolResult::error(&call.id, ctx.unknown_resource(id)),
                many => ToolResult::error(
                    &call.id,
                    format!(
                        "{} resources match; use one of the canonical ids: {}",
                        many.len(),
                        many.iter()
                            .map(|r| r.id.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            }
        }
        "search" => {
            let rows = of_type(scope, arguments);
            let rows = match text_arg(arguments, "query") {
                Some(q) => rows.into_iter().filter(|r| matches(r, q)).collect(),
                None => rows,
            };
            json_result(call, &page(rows, arguments))
        }
        "list" => {
            let rows = of_type(scope, arguments);
            let rows = match text_arg(arguments, "status") {
                Some(status) => rows
                    .into_iter()
                    .filter(|r| r.status.as_str() == status)
                    .collect(),
                None => rows,
            };
            json_result(call, &page(rows, arguments))
        }
        "health" => {
            let rows = of_type(scope, arguments);
            let count = |h: Health| rows.iter().filter(|r| r.health == h).count();
            let not_healthy: Vec<&Resource> = rows
                .iter()
                .copied()
                .filter(|r| r.health != Health::Healthy)
                .collect();
            let mut answer = json!({
                "resources": rows.len(),
                "healthy": count(Health::Healthy),
                "unhealthy": count(Health::Unhealthy),
                "unknown": count(Health::Unknown),
            });
            answer["not_healthy"] = page(not_healthy, arguments)["resources"].clone();
            json_result(call, &answer)
        }
        other => ToolResult::error(
            &call.id,
            format!(
                "action {} is not available in a Watch run; use search, get, list or health",
                truncate_chars(other, 32)
            ),
        ),
    }
}
