//! `POST /api/tokens`, `GET /api/tokens`, `DELETE /api/tokens/{id}` (scope `admin`).

use axum::routing;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use std::collections::BTreeSet;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use pulse_api::constraints::TextError;
use pulse_api::tokens::{
    ApiToken, CreateTokenRequest, CreatedToken, RequestedScope, TokenId, TokenList, TokenName,
};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_store::audit::{self, AuditEntry};
use pulse_store::tokens::{self, NewToken, RevokeOutcome};
use serde_json::json;

use crate::authorized::{AdminScope, Authorized};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, PathParam};
use crate::route::{Answer, Body, JSON_BODY, RouteSpec, concat, schema};
use crate::state::AppState;

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

fn validate(
    request: CreateTokenRequest,
    caller: &pulse_store::tokens::Principal,
    now: DateTime<Utc>,
) -> Result<NewToken, ApiError> {
    match TokenName::check(&request.name) {
        Err(TextError::Blank) => return Err(invalid("name: must not be empty")),
        Err(TextError::TooLong { max }) => {
            return Err(invalid(format!("name: at most {max} characters")));
        }
        Err(TextError::Control) => {
            return Err(invalid("name: must not contain control characters"));
        }
        Ok(()) => {}
    }
    let name = request.name.trim().to_owned();
    if request.scopes.is_empty() {
        return Err(invalid("scopes: at least one scope is required"));
    }
    let platform: Vec<&str> = request
        .scopes
        .iter()
        .filter_map(|scope| match scope {
            RequestedScope::Platform(name) => Some(name.as_str()),
            RequestedScope::Tenant(_) => None,
        })
        .collect();
    if !platform.is_empty() {
        return Err(ApiError::new(
            ErrorCode::PlatformScopeRefused,
            format!(
                "a tenant token cannot carry platform-operator authority ({}); platform tokens \
                 come from `pulsectl admin platform-token`",
                platform.join(", ")
            ),
        ));
    }
    let scopes: BTreeSet<Scope> = request
        .scopes
        .into_iter()
        .filter_map(|scope| match scope {
            RequestedScope::Tenant(scope) => Some(scope),
            RequestedScope::Platform(_) => None,
        })
        .collect();
    let beyond: Vec<&str> = scopes
        .iter()
        .filter(|scope| !caller.has(**scope))
        .map(|scope| scope.as_str())
        .collect();
    if !beyond.is_empty() {
        return Err(ApiError::new(
            ErrorCode::MissingScope,
            format!(
                "a token cannot grant scopes its creator lacks: {}",
                beyond.join(", ")
            ),
        ));
    }
    if let Some(at) = request.expires_at
        && at <= now
    {
        return Err(invalid("expires_at: must be in the future"));
    }
    Ok(NewToken {
        name,
        scopes,
        expires_at: request.expires_at,
        created_by: caller.user_id,
    })
}

pub async fn create(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    ApiJson(request, _): ApiJson<CreateTokenRequest>,
) -> Result<Response, ApiError> {
    let new = validate(request, &auth.principal, Utc::now())?;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let issued = tokens::issue(&tx, new).await?;
    audit::append(
        &tx,
        &AuditEntry {
            actor: format!("token:{}", auth.principal.token_id),
            kind: "token.created".to_owned(),
            subject: issued.token.id.to_string(),
            payload: json!({"name": issued.token.name, "scopes": issued.token.scopes, "expires_at": issued.token.expires_at}),
        },
    )
    .await?;
    tx.commit().await?;
    let body = CreatedToken {
        id: issued.token.id,
        name: issued.token.name,
        scopes: issued.token.scopes,
        token: issued.secret.expose().to_owned(),
        created_at: issued.token.created_at,
        expires_at: issued.token.expires_at,
    };
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// A stored token as the API lists it.
fn listed(token: tokens::ApiToken) -> ApiToken {
    ApiToken {
        id: token.id,
        name: token.name,
        scopes: token.scopes,
        created_by: token.created_by,
        created_at: token.created_at,
        expires_at: token.expires_at,
        revoked_at: token.revoked_at,
        last_used_at: token.last_used_at,
    }
}

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
) -> Result<Json<TokenList>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let tokens = tokens::list(&tx).await?;
    tx.commit().await?;
    Ok(Json(TokenList {
        tokens: tokens.into_iter().map(listed).collect(),
    }))
}

impl PathParam for TokenId {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        raw.parse().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidParameter,
                "id: expected a token id (UUID)",
            )
        })
    }
}

pub async fn revoke(
    State(state): State<AppState>,
    auth: Authorized<AdminScope>,
    ApiPath(TokenId(id)): ApiPath<TokenId>,
) -> Result<StatusCode, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    match tokens::revoke(&tx, id).await? {
        RevokeOutcome::NotFound => {
            tx.rollback().await?;
            Err(ApiError::new(ErrorCode::NotFound, format!("no token {id}")))
        }
        RevokeOutcome::AlreadyRevoked => {
            tx.rollback().await?;
            Ok(StatusCode::NO_CONTENT)
        }
        RevokeOutcome::Revoked => {
            audit::append(
                &tx,
                &AuditEntry {
                    actor: format!("token:{}", auth.principal.token_id),
                    kind: "token.revoked".to_owned(),
                    subject: id.to_string(),
                    payload: json!({}),
                },
            )
            .await?;
            tx.commit().await?;
            Ok(StatusCode::NO_CONTENT)
        }
    }
}

