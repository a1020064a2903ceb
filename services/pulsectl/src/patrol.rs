//! `pulsectl patrol run | status | runs` over the gateway's Patrol API:
//! `POST /api/ai/patrol/run`, `GET /api/ai/patrol/status`, `GET /api/ai/patrol/runs?limit=` and
//! `GET /api/ai/patrol/runs/{id}`.
//!
//! Human text by default; `--json` prints the answer as JSON. Answers are the API's own types
//! (`pulse-api`, `pulse-domain`), read through the typed client: a changed answer breaks this
//! build rather than its output.

use chrono::{DateTime, Utc};
use pulse_api::patrol::RunAccepted;
use pulse_domain::patrol::run::{PatrolRun, RunType};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::patrol::status::{HealthBasis, PatrolStatus};

use crate::cli::{PatrolRunArgs, PatrolRunsArgs};
use crate::gateway_client::{ApiError, GatewayClient, print_json};
use crate::text::{display_time, render_table, wire_name};

/// 2 when the API refused the input (a 4xx answer), 1 for everything else: an unavailable
/// scheduler (503), a failing gateway, a transport error.
pub fn exit_code(err: &ApiError) -> u8 {
    match err {
        ApiError::Api { status, .. } if (400..500).contains(status) => 2,
        _ => 1,
    }
}

/// The body of `POST /api/ai/patrol/run`: the default (sent as no body) for a full run.
pub fn run_body(args: &PatrolRunArgs) -> RawRunRequest {
    if args.resources.is_empty() && args.types.is_empty() {
        return RawRunRequest::default();
    }
    let non_empty = |items: Vec<String>| (!items.is_empty()).then_some(items);
    RawRunRequest {
        resource_ids: non_empty(args.resources.clone()),
        resource_types: non_empty(args.types.iter().map(|t| t.as_str().to_owned()).collect()),
        context: args.context.clone(),
        ..RawRunRequest::default()
    }
}

pub async fn run(client: &GatewayClient, args: &PatrolRunArgs) -> Result<(), ApiError> {
    let accepted = client.api().run_patrol(&run_body(args)).await?;
    if args.json {
        print_json(&accepted);
    } else {
        print!("{}", describe_accepted(&accepted));
    }
    Ok(())
}

pub async fn status(client: &GatewayClient, json: bool) -> Result<(), ApiError> {
    let status = client.api().patrol_status().await?;
    if json {
        print_json(&status);
    } else {
        print!("{}", describe_status(&status));
    }
    Ok(())
}

/// `patrol runs [--limit N]` or `patrol runs <ID>`.
pub async fn runs(client: &GatewayClient, args: &PatrolRunsArgs) -> Result<(), ApiError> {
    if let Some(id) = &args.id {
        let run = client.api().patrol_run(id).await?;
        if args.json {
            print_json(&run);
        } else {
            print!("{}", describe_run(&run));
        }
        return Ok(());
    }
    let list = client.api().patrol_runs(args.limit.map(u32::from)).await?;
    if args.json {
        print_json(&list);
    } else if list.runs.is_empty() {
        println!("no patrol runs");
    } else {
        print!("{}", render_runs(&list.runs));
    }
    Ok(())
}

fn or_dash(text: Option<&str>) -> &str {
    text.unwrap_or("-")
}

