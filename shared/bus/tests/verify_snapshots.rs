//! The `verify.resolution` request and reply and the `relay.observe` request a verifier sends,
//! snapshotted: a changed snapshot is a changed contract.

use std::collections::BTreeMap;

use chrono::{TimeZone, Utc};
use pulse_bus::relay_api::{RelayObserveReply, RelayObserveRequest};
use pulse_bus::verify_api::{
    ResolutionCheckReply, ResolutionCheckRequest, ResolutionEvidence, VERIFIER_QUEUE_GROUP,
    VERIFY_RESOLUTION,
};
use pulse_bus::{Message, Subjects};
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{Observation, ResourceTarget};
use pulse_domain::finding::{Category, FindingId, FindingKey, VerifierOutcome};
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};

fn key(raw: &str) -> FindingKey {
    FindingKey::normalize(raw).expect("valid key")
}

fn request() -> ResolutionCheckRequest {
    let key = key("service-unhealthy");
    ResolutionCheckRequest {
        finding_id: FindingId::derive("service:h1:web", Category::Reliability, &key),
        key,
        resource_id: "service:h1:web".to_owned(),
    }
}

#[test]
fn verify_resolution_subject_and_types() {
    let subjects = Subjects::new(Some("p"));
    let acme = TenantId::new("acme").expect("tenant");
    assert_eq!(
        subjects.tenant(&acme, VERIFY_RESOLUTION),
        "p.pulse.acme.verify.resolution"
    );
    assert_eq!(
        subjects.any_tenant(VERIFY_RESOLUTION),
        "p.pulse.*.verify.resolution"
    );
    assert_eq!(VERIFIER_QUEUE_GROUP, "verifier");
    assert_eq!(ResolutionCheckRequest::TYPE, "pulse.verify.resolution");
    assert_eq!(ResolutionCheckReply::TYPE, "pulse.verify.resolution_reply");
    // The relay's own request and reply types carry the same names.
    assert_eq!(RelayObserveRequest::TYPE, "pulse.relay.observe");
    assert_eq!(RelayObserveReply::TYPE, "pulse.relay.observe.reply");
}

#[test]
fn resolution_request_wire_shape() {
    insta::assert_json_snapshot!("resolution_request", request());
}

#[test]
fn resolution_request_normalizes_the_key_and_refuses_bad_input() {
    let parsed: ResolutionCheckRequest = serde_json::from_value(serde_json::json!({
        "finding_id": "40d57bb7c6c30f6f",
        "key": "High CPU",
        "resource_id": "host:h1",
    }))
    .expect("parses");
    assert_eq!(parsed.key.as_str(), "cpu-high");
    for bad in [
        serde_json::json!({"finding_id": "nothex", "key": "cpu-high", "resource_id": "host:h1"}),
        serde_json::json!({"finding_id": "40d57bb7c6c30f6f", "key": "cpu/high", "resource_id": "host:h1"}),
        serde_json::json!({"finding_id": "40d57bb7c6c30f6f", "key": "cpu-high"}),
        serde_json::json!({"finding_id": "40d57bb7c6c30f6f", "key": "cpu-high", "resource_id": "host:h1", "extra": 1}),
    ] {
        assert!(
            serde_json::from_value::<ResolutionCheckRequest>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn resolution_reply_wire_shapes() {
    let request = request();
    let observed_at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
    let checked_at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 1).unwrap();
    let still_present = ResolutionCheckReply {
        finding_id: request.finding_id,
        key: request.key.clone(),
        resource_id: request.resource_id.clone(),
        outcome: VerifierOutcome::StillPresent,
        reason: "the service is running with health unhealthy".to_owned(),
        evidence: Some(ResolutionEvidence {
            observed_at,
            resource_type: ResourceType::Service,
            status: ResourceStatus::Running,
            health: Health::Unhealthy,
            restart_count: Some(0),
            readings: BTreeMap::new(),
        }),
        checked_at,
    };
    insta::assert_json_snapshot!("resolution_reply_still_present", still_present);
    let inconclusive = ResolutionCheckReply {
        outcome: VerifierOutcome::Inconclusive,
        reason: "the agent did not answer within 5 s".to_owned(),
        evidence: None,
        ..still_present
    };
    insta::assert_json_snapshot!("resolution_reply_inconclusive", inconclusive);
}

#[test]
fn relay_observe_wire_shapes() {
    let request = RelayObserveRequest {
        agent_id: "h1".to_owned(),
        target: ResourceTarget::Service {
            name: "web".to_owned(),
        },
    };
    insta::assert_json_snapshot!("relay_observe_request", request);
    let reply = RelayObserveReply(Observation {
        request_id: "r-1".to_owned(),
        observed_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap(),
        resource: ObservedResource {
            resource_type: ResourceType::Host,
            source_id: "h1".to_owned(),
            name: "h1".to_owned(),
            aliases: Vec::new(),
            status: ResourceStatus::Running,
            health: Health::Healthy,
            restart_count: None,
            labels: BTreeMap::new(),
            details: serde_json::json!({}),
            metrics: BTreeMap::from([("cpu_percent".to_owned(), 12.5)]),
            parent: None,
        },
    });
    insta::assert_json_snapshot!("relay_observe_reply", reply);
}