/// What creating a token can answer beyond the body codes.
const CREATE_ERRORS: [ErrorCode; 4] = concat(JSON_BODY, [ErrorCode::PlatformScopeRefused]);

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "POST",
        path: "/api/tokens",
        scopes: &[Scope::Admin],
        public: false,
        name: "create_token",
        title: "Create an API token",
        description: "Issues a token of the caller's tenant with the given scopes (never more than the caller holds); the secret is in this answer only.",
        category: Category::Tokens,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(
            schema::<pulse_api::tokens::CreateTokenRequest>,
        )),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::tokens::CreatedToken>,
        },
        errors: &CREATE_ERRORS,
        handler: || routing::post(create),
    },
    RouteSpec {
        method: "GET",
        path: "/api/tokens",
        scopes: &[Scope::Admin],
        public: false,
        name: "list_tokens",
        title: "List API tokens",
        description: "The tenant's tokens, revoked and expired ones included; never a secret.",
        category: Category::Tokens,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::tokens::TokenList>,
        },
        errors: &[],
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/tokens/{id}",
        scopes: &[Scope::Admin],
        public: false,
        name: "revoke_token",
        title: "Revoke an API token",
        description: "Revokes one token of the tenant; revoking a revoked token is a no-op.",
        category: Category::Tokens,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::tokens::TokenId>),
        query: None,
        body: None,
        response: Answer::Empty { status: 204 },
        errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
        handler: || routing::delete(revoke),
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_domain::TenantId;
    use uuid::Uuid;

    fn caller(scopes: &[Scope]) -> pulse_store::tokens::Principal {
        pulse_store::tokens::Principal {
            tenant: TenantId::default_tenant(),
            token_id: Uuid::nil(),
            token_name: "t".to_owned(),
            user_id: None,
            scopes: scopes.iter().copied().collect(),
            kind: pulse_store::tokens::PrincipalKind::ApiToken,
            agent_id: None,
        }
    }

    fn request(name: &str, scopes: &[Scope]) -> CreateTokenRequest {
        CreateTokenRequest {
            name: name.to_owned(),
            scopes: scopes.iter().copied().map(RequestedScope::Tenant).collect(),
            expires_at: None,
        }
    }

    #[test]
    fn validation_names_the_field() {
        let admin = caller(&[Scope::Admin, Scope::MonitoringRead]);
        let now = Utc::now();
        let err = validate(request("  ", &[Scope::Admin]), &admin, now).unwrap_err();
        assert!(err.message.starts_with("name:"));
        let err = validate(request("x", &[]), &admin, now).unwrap_err();
        assert!(err.message.starts_with("scopes:"));
        let mut past = request("x", &[Scope::Admin]);
        past.expires_at = Some(now - chrono::Duration::seconds(1));
        assert!(
            validate(past, &admin, now)
                .unwrap_err()
                .message
                .starts_with("expires_at:")
        );
        let ok = validate(
            request(" ci ", &[Scope::MonitoringRead, Scope::MonitoringRead]),
            &admin,
            now,
        )
        .unwrap();
        assert_eq!(ok.name, "ci");
        assert_eq!(ok.scopes.len(), 1);
    }

    #[test]
    fn platform_scopes_are_refused_by_name() {
        let request: CreateTokenRequest = serde_json::from_value(
            serde_json::json!({"name": "x", "scopes": ["admin", "platform:operator"]}),
        )
        .unwrap();
        let admin = caller(&[Scope::Admin]);
        let err = validate(request, &admin, Utc::now()).unwrap_err();
        assert_eq!(err.code, ErrorCode::PlatformScopeRefused);
        assert!(err.message.contains("platform:operator"), "{}", err.message);
        let unknown = serde_json::from_value::<CreateTokenRequest>(
            serde_json::json!({"name": "x", "scopes": ["root"]}),
        )
        .unwrap_err();
        assert!(unknown.to_string().contains("root"), "{unknown}");
    }

    #[test]
    fn cannot_grant_scopes_the_caller_lacks() {
        let admin = caller(&[Scope::Admin]);
        let err = validate(request("x", &[Scope::AgentExec]), &admin, Utc::now()).unwrap_err();
        assert_eq!(err.code, ErrorCode::MissingScope);
        assert!(err.message.contains("agent:exec"));
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn created_and_listed_token_shapes() {
        let id = Uuid::parse_str("01a22885-50e2-75d7-ba82-2d4f4e2bbf70").unwrap();
        let created = CreatedToken {
            id,
            name: "ci".to_owned(),
            scopes: BTreeSet::from([Scope::MonitoringRead, Scope::Admin]),
            token: "pulse_<secret>".to_owned(),
            created_at: at("2026-11-29T18:00:00Z"),
            expires_at: Some(at("2027-01-01T00:00:00Z")),
        };
        insta::assert_json_snapshot!("created_token", created);
        let listed = TokenList {
            tokens: vec![ApiToken {
                id,
                name: "ci".to_owned(),
                scopes: BTreeSet::from([Scope::MonitoringRead]),
                created_by: None,
                created_at: at("2026-11-29T18:00:00Z"),
                expires_at: None,
                revoked_at: Some(at("2026-11-30T00:00:00Z")),
                last_used_at: None,
            }],
        };
        insta::assert_json_snapshot!("token_list", listed);
    }
}
