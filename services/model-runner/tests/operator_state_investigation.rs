//! The chain that keeps investigation budget off findings the operator silenced, against a
//! real database: a report on a resource in maintenance is recorded and auto-dismissed by the
//! finding store, and the investigation gate skips the dismissed finding at every autonomy
//! level; once the maintenance is cleared, the re-detected finding wakes and the gate would
//! investigate it.

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::ai_settings::AutonomyLevel;
use pulse_domain::finding::operator_state::{MaintenanceWindow, OperatorStateProjection};
use pulse_domain::finding::{Category, Finding, FindingStatus, ReportedFinding, Severity};
use pulse_model_runner::investigation::gate::{Decision, GateInput, Skip, decide};
use pulse_store::investigations::GateState;
use pulse_store::operator_state::{self, OperatorStateInput};
use pulse_store::{findings, tenants};
use pulse_test_support::db::TestDb;

fn reported() -> ReportedFinding {
    ReportedFinding {
        key: "restart-loop".to_owned(),
        severity: Severity::Critical,
        category: Category::Reliability,
        resource_id: "service:h1:web".to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "service".to_owned(),
        title: "web restarts in a loop".to_owned(),
        description: "restarted 6 times in 10 minutes".to_owned(),
        recommendation: "read the crash log".to_owned(),
        evidence: "restart_count=6".to_owned(),
        impact: String::new(),
    }
}

fn gate(finding: &Finding, mode: AutonomyLevel) -> Decision {
    decide(&GateInput {
        mode,
        severity: finding.severity,
        status: finding.status,
        finding_outcome: finding.investigation_outcome,
        last_regression_at: finding.last_regression_at,
        state: GateState::default(),
        now: Utc::now(),
    })
}

#[tokio::test]
async fn a_finding_dismissed_by_maintenance_is_never_investigated() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    let tx = db.store().tenant_tx(&tenant).await?;
    let now = Utc::now();
    let window = MaintenanceWindow::new(None, now + Duration::hours(1))?;
    operator_state::put(
        &tx,
        "service:h1:web",
        &OperatorStateInput {
            projection: OperatorStateProjection {
                maintenance_window: Some(window),
                ..Default::default()
            },
            note: String::new(),
        },
        "user:alice",
    )
    .await?;
    let held = findings::report(&tx, &reported(), None, now)
        .await?
        .finding
        .finding;
    assert_eq!(held.status, FindingStatus::Dismissed);
    for mode in [
        AutonomyLevel::Approval,
        AutonomyLevel::Assisted,
        AutonomyLevel::Full,
    ] {
        assert_eq!(
            gate(&held, mode),
            Decision::Skip(Skip::NotActive(FindingStatus::Dismissed)),
            "{mode:?}"
        );
    }

    // Cleared: the next report wakes it, and it is investigated like any active finding.
    assert!(operator_state::clear(&tx, "service:h1:web", "user:alice").await?);
    let woken = findings::report(&tx, &reported(), None, now + Duration::minutes(1))
        .await?
        .finding
        .finding;
    assert_eq!(woken.status, FindingStatus::Active);
    assert_eq!(
        gate(&woken, AutonomyLevel::Approval),
        Decision::Dispatch { attempt: 1 }
    );
    tx.rollback().await?;
    Ok(())
}