/// `30m`, `1h30m`, `45s`, `250ms`.
pub fn display_interval(ms: u64) -> String {
    if ms == 0 {
        return "not set".to_owned();
    }
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

fn display_ids(ids: &[String]) -> String {
    if ids.is_empty() {
        "-".to_owned()
    } else {
        ids.join(", ")
    }
}

/// Aligned `label  value` lines.
fn key_values(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    rows.iter()
        .map(|(k, v)| format!("{k:<width$}  {v}\n"))
        .collect()
}

fn time(at: Option<DateTime<Utc>>, absent: &str) -> String {
    display_time(at.map(|t| t.to_rfc3339()).as_deref(), absent)
}

pub fn describe_accepted(answer: &RunAccepted) -> String {
    let accepted = &answer.accepted;
    let run_type = accepted.run_type;
    let mut rows = vec![
        ("run", accepted.run_id.to_string()),
        ("status", answer.status.to_string()),
        ("type", run_type.as_str().to_owned()),
    ];
    if run_type == RunType::Full && accepted.scope_resource_ids.is_empty() {
        rows.push(("scope", "all resources".to_owned()));
    } else {
        rows.push(("requested", display_ids(&accepted.scope_resource_ids)));
        rows.push((
            "effective",
            display_ids(&accepted.effective_scope_resource_ids),
        ));
    }
    format!(
        "accepted patrol run {}\n{}",
        accepted.run_id,
        key_values(&rows)
    )
}

pub fn describe_status(status: &PatrolStatus) -> String {
    let running = match (&status.current_run_id, status.running) {
        (Some(id), _) => format!(
            "yes: run {id} ({})",
            or_dash(status.current_run_type.map(RunType::as_str))
        ),
        (None, true) => "yes".to_owned(),
        (None, false) => "no".to_owned(),
    };
    let health = match (status.healthy, status.health_basis) {
        (Some(true), _) => "healthy".to_owned(),
        (Some(false), HealthBasis::ActiveFindings) => {
            "unhealthy: warning or critical findings are active".to_owned()
        }
        (Some(false), _) => "unhealthy".to_owned(),
        (None, HealthBasis::RecentFullRunErrored) => {
            "not known: the last full run ended in error".to_owned()
        }
        (None, HealthBasis::ConnectionUnreadable) => {
            "not known: a Proxmox connection cannot be read (see the readiness checks)".to_owned()
        }
        (None, _) => "not known: no recent full run".to_owned(),
    };
    let c = &status.active_findings;
    let findings = format!(
        "{} ({} critical, {} warning, {} watch, {} info)",
        c.total, c.critical, c.warning, c.watch, c.info
    );
    let mut rows = vec![
        ("state", wire_name(&status.runtime_state)),
        ("health", health),
        ("active findings", findings),
        ("running", running),
        ("last patrol", time(status.last_patrol_at, "never")),
        ("next patrol", time(status.next_patrol_at, "not scheduled")),
        ("interval", display_interval(status.interval_ms)),
        ("queued scoped runs", status.queued_scoped_runs.to_string()),
    ];
    if let Some(reason) = &status.blocked_reason {
        rows.push(("blocked", reason.clone()));
    }
    key_values(&rows)
}

pub fn describe_run(run: &PatrolRun) -> String {
    let mut rows = vec![
        ("run", run.id.to_string()),
        ("trigger", run.trigger_reason.to_string()),
        ("type", run.run_type.as_str().to_owned()),
        ("status", run.status.to_string()),
        ("queued", time(Some(run.queued_at), "-")),
        ("started", time(run.started_at, "-")),
        ("finished", time(run.completed_at, "-")),
        (
            "duration",
            run.duration_ms
                .map(display_interval)
                .unwrap_or_else(|| "-".to_owned()),
        ),
        ("requested", display_ids(&run.scope_resource_ids)),
        ("effective", display_ids(&run.effective_scope_resource_ids)),
    ];
    if !run.scope_resource_types.is_empty() {
        let types: Vec<&str> = run
            .scope_resource_types
            .iter()
            .map(|t| t.as_str())
            .collect();
        rows.push(("types", types.join(", ")));
    }
    if let Some(context) = &run.scope_context {
        rows.push(("context", context.clone()));
    }
    rows.push(("checked", run.counts.resources_checked.to_string()));
    rows.push(("new findings", run.new_findings.to_string()));
    rows.push(("errors", run.error_count.to_string()));
    if run.tool_calls_recovered > 0 {
        rows.push((
            "from text",
            format!(
                "{} of {} tool calls were written as text and recovered",
                run.tool_calls_recovered, run.tool_call_count
            ),
        ));
    }
    if let Some(summary) = &run.error_summary {
        rows.push(("error", summary.clone()));
    }
    if let Some(recommendation) = &run.error_recommendation {
        rows.push(("what to do", recommendation.clone()));
    }
    key_values(&rows)
}

/// One run per line, newest first as the API lists them, columns padded to their widest cell.
pub fn render_runs(runs: &[PatrolRun]) -> String {
    let header = [
        "ID", "TRIGGER", "TYPE", "STATUS", "QUEUED", "STARTED", "FINISHED", "CHECKED", "NEW",
        "ERRORS",
    ]
    .map(str::to_owned);
    let mut rows = vec![header.to_vec()];
    for run in runs {
        rows.push(vec![
            run.id.to_string(),
            run.trigger_reason.to_string(),
            run.run_type.as_str().to_owned(),
            run.status.to_string(),
            time(Some(run.queued_at), "-"),
            time(run.started_at, "-"),
            time(run.completed_at, "-"),
            run.counts.resources_checked.to_string(),
            run.new_findings.to_string(),
            run.error_count.to_string(),
        ]);
    }
    render_table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command, PatrolCommand};
    use clap::Parser;
    use pulse_client::StatusCode;
    use pulse_domain::patrol::run::{RunStatus, TriggerReason};
    use pulse_domain::resource::ResourceType;

    fn parse(args: &[&str]) -> Result<PatrolCommand, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("pulsectl").chain(args.iter().copied()))?;
        match cli.command {
            Command::Patrol(command) => Ok(command),
            other => panic!("parsed {other:?}"),
        }
    }

    fn run_args(args: &[&str]) -> PatrolRunArgs {
        match parse(args).unwrap() {
            PatrolCommand::Run(args) => args,
            other => panic!("parsed {other:?}"),
        }
    }

    #[test]
    fn run_without_scope_is_a_full_run_with_no_body() {
        let args = run_args(&["patrol", "run"]);
        assert!(!args.json);
        assert_eq!(run_body(&args), RawRunRequest::default());
    }

    #[test]
    fn run_scope_options_become_the_request_body() {
        let args = run_args(&[
            "patrol",
            "run",
            "--resource",
            "service:web-1:nginx",
            "--resource",
            "web-1",
            "--type",
            "app-container",
            "--context",
            "after the deploy",
            "--json",
        ]);
        assert!(args.json);
        assert_eq!(args.types, vec![ResourceType::AppContainer]);
        assert_eq!(
            serde_json::to_value(run_body(&args)).unwrap(),
            serde_json::json!({
                "resource_ids": ["service:web-1:nginx", "web-1"],
                "resource_types": ["app-container"],
                "context": "after the deploy",
            })
        );
        let types_only = run_args(&["patrol", "run", "--type", "host"]);
        assert_eq!(
            serde_json::to_value(run_body(&types_only)).unwrap(),
            serde_json::json!({"resource_types": ["host"]})
        );
    }

    #[test]
    fn bad_run_arguments_are_refused_before_any_request() {
        let err = parse(&["patrol", "run", "--type", "k8s-pod"]).unwrap_err();
        assert!(err.to_string().contains("\"k8s-pod\""), "{err}");
        // Context alone names no scope: the API would refuse it, so the CLI does first.
        let err = parse(&["patrol", "run", "--context", "why"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn runs_takes_a_limit_or_one_id() {
        let PatrolCommand::Runs(args) = parse(&["patrol", "runs", "--limit", "5"]).unwrap() else {
            panic!("not runs");
        };
        assert_eq!((args.id, args.limit, args.json), (None, Some(5), false));
        let PatrolCommand::Runs(args) = parse(&["patrol", "runs", "0190-abc", "--json"]).unwrap()
        else {
            panic!("not runs");
        };
        assert_eq!((args.id.as_deref(), args.limit), (Some("0190-abc"), None));
        for bad in ["0", "201", "ten"] {
            assert!(parse(&["patrol", "runs", "--limit", bad]).is_err(), "{bad}");
        }
        assert!(parse(&["patrol", "runs", "abc", "--limit", "3"]).is_err());
        let PatrolCommand::Status { json } = parse(&["patrol", "status", "--json"]).unwrap() else {
            panic!("not status");
        };
        assert!(json);
    }

    #[test]
    fn refused_input_exits_2_and_unavailability_1() {
        let cases = [
            (StatusCode::UNPROCESSABLE_ENTITY, "unprocessable_scope", 2),
            (StatusCode::BAD_REQUEST, "invalid_parameter", 2),
            (StatusCode::FORBIDDEN, "missing_scope", 2),
            (StatusCode::NOT_FOUND, "not_found", 2),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "patrol_scheduler_unavailable",
                1,
            ),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal_error", 1),
        ];
        for (status, code, expected) in cases {
            let body = format!(r#"{{"error": "{code}", "message": "m"}}"#);
            let err = crate::gateway_client::api_error(status, &body);
            assert_eq!(exit_code(&err), expected, "{status}");
            let wrapped = crate::Error::Patrol(err);
            assert_eq!(wrapped.exit_code(), expected, "{status}");
            assert_eq!(wrapped.to_string(), format!("{code}: m"));
        }
        let html = crate::gateway_client::api_error(
            StatusCode::BAD_GATEWAY,
            "<html><body>bad gateway</body></html>",
        );
        assert_eq!(exit_code(&html), 1);
        assert_eq!(
            exit_code(&ApiError::NotRunning {
                url: "http://127.0.0.1:1".into()
            }),
            1
        );
    }

    #[test]
    fn display_interval_is_compact() {
        assert_eq!(display_interval(0), "not set");
        assert_eq!(display_interval(30 * 60_000), "30m");
        assert_eq!(display_interval(90 * 60_000), "1h30m");
        assert_eq!(display_interval(45_000), "45s");
        assert_eq!(display_interval(1_250), "1250ms");
    }

    #[test]
    fn accepted_runs_say_what_was_scoped() {
        let full: RunAccepted = serde_json::from_value(serde_json::json!({
            "run_id": "0193a1b2-0000-7000-8000-000000000001",
            "status": "queued",
            "type": "full",
            "trigger_reason": "manual",
            "queued_at": "2026-11-29T12:00:00Z",
            "scope_resource_ids": [],
            "effective_scope_resource_ids": [],
        }))
        .unwrap();
        assert_eq!(
            describe_accepted(&full),
            "\
accepted patrol run 0193a1b2-0000-7000-8000-000000000001
run     0193a1b2-0000-7000-8000-000000000001
status  queued
type    full
scope   all resources
"
        );
        let scoped: RunAccepted = serde_json::from_value(serde_json::json!({
            "run_id": "0193a1b2-0000-7000-8000-000000000002",
            "status": "queued",
            "type": "scoped",
            "trigger_reason": "manual",
            "queued_at": "2026-11-29T12:00:00Z",
            "scope_resource_ids": ["web-1"],
            "effective_scope_resource_ids": ["host:web-1"],
        }))
        .unwrap();
        assert_eq!(
            describe_accepted(&scoped),
            "\
accepted patrol run 0193a1b2-0000-7000-8000-000000000002
run        0193a1b2-0000-7000-8000-000000000002
status     queued
type       scoped
requested  web-1
effective  host:web-1
"
        );
    }

    fn status(fields: serde_json::Value) -> PatrolStatus {
        let mut status = serde_json::json!({
            "runtime_state": "active", "enabled": true, "running": false,
            "current_run_id": null, "current_run_type": null, "last_patrol_at": null,
            "last_activity_at": null, "next_patrol_at": null, "interval_ms": 0,
            "last_duration_ms": null, "resources_checked": null, "findings_count": 0,
            "active_findings": {"critical": 0, "warning": 0, "watch": 0, "info": 0, "total": 0},
            "error_count": null, "queued_scoped_runs": 0, "healthy": null,
            "health_basis": "no_recent_full_run", "blocked_reason": null, "blocked_cause": null,
            "blocked_until": null, "readiness_checks": [],
        });
        for (key, value) in fields.as_object().unwrap() {
            status[key] = value.clone();
        }
        serde_json::from_value(status).unwrap()
    }

    #[test]
    fn status_shows_the_current_run_and_a_blocked_reason() {
        let running = status(serde_json::json!({
            "runtime_state": "running",
            "running": true,
            "current_run_id": "0193a1b2-0000-7000-8000-000000000001",
            "current_run_type": "full",
            "interval_ms": 1_800_000,
            "queued_scoped_runs": 2,
            "healthy": false,
            "health_basis": "active_findings",
            "findings_count": 3,
            "active_findings": {"critical": 1, "warning": 1, "watch": 0, "info": 1, "total": 3},
        }));
        assert_eq!(
            describe_status(&running),
            "\
state               running
health              unhealthy: warning or critical findings are active
active findings     3 (1 critical, 1 warning, 0 watch, 1 info)
running             yes: run 0193a1b2-0000-7000-8000-000000000001 (full)
last patrol         never
next patrol         not scheduled
interval            30m
queued scoped runs  2
"
        );
        let blocked = status(serde_json::json!({
            "runtime_state": "blocked",
            "last_patrol_at": "2026-11-29T11:00:05.123Z",
            "blocked_reason": "no model provider is configured",
        }));
        let text = describe_status(&blocked);
        assert!(
            text.contains("health              not known: no recent full run\n"),
            "{text}"
        );
        assert!(
            text.contains("active findings     0 (0 critical, 0 warning, 0 watch, 0 info)\n"),
            "{text}"
        );
        assert!(text.contains("running             no\n"), "{text}");
        assert!(
            text.contains("last patrol         2026-11-29 11:00:05\n"),
            "{text}"
        );
        assert!(text.contains("interval            not set\n"), "{text}");
        assert!(
            text.ends_with("blocked             no model provider is configured\n"),
            "{text}"
        );
    }

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    fn sample_runs() -> Vec<PatrolRun> {
        let mut scoped = PatrolRun::queued(
            "0193a1b2-0000-7000-8000-000000000002".parse().unwrap(),
            TriggerReason::Manual,
            RunType::Scoped,
            at("2026-11-29T12:00:01Z"),
        );
        scoped.scope_resource_ids = vec!["web-1".into()];
        scoped.effective_scope_resource_ids = vec!["host:web-1".into()];
        scoped.scope_context = Some("after the deploy".into());
        let mut full = PatrolRun::queued(
            "0193a1b2-0000-7000-8000-000000000001".parse().unwrap(),
            TriggerReason::Scheduled,
            RunType::Full,
            at("2026-11-29T11:00:00Z"),
        );
        full.status = RunStatus::IssuesFound;
        full.started_at = Some(at("2026-11-29T11:00:02Z"));
        full.completed_at = Some(at("2026-11-29T11:01:32Z"));
        full.duration_ms = Some(90_000);
        full.counts.resources_checked = 12;
        full.new_findings = 3;
        full.error_count = 1;
        full.error_summary = Some("one host did not answer".into());
        vec![scoped, full]
    }

    #[test]
    fn runs_table_aligns_columns() {
        assert_eq!(
            render_runs(&sample_runs()),
            "\
ID                                    TRIGGER    TYPE    STATUS        QUEUED               STARTED              FINISHED             CHECKED  NEW  ERRORS
0193a1b2-0000-7000-8000-000000000002  manual     scoped  queued        2026-11-29 12:00:01  -                    -                    0        0    0
0193a1b2-0000-7000-8000-000000000001  scheduled  full    issues_found  2026-11-29 11:00:00  2026-11-29 11:00:02  2026-11-29 11:01:32  12       3    1
"
        );
    }

    #[test]
    fn one_run_shows_scope_counts_and_errors() {
        let runs = sample_runs();
        assert_eq!(
            describe_run(&runs[1]),
            "\
run           0193a1b2-0000-7000-8000-000000000001
trigger       scheduled
type          full
status        issues_found
queued        2026-11-29 11:00:00
started       2026-11-29 11:00:02
finished      2026-11-29 11:01:32
duration      1m30s
requested     -
effective     -
checked       12
new findings  3
errors        1
error         one host did not answer
"
        );
        let mut weak = runs[1].clone();
        weak.tool_call_count = 5;
        weak.tool_calls_recovered = 4;
        assert!(
            describe_run(&weak)
                .contains("from text     4 of 5 tool calls were written as text and recovered\n"),
            "{}",
            describe_run(&weak)
        );
        let scoped = describe_run(&runs[0]);
        assert!(scoped.contains("effective     host:web-1\n"), "{scoped}");
        assert!(
            scoped.contains("context       after the deploy\n"),
            "{scoped}"
        );
    }
}
