//! The action plan and its hash.
//!
//! `plan_hash` is the lowercase hex sha256 of the RFC 8785 canonical JSON of the
//! [`PlanIdentity`]: what would run (action id, resource, agent, capability, params), under which
//! approval floor, until when, against which resource version. The broker computes it when it
//! plans and again, with this same function, right before execution; a different hash is plan
//! drift and the action does not run.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::capability::Capability;
use super::policy::{PolicyDecision, Severity};
use crate::canonical_json;

/// Longest plan reason, in characters.
pub const MAX_REASON_CHARS: usize = 1_000;
/// Largest params object, as compact JSON bytes: room for the longest target of four-byte
/// characters, so every params object the document allows fits.
pub const MAX_PARAMS_BYTES: usize = 4 * MAX_ID_CHARS + 16;
/// Longest resource id, agent id or target, in characters (as an API document states a length).
pub const MAX_ID_CHARS: usize = 1_024;

/// The least approval a plan needs. A tenant policy may raise a floor, never lower it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalFloor {
    /// Policy may authorize it without a human.
    None,
    /// It may be planned and shown, never executed.
    DryRunOnly,
    /// A human with `actions:approve` must approve it.
    Admin,
    /// A step-up (MFA) approval; this build has no step-up, so it is never approved.
    Mfa,
}

impl ApprovalFloor {
    pub const ALL: [ApprovalFloor; 4] = [
        ApprovalFloor::None,
        ApprovalFloor::DryRunOnly,
        ApprovalFloor::Admin,
        ApprovalFloor::Mfa,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalFloor::None => "none",
            ApprovalFloor::DryRunOnly => "dry_run_only",
            ApprovalFloor::Admin => "admin",
            ApprovalFloor::Mfa => "mfa",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == text)
    }

    /// The least floor of a capability: stopping something needs a human, and so does every
    /// power action on a Proxmox guest (a VM carries more than one supervised service).
    pub fn minimum_for(capability: Capability) -> Self {
        match capability {
            Capability::ServiceStop
            | Capability::ContainerStop
            | Capability::GuestStart
            | Capability::GuestShutdown
            | Capability::GuestReboot
            | Capability::GuestStop => ApprovalFloor::Admin,
            Capability::ServiceStart
            | Capability::ServiceRestart
            | Capability::ContainerStart
            | Capability::ContainerRestart => ApprovalFloor::None,
        }
    }

    /// The floor a plan gets: the requested one, raised to the capability's minimum, never
    /// lowered.
    pub fn effective(requested: Option<Self>, capability: Capability) -> Self {
        requested
            .unwrap_or(ApprovalFloor::None)
            .max(Self::minimum_for(capability))
    }
}

/// What the plan hash covers.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanIdentity<'a> {
    pub action_id: Uuid,
    pub resource_id: &'a str,
    pub agent_id: &'a str,
    pub capability: Capability,
    pub params: &'a Value,
    pub floor: ApprovalFloor,
    pub expires_at: DateTime<Utc>,
    pub resource_version: &'a str,
}

/// THE plan hash function: sha256 of the canonical JSON of the identity, lowercase hex.
pub fn plan_hash(
    identity: &PlanIdentity<'_>,
) -> Result<String, canonical_json::CanonicalJsonError> {
    let value = json!({
        "action_id": identity.action_id.to_string(),
        "resource_id": identity.resource_id,
        "agent_id": identity.agent_id,
        "capability": identity.capability.as_str(),
        "params": identity.params,
        "approval_floor": identity.floor.as_str(),
        "expires_at": identity.expires_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        "resource_version": identity.resource_version,
    });
    let canonical = canonical_json::canonicalize(&value)?;
    Ok(hex::encode(Sha256::digest(&canonical)))
}

