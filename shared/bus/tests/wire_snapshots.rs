//! Every wire type, snapshotted: a changed snapshot is a changed contract.

mod common;

use std::collections::BTreeMap;

use chrono::{TimeZone, Utc};
use common::{FindingCreated, acme};
use opentelemetry::trace::TraceContextExt;
use pulse_bus::envelope::{encode, sorted_headers};
use pulse_bus::{ErrorCode, ErrorReply, Heartbeat, OutboxRow, Subjects};

#[test]
fn heartbeat_wire_shape() {
    let hb = Heartbeat {
        service: "pulse-verifier".to_owned(),
        instance_id: "0192b6a4-7c1e-7d2a-9f00-3b1c2d4e5f60".to_owned(),
        version: "0.1.0".to_owned(),
        started_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap(),
        sent_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 5, 30).unwrap(),
        ready: true,
    };
    insta::assert_json_snapshot!("heartbeat", hb);
}

#[test]
fn error_reply_wire_shape() {
    insta::assert_json_snapshot!(
        "error_reply",
        ErrorReply::new(ErrorCode::NotFound, "finding f-1 does not exist")
    );
}

#[test]
fn envelope_headers_of_a_sample_message() {
    // With a current trace, so traceparent is part of the contract too.
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let cx = pulse_bus::trace::remote_context(Some(traceparent)).unwrap();
    assert!(cx.has_active_span());
    let _guard = cx.attach();
    let enc = encode(
        &acme(),
        &FindingCreated {
            finding_id: "f-1".to_owned(),
            n: 1,
        },
        Some("0192b6a4-7c1e-7d2a-9f00-3b1c2d4e5f60"),
    )
    .unwrap();
    let headers: BTreeMap<String, Vec<String>> = sorted_headers(&enc.headers);
    insta::assert_json_snapshot!("envelope_headers", headers);
    let body: serde_json::Value = serde_json::from_slice(&enc.body).unwrap();
    insta::assert_json_snapshot!("envelope_body", body);
}

#[test]
fn outbox_row_wire_shape() {
    let subjects = Subjects::new(None);
    let mut row = OutboxRow::event(
        &subjects,
        &acme(),
        "finding",
        "created",
        &FindingCreated {
            finding_id: "f-1".to_owned(),
            n: 1,
        },
    )
    .unwrap();
    row.created_at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
    row.headers.insert(
        "traceparent".to_owned(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
    );
    insta::assert_json_snapshot!("outbox_row", row);
}
