//! The run's one typed proposal (`patrol_propose_action`): validation against the resource's
//! catalogue and the request-local capture sink.
//!
//! The sink keys on call identity plus payload fingerprint: the same payload is an idempotent
//! replay (it succeeds again, under the same or a new call id), the same id with another payload
//! latches an integrity error, a second distinct valid proposal latches ambiguity. Both latched
//! states invalidate the proposal: which one came "first" is not meaningful under concurrent
//! per-turn execution. Validation failures are counted; failed attempts without a valid
//! proposal are an error outcome, not the valid "no proposal" conclusion.
//!
//! Sensitive params are refused before anything else and their values are never echoed.

use std::sync::Mutex;

use pulse_bus::actions_api::{ActionCapabilitiesReply, ActionCapabilityEntry};
use pulse_domain::action::validate_request;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Whether a param of this name may carry a secret: the redactor's rule for secret field
/// names (one owner).
pub fn is_sensitive(name: &str) -> bool {
    pulse_redaction::is_secret_key(name)
}

/// A proposal that passed validation, under canonical ids.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    pub resource_id: String,
    pub causal_resource_id: String,
    pub capability_name: String,
    pub reason: String,
    pub params: Value,
}

/// Why a proposal was refused. Messages never contain a param value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposalError {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("params must be an object")]
    ParamsNotObject,
    #[error("params.{0} looks sensitive and is refused; its value is not shown or kept")]
    Sensitive(String),
    #[error(
        "capability {0:?} is not advertised by this resource; call patrol_action_capabilities and use an exact name"
    )]
    UnknownCapability(String),
    #[error("params.{0} is not declared by this capability")]
    Undeclared(String),
    #[error("params.{0} is required by this capability")]
    RequiredParam(String),
    #[error("params.{name} must be {expected}")]
    BadParam { name: String, expected: String },
    #[error("the proposal is not a valid plan: {0}")]
    Plan(String),
}

fn text<'a>(arguments: &'a Value, name: &'static str) -> Result<&'a str, ProposalError> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or(ProposalError::Missing(name))
}

/// The params of a proposal, checked for sensitive names before anything else looks at them.
fn params_of(arguments: &Value) -> Result<Map<String, Value>, ProposalError> {
    let params = match arguments.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return Err(ProposalError::ParamsNotObject),
    };
    if let Some(name) = params.keys().find(|k| is_sensitive(k)) {
        return Err(ProposalError::Sensitive(name.chars().take(64).collect()));
    }
    Ok(params)
}

/// Checks params against the capability's closed schema: declared, required, typed, enum.
fn check_params(
    entry: &ActionCapabilityEntry,
    params: &Map<String, Value>,
) -> Result<(), ProposalError> {
    if entry
        .sensitive_params
        .iter()
        .any(|s| params.contains_key(s))
    {
        let name = entry
            .sensitive_params
            .iter()
            .find(|s| params.contains_key(*s))
            .cloned()
            .unwrap_or_default();
        return Err(ProposalError::Sensitive(name));
    }
    let schema = &entry.params_schema;
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in params.keys() {
        if !properties.is_some_and(|p| p.contains_key(name)) {
            return Err(ProposalError::Undeclared(name.chars().take(64).collect()));
        }
    }
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !params.contains_key(required) {
            return Err(ProposalError::RequiredParam(required.to_owned()));
        }
    }
    for (name, value) in params {
        let Some(spec) = properties.and_then(|p| p.get(name)) else {
            continue;
        };
        let typed = match spec.get("type").and_then(Value::as_str) {
            Some("string") => value.is_string(),
            Some("integer") => value.is_i64() || value.is_u64(),
            Some("number") => value.is_number(),
            Some("boolean") => value.is_boolean(),
            _ => true,
        };
        if !typed {
            return Err(ProposalError::BadParam {
                name: name.clone(),
                expected: format!(
                    "of type {}",
                    spec.get("type").and_then(Value::as_str).unwrap_or("?")
                ),
            });
        }
        if let Some(allowed) = spec.get("enum").and_then(Value::as_array)
            && !allowed.contains(value)
        {
            return Err(ProposalError::BadParam {
                name: name.clone(),
                expected: format!("one of {}", Value::Array(allowed.clone())),
            });
        }
    }
    Ok(())
}

/// Validates a `patrol_propose_action` call against the catalogue of its resource (`catalogue`
/// answered for the call's `resource_id`, so it carries the canonical id) and the canonical id
/// of the causal resource.
pub fn validate(
    arguments: &Value,
    catalogue: &ActionCapabilitiesReply,
    causal_resource_id: &str,
) -> Result<Proposal, ProposalError> {
    let params = params_of(arguments)?;
    text(arguments, "resource_id")?;
    text(arguments, "causal_resource_id")?;
    let capability = text(arguments, "capability_name")?;
    let reason = text(arguments, "reason")?;
    let entry = catalogue
        .capabilities
        .iter()
        .find(|e| e.name == capability)
        .ok_or_else(|| ProposalError::UnknownCapability(capability.chars().take(64).collect()))?;
    check_params(entry, &params)?;
    let params = Value::Object(params);
    // The planner's own rules, so a captured proposal is one the broker can plan.
    validate_request(&catalogue.resource_id, "-", capability, &params, reason)
        .map_err(|e| ProposalError::Plan(e.to_string()))?;
    Ok(Proposal {
        resource_id: catalogue.resource_id.clone(),
        causal_resource_id: causal_resource_id.to_owned(),
        capability_name: entry.name.clone(),
        reason: reason.to_owned(),
        params,
    })
}

