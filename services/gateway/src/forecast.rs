//! `GET /api/resources/{id}/forecast` (scope `monitoring:read`): the capacity forecast of one
//! percent-used metric from its recent history, as [`forecast_capacity`] computes it.
//!
//! `?metric=` defaults by resource type (storage: `used_percent`, host: `memory_percent`; other
//! types must name one); `?window_hours=` (default 168, one week, at most 2160) bounds the
//! history, of which the newest [`MAX_SAMPLES`] samples are used.

use axum::Json;
use axum::extract::State;
use axum::routing;
use chrono::Utc;
use pulse_api::constraints::ResourceRef;
use pulse_api::forecast::{DEFAULT_WINDOW_HOURS, ForecastQuery, ForecastResponse};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::forecast::{MetricSample, forecast_capacity};
use pulse_domain::resource::ResourceType;
use pulse_store::alerts::{MEMORY_PERCENT, USED_PERCENT};
use pulse_store::metrics;

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::resources::resolve;
use crate::route::{Answer, RESOURCE_REF, RouteSpec, schema};
use crate::state::AppState;

/// Newest samples fitted at most.
pub const MAX_SAMPLES: i64 = 10_000;

/// The metric forecast for a resource of `kind` when the caller names none.
pub(crate) fn default_metric(kind: ResourceType) -> Option<&'static str> {
    match kind {
        // Storage and ZFS pools fill up; a disk wears out.
        ResourceType::Storage => Some(USED_PERCENT),
        ResourceType::PhysicalDisk => Some("wearout_remaining_percent"),
        ResourceType::Host | ResourceType::Node | ResourceType::Vm => Some(MEMORY_PERCENT),
        // A container's root disk fills up.
        ResourceType::SystemContainer => Some(USED_PERCENT),
        ResourceType::Service | ResourceType::AppContainer => None,
    }
}

pub async fn get(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    ApiPath(reference): ApiPath<ResourceRef>,
    ApiQuery(query, _): ApiQuery<ForecastQuery>,
) -> Result<Json<ForecastResponse>, ApiError> {
    let window_hours = query.window_hours.unwrap_or(DEFAULT_WINDOW_HOURS);
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource = match resolve(&tx, &reference).await {
        Ok(resource) => resource,
        Err(e) => {
            tx.rollback().await?;
            return Err(e);
        }
    };
    let metric = match query.metric.as_deref() {
        Some(metric) => metric.to_owned(),
        None => match default_metric(resource.resource_type) {
            Some(metric) => metric.to_owned(),
            None => {
                tx.rollback().await?;
                return Err(ApiError::new(
                    ErrorCode::InvalidParameter,
                    format!(
                        "metric: required for {} resources (no default)",
                        resource.resource_type
                    ),
                ));
            }
        },
    };
    let since = Utc::now() - chrono::Duration::hours(window_hours);
    let history = metrics::history(&tx, &resource.id, &metric, since, MAX_SAMPLES).await?;
    tx.commit().await?;
    let samples: Vec<MetricSample> = history
        .into_iter()
        .map(|(at, pct)| MetricSample::new(at, pct))
        .collect();
    Ok(Json(ForecastResponse {
        resource_id: resource.id,
        window_hours,
        outcome: forecast_capacity(&metric, &samples),
    }))
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[RouteSpec {
    method: "GET",
    path: "/api/resources/{id}/forecast",
    scopes: &[Scope::MonitoringRead],
    public: false,
    name: "get_resource_forecast",
    title: "Capacity forecast",
    description: "The capacity forecast of one percent-used metric of a resource from its recent history.",
    category: Category::Inventory,
    action_mode: ActionMode::Read,
    approval_policy: ApprovalPolicy::ScopeOnly,
    id: Some(schema::<pulse_api::constraints::ResourceRef>),
    query: Some(schema::<pulse_api::forecast::ForecastQuery>),
    body: None,
    response: Answer::Json {
        status: 200,
        schema: schema::<pulse_api::forecast::ForecastResponse>,
    },
    errors: &RESOURCE_REF,
    handler: || routing::get(get),
}];

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use pulse_domain::resource::ResourceId;

    #[test]
    fn metric_defaults_by_resource_type() {
        assert_eq!(default_metric(ResourceType::Storage), Some("used_percent"));
        assert_eq!(default_metric(ResourceType::Host), Some("memory_percent"));
        assert_eq!(default_metric(ResourceType::Service), None);
        assert_eq!(default_metric(ResourceType::AppContainer), None);
    }

    #[test]
    fn window_and_metric_are_checked() {
        let read = |query: &str| ApiQuery::<ForecastQuery>::parse(query).map(|q| q.0);
        assert_eq!(read("").expect("defaults").window_hours, None);
        assert_eq!(
            read("window_hours=24").expect("valid").window_hours,
            Some(24)
        );
        for bad in ["0", "-1", "2161", "week", ""] {
            let err = read(&format!("window_hours={bad}")).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidParameter);
            assert_eq!(
                err.message,
                "window_hours: must be an integer from 1 to 2160"
            );
        }
        assert!(read("metric=used_percent").is_ok());
        for bad in ["", "used+percent", "a/b", &"x".repeat(129)] {
            let err = read(&format!("metric={bad}")).expect_err(bad);
            assert_eq!(
                err.message,
                "metric: must be 1 to 128 characters of letters, digits, '_', '.' or '-'"
            );
        }
    }

    #[test]
    fn forecast_response_shape() {
        let t0 = chrono::Utc
            .with_ymd_and_hms(2026, 11, 1, 0, 0, 0)
            .single()
            .expect("valid time");
        // 2 points a day for three days: 80% rising to 86%.
        let samples: Vec<MetricSample> = (0..=6)
            .map(|i| {
                MetricSample::new(
                    t0 + chrono::Duration::hours(12 * i),
                    80.0 + f64::from(i as i32),
                )
            })
            .collect();
        let response = ForecastResponse {
            resource_id: ResourceId::storage("h1", "/var"),
            window_hours: DEFAULT_WINDOW_HOURS,
            outcome: forecast_capacity("used_percent", &samples),
        };
        insta::assert_json_snapshot!(response);
        let none = ForecastResponse {
            resource_id: ResourceId::host("h1"),
            window_hours: 24,
            outcome: forecast_capacity("memory_percent", &[]),
        };
        insta::assert_json_snapshot!("forecast_no_history_shape", none);
    }
}
