//! `pulsectl patrol run | status | runs` over the gateway's Patrol API:
//! `POST /api/ai/patrol/run`, `GET /api/ai/patrol/status`, `GET /api/ai/patrol/runs?limit=` and
//! `GET /api/ai/patrol/runs/{id}`.
//!
//! Human text by default; `--json` prints the API's answer as it came. The answers are read
//! leniently (unknown fields ignored, missing ones shown as `-`) so an older or newer gateway
//! still gets readable output.

use pulse_domain::finding::SeverityCounts;
use reqwest::Method;
use serde::Deserialize;

use crate::cli::{PatrolRunArgs, PatrolRunsArgs};
use crate::gateway_client::{ApiError, GatewayClient};
use crate::text::{display_time, render_table};

/// 2 when the API refused the input (a 4xx answer), 1 for everything else: an unavailable
/// scheduler (503), a failing gateway, a transport error.
pub fn exit_code(err: &ApiError) -> u8 {
    match err {
        ApiError::Api { status, .. } if (400..500).contains(status) => 2,
        _ => 1,
    }
}

/// The answer to an accepted run request (`202`).
#[derive(Debug, Clone, Deserialize)]
pub struct Accepted {
    pub run_id: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(rename = "type", default)]
    pub run_type: Option<String>,
    #[serde(default)]
    pub scope_resource_ids: Vec<String>,
    #[serde(default)]
    pub effective_scope_resource_ids: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    pub runtime_state: String,
    #[serde(default)]
    pub running: bool,
    #[serde(default)]
    pub current_run_id: Option<String>,
    #[serde(default)]
    pub current_run_type: Option<String>,
    #[serde(default)]
    pub last_patrol_at: Option<String>,
    #[serde(default)]
    pub next_patrol_at: Option<String>,
    #[serde(default)]
    pub interval_ms: u64,
    #[serde(default)]
    pub queued_scoped_runs: u32,
    #[serde(default)]
    pub blocked_reason: Option<String>,
    #[serde(default)]
    pub healthy: Option<bool>,
    #[serde(default)]
    pub health_basis: Option<String>,
    #[serde(default)]
    pub findings_count: Option<u32>,
    #[serde(default)]
    pub active_findings: Option<SeverityCounts>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub id: String,
    #[serde(default)]
    pub trigger_reason: Option<String>,
    #[serde(rename = "type", default)]
    pub run_type: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub queued_at: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub completed_at: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub scope_resource_ids: Vec<String>,
    #[serde(default)]
    pub effective_scope_resource_ids: Vec<String>,
    #[serde(default)]
    pub scope_resource_types: Vec<String>,
    #[serde(default)]
    pub scope_context: Option<String>,
    #[serde(default)]
    pub resources_checked: u32,
    #[serde(default)]
    pub new_findings: u32,
    #[serde(default)]
    pub error_count: u32,
    #[serde(default)]
    pub error_summary: Option<String>,
    #[serde(default)]
    pub error_recommendation: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RunList {
    runs: Vec<Run>,
}

/// The body of `POST /api/ai/patrol/run`: `None` (no body) for a full run.
pub fn run_body(args: &PatrolRunArgs) -> Option<serde_json::Value> {
    if args.resources.is_empty() && args.types.is_empty() {
        return None;
    }
    let mut body = serde_json::Map::new();
    if !args.resources.is_empty() {
        body.insert("resource_ids".into(), serde_json::json!(args.resources));
    }
    if !args.types.is_empty() {
        let types: Vec<&str> = args.types.iter().map(|t| t.as_str()).collect();
        body.insert("resource_types".into(), serde_json::json!(types));
    }
    if let Some(context) = &args.context {
        body.insert("context".into(), serde_json::json!(context));
    }
    Some(serde_json::Value::Object(body))
}

pub async fn run(client: &GatewayClient, args: &PatrolRunArgs) -> Result<(), ApiError> {
    let body = run_body(args);
    let segments = ["api", "ai", "patrol", "run"];
    if let Some(accepted) = client
        .fetch::<Accepted>(Method::POST, &segments, body.as_ref(), args.json)
        .await?
    {
        print!("{}", describe_accepted(&accepted));
    }
    Ok(())
}

