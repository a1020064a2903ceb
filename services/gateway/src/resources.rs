//! `GET /api/resources` and `GET /api/resources/{id}` (scope `monitoring:read`). The id accepts
//! anything the store's resolver accepts: canonical id, source id, name or alias.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use pulse_api::constraints::{MAX_REFERENCE_CHARS, ResourceRef};
use pulse_api::resources::{ListQuery, ResourceList};
use pulse_capabilities::ErrorCode;
use pulse_domain::resource::{Resource, ResourceType};
use pulse_store::resources::{self, ResolveError};

use crate::auth::{Authorized, MonitoringReadScope};
use crate::{ApiError, AppState};

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<ResourceList>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::new(ErrorCode::InvalidParameter, e.body_text()))?;
    let resource_type = query
        .resource_type
        .map(|t| t.parse::<ResourceType>())
        .transpose()
        .map_err(|e| ApiError::new(ErrorCode::InvalidParameter, format!("type: {e}")))?;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resources = resources::list(&tx, resource_type).await?;
    tx.commit().await?;
    Ok(Json(ResourceList { resources }))
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Resource>, ApiError> {
    let Path(reference) =
        path.map_err(|e| ApiError::new(ErrorCode::InvalidParameter, e.body_text()))?;
    check_reference("id", &reference)?;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resolved = resolve(&tx, &reference).await;
    tx.commit().await?;
    resolved.map(Json)
}

/// Refuses a reference no resource can have (`name` is the parameter, for the message).
pub(crate) fn check_reference(name: &str, reference: &str) -> Result<(), ApiError> {
    if ResourceRef::check(reference).is_err() {
        return Err(ApiError::new(
            ErrorCode::InvalidParameter,
            format!(
                "{name}: must be 1 to {MAX_REFERENCE_CHARS} characters, none of them control characters"
            ),
        ));
    }
    Ok(())
}

/// Resolves a reference as every resource route does: the typed `not_found` and
/// `ambiguous_resource` errors.
pub(crate) async fn resolve(
    tx: &pulse_store::TenantTx,
    reference: &str,
) -> Result<Resource, ApiError> {
    match resources::resolve(tx, reference).await {
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
