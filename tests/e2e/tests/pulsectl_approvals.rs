//! `pulsectl approvals list | approve | reject` and `pulsectl audit verify` against the real
//! gateway and action-broker: the built `pulsectl` binary lists pending plans, records a human's
//! decisions, and verifies the tenant's audit chain, reporting a break (exit 1) after a row was
//! altered directly in the database. Refused requests print `error: <code>: <hint>` and exit 2.

use std::time::Duration;

use pulse_api::actions::PlanBody;
use pulse_domain::action::{self, ActionState, ApprovalFloor};
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_domain::{Scope, TenantId};
use pulse_store::{audit, findings};
use pulse_test_support::action_api::{plan_pending, restart_plan, set_autonomy_level, user_token};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::cli::{Pulsectl, describe, row, stderr, stdout};
use pulse_test_support::seed::{seed_service, service_resource};
use pulse_test_support::service::TestGateway;
use serde_json::Value;

/// Plans a restart of `web` on `resource_id` with approval floor `admin`; returns the action id
/// of the pending plan.
async fn plan(gw: &TestGateway, token: &str, resource_id: &str) -> anyhow::Result<String> {
    let plan = PlanBody {
        approval_floor: Some(ApprovalFloor::Admin),
        ..restart_plan(resource_id, "web", action::Severity::Critical)
    };
    plan_pending(gw, token, &plan).await
}

/// An active finding on `resource_id`; its id.
async fn seed_finding(gw: &TestGateway, resource_id: &str) -> anyhow::Result<String> {
    let reported = ReportedFinding {
        key: "web-down".to_owned(),
        severity: Severity::Critical,
        category: Category::Reliability,
        resource_id: resource_id.to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "service".to_owned(),
        title: "web health check failing".to_owned(),
        description: "the health endpoint refuses connections".to_owned(),
        recommendation: "restart web".to_owned(),
        evidence: "health=connection refused".to_owned(),
        impact: String::new(),
    };
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let outcome = findings::report(&tx, &reported, None, chrono::Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id.as_hex())
}

/// The tenant's audit rows, read through the store.
async fn audit_rows(gw: &TestGateway) -> anyhow::Result<Vec<audit::AuditRecord>> {
    let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let rows = audit::list(&tx, 0, 10_000).await?;
    tx.rollback().await?;
    Ok(rows)
}