/// The fingerprint of a call's payload: sha256 of its canonical JSON.
pub fn fingerprint(arguments: &Value) -> Result<String, String> {
    let canonical = pulse_domain::canonical_json::canonicalize(arguments)
        .map_err(|e| format!("the proposal cannot be fingerprinted: {e}"))?;
    Ok(hex_of(&Sha256::digest(&canonical)))
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why the run has no usable proposal although it tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    #[error("the run proposed more than one distinct action; no proposal is kept")]
    Ambiguous,
    #[error("one proposal call id carried two different payloads; no proposal is kept")]
    Integrity,
    #[error("every proposal attempt of the run was refused")]
    FailedAttemptsOnly,
}

impl CaptureError {
    pub fn code(&self) -> &'static str {
        match self {
            CaptureError::Ambiguous => "proposal_ambiguous",
            CaptureError::Integrity => "proposal_integrity",
            CaptureError::FailedAttemptsOnly => "proposal_refused",
        }
    }
}

#[derive(Debug, Default)]
struct CaptureState {
    captured: Option<(String, String, Proposal)>,
    latched: Option<CaptureError>,
    failed_attempts: u32,
}

/// The run's one capture sink.
#[derive(Debug, Default)]
pub struct ProposalCapture {
    state: Mutex<CaptureState>,
}

