//! The one stable error-code table. Every API error is `{"error": "<code>", "message": "..."}`
//! with a code from here; a handler cannot emit anything else. `docs/api/errors.md` is generated
//! from this table and a test keeps the two in step.

macro_rules! error_codes {
    ($( $variant:ident => $code:literal, $status:literal, $meaning:literal, $remedy:literal; )*) => {
        /// A stable machine-readable error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum ErrorCode {
            $(
                #[serde(rename = $code)]
                $variant,
            )*
        }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The wire value.
            pub fn code(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// The code with this wire value, or `None` for a value the table does not hold.
            pub fn from_code(code: &str) -> Option<ErrorCode> {
                match code {
                    $($code => Some(ErrorCode::$variant),)*
                    _ => None,
                }
            }

            /// The HTTP status this code is answered with.
            pub fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status,)* }
            }

            /// What the code means, in one line.
            pub fn meaning(self) -> &'static str {
                match self { $(ErrorCode::$variant => $meaning,)* }
            }

            /// What the caller should do about it.
            pub fn remedy(self) -> &'static str {
                match self { $(ErrorCode::$variant => $remedy,)* }
            }
        }
    };
}

error_codes! {
    InvalidJson => "invalid_json", 400,
        "the request body is not syntactically valid JSON",
        "send a well-formed JSON document";
    InvalidRequest => "invalid_request", 422,
        "the request body is JSON but a field is missing, has the wrong type, is unknown or has an invalid value",
        "fix the field named in the message; see the route's documented body";
    InvalidParameter => "invalid_parameter", 400,
        "a path or query parameter is malformed",
        "fix the parameter named in the message";
    UnsupportedMediaType => "unsupported_media_type", 415,
        "the request body is not declared as JSON",
        "send the header Content-Type: application/json";
    PayloadTooLarge => "payload_too_large", 413,
        "the request body is larger than the configured limit",
        "send a smaller body (limit: gateway.max_body_bytes)";
    Unauthorized => "unauthorized", 401,
        "no valid token: missing, malformed, unknown, revoked or expired",
        "send Authorization: Bearer <token> with a live token (pulsectl token create)";
    AcknowledgementRequiresHuman => "acknowledgement_requires_human", 403,
        "the Autopilot acknowledgement is a person's: the caller's token belongs to no user",
        "accept the terms signed in to the web UI, or with a token a user created";
    CsrfTokenInvalid => "csrf_token_invalid", 403,
        "a web UI form arrived without the CSRF token of the signed-in session, or with another one",
        "reload the page and submit the form again";
    SignInFailed => "sign_in_failed", 401,
        "the organization, username and password do not match a user with a password",
        "check all three; an admin can create a user with `pulsectl user create`";
    SignInRateLimited => "sign_in_rate_limited", 429,
        "too many failed sign-ins for this account, or from this address, in a short time",
        "wait for the time given in the message, then sign in again";
    MissingScope => "missing_scope", 403,
        "the token is valid but lacks a scope this request requires",
        "use a token that carries the scope named in the message";
    NotFound => "not_found", 404,
        "no such route or resource in this tenant",
        "check the path and the id";
    MethodNotAllowed => "method_not_allowed", 405,
        "the route exists but not with this HTTP method",
        "use a method the route documents";
    AmbiguousResource => "ambiguous_resource", 409,
        "the resource reference (source id, name or alias) matches several resources; the message names them",
        "use the canonical id of the one you mean";
    Conflict => "conflict", 409,
        "the request conflicts with the current state",
        "re-read the resource and retry with the current state";
    SettingsVersionConflict => "settings_version_conflict", 409,
        "the settings changed since the version named in If-Match was read",
        "GET the settings again, reapply the change and send the new version in If-Match";
    AutopilotNotAcknowledged => "autopilot_not_acknowledged", 422,
        "autonomy_level full (Autopilot) needs an autopilot_acknowledgement of the current version",
        "send autopilot_acknowledgement {version, acknowledged_by, at} with the version named in the message";
    AgentNotConnected => "agent_not_connected", 409,
        "the agent named in the request has no open session with any relay",
        "check that pulse-agent runs on the host and reaches the relay; retry once it reports";
    AgentTimeout => "agent_timeout", 504,
        "the agent did not answer within relay.request_timeout_ms",
        "retry; for a command, retry with the same action id (it runs at most once)";
    AgentRefused => "agent_refused", 422,
        "the agent could not answer the request; the message gives its reason",
        "fix what the reason names (unknown service or container, bounds, no engine)";
    AgentResponseTooLarge => "agent_response_too_large", 502,
        "the agent's answer exceeded relay.max_response_bytes",
        "ask for less (fewer lines or bytes) or raise relay.max_response_bytes";
    RateLimited => "rate_limited", 429,
        "too many requests for this agent (relay.max_requests_per_sec)",
        "slow down and retry";
    InvalidLastEventId => "invalid_last_event_id", 400,
        "Last-Event-ID (header or last_event_id query parameter) is not an event id this API sent",
        "send the id of the last event received (a decimal sequence number), or reconnect without it for new events only";
    TooManyStreams => "too_many_streams", 429,
        "the tenant already has gateway.max_streams_per_tenant event streams open on this gateway",
        "close an open stream (or share one per client) and retry";
    UnprocessableScope => "unprocessable_scope", 422,
        "a requested Patrol scope id matches no resource or several; the message names each one",
        "use canonical ids (GET /api/resources) or a source id or alias that names exactly one resource";
    PatrolSchedulerUnavailable => "patrol_scheduler_unavailable", 503,
        "no patrol-scheduler answered the run request, so no run was accepted",
        "start pulse-patrol-scheduler (check its logs and /api/health), then send the request again";
    PatrolRunInProgress => "patrol_run_in_progress", 409,
        "a full Patrol run of this tenant is already queued or running (the message names it); a second one is not accepted",
        "follow the named run (GET /api/ai/patrol/runs/{id}) and request a new full run after it ended";
    PatrolQueueFull => "patrol_queue_full", 429,
        "the tenant already has patrol.scoped_queue_limit scoped Patrol runs waiting to start",
        "wait for queued runs to start (GET /api/ai/patrol/status shows queued_scoped_runs), then retry";
    PatrolNotReady => "patrol_not_ready", 409,
        "the Patrol provider or model is known not to work (a readiness check failed), so the run was refused before any model call; the message names the failed check",
        "fix the Patrol provider and model (PUT /api/settings/ai), run POST /api/ai/patrol/preflight, then request the run again";
    PatrolRunnerUnavailable => "patrol_runner_unavailable", 503,
        "no model-runner answered the preflight request, so no preflight ran",
        "start pulse-model-runner (check its logs and /api/health), then send the request again";
    ProviderNotFound => "provider_not_found", 404,
        "the path names no provider of the provider table",
        "use a provider id from GET /api/ai/models or the settings (openai, anthropic, gemini, ollama, ...)";
    ProviderNotConfigured => "provider_not_configured", 409,
        "the provider is not set up for this tenant: it needs an API key or a base URL, or its stored key cannot be opened",
        "set the provider's API key and base URL in Settings (PUT /api/settings/ai), then send the request again";
    ModelRunnerUnavailable => "model_runner_unavailable", 503,
        "no model-runner answered, so no provider was asked",
        "start pulse-model-runner (check its logs and /api/health), then send the request again";
    InvalidFindingRequest => "invalid_finding_request", 400,
        "a finding request is malformed: an unknown or missing field, a bad finding id, reason, category, duration or note (the message names it), or a broad suppression without allow_broad_scope",
        "fix the field named in the message; see docs/api/findings.md for each route's body";
    FindingNotFound => "finding_not_found", 404,
        "no finding with this id (or, for suppress without finding_id, no open finding on that resource and category) in this tenant",
        "list the findings (GET /api/ai/patrol/findings?include_resolved=1) and use an id from there";
    FindingActionNotAllowed => "finding_action_not_allowed", 409,
        "the finding's status does not accept this action (for example acknowledging a resolved finding); the message names the status and the actions it accepts",
        "re-read the finding (GET /api/ai/patrol/findings/{id}) and send one of the actions the message lists";
    PatrolUnavailable => "patrol_unavailable", 503,
        "the finding store is unreachable, so the finding could not be read or changed",
        "retry shortly; check /api/health and the gateway logs";
    ActionNotFound => "action_not_found", 404,
        "no action with this id in this tenant",
        "list the actions (GET /api/actions) and use an id from there";
    InvalidActionRequest => "invalid_action_request", 422,
        "an action plan or decision is malformed: unknown capability, params without a string target, a bad reason, severity, floor or outcome (the message names it)",
        "fix the field named in the message; see docs/api/actions.md";
    ActionNotApproved => "action_not_approved", 409,
        "the action is not approved (it is still waiting for a decision, or was rejected), so it was not executed",
        "approve it first (POST /api/actions/{id}/decision), then execute it";
    ActionAlreadyExecuting => "action_already_executing", 409,
        "the action is already executing; it runs at most once",
        "follow the action (GET /api/actions/{id}) until it is completed or failed";
    ActionExecutionFinal => "action_execution_final", 409,
        "the action already ended (completed, failed, rejected or expired); resubmitting never re-executes it",
        "read its outcome (GET /api/actions/{id}); plan a new action to run it again";
    ActionDecisionNotAllowed => "action_decision_not_allowed", 409,
        "the action does not wait for a decision (it was decided already, auto-authorized, refused or expired)",
        "re-read the action (GET /api/actions/{id}); only pending_approval actions take a decision";
    ActionStepUpUnavailable => "action_step_up_unavailable", 422,
        "the plan's approval floor is mfa and this build has no step-up authentication, so it can never be approved",
        "plan the action with a lower floor if the policy allows it, or perform the change outside Pulse";
    ActionSelfApprovalForbidden => "action_self_approval_forbidden", 403,
        "the plan's approval floor requires a human other than the requester, and the decider is the requester",
        "ask another human with actions:approve to decide";
    ActionDecisionRequiresHuman => "action_decision_requires_human", 403,
        "decisions are made by a human; this token belongs to no user",
        "decide with a token created by a user (the token's creator is the decider)";
    ActionPlanExpired => "action_plan_expired", 409,
        "the plan expired before it was executed; it is now expired and never runs",
        "plan the action again";
    ActionPlanDrift => "action_plan_drift", 409,
        "the plan changed after it was hashed (its recomputed plan hash differs), so it was refused and failed; the audit row starts with plan_drift:",
        "read the audit (GET /api/actions/{id}/audit) and plan the action again";
    ResourceRemediationLocked => "resource_remediation_locked", 409,
        "the resource is marked never_auto_remediate, so no action runs on it, approved or not; the action failed",
        "clear the lock if remediation is wanted, then plan the action again";
    ActionRefused => "action_refused", 409,
        "the policy refused to run the approved action right before execution (monitor mode, lock state unknown, or the agent does not offer the capability now); the message names the reason code",
        "fix the cause named in the message, then plan the action again";
    ActionExecutorUnavailable => "action_executor_unavailable", 503,
        "no action-broker (or no agent-relay) answered, so nothing was planned or run",
        "start pulse-action-broker and pulse-agent-relay (check /api/health), then retry";
    ServiceUnavailable => "service_unavailable", 503,
        "a dependency (database or message bus) is unreachable",
        "retry later; check /api/health and the service logs";
    InternalError => "internal_error", 500,
        "an unexpected error; it is logged with details",
        "retry; if it persists, report it with the time of the request";
    InvalidChatRequest => "invalid_chat_request", 400,
        "an Assistant request is malformed: an empty or oversized prompt, an unknown control level, a bad session or finding id (the message names it)",
        "fix the field named in the message; see docs/assistant.md for each route's body";
    AssistantSessionNotFound => "assistant_session_not_found", 404,
        "no Assistant session with this id in this tenant",
        "list the sessions (GET /api/ai/sessions) and use an id from there, or start a new chat without session_id";
    AssistantSessionBusy => "assistant_session_busy", 409,
        "the session is running a turn, so it does not take another prompt, an undo, a compaction or a deletion now",
        "wait for the turn's done event, or stop it (POST /api/ai/sessions/{id}/abort), then retry";
    AssistantSystemSession => "assistant_system_session", 409,
        "the session is a Patrol or investigation transcript; system sessions are read only and never resumed",
        "start a new chat, optionally from the finding (finding_id)";
    AssistantUndoConflict => "assistant_undo_conflict", 409,
        "there is no turn to undo or redo, or its prompt is not expected_prompt (the transcript changed since it was read)",
        "re-read the messages (GET /api/ai/sessions/{id}/messages) and send the prompt of the turn to undo or redo";
    AssistantNotConfigured => "assistant_not_configured", 409,
        "no Assistant model is selected (chat_model or model), or its stored key cannot be opened",
        "choose a model in Settings or with PUT /api/settings/ai {\"chat_model\": \"provider:model\"}, then ask again";
    AssistantTurnAborted => "assistant_turn_aborted", 409,
        "the Assistant turn was stopped before it finished (Stop, or the client went away); open tool rows were closed as cancelled",
        "send the prompt again when you want the answer";
    AssistantProviderFailed => "assistant_provider_failed", 502,
        "the chat model's provider failed during the turn (unreachable, refused, or broke off); nothing was changed",
        "try again; if it persists check the provider and model in Settings (POST /api/ai/patrol/preflight tests the route)";
    AssistantBudgetExceeded => "assistant_budget_exceeded", 429,
        "a tenant spend budget refuses further model calls; the message says which and when it resets",
        "wait until the budget resets, or raise it in Settings (budgets)";
    AssistantUnavailable => "assistant_unavailable", 503,
        "no model-runner answered the Assistant request, so the turn did not start",
        "start pulse-model-runner (check its logs and /api/health), then send the prompt again";
    PatrolDisabled => "patrol_disabled", 409,
        "Patrol is switched off for this tenant (patrol_enabled is false), so no run starts: not scheduled, not alert-triggered, not requested",
        "turn Patrol on with PUT /api/settings/ai {\"patrol_enabled\": true}, then request the run again";
    TenantSuspended => "tenant_suspended", 403,
        "the tenant is suspended by the platform operator: its tokens, agents and Patrol runs are refused; the message gives the reason",
        "ask the platform operator to resume the tenant (POST /api/platform/tenants/{id}/resume)";
    QuotaExceeded => "quota_exceeded", 429,
        "a quota of the tenant is reached; the message names the quota, its limit and what to do (a request-rate refusal carries Retry-After)",
        "do what the message says (wait, remove or resolve), or ask the platform operator to raise the quota";
    PlatformTokenRequired => "platform_token_required", 401,
        "the platform API (/api/platform/...) needs a live platform-operator token; tenant tokens and web sessions never reach it",
        "send Authorization: Bearer <platform token> (minted with `pulsectl admin platform-token`)";
    PlatformScopeRefused => "platform_scope_refused", 403,
        "a tenant token cannot carry platform-operator authority (a scope starting with platform:)",
        "leave the platform: scope out; platform authority is a platform token from `pulsectl admin platform-token`";
    TenantNotFound => "tenant_not_found", 404,
        "no tenant with this id",
        "list the tenants (GET /api/platform/tenants) and use an id from there";
    TenantExists => "tenant_exists", 409,
        "a tenant with this id already exists",
        "choose another id, or manage the existing tenant";
    ConnectionUnreachable => "connection_unreachable", 422,
        "nothing usable answered at the connection's URL: no route, refused, no answer in time, or not a Proxmox API; the message gives the cause",
        "check the URL and port (8006 for Proxmox VE, 8007 for Proxmox Backup Server) and that Pulse can reach it, then add or test the connection again";
    ConnectionTlsMismatch => "connection_tls_mismatch", 422,
        "the server's certificate is not the pinned one, or does not chain to the CA given (or the platform's roots); the message names the fingerprint it presented",
        "if the server is the one you meant, pin the fingerprint the message names (POST /api/connections/test answers it as presented_fingerprint), or give the CA that signed it";
    ConnectionAuthFailed => "connection_auth_failed", 422,
        "the Proxmox server refused the API token: wrong token id or secret, expired, or removed",
        "check the token id (user@realm!name) and its secret, or create a new token";
    ConnectionPrivilegesMissing => "connection_privileges_missing", 422,
        "the API token is accepted but lacks the privileges Pulse reads with, so the cluster would look empty; the message names them",
        "grant the token the PVEAuditor role on / with propagation (docs/proxmox.md), then test the connection again";
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// The schema of the wire value: one of the table's codes.
impl schemars::JsonSchema for ErrorCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ErrorCode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let codes: Vec<&str> = Self::ALL.iter().map(|c| c.code()).collect();
        schemars::json_schema!({
            "type": "string",
            "description": "a stable error code (docs/api/errors.md)",
            "enum": codes,
        })
    }
}

