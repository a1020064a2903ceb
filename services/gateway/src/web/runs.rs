//! Runs: history with trigger, scope, verdicts, tool calls, tokens and cost; one run in full.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::patrol::RunsQuery;
use pulse_domain::patrol::run::{PatrolRun, RunStatus};

use super::layout::{self, Nav, at, at_opt, badge, dollars, shown};
use super::session::WebUser;
use crate::authorized::MonitoringReadScope;
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;

fn scope(run: &PatrolRun) -> String {
    if run.effective_scope_resource_ids.is_empty() {
        "full".to_owned()
    } else {
        run.effective_scope_resource_ids.join(", ")
    }
}

/// Still waiting for a runner to finish it.
fn in_flight(run: &PatrolRun) -> bool {
    matches!(run.status, RunStatus::Queued | RunStatus::Running)
}

/// What a run cost, or "unknown" when its route has no price.
fn cost(run: &PatrolRun) -> String {
    run.cost_usd.map_or_else(|| "unknown".to_owned(), dollars)
}

pub async fn list(State(state): State<AppState>, user: WebUser) -> Response {
    let answer = match user.authorized::<MonitoringReadScope>() {
        Ok(auth) => layout::answer(
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
        Ok(answer) => answer.runs,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let running = runs.iter().any(in_flight);
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
                                    td { a href={"/runs/" (run.id)} { (at(&run.queued_at)) } }
                                    td { (badge(run.status.as_str())) }
                                    td { (run.trigger_reason) }
                                    td class="opt" { (scope(run)) }
                                    td {
                                        (run.new_findings) " new, "
                                        (run.existing_findings) " existing, "
                                        (run.resolved_findings) " resolved"
                                    }
                                    td class="opt" {
                                        (run.tool_call_count)
                                        @if run.tool_calls_recovered > 0 {
                                            " (" (run.tool_calls_recovered) " from text)"
                                        }
                                    }
                                    td class="opt" { (run.input_tokens) " in / " (run.output_tokens) " out" }
                                    td { (cost(run)) }
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
                layout::answer(crate::patrol::get(State(state), auth, ApiPath::parse(id)?).await)
            }
            .await
        }
        Err(error) => Err(error),
    };
    let run = match answer {
        Ok(run) => run,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    layout::page(&user, "Run", Nav::Runs, run_body(&run))
}

