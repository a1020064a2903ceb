//! The exec audit over the real Postgres: rows are listed newest first, per agent, bounded, and
//! row-level security keeps one tenant's audit from another's.

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_store::read_exec_audit::{self, ExecAuditRow, ExecOutcome, MAX_COMMAND_CHARS};
use pulse_store::tenants;
use pulse_test_support::db::TestDb;

fn row(agent: &str, command: &str, outcome: ExecOutcome, minutes_ago: i64) -> ExecAuditRow {
    let refused = outcome == ExecOutcome::Refused;
    ExecAuditRow {
        occurred_at: Utc::now() - Duration::minutes(minutes_ago),
        agent_id: agent.to_owned(),
        command: command.to_owned(),
        outcome,
        exit_status: (!refused).then_some(0),
        code: refused.then(|| "exec_write_command".to_owned()),
        duration_ms: 12,
        output_bytes: 340,
        truncated: false,
        requester: Some("run:0193".to_owned()),
    }
}

#[tokio::test]
async fn exec_attempts_are_listed_newest_first_per_tenant() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let store = db.store();
    let (a, b) = (TenantId::new("audit-a")?, TenantId::new("audit-b")?);
    tenants::create(store, &a, "a").await?;
    tenants::create(store, &b, "b").await?;

    let tx = store.tenant_tx(&a).await?;
    let df = row("h1", "df -h", ExecOutcome::Ran, 3);
    let rm = row("h1", "rm -rf /tmp/x", ExecOutcome::Refused, 2);
    let long = row(
        "h2",
        &"x".repeat(MAX_COMMAND_CHARS + 50),
        ExecOutcome::Ran,
        1,
    );
    for r in [&df, &rm, &long] {
        read_exec_audit::insert(&tx, r).await?;
    }
    tx.commit().await?;
    let tx = store.tenant_tx(&b).await?;
    read_exec_audit::insert(&tx, &row("h9", "uptime", ExecOutcome::Ran, 0)).await?;
    tx.commit().await?;

    let tx = store.tenant_tx(&a).await?;
    let all = read_exec_audit::list(&tx, None, 100).await?;
    let commands: Vec<&str> = all.iter().map(|r| r.command.as_str()).collect();
    assert_eq!(commands.len(), 3, "{commands:?}");
    assert_eq!(commands[1..], ["rm -rf /tmp/x", "df -h"]);
    assert_eq!(all[0].command.chars().count(), MAX_COMMAND_CHARS);
    assert_eq!(all[1].outcome, ExecOutcome::Refused);
    assert_eq!(all[1].code.as_deref(), Some("exec_write_command"));
    assert_eq!(all[1].exit_status, None);
    assert_eq!(all[2].exit_status, Some(0));
    assert_eq!(all[2].requester.as_deref(), Some("run:0193"));

    let h1 = read_exec_audit::list(&tx, Some("h1"), 100).await?;
    assert_eq!(h1.len(), 2);
    assert_eq!(read_exec_audit::list(&tx, None, 1).await?.len(), 1);
    // Row-level security alone hides tenant b's row.
    let unfiltered: i64 = tx
        .client()
        .query_one("SELECT count(*) FROM read_exec_audit", &[])
        .await?
        .get(0);
    assert_eq!(unfiltered, 3);
    // A refusal without its code is not a row the table takes.
    let mut bad = row("h1", "rm x", ExecOutcome::Refused, 0);
    bad.code = None;
    assert!(read_exec_audit::insert(&tx, &bad).await.is_err());
    Ok(())
}