/// The error table as Markdown, as published in `docs/api/errors.md`.
pub fn markdown_table() -> String {
    let mut out = String::from(
        "# API error codes\n\nEvery API error answers `{\"error\": \"<code>\", \"message\": \"...\"}`. \
         This table is generated from `pulse-capabilities` (`error_codes.rs`); a test keeps it in step.\n\n\
         | code | HTTP status | meaning | what to do |\n|---|---|---|---|\n",
    );
    for code in ErrorCode::ALL {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            code.code(),
            code.http_status(),
            code.meaning(),
            code.remedy()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_snake_case_and_statuses_are_errors() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.code()), "duplicate {}", code.code());
            assert!(
                code.code()
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}",
                code.code()
            );
            assert!((400..600).contains(&code.http_status()));
            assert_eq!(ErrorCode::from_code(code.code()), Some(*code));
            assert!(!code.meaning().is_empty() && !code.remedy().is_empty());
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::String(code.code().to_owned())
            );
        }
    }

    #[test]
    fn a_value_outside_the_table_is_no_code() {
        assert_eq!(ErrorCode::from_code("bad_request"), None);
        assert_eq!(ErrorCode::from_code(""), None);
        assert!(serde_json::from_str::<ErrorCode>("\"internal\"").is_err());
    }

    #[test]
    fn published_table_matches_the_code() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api/errors.md");
        if std::env::var_os("PULSE_UPDATE_DOCS").is_some() {
            std::fs::write(path, markdown_table()).unwrap();
        }
        let published = std::fs::read_to_string(path).unwrap_or_default();
        assert_eq!(
            published,
            markdown_table(),
            "docs/api/errors.md is stale; regenerate it with `PULSE_UPDATE_DOCS=1 cargo test -p pulse-capabilities`"
        );
    }
}
