//! `GET /api/alerts` (scope `monitoring:read`): the alerts of the deterministic floor, firing by
//! default. `?state=firing|cleared|all`, `?resource_id=` (any reference the resolver accepts;
//! a canonical id of a resource that no longer exists still finds its history), `?limit=`.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use pulse_api::alerts::{Alert, AlertList, AlertStatus, AlertsQuery, Limit, StateFilter};
use pulse_capabilities::ErrorCode;
use pulse_domain::resource::ResourceType;
use pulse_store::alerts::{self, AlertFilter, StoredAlert};

use crate::auth::{Authorized, MonitoringReadScope};
use crate::resources::{check_reference, resolve};
use crate::{ApiError, AppState};

/// Checks the query values; the resource reference is resolved later, in the tenant.
fn parse(query: &AlertsQuery) -> Result<(StateFilter, i64), ApiError> {
    let state = match query.state.as_deref() {
        None => StateFilter::Firing,
        Some(s) => s
            .parse()
            .map_err(|e| ApiError::new(ErrorCode::InvalidParameter, format!("state: {e}")))?,
    };
    let limit = match query.limit.as_deref() {
        None => alerts::DEFAULT_LIST_LIMIT,
        Some(raw) => Limit::parse(raw)
            .ok_or_else(|| ApiError::new(ErrorCode::InvalidParameter, Limit::refusal("limit")))?,
    };
    if let Some(reference) = &query.resource_id {
        check_reference("resource_id", reference)?;
    }
    Ok((state, limit))
}

/// A canonical id (`<type>:...`) names a resource even after it is gone.
fn is_canonical_id(reference: &str) -> bool {
    ResourceType::ALL.iter().any(|t| {
        reference
            .strip_prefix(t.as_str())
            .is_some_and(|rest| rest.starts_with(':') && rest.len() > 1)
    })
}

/// Which stored alerts a state filter selects.
pub(crate) fn state_filter(state: StateFilter) -> alerts::StateFilter {
    match state {
        StateFilter::Firing => alerts::StateFilter::Firing,
        StateFilter::Cleared => alerts::StateFilter::Cleared,
        StateFilter::All => alerts::StateFilter::All,
    }
}

/// A stored alert as the API lists it.
pub(crate) fn alert(stored: StoredAlert) -> Alert {
    Alert {
        id: stored.id,
        key: stored.key,
        rule: stored.rule,
        level: stored.level,
        value: stored.value,
        threshold: stored.threshold,
        resource_id: stored.resource_id,
        message: stored.message,
        state: match stored.state {
            alerts::AlertStatus::Firing => AlertStatus::Firing,
            alerts::AlertStatus::Cleared => AlertStatus::Cleared,
        },
        fired_at: stored.fired_at,
        updated_at: stored.updated_at,
        cleared_at: stored.cleared_at,
    }
}

pub async fn list(
    State(state): State<AppState>,
    auth: Authorized<MonitoringReadScope>,
    query: Result<Query<AlertsQuery>, QueryRejection>,
) -> Result<Json<AlertList>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::new(ErrorCode::InvalidParameter, e.body_text()))?;
    let (state_filter, limit) = parse(&query)?;
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource_id = match &query.resource_id {
        None => None,
        Some(reference) => match resolve(&tx, reference).await {
            Ok(resource) => Some(resource.id.as_str().to_owned()),
            Err(e) if e.code == ErrorCode::NotFound && is_canonical_id(reference) => {
                Some(reference.clone())
            }
            Err(e) => return Err(e),
        },
    };
    let listed = alerts::list(
        &tx,
        &AlertFilter {
            state: self::state_filter(state_filter),
            resource_id,
            limit,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Json(AlertList {
        alerts: listed.into_iter().map(alert).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use pulse_domain::alert_rules::{AlertKey, AlertLevel, AlertRule};
    use pulse_store::alerts::AlertStatus;

    fn query(state: Option<&str>, limit: Option<&str>, resource: Option<&str>) -> AlertsQuery {
        AlertsQuery {
            state: state.map(str::to_owned),
            resource_id: resource.map(str::to_owned),
            limit: limit.map(str::to_owned),
        }
    }

    #[test]
    fn defaults_to_firing_and_the_default_limit() {
        assert_eq!(
            parse(&AlertsQuery::default()),
            Ok((StateFilter::Firing, alerts::DEFAULT_LIST_LIMIT))
        );
        assert_eq!(
            parse(&query(Some("all"), Some("1000"), Some("web"))),
            Ok((StateFilter::All, 1000))
        );
    }

    #[test]
    fn bad_values_are_invalid_parameters_naming_the_field() {
        for (q, field) in [
            (query(Some("open"), None, None), "state:"),
            (query(None, Some("0"), None), "limit:"),
            (query(None, Some("1001"), None), "limit:"),
            (query(None, Some("ten"), None), "limit:"),
            (query(None, None, Some("")), "resource_id:"),
            (query(None, None, Some("a\u{7}b")), "resource_id:"),
        ] {
            let err = parse(&q).expect_err("refused");
            assert_eq!(err.code, ErrorCode::InvalidParameter);
            assert!(err.message.starts_with(field), "{}", err.message);
        }
    }

    #[test]
    fn canonical_ids_are_recognised_by_type_prefix() {
        assert!(is_canonical_id("service:h1:web"));
        assert!(is_canonical_id("app-container:h1:abc"));
        assert!(!is_canonical_id("service:"));
        assert!(!is_canonical_id("web"));
        assert!(!is_canonical_id("hostile:x"));
    }

    #[test]
    fn alert_list_shape() {
        let at = chrono::Utc
            .with_ymd_and_hms(2026, 11, 1, 12, 0, 0)
            .single()
            .expect("valid time");
        let list = AlertList {
            alerts: vec![alert(StoredAlert {
                id: uuid::Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_0001),
                key: AlertKey::new("storage:h1:/var", AlertRule::FilesystemUsage),
                rule: AlertRule::FilesystemUsage,
                level: AlertLevel::Critical,
                value: 96.5,
                threshold: 95.0,
                resource_id: "storage:h1:/var".to_owned(),
                message: "storage storage:h1:/var filesystem usage 96.5% is at or above the critical threshold of 95%".to_owned(),
                state: AlertStatus::Cleared,
                fired_at: at,
                updated_at: at,
                cleared_at: Some(at),
            })],
        };
        insta::assert_json_snapshot!(list);
    }
}
