//! The operator finding API (scope `ai:execute`, the scope the finding capabilities advertise).
//!
//! - `GET /api/ai/patrol/findings?include_resolved=1&limit=N`: active findings (with
//!   `include_resolved=1` every finding), most recently seen first; `limit` defaults to 200 and
//!   is capped at 500. `severity`, `category`, `status` and `resource_id` narrow the list.
//! - `GET /api/ai/patrol/findings/{id}`: one finding with its lifecycle and its newest
//!   `investigation_record` (absent when it was never investigated).
//! - `POST /api/ai/patrol/{acknowledge|snooze|dismiss|resolve|suppress|findings/note}` and
//!   `POST /api/ai/patrol/{dismiss|suppress}/undo`: operator actions, each body naming the
//!   `finding_id`. Every action goes through [`pulse_store::findings::operator_action`] (the
//!   one writer path and its state machine) with the token name as the actor, and answers the
//!   finding as written.
//!
//! Bodies are parsed strictly: an unknown or missing field is `400 invalid_finding_request`
//! naming it. Another tenant's finding is simply absent (`404 finding_not_found`); a transition
//! the state machine refuses is `409 finding_action_not_allowed` with the actions it accepts.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::PathRejection;
use axum::routing;
use chrono::Utc;
use pulse_api::constraints::MAX_REFERENCE_CHARS;
use pulse_api::findings::{
    ActionReference, DismissBody, FindingAnswer, FindingList, FindingRef, InvestigationEvidence,
    InvestigationRecord, InvestigationStatus, InvestigationSubject, InvestigationTrigger,
    ListQuery, NoteBody, ProposalSummary, ResolveBody, SnoozeBody, SnoozeHours, SuppressBody,
    SuppressResource,
};
use pulse_api::system::{self, ActionMode, ApprovalPolicy};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::finding::{
    Category, DismissedReason, Finding, FindingId, FindingStatus, OperatorAction, OperatorRefusal,
    StatusEvent, SuppressBreadth, transition,
};
use pulse_store::findings::{self, FindingsError, ListFilter, MAX_LIST_LIMIT, StoredFinding};
use pulse_store::investigations;
use pulse_store::{StoreError, TenantTx};

use crate::authorized::{Authorized, RequiredScopes};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, FindingRequest, PathParam};
use crate::route::{Answer, Body, RouteSpec, schema};
use crate::state::AppState;

/// The finding routes need `ai:execute`.
pub struct FindingScope;
impl RequiredScopes for FindingScope {
    const SCOPES: &'static [Scope] = &[Scope::AiExecute];
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidFindingRequest, message)
}

/// The store is the Patrol finding store here: its absence is `patrol_unavailable`.
pub(crate) fn store_error(error: StoreError) -> ApiError {
    match error {
        StoreError::Unavailable(reason) => {
            tracing::warn!(%reason, "finding store unavailable");
            ApiError::new(
                ErrorCode::PatrolUnavailable,
                "the finding store is unavailable; retry shortly",
            )
        }
        other => ApiError::from(other),
    }
}

/// The operator actions a finding in `status` accepts, by their route names.
pub fn allowed_actions(status: FindingStatus) -> Vec<&'static str> {
    [
        (StatusEvent::Acknowledge, "acknowledge"),
        (StatusEvent::Snooze, "snooze"),
        (StatusEvent::Dismiss, "dismiss"),
        (StatusEvent::Resolve, "resolve"),
        (StatusEvent::Suppress, "suppress"),
        (StatusEvent::Note, "note"),
        (StatusEvent::UndoDismiss, "dismiss/undo"),
        (StatusEvent::UndoSuppress, "suppress/undo"),
    ]
    .into_iter()
    .filter(|(event, _)| transition(status, *event).is_ok())
    .map(|(_, name)| name)
    .collect()
}

fn action_name(event: StatusEvent) -> &'static str {
    match event {
        StatusEvent::Acknowledge => "acknowledge",
        StatusEvent::Snooze => "snooze",
        StatusEvent::Dismiss => "dismiss",
        StatusEvent::Resolve => "resolve",
        StatusEvent::Suppress => "suppress",
        StatusEvent::Note => "note",
        StatusEvent::UndoDismiss => "dismiss/undo",
        StatusEvent::UndoSuppress => "suppress/undo",
        _ => "this action",
    }
}

