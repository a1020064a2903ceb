//! The platform-operator API (`/api/platform/...`): tenants, their users, suspension, quotas
//! and erasure, for a hosted installation serving many organizations.
//!
//! Authority: a platform token (`pulse_store::platform`), checked by the authentication layer
//! for every path under `/api/platform/` before routing; no tenant token and no web session
//! reaches these handlers, and a platform token reaches no tenant route (its secret is refused
//! there as malformed). The routes are their own table ([`ROUTES`]), in the OpenAPI
//! document and the declared-errors check like every other route, but not in the agent
//! capabilities manifest or MCP: they are not a tenant's capabilities.
//!
//! Deletion erases the tenant's rows in every tenant table (one database function that finds
//! them from the catalogue) and then purges its subjects from every JetStream stream.

use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing;
use pulse_api::platform::{
    CreateTenantRequest, CreateUserRequest, CreatedTenant, CreatedUser, PlatformUser,
    PlatformUserList, ProvisionedAdmin, ProvisionedToken, Standing, SuspendRequest, TenantErasure,
    TenantList, TenantRecord, TenantView,
};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::TenantId;
use pulse_domain::tenant::{MAX_SUSPENSION_REASON_CHARS, TenantQuotas};
use pulse_store::audit::{self, AuditEntry};
use pulse_store::bootstrap::{self, CreateUserError, ProvisionError};
use pulse_store::platform::PlatformPrincipal;
use pulse_store::tenants::{self, Erasure};
use pulse_store::users::{self, UserRole};
use pulse_store::{StoreError, quotas};
use serde_json::json;

use crate::extract::{ApiJson, ApiPath, PathParam};

use crate::error::ApiError;
use crate::route::{Answer, Body, RouteSpec, schema};
use crate::state::AppState;

/// The platform operator, proven by the authentication layer.
pub struct PlatformAuth(pub PlatformPrincipal);

impl<S: Send + Sync> FromRequestParts<S> for PlatformAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<PlatformPrincipal>()
            .cloned()
            .map(PlatformAuth)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::PlatformTokenRequired,
                    "this route needs a platform-operator token",
                )
            })
    }
}

impl PathParam for TenantId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        TenantId::new(raw)
            .map_err(|e| ApiError::new(ErrorCode::InvalidParameter, format!("id: {e}")))
    }
}

