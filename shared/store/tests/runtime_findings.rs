//! The synthetic `ai-service` Patrol runtime failure finding against real Postgres: repeated
//! failures keep one row, operators cannot triage it away (nor can a broad suppression rule
//! hold it), and a recovery resolves it exactly once.

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{
    AI_SERVICE_RESOURCE_ID, Category, FindingStatus, LifecycleEventType, OperatorAction,
    OperatorRefusal, ReportKind, ReportedFinding, RuntimeRecovery, Severity, SuppressBreadth,
};
use pulse_domain::patrol::run::{ErrorCause, RunId};
use pulse_store::findings::{self, FindingsError, ListFilter};
use pulse_store::tenants;
use pulse_test_support::db::TestDb;
use uuid::Uuid;

fn run() -> RunId {
    RunId::from_uuid(Uuid::new_v4())
}

#[tokio::test]
async fn runtime_failure_finding_is_one_row_not_triageable_and_cleared_by_recovery()
-> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("acme")?;
    tenants::create(db.store(), &tenant, "Acme").await?;
    let store = db.store();

    // A broad general suppression by an operator, created through an ordinary finding.
    let tx = store.tenant_tx(&tenant).await?;
    let ordinary = ReportedFinding {
        key: "backup-missing".to_owned(),
        severity: Severity::Warning,
        category: Category::General,
        resource_id: "host:h1".to_owned(),
        resource_name: "h1".to_owned(),
        resource_type: "host".to_owned(),
        title: "No backup for h1".to_owned(),
        description: "no backup in 7 days".to_owned(),
        recommendation: "configure a backup".to_owned(),
        evidence: "last backup 9 days ago".to_owned(),
        impact: String::new(),
    };
    let plain = findings::report(&tx, &ordinary, Some(run()), Utc::now()).await?;
    findings::operator_action(
        &tx,
        plain.finding.finding.id,
        &OperatorAction::Suppress {
            breadth: SuppressBreadth::CategoryOnAllResources,
            allow_broad_scope: true,
        },
        "ops",
        None,
        Utc::now(),
    )
    .await?;
    tx.commit().await?;

    // Two failing runs: one active critical finding on the ai-service, re-detected.
    let tx = store.tenant_tx(&tenant).await?;
    let first = findings::report_runtime_failure(
        &tx,
        ErrorCause::ProviderAuth,
        "the model provider rejected the credentials",
        run(),
        Utc::now(),
    )
    .await?;
    let second = findings::report_runtime_failure(
        &tx,
        ErrorCause::ProviderQuota,
        "out of credit",
        run(),
        Utc::now(),
    )
    .await?;
    tx.commit().await?;
    assert_eq!(first.kind, ReportKind::New);
    assert_ne!(second.kind, ReportKind::New);
    assert_eq!(first.finding.finding.id, second.finding.finding.id);
    let id = first.finding.finding.id;

    let tx = store.tenant_tx(&tenant).await?;
    let all = findings::list(&tx, ListFilter::IncludeResolved, None, Utc::now()).await?;
    let runtime: Vec<_> = all
        .iter()
        .filter(|s| s.finding.resource_id == AI_SERVICE_RESOURCE_ID)
        .collect();
    assert_eq!(runtime.len(), 1, "{runtime:?}");
    assert_eq!(runtime[0].finding.status, FindingStatus::Active);
    assert_eq!(runtime[0].finding.severity, Severity::Critical);

    // Operators cannot acknowledge, dismiss or resolve it; nothing changes.
    for action in [
        OperatorAction::Acknowledge,
        OperatorAction::Resolve {
            note: "ignore".to_owned(),
        },
    ] {
        let refused = findings::operator_action(&tx, id, &action, "ops", None, Utc::now()).await;
        assert!(
            matches!(
                refused,
                Err(FindingsError::Operator(OperatorRefusal::RuntimeFinding))
            ),
            "{action:?}: {refused:?}"
        );
    }
    let unchanged = findings::get(&tx, id).await?.expect("stored");
    assert_eq!(unchanged.finding.status, FindingStatus::Active);
    assert_eq!(unchanged.version, runtime[0].version);

    // A recovery resolves it once; a second recovery finds nothing open.
    let cleared =
        findings::clear_runtime_failure(&tx, RuntimeRecovery::PreflightToolCall, Utc::now())
            .await?;
    assert_eq!(cleared, [id]);
    let again =
        findings::clear_runtime_failure(&tx, RuntimeRecovery::SuccessfulRun, Utc::now()).await?;
    assert!(again.is_empty());
    tx.commit().await?;

    let tx = store.tenant_tx(&tenant).await?;
    let resolved = findings::get(&tx, id).await?.expect("stored");
    assert_eq!(resolved.finding.status, FindingStatus::Resolved);
    assert!(resolved.finding.auto_resolved);
    let last = resolved.finding.lifecycle.last().expect("an event");
    assert_eq!(last.event_type, LifecycleEventType::AutoResolved);
    assert_eq!(last.metadata["reason"], "preflight_tool_call");
    // The ordinary finding stays suppressed: the recovery touches only the runtime finding.
    let plain = findings::get(&tx, plain.finding.finding.id)
        .await?
        .expect("stored");
    assert_eq!(plain.finding.status, FindingStatus::Suppressed);
    tx.commit().await?;

    db.cleanup().await
}
