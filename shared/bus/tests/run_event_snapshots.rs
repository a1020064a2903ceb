//! The `events.run.*` payloads a runner publishes, snapshotted: a changed snapshot is a changed
//! contract (the SSE stream renders them to clients as they are).

use chrono::{TimeZone, Utc};
use pulse_bus::events::{
    RUN_COMPLETED, RUN_PROGRESS, RUN_STARTED, RUN_TOOL, RunCompleted, RunProgress, RunStarted,
    RunTool,
};
use pulse_bus::{Message, OutboxRow, Subjects};
use pulse_domain::TenantId;
use pulse_domain::patrol::run::{
    ErrorCause, PatrolRun, RunEvent, RunId, RunType, ToolCallRecord, TriggerReason,
};
use uuid::Uuid;

fn run_id() -> RunId {
    RunId::from_uuid(Uuid::from_u128(0x0190_f5a2_0000_7000_8000_0000_0000_0001))
}

#[test]
fn run_started_wire_shape() {
    let started = RunStarted {
        run_id: run_id(),
        run_type: RunType::Scoped,
        trigger_reason: TriggerReason::Manual,
        started_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 1).unwrap(),
        runner_id: "model-runner-0192b6a4".to_owned(),
        effective_scope_resource_ids: vec!["service:h1:db".to_owned()],
    };
    insta::assert_json_snapshot!("run_started", started);
}

#[test]
fn run_progress_wire_shape() {
    let progress = RunProgress {
        run_id: run_id(),
        provider_calls: 2,
        input_tokens: 1_800,
        output_tokens: 120,
        at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 9).unwrap(),
    };
    insta::assert_json_snapshot!("run_progress", progress);
}

#[test]
fn run_tool_wire_shape() {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 3).unwrap();
    let tool = RunTool {
        run_id: run_id(),
        call: ToolCallRecord::new(
            "call_1_0",
            "get_resource",
            r#"{"resource_id":"service:h1:db"}"#,
            r#"{"status":"running"}"#,
            true,
            t0,
            t0 + chrono::Duration::milliseconds(40),
        ),
    };
    insta::assert_json_snapshot!("run_tool", tool);
}

#[test]
fn run_completed_wire_shapes() {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
    let mut healthy = PatrolRun::queued(run_id(), TriggerReason::Manual, RunType::Full, t0);
    healthy
        .apply(RunEvent::Started, t0 + chrono::Duration::seconds(1), None)
        .unwrap();
    healthy.input_tokens = 2_400;
    healthy.output_tokens = 180;
    healthy.cost_usd = Some(0.000468);
    healthy
        .apply(
            RunEvent::Completed {
                issues_found: false,
            },
            t0 + chrono::Duration::seconds(12),
            None,
        )
        .unwrap();
    insta::assert_json_snapshot!("run_completed_healthy", RunCompleted::of(&healthy));

    let mut lost = PatrolRun::queued(run_id(), TriggerReason::Scheduled, RunType::Full, t0);
    lost.apply(RunEvent::Started, t0 + chrono::Duration::seconds(1), None)
        .unwrap();
    lost.apply(
        RunEvent::RunnerLost,
        t0 + chrono::Duration::seconds(40),
        Some("runner model-runner-1 stopped renewing its lease"),
    )
    .unwrap();
    let completed = RunCompleted::of(&lost);
    assert_eq!(completed.error_cause, Some(ErrorCause::RunnerLost));
    insta::assert_json_snapshot!("run_completed_runner_lost", completed);
}

#[test]
fn run_events_go_to_their_run_subjects() {
    let subjects = Subjects::new(None);
    let tenant = TenantId::new("acme").unwrap();
    let progress = RunProgress {
        run_id: run_id(),
        provider_calls: 1,
        input_tokens: 10,
        output_tokens: 2,
        at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 9).unwrap(),
    };
    let subjects_of: Vec<String> = [RUN_STARTED, RUN_PROGRESS, RUN_TOOL, RUN_COMPLETED]
        .into_iter()
        .map(|(domain, event)| {
            OutboxRow::event(&subjects, &tenant, domain, event, &progress)
                .unwrap()
                .subject
        })
        .collect();
    assert_eq!(
        subjects_of,
        [
            "pulse.acme.events.run.started",
            "pulse.acme.events.run.progress",
            "pulse.acme.events.run.tool",
            "pulse.acme.events.run.completed",
        ]
    );
    let types = [
        RunStarted::TYPE,
        RunProgress::TYPE,
        RunTool::TYPE,
        RunCompleted::TYPE,
    ];
    assert_eq!(
        types,
        [
            "pulse.patrol.run_started",
            "pulse.patrol.run_progress",
            "pulse.patrol.run_tool",
            "pulse.patrol.run_completed",
        ]
    );
}
