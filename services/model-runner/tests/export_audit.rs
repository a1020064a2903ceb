//! The export audit from the loop, against the provider simulator over real HTTP and the real
//! audit chain: canary secrets in labels, environment, logs and tool results never reach the
//! simulator nor the audit rows; each request leaves one `model.export` record with counts only.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use pulse_agent_loop::agent_loop::{
    AgentLoop, ExportAudit, LoopInput, LoopLimits, LoopOutcome, LoopStop, ProviderExport,
    RecordError, ToolHandler, UsageNotRecorded,
};
use pulse_agent_loop::provider::{Message, Protocol, Provider, ToolCall, ToolResult};
use pulse_agent_loop::route::Route;
use pulse_capabilities::{AdmittedCall, ExecutionProfile, ToolPolicy};
use pulse_domain::TenantId;
use pulse_model_runner::export_audit::{AuditedExports, EXPORT_ACTOR, EXPORT_KIND};
use pulse_model_runner::registry::RouteClass;
use pulse_redaction::{Destination, LocalOnlyResource, RedactionConfig, RedactionKind, Redactor};
use pulse_store::{audit, tenants};
use pulse_test_support::db::TestDb;
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn};
use serde_json::{Value, json};

const ROUTE: &str = "openai:sim-model";
const GOAL: &str = "Check the fleet and explain what is unhealthy.";

// Labels.
const GITHUB_TOKEN: &str = "ghp_CanaryToken0123456789abcdefghijklmnop";
const SLACK_TOKEN: &str = "xoxb-1234567890-canary-slacktoken";
// Environment.
const AWS_KEY: &str = "AKIAIOSFODNN7CANARY1";
const DB_PASSWORD: &str = "hunter2-canary";
const OPENAI_KEY: &str = "sk-proj-Canary0123456789abcdefghij";
// Logs.
const BEARER: &str = "Zm9vYmFyY2FuYXJ5dG9rZW4xMjM";
const URL_PASSWORD: &str = "urlpass-canary";
const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.c2lnbmF0dXJlY2FuYXJ5";
// Tool results.
const CONFIGURED: &str = "configured-canary-value";
const JSON_TOKEN: &str = "json-token-canary";
const ANTHROPIC_KEY: &str = "sk-ant-api03-Canary0123456789abcdefghij";
const LOCAL_ID: &str = "vm-payroll-01";

const CANARIES: &[&str] = &[
    GITHUB_TOKEN,
    SLACK_TOKEN,
    AWS_KEY,
    DB_PASSWORD,
    OPENAI_KEY,
    BEARER,
    URL_PASSWORD,
    JWT,
    CONFIGURED,
    JSON_TOKEN,
    ANTHROPIC_KEY,
    LOCAL_ID,
];

fn seed_context() -> String {
    let labels = format!(
        "labels of {LOCAL_ID}: com.example.owner=ops, github={GITHUB_TOKEN}, slack={SLACK_TOKEN}"
    );
    let environment =
        format!("DB_PASSWORD={DB_PASSWORD}\nAWS_ACCESS_KEY_ID={AWS_KEY}\nOPENAI={OPENAI_KEY}");
    let logs = format!(
        "GET /api/health Authorization: Bearer {BEARER}\n\
         connecting to postgres://app:{URL_PASSWORD}@db.local:5432/app\nsession jwt={JWT}"
    );
    format!("{GOAL}\n{labels}\n{environment}\n{logs}")
}

/// A read whose result leaks more secrets.
struct LeakyRead;

impl ToolHandler for LeakyRead {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        _admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let body = format!(
                r#"{{"container": "{LOCAL_ID}", "env": {{"API_TOKEN": "{JSON_TOKEN}"}}, "log": "leaked {CONFIGURED} and {ANTHROPIC_KEY}"}}"#
            );
            ToolResult::ok(&call.id, body)
        })
    }
}

fn redactor() -> Redactor {
    Redactor::new(
        Destination::external(ROUTE),
        &RedactionConfig {
            secrets: vec![CONFIGURED.to_owned()],
            local_only: vec![LocalOnlyResource {
                identifiers: vec![LOCAL_ID.to_owned()],
            }],
        },
    )
    .expect("redactor")
}

async fn run(sim: &ProviderSim, exports: &dyn ExportAudit) -> LoopOutcome {
    let provider = Provider::new(sim.route_config(Protocol::OpenAiCompatible)).expect("provider");
    let redactor = redactor();
    AgentLoop::run(LoopInput {
        transport: &provider,
        route: Route::parse(ROUTE).expect("route"),
        route_class: RouteClass::MeteredApi,
        system_prompt: "You are Pulse Patrol.".into(),
        messages: vec![Message::user(seed_context())],
        policy: ToolPolicy::for_profile(ExecutionProfile::PatrolDetection).expect("policy"),
        handler: &LeakyRead,
        redactor: &redactor,
        exports,
        usage: &UsageNotRecorded,
        limits: LoopLimits::default(),
        compaction: None,
        allowance: None,
        stream: true,
        temperature: None,
        tool_calls_from_text: false,
        listed: None,
        observer: None,
    })
    .await
}

fn script() -> Script {
    Script::turns([
        Turn::tool("pulse_query", json!({"action": "list", "limit": 5})),
        Turn::text("Summary: one container leaks credentials in its environment."),
    ])
}