pub async fn status(client: &GatewayClient, json: bool) -> Result<(), ApiError> {
    let segments = ["api", "ai", "patrol", "status"];
    if let Some(status) = client
        .fetch::<Status>(Method::GET, &segments, None, json)
        .await?
    {
        print!("{}", describe_status(&status));
    }
    Ok(())
}

/// `gateway` with `query` as its query string. `GatewayClient::url` replaces only the path, so a
/// client built on this base sends the query with every request.
pub fn gateway_with_query(gateway: &str, query: &str) -> Result<String, ApiError> {
    let mut url =
        reqwest::Url::parse(gateway).map_err(|_| ApiError::GatewayUrl(gateway.to_owned()))?;
    url.set_query(Some(query));
    Ok(url.to_string())
}

/// A client on `gateway` that sends `query` (if any) with every request.
pub fn client_with_query(
    gateway: &str,
    token: String,
    query: Option<String>,
) -> Result<GatewayClient, ApiError> {
    match query {
        Some(query) => GatewayClient::new(&gateway_with_query(gateway, &query)?, token),
        None => GatewayClient::new(gateway, token),
    }
}

/// `patrol runs [--limit N]` or `patrol runs <ID>`. Takes the gateway and token rather than a
/// client: the list's limit is a query parameter, carried by the client's base URL.
pub async fn runs(gateway: &str, token: String, args: &PatrolRunsArgs) -> Result<(), ApiError> {
    if let Some(id) = &args.id {
        let client = GatewayClient::new(gateway, token)?;
        let segments = ["api", "ai", "patrol", "runs", id.as_str()];
        if let Some(run) = client
            .fetch::<Run>(Method::GET, &segments, None, args.json)
            .await?
        {
            print!("{}", describe_run(&run));
        }
        return Ok(());
    }
    let client = client_with_query(
        gateway,
        token,
        args.limit.map(|limit| format!("limit={limit}")),
    )?;
    let segments = ["api", "ai", "patrol", "runs"];
    if let Some(list) = client
        .fetch::<RunList>(Method::GET, &segments, None, args.json)
        .await?
    {
        if list.runs.is_empty() {
            println!("no patrol runs");
        } else {
            print!("{}", render_runs(&list.runs));
        }
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

pub fn describe_accepted(accepted: &Accepted) -> String {
    let run_type = or_dash(accepted.run_type.as_deref());
    let mut rows = vec![
        ("run", accepted.run_id.clone()),
        ("status", or_dash(accepted.status.as_deref()).to_owned()),
        ("type", run_type.to_owned()),
    ];
    if run_type == "full" && accepted.scope_resource_ids.is_empty() {
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

pub fn describe_status(status: &Status) -> String {
    let running = match (&status.current_run_id, status.running) {
        (Some(id), _) => format!(
            "yes: run {id} ({})",
            or_dash(status.current_run_type.as_deref())
        ),
        (None, true) => "yes".to_owned(),
        (None, false) => "no".to_owned(),
    };
    let health = match (status.healthy, status.health_basis.as_deref()) {
        (Some(true), _) => "healthy".to_owned(),
        (Some(false), Some("active_findings")) => {
            "unhealthy: warning or critical findings are active".to_owned()
        }
        (Some(false), _) => "unhealthy".to_owned(),
        (None, Some("recent_full_run_errored")) => {
            "not known: the last full run ended in error".to_owned()
        }
        (None, _) => "not known: no recent full run".to_owned(),
    };
    let findings = match (&status.active_findings, status.findings_count) {
        (Some(c), _) => format!(
            "{} ({} critical, {} warning, {} watch, {} info)",
            c.total, c.critical, c.warning, c.watch, c.info
        ),
        (None, Some(n)) => n.to_string(),
        (None, None) => "-".to_owned(),
    };
    let mut rows = vec![
        ("state", status.runtime_state.clone()),
        ("health", health),
        ("active findings", findings),
        ("running", running),
        (
            "last patrol",
            display_time(status.last_patrol_at.as_deref(), "never"),
        ),
        (
            "next patrol",
            display_time(status.next_patrol_at.as_deref(), "not scheduled"),
        ),
        ("interval", display_interval(status.interval_ms)),
        ("queued scoped runs", status.queued_scoped_runs.to_string()),
    ];
    if let Some(reason) = &status.blocked_reason {
        rows.push(("blocked", reason.clone()));
    }
    key_values(&rows)
}

pub fn describe_run(run: &Run) -> String {
    let mut rows = vec![
        ("run", run.id.clone()),
        ("trigger", or_dash(run.trigger_reason.as_deref()).to_owned()),
        ("type", or_dash(run.run_type.as_deref()).to_owned()),
        ("status", or_dash(run.status.as_deref()).to_owned()),
        ("queued", display_time(run.queued_at.as_deref(), "-")),
        ("started", display_time(run.started_at.as_deref(), "-")),
        ("finished", display_time(run.completed_at.as_deref(), "-")),
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
        rows.push(("types", run.scope_resource_types.join(", ")));
    }
    if let Some(context) = &run.scope_context {
        rows.push(("context", context.clone()));
    }
    rows.push(("checked", run.resources_checked.to_string()));
    rows.push(("new findings", run.new_findings.to_string()));
    rows.push(("errors", run.error_count.to_string()));
    if let Some(summary) = &run.error_summary {
        rows.push(("error", summary.clone()));
    }
    if let Some(recommendation) = &run.error_recommendation {
        rows.push(("what to do", recommendation.clone()));
    }
    key_values(&rows)
}

/// One run per line, newest first as the API lists them, columns padded to their widest cell.
pub fn render_runs(runs: &[Run]) -> String {
    let header = [
        "ID", "TRIGGER", "TYPE", "STATUS", "QUEUED", "STARTED", "FINISHED", "CHECKED", "NEW",
        "ERRORS",
    ]
    .map(str::to_owned);
    let mut rows = vec![header.to_vec()];
    for run in runs {
        rows.push(vec![
            run.id.clone(),
            or_dash(run.trigger_reason.as_deref()).to_owned(),
            or_dash(run.run_type.as_deref()).to_owned(),
            or_dash(run.status.as_deref()).to_owned(),
            display_time(run.queued_at.as_deref(), "-"),
            display_time(run.started_at.as_deref(), "-"),
            display_time(run.completed_at.as_deref(), "-"),
            run.resources_checked.to_string(),
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
    use pulse_domain::resource::ResourceType;
    use reqwest::StatusCode;

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
        assert_eq!(run_body(&args), None);
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
            run_body(&args),
            Some(serde_json::json!({
                "resource_ids": ["service:web-1:nginx", "web-1"],
                "resource_types": ["app-container"],
                "context": "after the deploy",
            }))
        );
        let types_only = run_args(&["patrol", "run", "--type", "host"]);
        assert_eq!(
            run_body(&types_only),
            Some(serde_json::json!({"resource_types": ["host"]}))
        );
    }

    #[test]
    fn bad_run_arguments_are_refused_before_any_request() {
        let err = parse(&["patrol", "run", "--type", "vm"]).unwrap_err();
        assert!(err.to_string().contains("\"vm\""), "{err}");
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
    fn the_limit_travels_as_a_query_on_the_gateway_base() {
        let base = gateway_with_query("http://127.0.0.1:7655", "limit=5").unwrap();
        let client = GatewayClient::new(&base, "t".into()).unwrap();
        assert_eq!(
            client.url(&["api", "ai", "patrol", "runs"]).as_str(),
            "http://127.0.0.1:7655/api/ai/patrol/runs?limit=5"
        );
        assert!(gateway_with_query("not a url", "limit=5").is_err());
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
        let full: Accepted = serde_json::from_value(serde_json::json!({
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
        let scoped: Accepted = serde_json::from_value(serde_json::json!({
            "run_id": "r2",
            "status": "queued",
            "type": "scoped",
            "scope_resource_ids": ["web-1"],
            "effective_scope_resource_ids": ["host:web-1"],
        }))
        .unwrap();
        assert_eq!(
            describe_accepted(&scoped),
            "\
accepted patrol run r2
run        r2
status     queued
type       scoped
requested  web-1
effective  host:web-1
"
        );
    }

    #[test]
    fn status_shows_the_current_run_and_a_blocked_reason() {
        let status: Status = serde_json::from_value(serde_json::json!({
            "runtime_state": "running",
            "enabled": true,
            "running": true,
            "current_run_id": "r1",
            "current_run_type": "full",
            "last_patrol_at": null,
            "next_patrol_at": null,
            "interval_ms": 1_800_000,
            "queued_scoped_runs": 2,
            "blocked_reason": null,
            "readiness_checks": [],
            "healthy": false,
            "health_basis": "active_findings",
            "findings_count": 3,
            "active_findings": {"critical": 1, "warning": 1, "watch": 0, "info": 1, "total": 3},
        }))
        .unwrap();
        assert_eq!(
            describe_status(&status),
            "\
state               running
health              unhealthy: warning or critical findings are active
active findings     3 (1 critical, 1 warning, 0 watch, 1 info)
running             yes: run r1 (full)
last patrol         never
next patrol         not scheduled
interval            30m
queued scoped runs  2
"
        );
        let blocked: Status = serde_json::from_value(serde_json::json!({
            "runtime_state": "blocked",
            "running": false,
            "last_patrol_at": "2026-11-29T11:00:05.123Z",
            "interval_ms": 0,
            "blocked_reason": "no model provider is configured",
        }))
        .unwrap();
        let text = describe_status(&blocked);
        assert!(
            text.contains("health              not known: no recent full run\n"),
            "{text}"
        );
        assert!(text.contains("active findings     -\n"), "{text}");
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

    fn sample_runs() -> Vec<Run> {
        serde_json::from_value(serde_json::json!([
            {
                "id": "r2", "trigger_reason": "manual", "type": "scoped", "status": "queued",
                "queued_at": "2026-11-29T12:00:01Z", "started_at": null, "completed_at": null,
                "scope_resource_ids": ["web-1"],
                "effective_scope_resource_ids": ["host:web-1"],
                "scope_resource_types": [], "scope_context": "after the deploy",
                "resources_checked": 0, "new_findings": 0, "error_count": 0,
            },
            {
                "id": "run-1", "trigger_reason": "scheduled", "type": "full",
                "status": "completed", "queued_at": "2026-11-29T11:00:00Z",
                "started_at": "2026-11-29T11:00:02Z", "completed_at": "2026-11-29T11:01:32Z",
                "duration_ms": 90_000, "resources_checked": 12, "new_findings": 3,
                "error_count": 1, "error_summary": "one host did not answer",
            },
        ]))
        .unwrap()
    }

    #[test]
    fn runs_table_aligns_columns() {
        assert_eq!(
            render_runs(&sample_runs()),
            "\
ID     TRIGGER    TYPE    STATUS     QUEUED               STARTED              FINISHED             CHECKED  NEW  ERRORS
r2     manual     scoped  queued     2026-11-29 12:00:01  -                    -                    0        0    0
run-1  scheduled  full    completed  2026-11-29 11:00:00  2026-11-29 11:00:02  2026-11-29 11:01:32  12       3    1
"
        );
    }

    #[test]
    fn one_run_shows_scope_counts_and_errors() {
        let runs = sample_runs();
        assert_eq!(
            describe_run(&runs[1]),
            "\
run           run-1
trigger       scheduled
type          full
status        completed
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
        let scoped = describe_run(&runs[0]);
        assert!(scoped.contains("effective     host:web-1\n"), "{scoped}");
        assert!(
            scoped.contains("context       after the deploy\n"),
            "{scoped}"
        );
    }
}