fn findings_error(id: FindingId, error: FindingsError) -> ApiError {
    match error {
        FindingsError::NotFound(_) => not_found(id),
        FindingsError::Operator(OperatorRefusal::Illegal(illegal)) => ApiError::new(
            ErrorCode::FindingActionNotAllowed,
            format!(
                "finding {id} is {}, which does not accept {}; allowed: {}",
                illegal.from,
                action_name(illegal.event),
                allowed_actions(illegal.from).join(", ")
            ),
        ),
        FindingsError::Operator(
            refusal @ (OperatorRefusal::InvalidSnoozeDuration
            | OperatorRefusal::NoteTooLong
            | OperatorRefusal::EmptyNote
            | OperatorRefusal::BroadScope(_)),
        ) => invalid(refusal.to_string()),
        // Any other refusal is about the finding, not the input (a Patrol runtime finding, say).
        FindingsError::Operator(refusal) => {
            ApiError::new(ErrorCode::FindingActionNotAllowed, refusal.to_string())
        }
        FindingsError::Conflict { .. } | FindingsError::Contended(_) => ApiError::new(
            ErrorCode::Conflict,
            format!("finding {id} kept changing concurrently; re-read it and retry"),
        ),
        FindingsError::Store(e) => store_error(e),
        other => {
            tracing::error!(finding_id = %id, error = %other, "finding action failed");
            ApiError::new(ErrorCode::InternalError, "the finding could not be changed")
        }
    }
}

fn not_found(id: FindingId) -> ApiError {
    ApiError::new(ErrorCode::FindingNotFound, format!("no finding {id}"))
}

fn parse_id(raw: &str, field: &str) -> Result<FindingId, ApiError> {
    raw.parse()
        .map_err(|e| invalid(format!("{field}: {e}: {raw:?}")))
}

impl PathParam for FindingId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        parse_id(&raw, "id")
    }

    fn unreadable(rejection: &PathRejection) -> ApiError {
        invalid(rejection.body_text())
    }
}

/// The store's narrowing of the list, by the filters' wire names.
fn narrowing(query: &ListQuery) -> findings::Narrowing {
    findings::Narrowing {
        severity: query.severity.map(|s| s.as_str().to_owned()),
        category: query.category.map(|c| c.as_str().to_owned()),
        status: query.status.map(|s| s.as_str().to_owned()),
        resource_id: query.resource_id.clone(),
    }
}

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiQuery(query, _): ApiQuery<ListQuery, FindingRequest>,
) -> Result<Json<FindingList>, ApiError> {
    let include_resolved = query.include_resolved;
    // Any positive count is accepted; more than the cap answer the cap.
    let limit = query.limit.map(|n| n.min(MAX_LIST_LIMIT));
    let narrowing = narrowing(&query);
    let filter = if include_resolved {
        ListFilter::IncludeResolved
    } else {
        ListFilter::Active
    };
    let tx = tenant_tx(&state, &auth).await?;
    let stored = findings::list_narrowed(&tx, filter, &narrowing, limit, Utc::now())
        .await
        .map_err(store_error)?;
    tx.commit().await.map_err(store_error)?;
    let findings: Vec<Finding> = stored.into_iter().map(|s| s.finding).collect();
    Ok(Json(FindingList {
        count: findings.len(),
        findings,
        limit: limit.unwrap_or(findings::DEFAULT_LIST_LIMIT),
        include_resolved,
    }))
}

/// A stored finding as the API answers it (without its investigation record).
fn answer(stored: StoredFinding) -> FindingAnswer {
    FindingAnswer {
        allowed_actions: allowed_actions(stored.finding.status)
            .into_iter()
            .map(str::to_owned)
            .collect(),
        finding: stored.finding,
        version: stored.version,
        investigation_record: None,
    }
}

