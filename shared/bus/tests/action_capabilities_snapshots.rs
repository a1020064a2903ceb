//! The action catalogue request and reply (Patrol investigation's `patrol_action_capabilities`),
//! snapshotted: a changed snapshot is a changed contract. Neither carries a command, a target
//! host or an autonomy field.

use pulse_bus::actions_api::{
    ACTION_CAPABILITIES_REQUEST, ActionCapabilitiesReply, ActionCapabilitiesRequest,
    ActionCapabilityEntry,
};
use pulse_bus::{Message, Subjects};
use pulse_domain::TenantId;
use pulse_domain::action::ApprovalFloor;
use pulse_domain::resource::ResourceType;
use serde_json::json;

#[test]
fn catalogue_subject_and_types() {
    let subjects = Subjects::new(Some("p"));
    let acme = TenantId::new("acme").unwrap();
    assert_eq!(
        subjects.tenant(&acme, ACTION_CAPABILITIES_REQUEST),
        "p.pulse.acme.actions.capabilities.request"
    );
    assert_eq!(
        ActionCapabilitiesRequest::TYPE,
        "pulse.actions.capabilities_request"
    );
    assert_eq!(
        ActionCapabilitiesReply::TYPE,
        "pulse.actions.capabilities_reply"
    );
}

#[test]
fn action_capabilities_request() {
    insta::assert_json_snapshot!(ActionCapabilitiesRequest {
        resource_id: "nginx".to_owned(),
    });
}

#[test]
fn action_capabilities_reply() {
    let reply = ActionCapabilitiesReply {
        resource_id: "service:h1:nginx".to_owned(),
        resource_type: ResourceType::Service,
        resource_name: "nginx".to_owned(),
        capabilities: vec![ActionCapabilityEntry {
            name: "service.restart".to_owned(),
            description: "Restart the supervised service.".to_owned(),
            params_schema: json!({
                "type": "object",
                "properties": {"target": {"type": "string", "enum": ["nginx"]}},
                "required": ["target"],
                "additionalProperties": false,
            }),
            sensitive_params: Vec::new(),
            approval_floor: ApprovalFloor::None,
            auto_approval_eligible: true,
            risk_level: Default::default(),
        }],
    };
    let text = serde_json::to_string(&reply).unwrap();
    for forbidden in ["command", "target_host", "autonomy"] {
        assert!(!text.contains(forbidden), "{forbidden}: {text}");
    }
    insta::assert_json_snapshot!(reply);
}
