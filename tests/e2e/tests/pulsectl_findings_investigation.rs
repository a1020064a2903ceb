//! `pulsectl findings show` prints what Patrol learned about a finding: the latest
//! investigation record (status, confidence, conclusion, evidence, proposal, the action it
//! entered) and the fix outcome the action wrote back, with its message. The finding, its
//! investigation and the fix outcome are seeded through the store owners the services use
//! (`findings::report`, `investigations::begin`/`finish`, `findings::record_fix_outcome`); the
//! real gateway serves them to the built `pulsectl` binary.

use std::time::Duration;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::action::FixOutcome;
use pulse_domain::finding::{Category, FindingId, InvestigationOutcome, ReportedFinding, Severity};
use pulse_store::findings;
use pulse_store::investigations::{
    self, ActionReference, InvestigationEvidence, InvestigationRecord, InvestigationStatus,
    InvestigationSubject, InvestigationTrigger, ProposalSummary,
};
use pulse_test_support::cli::Pulsectl;
use pulse_test_support::service::TestGateway;
use uuid::Uuid;

const RESOURCE: &str = "service:h1:web";

async fn seed_finding(gateway: &TestGateway) -> anyhow::Result<FindingId> {
    let reported = ReportedFinding {
        key: "web-down".to_owned(),
        severity: Severity::Critical,
        category: Category::Reliability,
        resource_id: RESOURCE.to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "service".to_owned(),
        title: "web health check failing".to_owned(),
        description: "the health endpoint refuses connections".to_owned(),
        recommendation: "restart web".to_owned(),
        evidence: "health=connection refused".to_owned(),
        impact: String::new(),
    };
    let tx = gateway
        .db
        .store()
        .tenant_tx(&TenantId::default_tenant())
        .await?;
    let outcome = findings::report(&tx, &reported, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id)
}

fn record(id: Uuid, finding: FindingId, action_id: Uuid) -> InvestigationRecord {
    let now = Utc::now();
    InvestigationRecord {
        id,
        finding_id: finding.as_hex(),
        session_id: "watch-run".to_owned(),
        subject: InvestigationSubject {
            resource_id: RESOURCE.to_owned(),
            resource_name: "web".to_owned(),
            resource_type: "service".to_owned(),
            node: String::new(),
        },
        trigger: InvestigationTrigger {
            finding_key: "web-down".to_owned(),
            source: "ai-analysis".to_owned(),
            severity: "critical".to_owned(),
            category: "reliability".to_owned(),
            title: "web health check failing".to_owned(),
            detected_at: now,
            description: "the health endpoint refuses connections".to_owned(),
            cause: "watch_run:watch-run".to_owned(),
        },
        status: InvestigationStatus::Completed,
        outcome: Some(InvestigationOutcome::FixQueued),
        confidence: "high".to_owned(),
        evidence: vec![
            InvestigationEvidence {
                id: "call-1".to_owned(),
                kind: "pulse_get_resource".to_owned(),
                summary: "web is stopped".to_owned(),
            },
            InvestigationEvidence {
                id: "call-2".to_owned(),
                kind: "pulse_read_logs".to_owned(),
                summary: "exited after its health file vanished".to_owned(),
            },
        ],
        conclusion: "web stopped after its health file vanished".to_owned(),
        impact: String::new(),
        recommended_action: "service.restart on service:h1:web".to_owned(),
        verification: Vec::new(),
        rollback: Vec::new(),
        tools_used: vec![
            "pulse_get_resource".to_owned(),
            "pulse_read_logs".to_owned(),
        ],
        proposal: Some(ProposalSummary {
            resource_id: RESOURCE.to_owned(),
            causal_resource_id: RESOURCE.to_owned(),
            capability_name: "service.restart".to_owned(),
            reason: "a restart recreates the health file".to_owned(),
        }),
        started_at: now,
        completed_at: Some(now),
        action: Some(ActionReference {
            action_id,
            state: "pending_approval".to_owned(),
        }),
        error: String::new(),
    }
}

#[tokio::test]
async fn show_prints_the_investigation_record_and_the_fix_outcome() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let result = async {
        let ops = gateway.create_token("ops", &["ai:execute"]).await?;
        let cli = Pulsectl::new(&gateway, Duration::from_secs(30));
        let finding = seed_finding(&gateway).await?;
        let id = finding.as_hex();

        // Before any investigation: no such sections.
        let text = cli.ok(&ops, &["findings", "show", &id]).await?;
        anyhow::ensure!(
            !text.contains("investigation:") && !text.contains("fix outcome:"),
            "{text}"
        );

        let action_id = Uuid::now_v7();
        let investigation = Uuid::now_v7();
        let tx = gateway
            .db
            .store()
            .tenant_tx(&TenantId::default_tenant())
            .await?;
        let started = Utc::now() - chrono::Duration::minutes(2);
        anyhow::ensure!(
            investigations::begin(&tx, investigation, finding, Uuid::now_v7(), 1, started).await?
        );
        anyhow::ensure!(
            investigations::finish(&tx, &record(investigation, finding, action_id), None).await?
        );
        tx.commit().await?;

        // Investigated, fix not decided yet: the record, no fix outcome.
        let text = cli.ok(&ops, &["findings", "show", &id]).await?;
        let section = text
            .split("investigation:\n")
            .nth(1)
            .ok_or_else(|| anyhow::anyhow!("no investigation section:\n{text}"))?;
        for line in [
            format!("id           {investigation}"),
            "status       completed (fix_queued)".to_owned(),
            "confidence   high".to_owned(),
            "conclusion   web stopped after its health file vanished".to_owned(),
            "evidence     pulse_get_resource: web is stopped".to_owned(),
            "             pulse_read_logs: exited after its health file vanished".to_owned(),
            format!(
                "proposal     service.restart on {RESOURCE}: a restart recreates the health file"
            ),
            format!("action       {action_id} (entered as pending_approval)"),
        ] {
            anyhow::ensure!(section.contains(&line), "{line:?} missing:\n{text}");
        }
        anyhow::ensure!(!text.contains("fix outcome:"), "{text}");

        // The action ran and the verifier confirmed it.
        let tx = gateway
            .db
            .store()
            .tenant_tx(&TenantId::default_tenant())
            .await?;
        anyhow::ensure!(
            findings::record_fix_outcome(
                &tx,
                finding,
                FixOutcome::Verified,
                action_id,
                "web answers its health check again",
                Utc::now(),
            )
            .await?
        );
        tx.commit().await?;

        let text = cli.ok(&ops, &["findings", "show", &id]).await?;
        let fix = text
            .split("fix outcome:\n")
            .nth(1)
            .ok_or_else(|| anyhow::anyhow!("no fix outcome section:\n{text}"))?;
        for line in [
            "outcome  fix_verified".to_owned(),
            format!("action   {action_id}"),
            "message  web answers its health check again".to_owned(),
        ] {
            anyhow::ensure!(fix.contains(&line), "{line:?} missing:\n{text}");
        }
        anyhow::ensure!(text.contains("investigation:\n"), "{text}");
        anyhow::ensure!(
            text.lines()
                .any(|l| l.starts_with("status ") && l.contains("resolved")),
            "a verified fix resolves the finding:\n{text}"
        );
        Ok(())
    }
    .await;
    gateway.stop().await?;
    result
}
