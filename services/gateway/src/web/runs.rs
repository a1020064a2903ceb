//! Runs: history with trigger, scope, verdicts, tool calls, tokens and cost; one run in full.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::html;
use pulse_api::patrol::RunsQuery;
use serde_json::Value;

use super::layout::{self, Nav, badge, text, time, usd};
use super::session::WebUser;
use crate::authorized::MonitoringReadScope;
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;

fn scope(run: &Value) -> String {
    match run["effective_scope_resource_ids"].as_array() {
        Some(ids) if !ids.is_empty() => ids.iter().map(text).collect::<Vec<_>>().join(", "),
        _ => "full".to_owned(),
    }
}

pub async fn list(State(state): State<AppState>, user: WebUser) -> Response {
    let answer = match user.authorized::<MonitoringReadScope>() {
        Ok(auth) => layout::value(
            crate::patrol::list(
                State(state),
                auth,
                ApiQuery::new(RunsQuery { limit: Some(100) }),
            )
            .await,
        ),
        Err(error) => Err(error),
    };
    let runs = match answer {
        Ok(answer) => answer["runs"].as_array().cloned().unwrap_or_default(),
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let running = runs
        .iter()
        .any(|r| matches!(r["status"].as_str(), Some("queued" | "running")));
    let body = html! {
        h1 { "Runs" }
        div id="runs" data-live data-pending[running] {
            @if runs.is_empty() {
                p { "No Patrol runs yet." }
            } @else {
                div class="table-wrap" {
                    table {
                        thead { tr {
                            th { "Run" } th { "Status" } th { "Trigger" } th class="opt" { "Scope" }
                            th { "Verdicts" } th class="opt" { "Tool calls" } th class="opt" { "Tokens" } th { "Cost" }
                        } }
                        tbody {
                            @for run in &runs {
                                tr {
                                    td { a href={"/runs/" (text(&run["id"]))} { (time(&run["queued_at"])) } }
                                    td { (badge(run["status"].as_str().unwrap_or("unknown"))) }
                                    td { (text(&run["trigger_reason"])) }
                                    td class="opt" { (scope(run)) }
                                    td {
                                        (text(&run["new_findings"])) " new, "
                                        (text(&run["existing_findings"])) " existing, "
                                        (text(&run["resolved_findings"])) " resolved"
                                    }
                                    td class="opt" { (text(&run["tool_call_count"])) }
                                    td class="opt" { (text(&run["input_tokens"])) " in / " (text(&run["output_tokens"])) " out" }
                                    td { (usd(&run["cost_usd"])) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout::page(&user, "Runs", Nav::Runs, body)
}

pub async fn detail(
    State(state): State<AppState>,
    user: WebUser,
    Path(id): Path<String>,
) -> Response {
    let answer = match user.authorized::<MonitoringReadScope>() {
        Ok(auth) => {
            async {
                layout::value(crate::patrol::get(State(state), auth, ApiPath::parse(id)?).await)
            }
            .await
        }
        Err(error) => Err(error),
    };
    let run = match answer {
        Ok(run) => run,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let running = matches!(run["status"].as_str(), Some("queued" | "running"));
    let body = html! {
        p { a href="/runs" { "← All runs" } }
        div id="run" data-live data-pending[running] {
            h1 { "Run " code { (text(&run["id"])) } }
            p { (badge(run["status"].as_str().unwrap_or("unknown"))) }
            div class="grid" {
                div class="panel" {
                    dl class="facts" {
                        dt { "Trigger" } dd { (text(&run["trigger_reason"])) }
                        dt { "Type" } dd { (text(&run["type"])) }
                        dt { "Scope" } dd { (scope(&run)) }
                        dt { "Queued" } dd { (time(&run["queued_at"])) }
                        dt { "Started" } dd { (time(&run["started_at"])) }
                        dt { "Completed" } dd { (time(&run["completed_at"])) }
                        dt { "Resources checked" } dd { (text(&run["resources_checked"])) }
                        dt { "Model turns" } dd { (text(&run["turns"])) }
                        dt { "Tokens" } dd { (text(&run["input_tokens"])) " in / " (text(&run["output_tokens"])) " out" }
                        dt { "Cost" } dd { (usd(&run["cost_usd"])) }
                    }
                }
                @if run["error_summary"].is_string() {
                    div class="panel" {
                        h2 { "Error" }
                        p class="flash error" { (text(&run["error_summary"])) }
                        p { (text(&run["error_detail"])) }
                        @if run["error_remedy"].is_string() { p { strong { "What to do: " } (text(&run["error_remedy"])) } }
                    }
                }
            }
            h2 { "Verdicts" }
            @if let Some(verdicts) = run["finding_assessments"].as_array().filter(|v| !v.is_empty()) {
                ul {
                    @for v in verdicts {
                        li {
                            a href={"/findings/" (text(&v["finding_id"]))} { code { (text(&v["finding_id"])) } }
                            " · " (badge(v["verdict"].as_str().unwrap_or("unknown"))) " · " (text(&v["reason"]))
                        }
                    }
                }
            } @else {
                p { "No verdicts on existing findings." }
            }
            @if let Some(ids) = run["finding_ids"].as_array().filter(|v| !v.is_empty()) {
                p { "Findings recorded: "
                    @for id in ids { a href={"/findings/" (text(id))} { code { (text(id)) } } " " }
                }
            }
            h2 { "Tool calls" }
            @if let Some(calls) = run["tool_calls"].as_array().filter(|v| !v.is_empty()) {
                ol {
                    @for call in calls {
                        li {
                            details {
                                summary {
                                    code { (text(&call["tool_name"])) } " · "
                                    @if call["success"].as_bool() == Some(true) { "ok" } @else { "failed" }
                                    " · " (text(&call["duration_ms"])) " ms"
                                }
                                p { strong { "Input" } }
                                pre { (text(&call["input"])) }
                                p { strong { "Output" } }
                                pre { (text(&call["output"])) }
                            }
                        }
                    }
                }
            } @else {
                p { "No tool calls recorded." }
            }
        }
    };
    layout::page(&user, "Run", Nav::Runs, body)
}