/// A stored investigation record as the API shows it.
fn investigation_record(record: investigations::InvestigationRecord) -> InvestigationRecord {
    InvestigationRecord {
        id: record.id,
        finding_id: record.finding_id,
        session_id: record.session_id,
        subject: InvestigationSubject {
            resource_id: record.subject.resource_id,
            resource_name: record.subject.resource_name,
            resource_type: record.subject.resource_type,
            node: record.subject.node,
        },
        trigger: InvestigationTrigger {
            finding_key: record.trigger.finding_key,
            source: record.trigger.source,
            severity: record.trigger.severity,
            category: record.trigger.category,
            title: record.trigger.title,
            detected_at: record.trigger.detected_at,
            description: record.trigger.description,
            cause: record.trigger.cause,
        },
        status: match record.status {
            investigations::InvestigationStatus::Running => InvestigationStatus::Running,
            investigations::InvestigationStatus::Completed => InvestigationStatus::Completed,
            investigations::InvestigationStatus::Failed => InvestigationStatus::Failed,
            investigations::InvestigationStatus::TimedOut => InvestigationStatus::TimedOut,
        },
        outcome: record.outcome,
        confidence: record.confidence,
        evidence: record
            .evidence
            .into_iter()
            .map(|e| InvestigationEvidence {
                id: e.id,
                kind: e.kind,
                summary: e.summary,
            })
            .collect(),
        conclusion: record.conclusion,
        impact: record.impact,
        recommended_action: record.recommended_action,
        verification: record.verification,
        rollback: record.rollback,
        tools_used: record.tools_used,
        proposal: record.proposal.map(|p| ProposalSummary {
            resource_id: p.resource_id,
            causal_resource_id: p.causal_resource_id,
            capability_name: p.capability_name,
            reason: p.reason,
        }),
        started_at: record.started_at,
        completed_at: record.completed_at,
        action: record.action.map(|a| ActionReference {
            action_id: a.action_id,
            state: a.state,
        }),
        error: record.error,
    }
}

async fn tenant_tx(
    state: &AppState,
    auth: &Authorized<FindingScope>,
) -> Result<TenantTx, ApiError> {
    state
        .store
        .tenant_tx(&auth.principal.tenant)
        .await
        .map_err(store_error)
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiPath(id): ApiPath<FindingId>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let tx = tenant_tx(&state, &auth).await?;
    let stored = findings::get(&tx, id).await.map_err(store_error)?;
    let record = match stored {
        Some(_) => investigations::latest_record(&tx, id)
            .await
            .map_err(store_error)?,
        None => None,
    };
    tx.commit().await.map_err(store_error)?;
    let mut found = stored.map(answer).ok_or_else(|| not_found(id))?;
    found.investigation_record = record.map(investigation_record);
    Ok(Json(found))
}

/// Applies `action` to the finding and commits; the answer is the finding as written.
async fn act(
    state: &AppState,
    auth: &Authorized<FindingScope>,
    id: FindingId,
    action: OperatorAction,
) -> Result<Json<FindingAnswer>, ApiError> {
    let actor = auth.principal.named_actor();
    let tx = tenant_tx(state, auth).await?;
    let stored = findings::operator_action(&tx, id, &action, &actor, None, Utc::now())
        .await
        .map_err(|e| findings_error(id, e))?;
    tx.commit().await.map_err(store_error)?;
    // The change's lifecycle event waits in the outbox: publish it now, not at the next poll.
    state.settings.outbox_notify.notify_one();
    tracing::info!(finding_id = %id, action = action_name(action.status_event()), %actor, "finding operator action");
    Ok(Json(answer(stored)))
}

pub async fn acknowledge(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<FindingRef, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(&state, &auth, id, OperatorAction::Acknowledge).await
}

pub async fn snooze(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<SnoozeBody, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    if !SnoozeHours::contains(body.duration_hours) {
        return Err(invalid(format!(
            "{}, not {}",
            SnoozeHours::refusal("duration_hours"),
            body.duration_hours
        )));
    }
    let action = OperatorAction::Snooze {
        duration_seconds: body.duration_hours * 3600,
    };
    act(&state, &auth, id, action).await
}

