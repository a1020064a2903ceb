//! `pulsectl findings list | show | ack | dismiss | suppress` against the real gateway, on
//! findings seeded with `pulse_store::findings::report` in its database: the built `pulsectl`
//! binary lists, shows, acknowledges, dismisses and suppresses; refused requests print
//! `error: <code>: <message>` and exit 2.

use std::process::Output;
use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_store::findings;
use pulse_test_support::service::{TestGateway, binary};
use serde_json::{Value, json};

/// Runs `pulsectl <args>` against `gateway` with `token` on the command line; the environment's
/// Pulse variables are removed so only the flags count.
async fn pulsectl(gateway: &TestGateway, token: &str, args: &[&str]) -> anyhow::Result<Output> {
    let mut command = tokio::process::Command::new(binary("pulsectl")?);
    command
        .args(["--gateway", &gateway.url, "--token", token, "--state-dir"])
        .arg(gateway.state_dir.join("pulsectl-state"))
        .args(args)
        .env_remove("PULSE_GATEWAY_URL")
        .env_remove("PULSE_TOKEN")
        .env_remove("PULSE_STATE_DIR")
        .kill_on_drop(true);
    Ok(tokio::time::timeout(Duration::from_secs(30), command.output()).await??)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn describe(output: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        stdout(output),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Runs a command that must succeed; returns its stdout.
async fn ok(gateway: &TestGateway, token: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = pulsectl(gateway, token, args).await?;
    anyhow::ensure!(output.status.success(), "{args:?}: {}", describe(&output));
    Ok(stdout(&output))
}

/// The value of a `label  value` line.
fn field<'a>(text: &'a str, label: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        line.strip_prefix(label)
            .filter(|rest| rest.starts_with("  "))
            .map(str::trim)
    })
}

/// The list line of finding `id`.
fn row<'a>(text: &'a str, id: &str) -> Option<&'a str> {
    text.lines().find(|line| line.starts_with(id))
}

async fn seed(gateway: &TestGateway, resource: &str, key: &str) -> anyhow::Result<String> {
    let reported = ReportedFinding {
        key: key.to_owned(),
        severity: Severity::Warning,
        category: Category::Capacity,
        resource_id: resource.to_owned(),
        resource_name: resource.trim_start_matches("host:").to_owned(),
        resource_type: "host".to_owned(),
        title: format!("{key} on {resource}"),
        description: "usage above 90% for an hour".to_owned(),
        recommendation: "free space or grow the volume".to_owned(),
        evidence: "disk_used_percent=93".to_owned(),
        impact: String::new(),
    };
    let tx = gateway
        .db
        .store()
        .tenant_tx(&TenantId::default_tenant())
        .await?;
    let outcome = findings::report(&tx, &reported, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id.as_hex())
}

#[tokio::test]
async fn pulsectl_lists_shows_and_triages_findings() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let response = gateway
        .http
        .post(gateway.url("/api/tokens"))
        .bearer_auth(&gateway.admin_token)
        .json(&json!({"name": "ops", "scopes": ["ai:execute"]}))
        .send()
        .await?;
    let body: Value = response.json().await?;
    let ops = body["token"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no token in {body}"))?
        .to_owned();
    let disk = seed(&gateway, "host:db-1", "disk-high").await?;
    let other = seed(&gateway, "host:web-1", "disk-high").await?;
    let third = seed(&gateway, "host:cache-1", "memory-high").await?;

    // list: a header and one line per active finding.
    let text = ok(&gateway, &ops, &["findings", "list"]).await?;
    assert!(text.starts_with("ID "), "{text}");
    for id in [&disk, &other, &third] {
        let line = row(&text, id).unwrap_or_else(|| panic!("{id} missing from\n{text}"));
        assert!(
            line.contains("warning") && line.contains("active"),
            "{line}"
        );
    }

    // show: the fields and the lifecycle.
    let text = ok(&gateway, &ops, &["findings", "show", &disk]).await?;
    assert_eq!(field(&text, "finding"), Some(disk.as_str()), "{text}");
    assert_eq!(field(&text, "status"), Some("active"), "{text}");
    assert_eq!(field(&text, "acknowledged"), Some("no"), "{text}");
    assert!(
        text.contains("lifecycle:") && text.contains("detected"),
        "{text}"
    );

    // ack: recorded with the token name; the list marks it.
    let text = ok(&gateway, &ops, &["findings", "ack", &disk]).await?;
    assert!(
        text.starts_with(&format!("acknowledged finding {disk}")),
        "{text}"
    );
    let text = ok(&gateway, &ops, &["findings", "list"]).await?;
    assert!(
        row(&text, &disk).is_some_and(|l| l.contains("active (acked)")),
        "{text}"
    );
    let text = ok(&gateway, &ops, &["findings", "show", &disk]).await?;
    assert!(
        text.contains("acknowledged") && text.contains("token:ops"),
        "{text}"
    );

    // dismiss will_fix_later: the reminder date is printed; the finding leaves the active list
    // and shows with --all.
    let text = ok(
        &gateway,
        &ops,
        &[
            "findings",
            "dismiss",
            &other,
            "--reason",
            "will_fix_later",
            "--note",
            "OPS-7",
        ],
    )
    .await?;
    assert!(
        text.contains(&format!("dismissed finding {other} (will_fix_later)")),
        "{text}"
    );
    assert!(text.contains("reminds at "), "{text}");
    let active = ok(&gateway, &ops, &["findings", "list"]).await?;
    assert!(row(&active, &other).is_none(), "{active}");
    let all = ok(&gateway, &ops, &["findings", "list", "--all"]).await?;
    assert!(
        row(&all, &other).is_some_and(|l| l.contains("dismissed")),
        "{all}"
    );

    // suppress by resource and category.
    let text = ok(
        &gateway,
        &ops,
        &[
            "findings",
            "suppress",
            "--resource",
            "host:cache-1",
            "--category",
            "capacity",
        ],
    )
    .await?;
    assert!(text.contains(&format!("from finding {third}")), "{text}");
    let text = ok(&gateway, &ops, &["findings", "show", &third]).await?;
    assert_eq!(field(&text, "status"), Some("suppressed"), "{text}");
    assert!(field(&text, "suppression").is_some(), "{text}");

    // --json prints the API's answer.
    let text = ok(&gateway, &ops, &["findings", "show", &disk, "--json"]).await?;
    let value: Value = serde_json::from_str(&text)?;
    assert_eq!(value["finding"]["id"], disk.as_str());

    // Refusals: the code and message on stderr, exit 2.
    let output = pulsectl(&gateway, &ops, &["findings", "ack", &other]).await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("error: finding_action_not_allowed:"), "{err}");
    let output = pulsectl(&gateway, &ops, &["findings", "show", "00000000deadbeef"]).await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("error: finding_not_found:"));
    let output = pulsectl(
        &gateway,
        &ops,
        &[
            "findings",
            "suppress",
            "--resource",
            "*",
            "--category",
            "capacity",
        ],
    )
    .await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("allow_broad_scope"));

    gateway.stop().await
}