impl ProposalCapture {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut CaptureState) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }

    /// Records a refused attempt.
    pub fn refused(&self) {
        self.with(|s| s.failed_attempts = s.failed_attempts.saturating_add(1));
    }

    /// Offers a validated proposal of call `call_id` whose payload fingerprint is `print`.
    /// `Ok` for the first proposal and for an identical replay; an error latches.
    pub fn offer(
        &self,
        call_id: &str,
        print: &str,
        proposal: Proposal,
    ) -> Result<(), CaptureError> {
        self.with(|s| {
            if let Some(latched) = &s.latched {
                return Err(latched.clone());
            }
            let error = match &s.captured {
                None => {
                    s.captured = Some((call_id.to_owned(), print.to_owned(), proposal));
                    return Ok(());
                }
                Some((id, p, _)) if id == call_id && p == print => return Ok(()),
                Some((id, _, _)) if id == call_id => CaptureError::Integrity,
                // The same payload re-sent under a new call id is the same proposal.
                Some((_, p, _)) if p == print => return Ok(()),
                Some(_) => CaptureError::Ambiguous,
            };
            s.latched = Some(error.clone());
            Err(error)
        })
    }

    /// Latches ambiguity from outside the sink (a second proposal call the run's gate stopped
    /// before it reached the handler).
    pub fn latch_ambiguous(&self) {
        self.with(|s| {
            if s.latched.is_none() {
                s.latched = Some(CaptureError::Ambiguous);
            }
        });
    }

    /// The call id of the captured proposal, if any.
    pub fn captured_call_id(&self) -> Option<String> {
        self.with(|s| s.captured.as_ref().map(|(id, _, _)| id.clone()))
    }

    /// The run's proposal cardinality: one proposal, none, or why there is none.
    pub fn outcome(&self) -> Result<Option<Proposal>, CaptureError> {
        self.with(|s| {
            if let Some(latched) = &s.latched {
                return Err(latched.clone());
            }
            match &s.captured {
                Some((_, _, proposal)) => Ok(Some(proposal.clone())),
                None if s.failed_attempts > 0 => Err(CaptureError::FailedAttemptsOnly),
                None => Ok(None),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use pulse_domain::action::ApprovalFloor;
    use pulse_domain::resource::ResourceType;
    use serde_json::json;

    use super::*;

    fn catalogue() -> ActionCapabilitiesReply {
        let entry = |name: &str| ActionCapabilityEntry {
            name: name.to_owned(),
            description: String::new(),
            params_schema: json!({
                "type": "object",
                "properties": {"target": {"type": "string", "enum": ["web"]}},
                "required": ["target"],
                "additionalProperties": false,
            }),
            sensitive_params: Vec::new(),
            approval_floor: ApprovalFloor::None,
            auto_approval_eligible: true,
            risk_level: Default::default(),
        };
        ActionCapabilitiesReply {
            resource_id: "service:h1:web".to_owned(),
            resource_type: ResourceType::Service,
            resource_name: "web".to_owned(),
            capabilities: vec![entry("service.restart"), entry("service.stop")],
        }
    }

    fn args(capability: &str, params: Value) -> Value {
        json!({
            "resource_id": "web",
            "causal_resource_id": "service:h1:web",
            "capability_name": capability,
            "reason": "the health check fails",
            "params": params,
        })
    }

    #[test]
    fn a_valid_proposal_carries_the_canonical_target() {
        let proposal = validate(
            &args("service.restart", json!({"target": "web"})),
            &catalogue(),
            "service:h1:web",
        )
        .expect("valid");
        assert_eq!(proposal.resource_id, "service:h1:web");
        assert_eq!(proposal.capability_name, "service.restart");
        assert_eq!(proposal.params, json!({"target": "web"}));
    }

    #[test]
    fn sensitive_params_are_refused_without_echoing_the_value() {
        let canary = "hunter2-canary-value";
        for name in ["password", "api_key", "Auth_Token", "client_secret"] {
            let error = validate(
                &args("service.restart", json!({"target": "web", name: canary})),
                &catalogue(),
                "service:h1:web",
            )
            .expect_err("sensitive");
            assert!(
                matches!(error, ProposalError::Sensitive(_)),
                "{name}: {error}"
            );
            assert!(!error.to_string().contains(canary), "{error}");
        }
    }

    #[test]
    fn the_catalogue_decides_names_and_params_exactly() {
        let cases = [
            (
                args("service.Restart", json!({"target": "web"})),
                "UnknownCapability",
            ),
            (
                args("restart", json!({"target": "web"})),
                "UnknownCapability",
            ),
            (args("service.restart", json!({})), "RequiredParam"),
            (args("service.restart", json!({"target": "db"})), "BadParam"),
            (args("service.restart", json!({"target": 7})), "BadParam"),
            (
                args("service.restart", json!({"target": "web", "force": true})),
                "Undeclared",
            ),
            (args("service.restart", json!("web")), "ParamsNotObject"),
        ];
        for (arguments, expected) in cases {
            let error = validate(&arguments, &catalogue(), "service:h1:web").expect_err("refused");
            assert!(
                format!("{error:?}").starts_with(expected),
                "{arguments}: {error:?}"
            );
        }
        let mut no_reason = args("service.restart", json!({"target": "web"}));
        no_reason["reason"] = json!("  ");
        assert_eq!(
            validate(&no_reason, &catalogue(), "service:h1:web"),
            Err(ProposalError::Missing("reason"))
        );
    }

    fn proposal(capability: &str) -> Proposal {
        validate(
            &args(capability, json!({"target": "web"})),
            &catalogue(),
            "service:h1:web",
        )
        .expect("valid")
    }

    #[test]
    fn an_identical_replay_is_idempotent() {
        let capture = ProposalCapture::new();
        let print = fingerprint(&args("service.restart", json!({"target": "web"}))).unwrap();
        capture
            .offer("call-1", &print, proposal("service.restart"))
            .unwrap();
        capture
            .offer("call-1", &print, proposal("service.restart"))
            .unwrap();
        assert_eq!(capture.outcome(), Ok(Some(proposal("service.restart"))));
    }

    #[test]
    fn the_same_payload_under_a_new_call_id_is_idempotent() {
        let capture = ProposalCapture::new();
        let print = fingerprint(&args("service.restart", json!({"target": "web"}))).unwrap();
        capture
            .offer("call-1", &print, proposal("service.restart"))
            .unwrap();
        assert_eq!(
            capture.offer("call-2", &print, proposal("service.restart")),
            Ok(())
        );
        assert_eq!(capture.outcome(), Ok(Some(proposal("service.restart"))));
        assert_eq!(capture.captured_call_id().as_deref(), Some("call-1"));
    }

    #[test]
    fn a_second_distinct_proposal_is_ambiguous_and_keeps_none() {
        let capture = ProposalCapture::new();
        let first = fingerprint(&args("service.restart", json!({"target": "web"}))).unwrap();
        let second = fingerprint(&args("service.stop", json!({"target": "web"}))).unwrap();
        assert_ne!(first, second);
        capture
            .offer("call-1", &first, proposal("service.restart"))
            .unwrap();
        assert_eq!(
            capture.offer("call-2", &second, proposal("service.stop")),
            Err(CaptureError::Ambiguous)
        );
        assert_eq!(capture.outcome(), Err(CaptureError::Ambiguous));
        // Latched: even the first proposal's replay is refused now.
        assert_eq!(
            capture.offer("call-1", &first, proposal("service.restart")),
            Err(CaptureError::Ambiguous)
        );
    }

    #[test]
    fn one_call_id_with_two_payloads_is_an_integrity_error() {
        let capture = ProposalCapture::new();
        capture
            .offer("call-1", "a", proposal("service.restart"))
            .unwrap();
        assert_eq!(
            capture.offer("call-1", "b", proposal("service.stop")),
            Err(CaptureError::Integrity)
        );
        assert_eq!(capture.outcome(), Err(CaptureError::Integrity));
    }

    #[test]
    fn refused_attempts_without_a_proposal_are_an_error_and_none_is_a_valid_zero() {
        let capture = ProposalCapture::new();
        assert_eq!(capture.outcome(), Ok(None));
        capture.refused();
        assert_eq!(capture.outcome(), Err(CaptureError::FailedAttemptsOnly));
        capture
            .offer("call-2", "a", proposal("service.restart"))
            .unwrap();
        assert!(capture.outcome().unwrap().is_some());
    }
}
