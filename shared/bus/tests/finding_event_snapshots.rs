//! The `events.finding.*` payload, snapshotted: a changed snapshot is a changed contract (the
//! agent event stream renders it to clients as it is).

use chrono::{TimeZone, Utc};
use pulse_bus::events::{
    FINDING_CREATED, FINDING_RESOLVED, FINDING_UPDATED, FindingChange, FindingChanged,
};
use pulse_bus::{Message, OutboxRow, Subjects};
use pulse_domain::TenantId;
use pulse_domain::finding::{
    Category, FindingId, FindingKey, FindingStatus, LifecycleEventType, Severity,
};

fn changed(change: FindingChange, event: Option<LifecycleEventType>) -> FindingChanged {
    let key = FindingKey::normalize("service-unhealthy").unwrap();
    FindingChanged {
        finding_id: FindingId::derive("service:h1:web", Category::Reliability, &key),
        key,
        resource_id: "service:h1:web".to_owned(),
        resource_name: "web".to_owned(),
        severity: Severity::Warning,
        category: Category::Reliability,
        status: FindingStatus::Active,
        title: "web health check failing".to_owned(),
        change,
        lifecycle_event: event,
        version: 3,
        at: Utc.with_ymd_and_hms(2026, 12, 2, 8, 0, 1).unwrap(),
    }
}

#[test]
fn finding_changed_wire_shape() {
    insta::assert_json_snapshot!(
        "finding_updated",
        changed(
            FindingChange::Updated,
            Some(LifecycleEventType::Acknowledged)
        )
    );
    insta::assert_json_snapshot!(
        "finding_updated_without_event",
        changed(FindingChange::Updated, None)
    );
}

#[test]
fn each_change_goes_to_its_subject() {
    let subjects = Subjects::new(None);
    let tenant = TenantId::new("acme").unwrap();
    let subjects_of: Vec<String> = [
        FindingChange::Created,
        FindingChange::Updated,
        FindingChange::Resolved,
    ]
    .into_iter()
    .map(|change| {
        let (domain, event) = change.event();
        OutboxRow::event(&subjects, &tenant, domain, event, &changed(change, None))
            .unwrap()
            .subject
    })
    .collect();
    assert_eq!(
        subjects_of,
        [
            "pulse.acme.events.finding.created",
            "pulse.acme.events.finding.updated",
            "pulse.acme.events.finding.resolved",
        ]
    );
    assert_eq!(
        [FINDING_CREATED, FINDING_UPDATED, FINDING_RESOLVED],
        [
            ("finding", "created"),
            ("finding", "updated"),
            ("finding", "resolved")
        ]
    );
    assert_eq!(FindingChanged::TYPE, "pulse.finding.changed");
}
