//! `GET /api/resources` and `GET /api/resources/{id}` (scope `monitoring:read`). The id accepts
//! anything the store's resolver accepts: canonical id, source id, name or alias.

use axum::Json;
use axum::extract::State;
use pulse_api::constraints::ResourceRef;
use pulse_api::resources::{ListQuery, ResourceList};
use pulse_capabilities::ErrorCode;
use pulse_domain::resource::Resource;
use pulse_store::resources::{self, ResolveError};

use crate::auth::{Authorized, MonitoringReadScope};
use crate::extract::{ApiPath, ApiQuery, PathParam};
use crate::{ApiError, AppState};

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