/// The version of a resource the plan hash binds: a digest of what makes it this resource (its
/// type, agent, source and parent), or `absent` when no such resource exists. A resource
/// replaced by another under the same id changes it.
pub fn resource_version(resource: Option<&crate::resource::Resource>) -> String {
    match resource {
        None => "absent".to_owned(),
        Some(r) => {
            let identity = json!({
                "type": r.resource_type.as_str(),
                "agent_id": r.agent_id,
                "source_id": r.source_id,
                "parent": r.parent.as_ref().map(|p| p.to_string()),
            });
            let canonical = canonical_json::canonicalize(&identity)
                .unwrap_or_else(|_| identity.to_string().into_bytes());
            hex::encode(&Sha256::digest(&canonical)[..12])
        }
    }
}

/// A planned action as stored and shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ActionPlan {
    pub action_id: Uuid,
    pub resource_id: String,
    /// The agent that runs the command.
    pub agent_id: String,
    pub capability: Capability,
    /// An object; `target` (string) names the service or container the capability acts on.
    pub params: Value,
    pub reason: String,
    pub severity: Severity,
    pub approval_floor: ApprovalFloor,
    /// `user:<id>` or `token:<id>`.
    pub requested_by: String,
    pub planned_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub resource_version: String,
    pub policy_decision: PolicyDecision,
    pub plan_hash: String,
}

impl ActionPlan {
    pub fn identity(&self) -> PlanIdentity<'_> {
        PlanIdentity {
            action_id: self.action_id,
            resource_id: &self.resource_id,
            agent_id: &self.agent_id,
            capability: self.capability,
            params: &self.params,
            floor: self.approval_floor,
            expires_at: self.expires_at,
            resource_version: &self.resource_version,
        }
    }

    /// The hash of the plan as it is now; differs from `plan_hash` when the plan drifted.
    pub fn recompute_hash(&self) -> Result<String, canonical_json::CanonicalJsonError> {
        plan_hash(&self.identity())
    }

    /// The command target named in the params.
    pub fn target(&self) -> Option<&str> {
        self.params.get("target").and_then(Value::as_str)
    }

    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        now >= self.expires_at
    }
}

/// Why a plan request is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("unknown capability {0:?}")]
    UnknownCapability(String),
    #[error("{field} must be 1..={max} characters")]
    BadId { field: &'static str, max: usize },
    #[error(
        "params must be a JSON object whose only field is `target`, a string of 1..={MAX_ID_CHARS} characters without control characters"
    )]
    BadParams,
    #[error("params exceed {MAX_PARAMS_BYTES} bytes")]
    ParamsTooLarge,
    #[error(
        "reason must be 1..={MAX_REASON_CHARS} characters, not only white space, without U+0000"
    )]
    BadReason,
}