pub async fn dismiss(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<DismissBody, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    let reason = DismissedReason::parse(&body.reason).ok_or_else(|| {
        let valid: Vec<&str> = DismissedReason::ALL.iter().map(|r| r.as_str()).collect();
        invalid(format!(
            "reason: {:?} is not one of {}",
            body.reason,
            valid.join(", ")
        ))
    })?;
    let action = OperatorAction::Dismiss {
        reason,
        note: body.note,
    };
    act(&state, &auth, id, action).await
}

pub async fn resolve(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<ResolveBody, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(
        &state,
        &auth,
        id,
        OperatorAction::Resolve { note: body.note },
    )
    .await
}

pub async fn note(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<NoteBody, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(&state, &auth, id, OperatorAction::Note { text: body.note }).await
}

pub async fn undo_dismiss(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<FindingRef, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(&state, &auth, id, OperatorAction::UndoDismiss).await
}

pub async fn undo_suppress(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<FindingRef, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(&state, &auth, id, OperatorAction::UndoSuppress).await
}

/// The scope a suppress body asks for: a concrete side or `*` (every).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuppressScope {
    pub resource_id: Option<String>,
    pub category: Option<Category>,
    pub breadth: SuppressBreadth,
}

pub fn suppress_scope(body: &SuppressBody) -> Result<SuppressScope, ApiError> {
    if SuppressResource::check(&body.resource_id).is_err() {
        return Err(invalid(format!(
            "resource_id: must be 1 to {MAX_REFERENCE_CHARS} characters, not only white space \
             (use * for every resource)"
        )));
    }
    let resource_id = match body.resource_id.as_str() {
        "*" => None,
        _ => Some(body.resource_id.clone()),
    };
    let category = match body.category.as_str() {
        "*" => None,
        raw => Some(Category::parse(raw).ok_or_else(|| {
            let valid: Vec<&str> = Category::ALL.iter().map(|c| c.as_str()).collect();
            invalid(format!(
                "category: {raw:?} is not one of {} (or * for every category)",
                valid.join(", ")
            ))
        })?),
    };
    let breadth = match (&resource_id, category) {
        (Some(_), Some(_)) => SuppressBreadth::ResourceAndCategory,
        (Some(_), None) => SuppressBreadth::AllCategoriesOnResource,
        (None, Some(_)) => SuppressBreadth::CategoryOnAllResources,
        (None, None) => {
            return Err(invalid(
                "resource_id and category: a suppression of every resource and every category \
                 would silence Patrol entirely and is never accepted",
            ));
        }
    };
    if breadth.is_broad() && !body.allow_broad_scope {
        let side = if resource_id.is_none() {
            "resource"
        } else {
            "category"
        };
        return Err(invalid(format!(
            "a suppression covering every {side} needs allow_broad_scope: true"
        )));
    }
    Ok(SuppressScope {
        resource_id,
        category,
        breadth,
    })
}

impl SuppressScope {
    fn matches(&self, finding: &Finding) -> bool {
        self.resource_id
            .as_deref()
            .is_none_or(|r| r == finding.resource_id)
            && self.category.is_none_or(|c| c == finding.category)
    }
}

pub async fn suppress(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    ApiJson(body, _): ApiJson<SuppressBody, FindingRequest>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let scope = suppress_scope(&body)?;
    let id = match &body.finding_id {
        Some(raw) => parse_id(raw, "finding_id")?,
        None => anchor(&state, &auth, &scope).await?,
    };
    let action = OperatorAction::Suppress {
        breadth: scope.breadth,
        allow_broad_scope: body.allow_broad_scope,
    };
    let actor = auth.principal.named_actor();
    let tx = tenant_tx(&state, &auth).await?;
    // The rule is derived from the finding: a finding_id outside the asked scope is refused
    // rather than silently suppressing something else.
    let stored = findings::get(&tx, id)
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(id))?;
    if !scope.matches(&stored.finding) {
        return Err(invalid(format!(
            "finding {id} is on {} in category {}, outside the requested resource_id {:?} and \
             category {:?}",
            stored.finding.resource_id, stored.finding.category, body.resource_id, body.category
        )));
    }
    let stored = findings::operator_action(&tx, id, &action, &actor, None, Utc::now())
        .await
        .map_err(|e| findings_error(id, e))?;
    tx.commit().await.map_err(store_error)?;
    state.settings.outbox_notify.notify_one();
    tracing::info!(finding_id = %id, action = "suppress", %actor, "finding operator action");
    Ok(Json(answer(stored)))
}