fn no_tenant(id: &TenantId) -> ApiError {
    ApiError::new(ErrorCode::TenantNotFound, format!("no tenant '{id}'"))
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

/// A stored tenant as the platform operator sees it.
fn tenant_record(record: tenants::TenantRecord) -> TenantRecord {
    TenantRecord {
        id: record.id,
        name: record.name,
        created_at: record.created_at,
        standing: match record.standing {
            tenants::Standing::Active => Standing::Active,
            tenants::Standing::Suspended { since, reason } => Standing::Suspended { since, reason },
        },
    }
}

async fn record(state: &AppState, id: &TenantId) -> Result<TenantRecord, ApiError> {
    tenants::get(&state.store, id)
        .await?
        .map(tenant_record)
        .ok_or_else(|| no_tenant(id))
}

fn check_quotas(quotas: &TenantQuotas) -> Result<(), ApiError> {
    if quotas.api_requests_per_sec == Some(0) {
        return Err(invalid(
            "quotas.api_requests_per_sec: at least 1, or null for no quota",
        ));
    }
    Ok(())
}

pub async fn create(
    State(state): State<AppState>,
    PlatformAuth(operator): PlatformAuth,
    ApiJson(request, _): ApiJson<CreateTenantRequest>,
) -> Result<Response, ApiError> {
    let id = TenantId::new(request.id.trim()).map_err(|e| invalid(format!("id: {e}")))?;
    let quotas = request.quotas.unwrap_or_default();
    check_quotas(&quotas)?;
    let admin_username = request.admin_username.as_deref().unwrap_or("admin");
    let provisioned = bootstrap::provision_tenant(
        &state.store,
        &id,
        &request.name,
        admin_username,
        &operator.actor(),
    )
    .await
    .map_err(|error| match error {
        ProvisionError::Exists(id) => ApiError::new(
            ErrorCode::TenantExists,
            format!("tenant '{id}' already exists"),
        ),
        ProvisionError::Invalid { field, reason } => invalid(format!("{field}: {reason}")),
        ProvisionError::Store(error) => error.into(),
    })?;
    if quotas != TenantQuotas::default() {
        let tx = state.store.tenant_tx(&id).await?;
        quotas::set(&tx, &quotas).await?;
        tx.commit().await?;
    }
    tracing::info!(tenant = %id, operator = %operator.token_id, "tenant provisioned");
    let body = CreatedTenant {
        tenant: record(&state, &id).await?,
        admin: ProvisionedAdmin {
            id: provisioned.admin.id,
            username: provisioned.admin.username,
            password: provisioned.admin_password,
        },
        admin_token: ProvisionedToken {
            id: provisioned.token.token.id,
            name: provisioned.token.token.name,
            token: provisioned.token.secret.expose().to_owned(),
        },
        quotas,
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub async fn list(
    State(state): State<AppState>,
    _operator: PlatformAuth,
) -> Result<Json<TenantList>, ApiError> {
    Ok(Json(TenantList {
        tenants: tenants::list_all(&state.store)
            .await?
            .into_iter()
            .map(tenant_record)
            .collect(),
    }))
}

pub async fn show(
    State(state): State<AppState>,
    _operator: PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
) -> Result<Json<TenantView>, ApiError> {
    let tenant = record(&state, &id).await?;
    let tx = state.store.tenant_tx(&id).await?;
    let quotas = quotas::get(&tx).await?;
    tx.rollback().await?;
    Ok(Json(TenantView { tenant, quotas }))
}

/// Suspends (`Some(reason)`) or resumes (`None`) a tenant, with an audit row in its chain.
async fn set_suspension(
    state: &AppState,
    operator: &PlatformPrincipal,
    id: &TenantId,
    reason: Option<&str>,
) -> Result<TenantRecord, ApiError> {
    let tx = state.store.tenant_tx(id).await?;
    if !tenants::set_suspension(&tx, reason).await? {
        tx.rollback().await?;
        return Err(no_tenant(id));
    }
    let (kind, payload) = match reason {
        Some(reason) => ("tenant.suspended", json!({"reason": reason})),
        None => ("tenant.resumed", json!({})),
    };
    audit::append(
        &tx,
        &AuditEntry {
            actor: operator.actor(),
            kind: kind.to_owned(),
            subject: id.to_string(),
            payload,
        },
    )
    .await?;
    tx.commit().await?;
    tracing::info!(tenant = %id, operator = %operator.token_id, kind, "tenant standing changed");
    record(state, id).await
}

pub async fn suspend(
    State(state): State<AppState>,
    PlatformAuth(operator): PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
    ApiJson(request, _): ApiJson<SuspendRequest>,
) -> Result<Json<TenantRecord>, ApiError> {
    let reason = request.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_SUSPENSION_REASON_CHARS {
        return Err(invalid(format!(
            "reason: 1 to {MAX_SUSPENSION_REASON_CHARS} characters"
        )));
    }
    if reason.chars().any(char::is_control) {
        return Err(invalid("reason: must not contain control characters"));
    }
    Ok(Json(
        set_suspension(&state, &operator, &id, Some(reason)).await?,
    ))
}

pub async fn resume(
    State(state): State<AppState>,
    PlatformAuth(operator): PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
) -> Result<Json<TenantRecord>, ApiError> {
    Ok(Json(set_suspension(&state, &operator, &id, None).await?))
}

pub async fn remove(
    State(state): State<AppState>,
    PlatformAuth(operator): PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
) -> Result<Json<TenantErasure>, ApiError> {
    let erasure: Erasure = tenants::erase(&state.store, &id).await?;
    // After the rows: nothing can enqueue for the tenant any more (its row is gone), so what is
    // purged now stays purged. A tenant already erased is purged again, so a deletion whose purge
    // failed completes when it is sent again.
    let purged = pulse_bus::streams::purge_tenant(state.bus.jetstream(), state.bus.subjects(), &id)
        .await
        .map_err(|error| {
            tracing::error!(tenant = %id, %error, "tenant rows erased but its stream messages were not purged");
            ApiError::new(
                ErrorCode::ServiceUnavailable,
                "the tenant's rows were erased but its stream messages could not be purged; \
                 send the deletion again once the message bus is reachable",
            )
        })?;
    if !erasure.found() && purged == 0 {
        return Err(no_tenant(&id));
    }
    tracing::warn!(
        tenant = %id,
        operator = %operator.token_id,
        rows = erasure.total(),
        stream_messages = purged,
        "tenant erased"
    );
    Ok(Json(TenantErasure {
        id: id.to_string(),
        rows: erasure.rows,
        stream_messages: purged,
    }))
}

pub async fn list_users(
    State(state): State<AppState>,
    _operator: PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
) -> Result<Json<PlatformUserList>, ApiError> {
    record(&state, &id).await?;
    let tx = state.store.tenant_tx(&id).await?;
    let users = users::list(&tx).await?;
    tx.rollback().await?;
    Ok(Json(PlatformUserList {
        users: users
            .into_iter()
            .map(|user| PlatformUser {
                id: user.id,
                username: user.username,
                role: user.role.as_str().to_owned(),
                created_at: user.created_at,
            })
            .collect(),
    }))
}

pub async fn create_user(
    State(state): State<AppState>,
    PlatformAuth(operator): PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
    ApiJson(request, _): ApiJson<CreateUserRequest>,
) -> Result<Response, ApiError> {
    let role = match request.role.as_deref().unwrap_or("operator") {
        "admin" => UserRole::Admin,
        "operator" => UserRole::Operator,
        "viewer" => UserRole::Viewer,
        other => {
            return Err(invalid(format!(
                "role: '{other}' is not one of admin, operator, viewer"
            )));
        }
    };
    let password = users::generate_password();
    let hashed = password.clone();
    let hash = tokio::task::spawn_blocking(move || users::hash_password(&hashed))
        .await
        .map_err(|e| StoreError::Invalid(format!("password hashing did not finish: {e}")))?
        .map_err(|e| StoreError::Invalid(e.to_string()))?;
    let user = bootstrap::create_user(
        &state.store,
        &id,
        &request.username,
        role,
        &hash,
        &operator.actor(),
    )
    .await
    .map_err(|error| match error {
        CreateUserError::NoTenant(id) => no_tenant(&id),
        CreateUserError::Exists { username, .. } => ApiError::new(
            ErrorCode::Conflict,
            format!("tenant '{id}' already has a user named '{username}'"),
        ),
        CreateUserError::Username(reason) => invalid(format!("username: {reason}")),
        CreateUserError::Store(error) => error.into(),
    })?;
    let body = CreatedUser {
        user: PlatformUser {
            id: user.id,
            username: user.username,
            role: role.as_str().to_owned(),
            created_at: user.created_at,
        },
        password,
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub async fn get_quotas(
    State(state): State<AppState>,
    _operator: PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
) -> Result<Json<TenantQuotas>, ApiError> {
    record(&state, &id).await?;
    let tx = state.store.tenant_tx(&id).await?;
    let quotas = quotas::get(&tx).await?;
    tx.rollback().await?;
    Ok(Json(quotas))
}

pub async fn put_quotas(
    State(state): State<AppState>,
    PlatformAuth(operator): PlatformAuth,
    ApiPath(id): ApiPath<TenantId>,
    ApiJson(quotas, _): ApiJson<TenantQuotas>,
) -> Result<Json<TenantQuotas>, ApiError> {
    check_quotas(&quotas)?;
    record(&state, &id).await?;
    let tx = state.store.tenant_tx(&id).await?;
    quotas::set(&tx, &quotas).await?;
    audit::append(
        &tx,
        &AuditEntry {
            actor: operator.actor(),
            kind: "tenant.quotas_set".to_owned(),
            subject: id.to_string(),
            payload: serde_json::to_value(quotas).unwrap_or_default(),
        },
    )
    .await?;
    tx.commit().await?;
    state.quota_rate.forget(&id);
    Ok(Json(quotas))
}

/// What every platform route can answer beyond its own codes.
const PLATFORM: [ErrorCode; 1] = [ErrorCode::PlatformTokenRequired];
const ONE: [ErrorCode; 3] = [
    ErrorCode::PlatformTokenRequired,
    ErrorCode::InvalidParameter,
    ErrorCode::TenantNotFound,
];
const ONE_BODY: [ErrorCode; 6] = [
    ErrorCode::PlatformTokenRequired,
    ErrorCode::InvalidParameter,
    ErrorCode::TenantNotFound,
    ErrorCode::InvalidJson,
    ErrorCode::UnsupportedMediaType,
    ErrorCode::InvalidRequest,
];

/// Every `/api/platform/` route. `scopes` is empty (no tenant scope grants them) and `public`
/// false: the authentication layer demands a platform token instead.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "POST",
        path: "/api/platform/tenants",
        scopes: &[],
        public: false,
        name: "platform_create_tenant",
        title: "Create a tenant",
        description: "Creates a tenant (organization) with its first admin user and an admin \
            token; the answer carries the admin's password and the token once. Optional quotas.",
        category: Category::Platform,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<CreateTenantRequest>)),
        response: Answer::Json {
            status: 201,
            schema: schema::<CreatedTenant>,
        },
        errors: &[
            ErrorCode::PlatformTokenRequired,
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::TenantExists,
        ],
        handler: || routing::post(create),
    },
    RouteSpec {
        method: "GET",
        path: "/api/platform/tenants",
        scopes: &[],
        public: false,
        name: "platform_list_tenants",
        title: "List tenants",
        description: "Every tenant with its standing (active, or suspended with the reason).",
        category: Category::Platform,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<TenantList>,
        },
        errors: &PLATFORM,
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/platform/tenants/{id}",
        scopes: &[],
        public: false,
        name: "platform_get_tenant",
        title: "Get a tenant",
        description: "One tenant with its standing and quotas.",
        category: Category::Platform,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<TenantView>,
        },
        errors: &ONE,
        handler: || routing::get(show),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/platform/tenants/{id}",
        scopes: &[],
        public: false,
        name: "platform_delete_tenant",
        title: "Delete a tenant",
        description: "Erases the tenant: every row of every tenant table and its messages in \
            every JetStream stream. Irreversible.",
        category: Category::Platform,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<TenantErasure>,
        },
        errors: &ONE,
        handler: || routing::delete(remove),
    },
    RouteSpec {
        method: "POST",
        path: "/api/platform/tenants/{id}/suspend",
        scopes: &[],
        public: false,
        name: "platform_suspend_tenant",
        title: "Suspend a tenant",
        description: "Refuses the tenant's tokens, agents and Patrol runs with tenant_suspended \
            and the reason, until it is resumed. Nothing is deleted.",
        category: Category::Platform,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: Some(Body::required(schema::<SuspendRequest>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<TenantRecord>,
        },
        errors: &ONE_BODY,
        handler: || routing::post(suspend),
    },
    RouteSpec {
        method: "POST",
        path: "/api/platform/tenants/{id}/resume",
        scopes: &[],
        public: false,
        name: "platform_resume_tenant",
        title: "Resume a tenant",
        description: "Lifts a suspension: the tenant's tokens, agents and runs work again.",
        category: Category::Platform,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<TenantRecord>,
        },
        errors: &ONE,
        handler: || routing::post(resume),
    },
    RouteSpec {
        method: "GET",
        path: "/api/platform/tenants/{id}/users",
        scopes: &[],
        public: false,
        name: "platform_list_users",
        title: "List a tenant's users",
        description: "The tenant's users with their roles.",
        category: Category::Platform,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<PlatformUserList>,
        },
        errors: &ONE,
        handler: || routing::get(list_users),
    },
    RouteSpec {
        method: "POST",
        path: "/api/platform/tenants/{id}/users",
        scopes: &[],
        public: false,
        name: "platform_create_user",
        title: "Create a user in a tenant",
        description: "A user who signs in to the web UI; the generated password is in the answer \
            once.",
        category: Category::Platform,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: Some(Body::required(schema::<CreateUserRequest>)),
        response: Answer::Json {
            status: 201,
            schema: schema::<CreatedUser>,
        },
        errors: &[
            ErrorCode::PlatformTokenRequired,
            ErrorCode::InvalidParameter,
            ErrorCode::TenantNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::Conflict,
        ],
        handler: || routing::post(create_user),
    },
    RouteSpec {
        method: "GET",
        path: "/api/platform/tenants/{id}/quotas",
        scopes: &[],
        public: false,
        name: "platform_get_quotas",
        title: "Get a tenant's quotas",
        description: "The tenant's quotas; null is no quota on that dimension.",
        category: Category::Platform,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<TenantQuotas>,
        },
        errors: &ONE,
        handler: || routing::get(get_quotas),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/platform/tenants/{id}/quotas",
        scopes: &[],
        public: false,
        name: "platform_set_quotas",
        title: "Set a tenant's quotas",
        description: "Replaces the tenant's quotas (a missing or null field is no quota).",
        category: Category::Platform,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::TenantId>),
        query: None,
        body: Some(Body::required(schema::<TenantQuotas>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<TenantQuotas>,
        },
        errors: &ONE_BODY,
        handler: || routing::put(put_quotas),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::is_platform_path;

    #[test]
    fn platform_routes_live_under_the_prefix_and_need_no_tenant_scope() {
        for spec in ROUTES {
            assert!(is_platform_path(spec.path), "{}", spec.path);
            assert!(spec.scopes.is_empty() && !spec.public, "{}", spec.name);
            assert!(spec.name.starts_with("platform_"), "{}", spec.name);
            assert!(
                spec.declares(ErrorCode::PlatformTokenRequired),
                "{}",
                spec.name
            );
            assert_eq!(spec.category, Category::Platform);
        }
        assert!(!is_platform_path("/api/platformer"));
        assert!(!is_platform_path("/api/tokens"));
    }
}
