//! `GET /api/resources` and `GET /api/resources/{id}` (scope `monitoring:read`). The id accepts
//! anything the store's resolver accepts: canonical id, source id, name or alias.

use axum::Json;
use axum::extract::State;
use axum::routing;
use pulse_api::constraints::ResourceRef;
use pulse_api::resources::{ListQuery, ResourceList};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::resource::Resource;
use pulse_store::resources::{self, ResolveError};

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, PathParam};
use crate::route::{Answer, RESOURCE_REF, RouteSpec, schema};
use crate::state::AppState;

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiQuery(query, _): ApiQuery<ListQuery>,
) -> Result<Json<ResourceList>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resources = resources::list(&tx, query.resource_type).await?;
    tx.commit().await?;
    Ok(Json(ResourceList { resources }))
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
) -> Result<Json<Resource>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resolved = resolve(&tx, &reference).await;
    tx.commit().await?;
    resolved.map(Json)
}

/// Every resource route's `{id}`: a reference no resource can have is refused before any read.
impl PathParam for ResourceRef {
    fn from_segment(raw: String) -> Result<Self, ApiError> {
        ResourceRef::parse(raw).map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidParameter,
                format!("id: {}", ResourceRef::requirement()),
            )
        })
    }
}

/// Resolves a reference as every resource route does: the typed `not_found` and
/// `ambiguous_resource` errors.
pub(crate) async fn resolve(
    tx: &pulse_store::TenantTx,
    reference: &ResourceRef,
) -> Result<Resource, ApiError> {
    match resources::resolve(tx, reference.as_str()).await {
        Ok(resource) => Ok(resource),
        Err(ResolveError::NotFound { .. }) => Err(ApiError::new(
            ErrorCode::NotFound,
            "no resource with that id, source id, name or alias",
        )),
        Err(error @ ResolveError::Ambiguous { .. }) => Err(ApiError::new(
            ErrorCode::AmbiguousResource,
            format!("{error}; use a canonical id"),
        )),
        Err(ResolveError::Store(error)) => Err(error.into()),
    }
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: "GET",
        path: "/api/resources",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_resources",
        title: "List resources",
        description: "The tenant's resources as the agents last reported them, optionally of one type.",
        category: Category::Inventory,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::resources::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::resources::ResourceList>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || routing::get(list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_resource",
        title: "Get a resource",
        description: "One resource by canonical id, source id, name or alias.",
        category: Category::Inventory,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_domain::resource::Resource>,
        },
        errors: &RESOURCE_REF,
        handler: || routing::get(get),
    },
];