/// Validates the caller-supplied parts of a plan.
pub fn validate_request(
    resource_id: &str,
    agent_id: &str,
    capability: &str,
    params: &Value,
    reason: &str,
) -> Result<Capability, PlanError> {
    for (field, value) in [("resource_id", resource_id), ("agent_id", agent_id)] {
        if value.is_empty() || value.chars().count() > MAX_ID_CHARS {
            return Err(PlanError::BadId {
                field,
                max: MAX_ID_CHARS,
            });
        }
    }
    let capability = Capability::parse(capability)
        .ok_or_else(|| PlanError::UnknownCapability(capability.chars().take(64).collect()))?;
    // The capability catalogue's params schema is closed: `target` and nothing else.
    let target = params.get("target").and_then(Value::as_str);
    let only_target = params
        .as_object()
        .is_some_and(|fields| fields.keys().all(|k| k == "target"));
    let bad_target = |t: &str| {
        t.is_empty() || t.chars().count() > MAX_ID_CHARS || t.chars().any(char::is_control)
    };
    if !only_target || target.is_none_or(bad_target) {
        return Err(PlanError::BadParams);
    }
    if serde_json::to_vec(params).map_or(true, |b| b.len() > MAX_PARAMS_BYTES) {
        return Err(PlanError::ParamsTooLarge);
    }
    let chars = reason.trim().chars().count();
    if chars == 0 || reason.chars().count() > MAX_REASON_CHARS || reason.contains('\0') {
        return Err(PlanError::BadReason);
    }
    Ok(capability)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn identity_parts() -> (Uuid, Value, DateTime<Utc>) {
        (
            Uuid::parse_str("0193a1b2-0000-7000-8000-000000000001").unwrap(),
            json!({"target": "nginx", "grace_seconds": 5}),
            Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap(),
        )
    }

    fn identity<'a>(id: Uuid, params: &'a Value, at: DateTime<Utc>) -> PlanIdentity<'a> {
        PlanIdentity {
            action_id: id,
            resource_id: "host-1/service/nginx",
            agent_id: "host-1",
            capability: Capability::ServiceRestart,
            params,
            floor: ApprovalFloor::Admin,
            expires_at: at,
            resource_version: "7",
        }
    }

    #[test]
    fn the_hash_is_sha256_of_the_canonical_identity() {
        let (id, params, at) = identity_parts();
        let hash = plan_hash(&identity(id, &params, at)).unwrap();
        let canonical = concat!(
            r#"{"action_id":"0193a1b2-0000-7000-8000-000000000001","agent_id":"host-1","#,
            r#""approval_floor":"admin","capability":"service.restart","#,
            r#""expires_at":"2026-11-29T12:00:00.000000Z","params":{"grace_seconds":5,"target":"nginx"},"#,
            r#""resource_id":"host-1/service/nginx","resource_version":"7"}"#
        );
        assert_eq!(hash, hex::encode(Sha256::digest(canonical.as_bytes())));
        assert_eq!(hash.len(), 64);
    }

    #[test]
    fn key_order_of_params_does_not_matter() {
        let (id, _, at) = identity_parts();
        let a: Value = serde_json::from_str(r#"{"target":"nginx","grace_seconds":5}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"grace_seconds":5,"target":"nginx"}"#).unwrap();
        assert_eq!(
            plan_hash(&identity(id, &a, at)).unwrap(),
            plan_hash(&identity(id, &b, at)).unwrap()
        );
    }

    #[test]
    fn every_identity_field_changes_the_hash() {
        let (id, params, at) = identity_parts();
        let base_identity = identity(id, &params, at);
        let base = plan_hash(&base_identity).unwrap();
        let other_params = json!({"target": "postgres", "grace_seconds": 5});
        let variants = [
            PlanIdentity {
                action_id: Uuid::nil(),
                ..base_identity.clone()
            },
            PlanIdentity {
                resource_id: "host-1/service/other",
                ..base_identity.clone()
            },
            PlanIdentity {
                agent_id: "host-2",
                ..base_identity.clone()
            },
            PlanIdentity {
                capability: Capability::ServiceStop,
                ..base_identity.clone()
            },
            PlanIdentity {
                params: &other_params,
                ..base_identity.clone()
            },
            PlanIdentity {
                floor: ApprovalFloor::None,
                ..base_identity.clone()
            },
            PlanIdentity {
                expires_at: at + chrono::Duration::microseconds(1),
                ..base_identity.clone()
            },
            PlanIdentity {
                resource_version: "8",
                ..base_identity.clone()
            },
        ];
        for variant in variants {
            assert_ne!(plan_hash(&variant).unwrap(), base, "{variant:?}");
        }
    }

    #[test]
    fn requests_are_validated() {
        let ok = json!({"target": "nginx"});
        assert_eq!(
            validate_request("r", "a", "service.restart", &ok, "restart it"),
            Ok(Capability::ServiceRestart)
        );
        assert!(matches!(
            validate_request("r", "a", "shell.exec", &ok, "x"),
            Err(PlanError::UnknownCapability(_))
        ));
        assert!(matches!(
            validate_request("", "a", "service.restart", &ok, "x"),
            Err(PlanError::BadId {
                field: "resource_id",
                ..
            })
        ));
        for bad in [
            json!([]),
            json!({}),
            json!({"target": ""}),
            json!({"target": 3}),
        ] {
            assert_eq!(
                validate_request("r", "a", "service.restart", &bad, "x"),
                Err(PlanError::BadParams),
                "{bad}"
            );
        }
        // The params schema is closed: `target` only.
        let extra = json!({"target": "n", "grace_seconds": 5});
        assert_eq!(
            validate_request("r", "a", "service.restart", &extra, "x"),
            Err(PlanError::BadParams)
        );
        assert_eq!(
            validate_request(
                "r",
                "a",
                "service.restart",
                &json!({"target": "a\u{1}"}),
                "x"
            ),
            Err(PlanError::BadParams)
        );
        // The longest target, of four-byte characters, still fits.
        let longest = json!({"target": "\u{1f600}".repeat(MAX_ID_CHARS)});
        assert_eq!(
            validate_request("r", "a", "service.restart", &longest, "x"),
            Ok(Capability::ServiceRestart)
        );
        assert_eq!(
            validate_request("r", "a", "service.restart", &ok, "   "),
            Err(PlanError::BadReason)
        );
        assert_eq!(
            validate_request(
                "r",
                "a",
                "service.restart",
                &ok,
                &"y".repeat(MAX_REASON_CHARS + 1)
            ),
            Err(PlanError::BadReason)
        );
    }

    #[test]
    fn a_requested_floor_is_raised_never_lowered() {
        let stop = Capability::ServiceStop;
        let restart = Capability::ServiceRestart;
        assert_eq!(ApprovalFloor::effective(None, stop), ApprovalFloor::Admin);
        assert_eq!(
            ApprovalFloor::effective(Some(ApprovalFloor::None), stop),
            ApprovalFloor::Admin
        );
        assert_eq!(
            ApprovalFloor::effective(Some(ApprovalFloor::Mfa), stop),
            ApprovalFloor::Mfa
        );
        assert_eq!(ApprovalFloor::effective(None, restart), ApprovalFloor::None);
        for floor in ApprovalFloor::ALL {
            assert_eq!(ApprovalFloor::effective(Some(floor), restart), floor);
        }
    }

    #[test]
    fn floors_order_and_round_trip() {
        assert!(ApprovalFloor::None < ApprovalFloor::DryRunOnly);
        assert!(ApprovalFloor::Admin < ApprovalFloor::Mfa);
        for floor in ApprovalFloor::ALL {
            assert_eq!(ApprovalFloor::parse(floor.as_str()), Some(floor));
        }
    }

    #[test]
    fn resource_version_binds_what_makes_the_resource_itself() {
        use crate::resource::{Health, Resource, ResourceId, ResourceStatus, ResourceType};
        let at = Utc::now();
        let nginx = |agent: &str, status: ResourceStatus| Resource {
            id: ResourceId::of(ResourceType::Service, agent, "nginx"),
            resource_type: ResourceType::Service,
            source_id: "nginx".to_owned(),
            name: "nginx".to_owned(),
            aliases: Vec::new(),
            parent: None,
            agent_id: agent.to_owned(),
            status,
            health: Health::Unknown,
            restart_count: None,
            labels: Default::default(),
            details: Value::Null,
            observed_at: at,
            received_at: at,
        };
        assert_eq!(resource_version(None), "absent");
        let running = resource_version(Some(&nginx("h1", ResourceStatus::Running)));
        assert_eq!(running.len(), 24);
        // Its state is not its identity: a stopped nginx is the same resource.
        assert_eq!(
            running,
            resource_version(Some(&nginx("h1", ResourceStatus::Stopped)))
        );
        // The same name on another agent is another resource.
        assert_ne!(
            running,
            resource_version(Some(&nginx("h2", ResourceStatus::Running)))
        );
    }
}