#[tokio::test]
async fn pulsectl_decides_pending_actions_and_verifies_the_audit_chain() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gw = TestGateway::start().await?;
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    set_autonomy_level(&gw, AutonomyLevel::Approval).await?;
    let cli = Pulsectl::new(&gw, Duration::from_secs(100));
    // Alice plans; the admin user decides (tokens created over the API belong to the admin
    // user, who then could not approve their plans).
    let planner = user_token(
        gw.db.store(),
        &TenantId::default_tenant(),
        Some("alice"),
        &[Scope::ActionsPlan],
    )
    .await?;
    let reader = gw.create_token("reader", &["monitoring:read"]).await?;
    let chat = gw.create_token("chat", &["ai:chat"]).await?;
    let admin = gw.admin_token.clone();
    let web = seed_service(
        gw.db.store(),
        &TenantId::default_tenant(),
        "approvals",
        service_resource("web"),
    )
    .await?;
    let approved = plan(&gw, &planner, &web).await?;
    // The rejected plan is a fix for a finding: its rejection is written back to it.
    let finding = seed_finding(&gw, &web).await?;
    let for_finding = PlanBody {
        approval_floor: Some(ApprovalFloor::Admin),
        finding_id: Some(finding.parse()?),
        ..restart_plan(&web, "web", action::Severity::Critical)
    };
    let rejected = plan_pending(&gw, &planner, &for_finding).await?;

    // list: a header and one line per pending plan with its resource, capability and floor.
    let text = cli.ok(&reader, &["approvals", "list"]).await?;
    assert!(text.starts_with("ID "), "{text}");
    for id in [&approved, &rejected] {
        let line = row(&text, id).unwrap_or_else(|| panic!("{id} missing from\n{text}"));
        for cell in [web.as_str(), "service.restart web", "critical", "admin"] {
            assert!(line.contains(cell), "{cell} missing from {line}");
        }
    }
    let text = cli.ok(&reader, &["approvals", "list", "--json"]).await?;
    let listed: Value = serde_json::from_str(&text)?;
    assert!(
        listed
            .as_array()
            .is_some_and(|l| l.iter().any(|a| a["action_id"] == approved.as_str())),
        "{listed}"
    );

    // approve: the human's decision is recorded; the action leaves pending_approval (task C
    // may start its execution right away, so only "no longer pending" is asserted).
    let text = cli
        .ok(
            &admin,
            &[
                "approvals",
                "approve",
                &approved,
                "--reason",
                "checked the logs",
            ],
        )
        .await?;
    // The message names the approving user by login; the stable actor id stays in the API
    // answer and the audit.
    assert!(
        text.starts_with(&format!("action {approved} approved by admin: now ")),
        "{text}"
    );
    assert!(!text.contains("user:"), "{text}");
    let as_admin = gw.client_as(&admin)?;
    let action = as_admin.action(&approved).await?;
    assert_ne!(action.state, ActionState::PendingApproval, "{action:?}");
    assert!(action.human_approved, "{action:?}");
    let decider = action.decided_by.clone().unwrap_or_default();
    assert!(decider.starts_with("user:"), "{action:?}");
    assert_eq!(
        action.decided_by_name.as_deref(),
        Some("admin"),
        "{action:?}"
    );
    let trail = as_admin.action_audit(&approved).await?;
    assert!(
        trail
            .iter()
            .any(|r| r.kind == "action.approved" && r.actor == decider),
        "{trail:?}"
    );

    // reject: the action is rejected by the same human.
    let text = cli
        .ok(
            &admin,
            &[
                "approvals",
                "reject",
                &rejected,
                "--reason",
                "not during business hours",
            ],
        )
        .await?;
    assert_eq!(
        text.trim(),
        format!("action {rejected} rejected by admin: now rejected")
    );
    let action = as_admin.action(&rejected).await?;
    assert_eq!(action.state, ActionState::Rejected, "{action:?}");
    assert_eq!(
        action.decision_reason.as_deref(),
        Some("not during business hours")
    );
    // The finding's fix outcome names the user too, with the reason.
    let text = cli.ok(&admin, &["findings", "show", &finding]).await?;
    let fix = text
        .split("fix outcome:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no fix outcome:\n{text}"));
    assert!(fix.contains("outcome  fix_rejected"), "{text}");
    assert!(
        fix.contains("message  rejected by admin: not during business hours"),
        "{text}"
    );
    let text = cli.ok(&reader, &["approvals", "list"]).await?;
    assert!(
        row(&text, &approved).is_none() && row(&text, &rejected).is_none(),
        "{text}"
    );

    // Refusals: one line with the code and what to do, exit 2.
    let output = cli
        .fails(
            &admin,
            &[
                "approvals",
                "approve",
                &rejected,
                "--reason",
                "changed my mind",
            ],
            2,
        )
        .await?;
    let err = stderr(&output);
    assert!(
        err.starts_with("error: action_decision_not_allowed: "),
        "{err}"
    );
    assert!(err.contains("pulsectl approvals list"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let unknown = "01900000-0000-7000-8000-000000000000";
    let output = cli
        .fails(
            &admin,
            &["approvals", "reject", unknown, "--reason", "x"],
            2,
        )
        .await?;
    assert!(
        stderr(&output).starts_with(&format!("error: action_not_found: no action {unknown}")),
        "{}",
        describe(&output)
    );
    let third = plan(&gw, &planner, &web).await?;
    let output = cli
        .fails(&chat, &["approvals", "approve", &third, "--reason", "x"], 2)
        .await?;
    assert!(
        stderr(&output).starts_with("error: missing_scope: this token lacks actions:approve"),
        "{}",
        describe(&output)
    );

    // audit verify: intact, counting every row of the tenant's chain.
    // (An execution the approval started may still append rows meanwhile: the count is read
    // before and after.)
    let before = audit_rows(&gw).await?.len();
    let text = cli.ok(&admin, &["audit", "verify"]).await?;
    let after = audit_rows(&gw).await?.len();
    let entries: usize = text
        .trim()
        .strip_prefix("audit chain intact: ")
        .and_then(|rest| rest.strip_suffix(" entries"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected report: {text}"));
    assert!(
        before > 0 && (before..=after).contains(&entries),
        "{entries} entries reported, {before}..={after} stored"
    );
    let output = cli.fails(&chat, &["audit", "verify"], 2).await?;
    assert!(
        stderr(&output).starts_with("error: missing_scope:"),
        "{}",
        describe(&output)
    );

    // Tampering with a row directly in the database (as the superuser, triggers off) is found
    // at that row.
    let target = audit_rows(&gw)
        .await?
        .into_iter()
        .find(|r| r.kind == "action.rejected")
        .ok_or_else(|| anyhow::anyhow!("no action.rejected audit row"))?;
    let owner = gw.db.owner_client().await?;
    owner
        .batch_execute(&format!(
            "BEGIN; SET LOCAL session_replication_role = replica;
             UPDATE audit_events SET actor = 'user:someone-else'
             WHERE tenant_id = '{}' AND seq = {};
             COMMIT;",
            TenantId::default_tenant().as_str(),
            target.seq
        ))
        .await?;
    let output = cli.fails(&admin, &["audit", "verify"], 1).await?;
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!(
            "audit chain BROKEN at entry {}: row_hash_mismatch",
            target.seq
        )),
        "{}",
        describe(&output)
    );
    assert!(
        text.contains(&format!("{} entries before it verify", target.seq - 1)),
        "{text}"
    );
    assert!(
        stderr(&output).contains("error: the audit chain failed verification"),
        "{}",
        describe(&output)
    );
    let output = cli.fails(&admin, &["audit", "verify", "--json"], 1).await?;
    let report: Value = serde_json::from_str(&stdout(&output))?;
    assert_eq!(report["ok"], false, "{report}");
    assert_eq!(report["first_broken_seq"], target.seq, "{report}");
    assert_eq!(report["reason"], "row_hash_mismatch", "{report}");

    broker.stop().await?;
    gw.stop().await
}