/// One run in full.
fn run_body(run: &PatrolRun) -> Markup {
    html! {
        p { a href="/runs" { "← All runs" } }
        div id="run" data-live data-pending[in_flight(run)] {
            h1 { "Run " code { (run.id) } }
            p { (badge(run.status.as_str())) }
            div class="grid" {
                div class="panel" {
                    dl class="facts" {
                        dt { "Trigger" } dd { (run.trigger_reason) }
                        dt { "Type" } dd { (run.run_type.as_str()) }
                        dt { "Scope" } dd { (scope(run)) }
                        dt { "Queued" } dd { (at(&run.queued_at)) }
                        dt { "Started" } dd { (at_opt(run.started_at.as_ref())) }
                        dt { "Completed" } dd { (at_opt(run.completed_at.as_ref())) }
                        dt { "Resources checked" } dd { (run.counts.resources_checked) }
                        dt { "Model turns" } dd { (run.turns) }
                        @if run.tool_calls_recovered > 0 {
                            dt { "Tool calls recovered from text" }
                            dd { (run.tool_calls_recovered) " of " (run.tool_call_count) }
                        }
                        dt { "Tokens" } dd { (run.input_tokens) " in / " (run.output_tokens) " out" }
                        dt { "Cost" } dd { (cost(run)) }
                    }
                }
                @if let Some(summary) = &run.error_summary {
                    div class="panel" {
                        h2 { "Error" }
                        p class="flash error" { (shown(Some(summary))) }
                        p { (shown(run.error_detail.as_deref())) }
                        @if let Some(remedy) = &run.error_recommendation {
                            p { strong { "What to do: " } (shown(Some(remedy))) }
                        }
                    }
                }
            }
            h2 { "Verdicts" }
            @if run.finding_assessments.is_empty() {
                p { "No verdicts on existing findings." }
            } @else {
                ul {
                    @for v in &run.finding_assessments {
                        li {
                            a href={"/findings/" (shown(Some(&v.finding_id)))} { code { (shown(Some(&v.finding_id))) } }
                            " · " (badge(&v.verdict)) " · " (shown(Some(&v.reason)))
                        }
                    }
                }
            }
            @if !run.finding_ids.is_empty() {
                p { "Findings recorded: "
                    @for id in &run.finding_ids { a href={"/findings/" (shown(Some(id)))} { code { (shown(Some(id))) } } " " }
                }
            }
            h2 { "Tool calls" }
            @if run.tool_calls.is_empty() {
                p { "No tool calls recorded." }
            } @else {
                ol {
                    @for call in &run.tool_calls {
                        li {
                            details {
                                summary {
                                    code { (shown(Some(&call.tool_name))) } " · "
                                    @if call.success { "ok" } @else { "failed" }
                                    @if call.recovered_from_text { " · recovered from text" }
                                    " · " (call.duration_ms) " ms"
                                }
                                p { strong { "Input" } }
                                pre { (shown(Some(&call.input))) }
                                p { strong { "Output" } }
                                pre { (shown(Some(&call.output))) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use pulse_domain::patrol::run::{RunId, RunType, TriggerReason};

    use super::*;

    #[test]
    fn a_failed_run_says_what_went_wrong_and_what_to_do() {
        let mut run = PatrolRun::queued(
            RunId::from_uuid(uuid::Uuid::nil()),
            TriggerReason::Manual,
            RunType::Full,
            Utc::now(),
        );
        run.status = RunStatus::Error;
        run.error_summary = Some("the provider refused the key".to_owned());
        run.error_recommendation = Some("set a valid key in the AI settings".to_owned());
        let page = run_body(&run).into_string();
        assert!(
            page.contains("the provider refused the key"),
            "no error summary: {page}"
        );
        assert!(
            page.contains("What to do: </strong>set a valid key in the AI settings"),
            "no remedy: {page}"
        );
        assert!(page.contains("data-live"), "{page}");
        assert!(
            !page.contains("data-pending"),
            "a failed run is not pending: {page}"
        );
    }

    #[test]
    fn calls_recovered_from_text_are_shown_on_the_run_and_on_each_call() {
        let mut run = PatrolRun::queued(
            RunId::from_uuid(uuid::Uuid::nil()),
            TriggerReason::Manual,
            RunType::Full,
            Utc::now(),
        );
        assert!(!run_body(&run).into_string().contains("recovered from text"));
        let now = Utc::now();
        run.tool_calls = vec![
            pulse_domain::patrol::run::ToolCallRecord::new(
                "txt000000",
                "pulse_query",
                "{}",
                "[]",
                true,
                now,
                now,
            )
            .recovered_from_text(true),
        ];
        run.tool_call_count = 1;
        run.tool_calls_recovered = 1;
        let page = run_body(&run).into_string();
        assert!(
            page.contains("<dt>Tool calls recovered from text</dt><dd>1 of 1</dd>"),
            "{page}"
        );
        assert!(page.contains("ok · recovered from text"), "{page}");
    }

    #[test]
    fn a_queued_run_is_polled_and_costs_unknown_without_a_price() {
        let run = PatrolRun::queued(
            RunId::from_uuid(uuid::Uuid::nil()),
            TriggerReason::Scheduled,
            RunType::Full,
            Utc::now(),
        );
        let page = run_body(&run).into_string();
        assert!(page.contains("data-pending"), "{page}");
        assert!(page.contains("<dd>unknown</dd>"), "{page}");
        assert!(page.contains("<dd>full</dd>"), "a full run's scope: {page}");
    }
}