/// The most recently seen finding a suppression scope may be created from: open or dismissed,
/// matched by the scope, among the newest [`MAX_LIST_LIMIT`].
async fn anchor(
    state: &AppState,
    auth: &Authorized<FindingScope>,
    scope: &SuppressScope,
) -> Result<FindingId, ApiError> {
    let tx = tenant_tx(state, auth).await?;
    let candidates = findings::list(
        &tx,
        ListFilter::IncludeResolved,
        Some(MAX_LIST_LIMIT),
        Utc::now(),
    )
    .await
    .map_err(store_error)?;
    tx.commit().await.map_err(store_error)?;
    candidates
        .into_iter()
        .map(|s| s.finding)
        .find(|f| transition(f.status, StatusEvent::Suppress).is_ok() && scope.matches(f))
        .map(|f| f.id)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::FindingNotFound,
                format!(
                    "no open finding on {} in category {} to suppress",
                    scope.resource_id.as_deref().unwrap_or("any resource"),
                    scope.category.map_or("any", |c| c.as_str())
                ),
            )
        })
}

/// What a finding operator action can answer.
const FINDING_ACTION: &[ErrorCode] = &[
    ErrorCode::InvalidFindingRequest,
    ErrorCode::UnsupportedMediaType,
    ErrorCode::FindingNotFound,
    ErrorCode::FindingActionNotAllowed,
    ErrorCode::Conflict,
    ErrorCode::PatrolUnavailable,
];

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/findings",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "list_findings",
        title: "List findings",
        description: "Active Patrol findings (every finding with include_resolved=1), most recently seen first.",
        category: system::Category::Findings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::findings::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingList>,
        },
        errors: &[
            ErrorCode::InvalidFindingRequest,
            ErrorCode::PatrolUnavailable,
        ],
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/findings/{id}",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "get_finding",
        title: "Get a finding",
        description: "One finding with its lifecycle, the actions its status accepts and its newest investigation record.",
        category: system::Category::Findings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::finding::FindingId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: &[
            ErrorCode::InvalidFindingRequest,
            ErrorCode::FindingNotFound,
            ErrorCode::PatrolUnavailable,
        ],
        handler: || routing::get(get),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/acknowledge",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "acknowledge_finding",
        title: "Acknowledge a finding",
        description: "Marks an active finding as seen by an operator.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::FindingRef>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(acknowledge),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/snooze",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "snooze_finding",
        title: "Snooze a finding",
        description: "Hides a finding for 1 to 2160 hours; it returns if still present afterwards.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::SnoozeBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(snooze),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/dismiss",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "dismiss_finding",
        title: "Dismiss a finding",
        description: "Dismisses a finding with a reason (not_an_issue, expected_behavior, will_fix_later) and an optional note.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::DismissBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(dismiss),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/dismiss/undo",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "undo_dismiss_finding",
        title: "Undo a dismissal",
        description: "Reopens a dismissed finding.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::FindingRef>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(undo_dismiss),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/resolve",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "resolve_finding",
        title: "Resolve a finding",
        description: "Marks a finding resolved by an operator, with an optional note.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::ResolveBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(resolve),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/suppress",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "suppress_finding",
        title: "Suppress findings",
        description: "Creates a suppression rule from a finding (or the newest open one matching resource_id and category); * on one side needs allow_broad_scope.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::SuppressBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(suppress),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/suppress/undo",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "undo_suppress_finding",
        title: "Undo a suppression",
        description: "Removes the suppression a finding was suppressed by and reopens it.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::FindingRef>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(undo_suppress),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/findings/note",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "note_finding",
        title: "Add a note to a finding",
        description: "Appends an operator note to a finding's lifecycle.",
        category: system::Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::NoteBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || routing::post(note),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn body(resource: &str, category: &str, allow: bool) -> SuppressBody {
        SuppressBody {
            finding_id: None,
            resource_id: resource.to_owned(),
            category: category.to_owned(),
            allow_broad_scope: allow,
        }
    }

    #[test]
    fn suppression_is_narrow_unless_broad_scope_is_allowed() {
        let narrow = suppress_scope(&body("host:h1", "capacity", false)).expect("narrow");
        assert_eq!(narrow.breadth, SuppressBreadth::ResourceAndCategory);
        for (resource, category) in [("*", "capacity"), ("host:h1", "*")] {
            let err = suppress_scope(&body(resource, category, false)).expect_err("broad");
            assert_eq!(err.code, ErrorCode::InvalidFindingRequest);
            assert!(err.message.contains("allow_broad_scope"), "{}", err.message);
            assert!(suppress_scope(&body(resource, category, true)).is_ok());
        }
        let everything = suppress_scope(&body("*", "*", true)).expect_err("never");
        assert_eq!(everything.code, ErrorCode::InvalidFindingRequest);
        let unknown = suppress_scope(&body("host:h1", "cpu", false)).expect_err("category");
        assert!(
            unknown.message.contains("performance"),
            "{}",
            unknown.message
        );
    }

    #[test]
    fn allowed_actions_follow_the_state_machine() {
        assert_eq!(
            allowed_actions(FindingStatus::Resolved),
            vec!["note"],
            "a resolved finding only takes notes"
        );
        assert!(allowed_actions(FindingStatus::Dismissed).contains(&"dismiss/undo"));
        assert!(!allowed_actions(FindingStatus::Active).contains(&"dismiss/undo"));
    }

    #[test]
    fn finding_answer_shape() {
        use chrono::TimeZone;
        use pulse_domain::finding::{ReportContext, ReportedFinding, Severity, report};
        let at = Utc
            .with_ymd_and_hms(2026, 11, 29, 12, 0, 0)
            .single()
            .expect("valid time");
        let reported = ReportedFinding {
            key: "disk-high".to_owned(),
            severity: Severity::Warning,
            category: Category::Capacity,
            resource_id: "host:db-1".to_owned(),
            resource_name: "db-1".to_owned(),
            resource_type: "host".to_owned(),
            title: "Disk almost full on db-1".to_owned(),
            description: "/var is 93% full".to_owned(),
            recommendation: "free space or grow the volume".to_owned(),
            evidence: "disk_used_percent=93".to_owned(),
            impact: String::new(),
        };
        let ctx = ReportContext {
            existing_same_id: None,
            active_on_resource: &[],
            suppressions: &[],
        };
        let finding = report(ctx, &reported, None, at).expect("valid").finding;
        let shown = answer(StoredFinding {
            finding,
            version: 1,
        });
        insta::assert_json_snapshot!(shown);
    }

    #[test]
    fn list_filters_are_typed_and_refused_as_finding_requests() {
        let read = |query: &str| ApiQuery::<ListQuery, FindingRequest>::parse(query).map(|q| q.0);
        let query =
            read("include_resolved=1&limit=9000&severity=+warning+&category=&status=active")
                .expect("valid");
        assert!(query.include_resolved);
        assert_eq!(query.limit, Some(9000));
        assert_eq!(
            query.severity,
            Some(pulse_domain::finding::Severity::Warning)
        );
        assert_eq!(query.category, None);
        assert_eq!(narrowing(&query).status.as_deref(), Some("active"));
        assert!(
            !read("include_resolved=false")
                .expect("valid")
                .include_resolved
        );
        for (query, message) in [
            (
                "limit=0",
                "limit: must be a positive integer (at most 500 are returned), not \"0\"",
            ),
            (
                "limit=ten",
                "limit: must be a positive integer (at most 500 are returned), not \"ten\"",
            ),
            (
                "include_resolved=yes",
                "include_resolved: expected 1 or 0, not \"yes\"",
            ),
            (
                "severity=high",
                "severity: \"high\" is not one of info, watch, warning, critical",
            ),
            (
                "status=open",
                "status: \"open\" is not one of active, resolved, snoozed, dismissed, suppressed",
            ),
        ] {
            let err = read(query).expect_err(query);
            assert_eq!(err.code, ErrorCode::InvalidFindingRequest, "{query}");
            assert_eq!(err.message, message);
        }
    }
}