/// The simulator's request log as any client sees it: `GET /_sim/requests`.
async fn recorded_requests(sim: &ProviderSim) -> anyhow::Result<String> {
    pulse_test_support::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let response = client
        .get(format!("{}/_sim/requests", sim.base_url()))
        .send()
        .await?;
    anyhow::ensure!(response.status().is_success(), "{}", response.status());
    Ok(response.text().await?)
}

fn counts(payload: &Value) -> BTreeMap<String, u64> {
    payload["redactions"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn every_export_is_audited_with_counts_only_and_no_canary_leaves() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let a = TenantId::new("tenant-a")?;
    tenants::create(db.store(), &a, "tenant-a").await?;
    let b = TenantId::new("tenant-b")?;
    tenants::create(db.store(), &b, "tenant-b").await?;
    let sim = ProviderSim::start(script()).await?;
    let exports = AuditedExports::new(db.store().clone(), a.clone()).with_run_id("run-42");

    let outcome = run(&sim, &exports).await;
    assert_eq!(outcome.stop, LoopStop::Completed);

    // Nothing the provider received carries a canary.
    let log = recorded_requests(&sim).await?;
    let entries: Vec<Value> = serde_json::from_str(&log)?;
    assert_eq!(entries.len(), 2);
    for canary in CANARIES {
        assert!(!log.contains(canary), "{canary} reached the provider");
    }
    // The redacted request still reached it, with the markers in place of the secrets.
    assert!(log.contains("[REDACTED:aws_access_key]"));
    assert!(log.contains("[REDACTED:configured_secret]"));
    assert!(log.contains("Check the fleet"));

    // One audit record per request, in order, each with the destination and counts only.
    let tx = db.store().tenant_tx(&a).await?;
    let records = audit::list(&tx, 0, 100).await?;
    assert_eq!(records.len(), 2);
    assert_eq!(outcome.redactions.len(), 2);
    for (i, (record, report)) in records.iter().zip(&outcome.redactions).enumerate() {
        assert_eq!(record.kind, EXPORT_KIND);
        assert_eq!(record.actor, EXPORT_ACTOR);
        assert_eq!(record.subject, ROUTE);
        assert_eq!(record.payload["destination"], json!(ROUTE));
        assert_eq!(record.payload["boundary"], json!("external"));
        assert_eq!(record.payload["local_only_withheld"], json!(true));
        assert_eq!(record.payload["call"], json!(i + 1));
        assert_eq!(record.payload["run_id"], json!("run-42"));
        assert_eq!(record.payload["total"], json!(report.total));
        let expected: BTreeMap<String, u64> = report
            .counts
            .iter()
            .map(|(k, n)| (k.as_str().to_owned(), *n))
            .collect();
        assert_eq!(counts(&record.payload), expected);
        let mut keys: Vec<&str> = record
            .payload
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "boundary",
                "call",
                "destination",
                "local_only_withheld",
                "redactions",
                "run_id",
                "total"
            ]
        );
    }
    // The seed context's secrets were counted in the first request.
    let first = counts(&records[0].payload);
    for kind in [
        RedactionKind::GithubToken,
        RedactionKind::SlackToken,
        RedactionKind::AwsAccessKey,
        RedactionKind::OpenaiKey,
        RedactionKind::BearerToken,
        RedactionKind::UrlCredentials,
        RedactionKind::Jwt,
        RedactionKind::LocalOnlyResource,
    ] {
        assert!(first.get(kind.as_str()).is_some_and(|n| *n > 0), "{kind:?}");
    }
    // The tool result's secrets only exist from the second request on.
    let second = counts(&records[1].payload);
    for kind in [RedactionKind::ConfiguredSecret, RedactionKind::AnthropicKey] {
        assert!(!first.contains_key(kind.as_str()), "{kind:?}");
        assert!(
            second.get(kind.as_str()).is_some_and(|n| *n > 0),
            "{kind:?}"
        );
    }
    assert!(records[1].payload["total"].as_u64() > records[0].payload["total"].as_u64());

    // Neither a redacted value nor the prompt is in the audit rows.
    let stored = serde_json::to_string(&records)?;
    for canary in CANARIES {
        assert!(!stored.contains(canary), "{canary} in the audit");
    }
    for prompt in [
        GOAL,
        "You are Pulse Patrol",
        "com.example.owner",
        "Summary:",
    ] {
        assert!(
            !stored.contains(prompt),
            "prompt text {prompt:?} in the audit"
        );
    }

    // The chain holds.
    let report = audit::verify(&tx).await?;
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.rows_checked, 2);
    drop(tx);

    // Another tenant's chain has none of it.
    let tx = db.store().tenant_tx(&b).await?;
    assert!(audit::list(&tx, 0, 100).await?.is_empty());
    drop(tx);
    db.cleanup().await?;
    Ok(())
}

/// Refuses every export.
struct Unrecordable;

impl ExportAudit for Unrecordable {
    fn exported<'a>(
        &'a self,
        _export: &'a ProviderExport<'a>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(async { Err(RecordError::new("audit store unavailable")) })
    }
}

#[tokio::test]
async fn a_request_whose_export_cannot_be_audited_is_never_sent() {
    let sim = ProviderSim::start(script()).await.expect("sim");
    let outcome = run(&sim, &Unrecordable).await;
    assert_eq!(
        outcome.stop,
        LoopStop::ExportNotAudited {
            message: "audit store unavailable".into()
        }
    );
    assert_eq!(outcome.stop.as_str(), "export_not_audited");
    assert!(sim.requests().is_empty());
    assert_eq!(outcome.provider_calls, 0);
    assert!(outcome.redactions.is_empty(), "no request was sent");
}
