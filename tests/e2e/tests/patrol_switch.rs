//! The per-tenant Patrol switch (`patrol_enabled` in `PUT /api/settings/ai`) through the real
//! gateway and patrol-scheduler binaries, with a one-second cadence:
//!
//! - switched off, the tenant's due slots pass without a run (counted as skipped with cause
//!   `patrol_disabled`), a requested run is refused `409 patrol_disabled` saying how to switch
//!   it on, and `GET /api/ai/patrol/status` shows `disabled` with that cause; another tenant's
//!   Patrol keeps running;
//! - switched on again, scheduled runs resume and requests are no longer refused for it;
//! - a run accepted before the switch went off does not start afterwards: the model-runner that
//!   takes its job ends it `error` with cause `cancelled`, saying Patrol was switched off, before
//!   any readiness check or model call.

use std::time::Duration;

use pulse_domain::ai_settings::PatchBody;
use pulse_domain::patrol::run::{ErrorCause, PatrolRun, RunStatus, RunType, TriggerReason};
use pulse_domain::patrol::status::{BlockedCause, PatrolStatus, RuntimeState};
use pulse_domain::{Scope, TenantId};
use pulse_store::tenants;
use pulse_test_support::action_api::user_token;
use pulse_test_support::patrol::{save_settings, select_keyless_model};
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::{TestGateway, scratch_dir};
use pulse_test_support::wait;
use reqwest::Method;
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(60);

