//! The Patrol preflight request and its reply, snapshotted: a changed snapshot is a changed
//! contract between the gateway and the model-runner.

use chrono::{TimeZone, Utc};
use pulse_bus::Message;
use pulse_bus::patrol_api::{PATROL_PREFLIGHT_REQUEST, PatrolPreflightRequest};
use pulse_domain::patrol::readiness::{PreflightRecord, TurnTransport};

#[test]
fn preflight_request_and_reply_wire_shape() {
    assert_eq!(PATROL_PREFLIGHT_REQUEST, "patrol.preflight.request");
    assert_eq!(
        PatrolPreflightRequest::TYPE,
        "pulse.patrol.preflight_request"
    );
    assert_eq!(PreflightRecord::TYPE, "pulse.patrol.preflight_record");
    let request = PatrolPreflightRequest {
        requested_by: "token:ops".to_owned(),
    };
    insta::assert_json_snapshot!("preflight_request", request);
    let reply = PreflightRecord {
        route: "openai:gpt-4.1-mini".to_owned(),
        model: "gpt-4.1-mini".to_owned(),
        base_url: Some("https://llm.internal/v1".to_owned()),
        ok: false,
        tool_call_observed: false,
        tool_calls_recovered: 0,
        cause: Some("auth".to_owned()),
        summary: "the provider rejected the API key".to_owned(),
        recommendation: Some("check the API key and its permissions".to_owned()),
        action: Some("/settings/pulse-intelligence/provider".to_owned()),
        checked_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 1).unwrap(),
        transport: Some(TurnTransport::Buffered),
    };
    insta::assert_json_snapshot!("preflight_record", reply);
}
