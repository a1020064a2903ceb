//! `pulsectl findings list | show | ack | dismiss | suppress` against the real gateway, on
//! findings seeded with `pulse_store::findings::report` in its database: the built `pulsectl`
//! binary lists, shows, acknowledges, dismisses and suppresses; refused requests print
//! `error: <code>: <message>` and exit 2.

use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_store::findings;
use pulse_test_support::cli::{Pulsectl, describe, field, row};
use pulse_test_support::service::TestGateway;
use serde_json::Value;

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
    let ops = gateway.create_token("ops", &["ai:execute"]).await?;
    let cli = Pulsectl::new(&gateway, Duration::from_secs(30));
    let disk = seed(&gateway, "host:db-1", "disk-high").await?;
    let other = seed(&gateway, "host:web-1", "disk-high").await?;
    let third = seed(&gateway, "host:cache-1", "memory-high").await?;

    // list: a header and one line per active finding.
    let text = cli.ok(&ops, &["findings", "list"]).await?;
    assert!(text.starts_with("ID "), "{text}");
    for id in [&disk, &other, &third] {
        let line = row(&text, id).unwrap_or_else(|| panic!("{id} missing from\n{text}"));
        assert!(
            line.contains("warning") && line.contains("active"),
            "{line}"
        );
    }

    // show: the fields and the lifecycle.
    let text = cli.ok(&ops, &["findings", "show", &disk]).await?;
    assert_eq!(field(&text, "finding"), Some(disk.as_str()), "{text}");
    assert_eq!(field(&text, "status"), Some("active"), "{text}");
    assert_eq!(field(&text, "acknowledged"), Some("no"), "{text}");
    assert!(
        text.contains("lifecycle:") && text.contains("detected"),
        "{text}"
    );

    // ack: recorded with the token name; the list marks it.
    let text = cli.ok(&ops, &["findings", "ack", &disk]).await?;
    assert!(
        text.starts_with(&format!("acknowledged finding {disk}")),
        "{text}"
    );
    let text = cli.ok(&ops, &["findings", "list"]).await?;
    assert!(
        row(&text, &disk).is_some_and(|l| l.contains("active (acked)")),
        "{text}"
    );
    let text = cli.ok(&ops, &["findings", "show", &disk]).await?;
    assert!(
        text.contains("acknowledged") && text.contains("token:ops"),
        "{text}"
    );

    // dismiss will_fix_later: the reminder date is printed; the finding leaves the active list
    // and shows with --all.
    let text = cli
        .ok(
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
    let active = cli.ok(&ops, &["findings", "list"]).await?;
    assert!(row(&active, &other).is_none(), "{active}");
    let all = cli.ok(&ops, &["findings", "list", "--all"]).await?;
    assert!(
        row(&all, &other).is_some_and(|l| l.contains("dismissed")),
        "{all}"
    );

    // suppress by resource and category.
    let text = cli
        .ok(
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
    let text = cli.ok(&ops, &["findings", "show", &third]).await?;
    assert_eq!(field(&text, "status"), Some("suppressed"), "{text}");
    assert!(field(&text, "suppression").is_some(), "{text}");

    // --json prints the API's answer.
    let text = cli.ok(&ops, &["findings", "show", &disk, "--json"]).await?;
    let value: Value = serde_json::from_str(&text)?;
    assert_eq!(value["finding"]["id"], disk.as_str());

    // Refusals: the code and message on stderr, exit 2.
    let output = cli.run(&ops, &["findings", "ack", &other]).await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("error: finding_action_not_allowed:"), "{err}");
    let output = cli
        .run(&ops, &["findings", "show", "00000000deadbeef"])
        .await?;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("error: finding_not_found:"));
    let output = cli
        .run(
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