/// `pulse_patrol_scheduled_runs_skipped_total{cause="<cause>"}` of the scheduler.
async fn skipped(gateway: &TestGateway, health_url: &str, cause: &str) -> anyhow::Result<f64> {
    let text = gateway
        .http
        .get(format!("{health_url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let label = format!("cause=\"{cause}\"");
    Ok(text
        .lines()
        .find(|l| l.starts_with("pulse_patrol_scheduled_runs_skipped_total{") && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(0.0))
}

async fn runs(gateway: &TestGateway, token: &str) -> anyhow::Result<Vec<PatrolRun>> {
    Ok(gateway.client_as(token)?.patrol_runs(None).await?.runs)
}

async fn status(gateway: &TestGateway) -> anyhow::Result<PatrolStatus> {
    Ok(gateway.client()?.patrol_status().await?)
}

/// The settings that switch Patrol on or off.
fn switch(enabled: bool) -> PatchBody {
    PatchBody {
        patrol_enabled: Some(Some(enabled)),
        ..PatchBody::default()
    }
}

#[tokio::test]
async fn a_switched_off_tenant_starts_no_run_until_it_is_switched_on() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let store = gateway.db.store();
    select_keyless_model(&gateway, &gateway.admin_token).await?;

    // The switch is a typed field of the settings.
    let (code, refused) = gateway
        .admin_json(
            Method::PUT,
            "/api/settings/ai",
            Some(json!({"patrol_enabled": "no"})),
        )
        .await?;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(refused["error"], "invalid_request", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("patrol_enabled")),
        "{refused}"
    );
    let settings = gateway.client()?.ai_settings().await?;
    assert!(settings.patrol_enabled, "on by default: {settings:?}");
    save_settings(&gateway, &switch(false)).await?;
    let settings = gateway.client()?.ai_settings().await?;
    assert!(!settings.patrol_enabled, "{settings:?}");

    // Another tenant keeps Patrol on.
    let globex = TenantId::new("globex")?;
    tenants::create(store, &globex, "Globex").await?;
    let globex_admin = user_token(
        store,
        &globex,
        Some("gina"),
        &[Scope::Admin, Scope::MonitoringRead],
    )
    .await?;
    select_keyless_model(&gateway, &globex_admin).await?;

    let dir = scratch_dir("patrol-switch")?;
    let scheduler = TestScheduler::start(
        &gateway,
        &dir.join("scheduler"),
        &[
            ("PULSE_PATROL__CADENCE_OVERRIDE_MS", "1000"),
            ("PULSE_PATROL__JITTER_PCT", "0"),
            ("PULSE_PATROL__DISPATCH_POLL_MS", "100"),
            ("PULSE_PATROL__SCHEDULE_REFRESH_MS", "500"),
        ],
    )
    .await?;

    // Due slots pass for the switched-off tenant.
    wait::until(
        DEADLINE,
        "two skipped slots of the switched-off tenant",
        || async {
            let n = skipped(&gateway, &scheduler.health_url, "patrol_disabled")
                .await
                .ok()?;
            (n >= 2.0).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))?;
    // The other tenant's cadence runs meanwhile.
    wait::until(DEADLINE, "a cadence run of the other tenant", || async {
        let theirs = runs(&gateway, &globex_admin).await.ok()?;
        (!theirs.is_empty()).then_some(())
    })
    .await?;
    assert!(
        runs(&gateway, &gateway.admin_token).await?.is_empty(),
        "no run of the switched-off tenant"
    );

    // A requested run is refused, saying how to switch Patrol on; nothing is recorded.
    let (code, refused) = gateway
        .admin_json(Method::POST, "/api/ai/patrol/run", None)
        .await?;
    assert_eq!(code, 409, "{refused}");
    assert_eq!(refused["error"], "patrol_disabled", "{refused}");
    assert!(
        refused["message"].as_str().is_some_and(
            |m| m.contains("\"patrol_enabled\": true") && m.contains("/api/settings/ai")
        ),
        "{refused}"
    );
    assert!(runs(&gateway, &gateway.admin_token).await?.is_empty());

    // The status says it is off and why.
    let off = status(&gateway).await?;
    assert_eq!(off.runtime_state, RuntimeState::Disabled, "{off:?}");
    assert!(!off.enabled, "{off:?}");
    assert_eq!(
        off.blocked_cause,
        Some(BlockedCause::PatrolDisabled),
        "{off:?}"
    );
    assert!(
        off.blocked_reason
            .as_deref()
            .is_some_and(|m| m.contains("patrol_enabled")),
        "{off:?}"
    );
    assert_eq!(off.next_patrol_at, None, "{off:?}");

    // Switched on: the cadence resumes for the tenant.
    save_settings(&gateway, &switch(true)).await?;
    let resumed = wait::until(DEADLINE, "a cadence run after switching on", || async {
        let ours = runs(&gateway, &gateway.admin_token).await.ok()?;
        ours.into_iter().find(|r| {
            matches!(
                r.trigger_reason,
                TriggerReason::Scheduled | TriggerReason::Startup
            )
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; scheduler log:\n{}", scheduler.process.log_tail(30)))?;
    assert_eq!(resumed.run_type, RunType::Full, "{resumed:?}");
    let on = status(&gateway).await?;
    assert!(on.enabled, "{on:?}");
    assert_ne!(on.runtime_state, RuntimeState::Disabled, "{on:?}");
    assert_ne!(
        on.blocked_cause,
        Some(BlockedCause::PatrolDisabled),
        "{on:?}"
    );
    // A request is no longer refused for the switch (the cadence run may still be in flight:
    // no runner takes it here).
    let (code, answer) = gateway
        .admin_json(Method::POST, "/api/ai/patrol/run", None)
        .await?;
    assert!(
        code == 202 || answer["error"] == "patrol_run_in_progress",
        "{code} {answer}"
    );

    scheduler.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    gateway.stop().await
}

#[tokio::test]
async fn a_run_accepted_before_the_switch_went_off_does_not_start() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    select_keyless_model(&gateway, &gateway.admin_token).await?;
    let scheduler = TestScheduler::start(&gateway, &scratch_dir("switch-queued")?, &[]).await?;
    // The scheduler's startup run is accepted while Patrol is on; no runner takes it yet.
    let run = wait::until(DEADLINE, "a run to be accepted", || async {
        status(&gateway).await.ok()?.current_run_id
    })
    .await?;
    save_settings(&gateway, &switch(false)).await?;
    let runner = pulse_test_support::runner::TestModelRunner::start(
        &gateway,
        &scratch_dir("switch-runner")?,
        &[],
    )
    .await?;
    let ended = pulse_test_support::patrol::terminal_run(&gateway, run, DEADLINE)
        .await
        .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", runner.process.log_tail(40)))?;
    assert_eq!(ended.status, RunStatus::Error, "{ended:?}");
    assert_eq!(ended.error_cause, Some(ErrorCause::Cancelled), "{ended:?}");
    assert!(
        ended
            .error_detail
            .as_deref()
            .is_some_and(|d| d.contains("switched off") && d.contains("patrol_enabled")),
        "{ended:?}"
    );
    runner.stop().await?;
    scheduler.stop().await?;
    gateway.stop().await
}
