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
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, Path, Query, Request, State};
use chrono::Utc;
use pulse_api::constraints::MAX_REFERENCE_CHARS;
use pulse_api::findings::{
    ActionReference, DismissBody, FindingAnswer, FindingList, FindingRef, Flag,
    InvestigationEvidence, InvestigationRecord, InvestigationStatus, InvestigationSubject,
    InvestigationTrigger, ListLimit, ListQuery, NoteBody, ProposalSummary, ResolveBody, SnoozeBody,
    SnoozeHours, SuppressBody, SuppressResource,
};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::finding::{
    Category, DismissedReason, Finding, FindingId, FindingStatus, OperatorAction, OperatorRefusal,
    StatusEvent, SuppressBreadth, transition,
};
use pulse_store::findings::{self, FindingsError, ListFilter, MAX_LIST_LIMIT, StoredFinding};
use pulse_store::investigations;
use pulse_store::{StoreError, TenantTx};
use serde::de::DeserializeOwned;

use crate::auth::{Authorized, RequiredScopes};
use crate::{ApiError, AppState};

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

/// A JSON body whose every rejection is `invalid_finding_request` naming the field (a body that
/// is not declared JSON is `unsupported_media_type`, an oversized one `payload_too_large`).
pub struct FindingBody<T>(pub T);

impl<S, T> FromRequest<S> for FindingBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match crate::json::object_body::<S, T>(req, state).await {
            Ok((value, None)) => Ok(FindingBody(value)),
            Ok((_, Some(refusal))) => Err(invalid(refusal)),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "expected Content-Type: application/json",
            )),
            Err(JsonRejection::BytesRejection(e))
                if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "request body is too large",
                ))
            }
            Err(JsonRejection::JsonDataError(e)) => Err(invalid(e.body_text())),
            Err(other) => Err(invalid(other.body_text())),
        }
    }
}

/// An enum-valued filter, checked against the domain type's wire names.
fn enum_filter<T: DeserializeOwned>(
    raw: Option<&str>,
    field: &str,
    valid: &str,
) -> Result<Option<String>, ApiError> {
    match raw.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(value) => serde_json::from_value::<T>(serde_json::Value::String(value.to_owned()))
            .map(|_| Some(value.to_owned()))
            .map_err(|_| invalid(format!("{field}: {value:?} is not one of {valid}"))),
    }
}

fn narrowing(query: &ListQuery) -> Result<findings::Narrowing, ApiError> {
    Ok(findings::Narrowing {
        severity: enum_filter::<pulse_domain::finding::Severity>(
            query.severity.as_deref(),
            "severity",
            "info, watch, warning, critical",
        )?,
        category: enum_filter::<Category>(
            query.category.as_deref(),
            "category",
            "performance, capacity, reliability, backup, security, general",
        )?,
        status: enum_filter::<FindingStatus>(
            query.status.as_deref(),
            "status",
            "active, resolved, snoozed, dismissed, suppressed",
        )?,
        resource_id: query
            .resource_id
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    })
}

fn parse_flag(raw: Option<&str>) -> Result<bool, ApiError> {
    match raw.map(Flag::parse) {
        None => Ok(false),
        Some(Some(flag)) => Ok(flag),
        Some(None) => Err(invalid(format!(
            "include_resolved: expected 1 or 0, not {:?}",
            raw.unwrap_or_default()
        ))),
    }
}

/// `None` for the store's default (200); values above the cap are capped at 500.
fn parse_limit(raw: Option<&str>) -> Result<Option<i64>, ApiError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match ListLimit::parse(raw) {
        Some(n) => Ok(Some(n.min(MAX_LIST_LIMIT))),
        None => Err(invalid(format!(
            "limit: must be a positive integer (at most {MAX_LIST_LIMIT} are returned), not {raw:?}"
        ))),
    }
}

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<FindingList>, ApiError> {
    let Query(query) = query.map_err(|e| invalid(e.body_text()))?;
    let include_resolved = parse_flag(query.include_resolved.as_deref())?;
    let limit = parse_limit(query.limit.as_deref())?;
    let narrowing = narrowing(&query)?;
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
        allowed_actions: allowed_actions(stored.finding.status),
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
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let Path(raw) = path.map_err(|e| invalid(e.body_text()))?;
    let id = parse_id(&raw, "id")?;
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
    FindingBody(body): FindingBody<FindingRef>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(&state, &auth, id, OperatorAction::Acknowledge).await
}

pub async fn snooze(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    FindingBody(body): FindingBody<SnoozeBody>,
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
    FindingBody(body): FindingBody<DismissBody>,
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
    FindingBody(body): FindingBody<ResolveBody>,
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
    FindingBody(body): FindingBody<NoteBody>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(&state, &auth, id, OperatorAction::Note { text: body.note }).await
}

pub async fn undo_dismiss(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    FindingBody(body): FindingBody<FindingRef>,
) -> Result<Json<FindingAnswer>, ApiError> {
    let id = parse_id(&body.finding_id, "finding_id")?;
    act(&state, &auth, id, OperatorAction::UndoDismiss).await
}

pub async fn undo_suppress(
    State(state): State<AppState>,
    auth: Authorized<FindingScope>,
    FindingBody(body): FindingBody<FindingRef>,
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
    FindingBody(body): FindingBody<SuppressBody>,
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
    fn list_limits_default_and_cap() {
        assert_eq!(parse_limit(None), Ok(None));
        assert_eq!(parse_limit(Some("20")), Ok(Some(20)));
        assert_eq!(parse_limit(Some("9000")), Ok(Some(MAX_LIST_LIMIT)));
        for bad in ["0", "-1", "ten", ""] {
            assert_eq!(
                parse_limit(Some(bad)).expect_err(bad).code,
                ErrorCode::InvalidFindingRequest
            );
        }
        assert_eq!(parse_flag(Some("1")), Ok(true));
        assert!(parse_flag(Some("yes")).is_err());
    }
}
