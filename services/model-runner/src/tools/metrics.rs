//! `pulse_metrics` in a Watch run: the `performance` history of one in-scope resource (the
//! percent metrics its agent reports) with a capacity forecast per metric
//! ([`pulse_domain::forecast`], the same projection a finding is stamped with). Other metric
//! types are not collected by Pulse agents and answer an error result.

use chrono::{Duration, Utc};
use pulse_domain::forecast::{self, MetricSample};
use pulse_store::metrics;
use serde_json::{Value, json};

use super::{ToolContext, json_result, text_arg};
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// The percent metrics agents report, in answer order.
pub const PERFORMANCE_METRICS: &[&str] = &["cpu_percent", "memory_percent", "disk_percent"];
/// Samples read per metric.
const MAX_SAMPLES: i64 = 500;
/// Samples shown per metric (the newest); the forecast uses all read.
const SHOWN_SAMPLES: usize = 12;

pub async fn call(ctx: &ToolContext, call: &ToolCall) -> ToolResult {
    let arguments = &call.arguments;
    match text_arg(arguments, "type") {
        Some("performance") => {}
        Some(other) => {
            return ToolResult::error(
                &call.id,
                format!(
                    "metric type {} is not collected; use performance",
                    pulse_domain::resource::truncate_chars(other, 32)
                ),
            );
        }
        None => return ToolResult::error(&call.id, "type is required"),
    }
    let Some(id) = text_arg(arguments, "resource_id") else {
        return ToolResult::error(
            &call.id,
            "resource_id is required: the canonical id of a resource in this run's scope",
        );
    };
    let Some(resource) = ctx.in_scope(id) else {
        return ToolResult::error(&call.id, ctx.unknown_resource(id));
    };
    let period = match text_arg(arguments, "period") {
        None | Some("24h") => Duration::hours(24),
        Some("7d") => Duration::days(7),
        Some(_) => return ToolResult::error(&call.id, "period must be 24h or 7d"),
    };
    let since = Utc::now() - period;
    let tx = match ctx.store.tenant_tx(&ctx.tenant).await {
        Ok(tx) => tx,
        Err(error) => {
            tracing::warn!(%error, "metrics read failed");
            return ToolResult::error(&call.id, "metrics are unavailable right now");
        }
    };
    let mut series = serde_json::Map::new();
    for metric in PERFORMANCE_METRICS {
        let samples = match metrics::history(&tx, &resource.id, metric, since, MAX_SAMPLES).await {
            Ok(samples) => samples,
            Err(error) => {
                tracing::warn!(%error, metric, "metrics read failed");
                return ToolResult::error(&call.id, "metrics are unavailable right now");
            }
        };
        if samples.is_empty() {
            continue;
        }
        let points: Vec<MetricSample> = samples
            .iter()
            .map(|(at, v)| MetricSample::new(*at, *v))
            .collect();
        let newest: Vec<Value> = samples
            .iter()
            .rev()
            .take(SHOWN_SAMPLES)
            .rev()
            .map(|(at, v)| json!({"at": at, "value": v}))
            .collect();
        series.insert(
            (*metric).to_owned(),
            json!({
                "samples": samples.len(),
                "newest": newest,
                "forecast": forecast::forecast_capacity(metric, &points),
            }),
        );
    }
    json_result(
        call,
        &json!({
            "resource_id": resource.id.as_str(),
            "period": if period == Duration::days(7) { "7d" } else { "24h" },
            "metrics": series,
            "note": if series.is_empty() { "no samples in this period" } else { "" },
        }),
    )
}
