//! `GET /api/alerts` (scope `monitoring:read`): the alerts of the deterministic floor, firing by
//! default. `?state=firing|cleared|all`, `?resource_id=` (any reference the resolver accepts;
//! a canonical id of a resource that no longer exists still finds its history), `?limit=`.

use axum::Json;
use axum::extract::State;
use axum::routing;
use pulse_api::alerts::{Alert, AlertList, AlertStatus, AlertsQuery, StateFilter};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use pulse_domain::resource::ResourceType;
use pulse_store::alerts::{self, AlertFilter, StoredAlert};

use crate::authorized::{Authorized, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::resources::resolve;
use crate::route::{Answer, RESOURCE_REF, RouteSpec, schema};
use crate::state::AppState;

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
    ApiQuery(query, _): ApiQuery<AlertsQuery>,
) -> Result<Json<AlertList>, ApiError> {
    let tx = state.store.tenant_tx(&auth.principal.tenant).await?;
    let resource_id = match &query.resource_id {
        None => None,
        Some(reference) => match resolve(&tx, reference).await {
            Ok(resource) => Some(resource.id.as_str().to_owned()),
            Err(e) if e.code == ErrorCode::NotFound && is_canonical_id(reference.as_str()) => {
                Some(reference.to_string())
            }
            Err(e) => return Err(e),
        },
    };
    let listed = alerts::list(
        &tx,
        &AlertFilter {
            state: state_filter(query.state.unwrap_or_default()),
            resource_id,
            limit: query.limit.unwrap_or(alerts::DEFAULT_LIST_LIMIT),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Json(AlertList {
        alerts: listed.into_iter().map(alert).collect(),
    }))
}

/// The routes of this module, in the order the API lists them.
pub(crate) const ROUTES: &[RouteSpec] = &[RouteSpec {
    method: "GET",
    path: "/api/alerts",
    scopes: &[Scope::MonitoringRead],
    public: false,
    name: "list_alerts",
    title: "List alerts",
    description: "The alerts of the deterministic floor: firing by default, or cleared or all, optionally of one resource.",
    category: Category::Inventory,
    action_mode: ActionMode::Read,
    approval_policy: ApprovalPolicy::ScopeOnly,
    id: None,
    query: Some(schema::<pulse_api::alerts::AlertsQuery>),
    body: None,
    response: Answer::Json {
        status: 200,
        schema: schema::<pulse_api::alerts::AlertList>,
    },
    errors: &RESOURCE_REF,
    handler: || routing::get(list),
}];

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use pulse_domain::alert_rules::{AlertKey, AlertLevel, AlertRule};
    use pulse_store::alerts::AlertStatus;

    fn read(query: &str) -> Result<AlertsQuery, ApiError> {
        ApiQuery::<AlertsQuery>::parse(query).map(|q| q.0)
    }

    #[test]
    fn defaults_to_firing_and_the_default_limit() {
        let defaults = read("").expect("no parameters");
        assert_eq!(defaults.state.unwrap_or_default(), StateFilter::Firing);
        assert_eq!(defaults.limit, None);
        let all = read("state=all&limit=1000&resource_id=web").expect("valid");
        assert_eq!(all.state, Some(StateFilter::All));
        assert_eq!(all.limit, Some(1000));
        assert_eq!(
            all.resource_id.map(|r| r.to_string()).as_deref(),
            Some("web")
        );
    }

    #[test]
    fn bad_values_are_invalid_parameters_naming_the_field() {
        for (query, message) in [
            (
                "state=open",
                "state: unknown alert state \"open\" (expected firing, cleared or all)",
            ),
            ("limit=0", "limit: must be an integer from 1 to 1000"),
            ("limit=1001", "limit: must be an integer from 1 to 1000"),
            ("limit=ten", "limit: must be an integer from 1 to 1000"),
            (
                "resource_id=",
                "resource_id: must be 1 to 1024 characters, none of them control characters",
            ),
            (
                "resource_id=a%07b",
                "resource_id: must be 1 to 1024 characters, none of them control characters",
            ),
        ] {
            let err = read(query).expect_err(query);
            assert_eq!(err.code, ErrorCode::InvalidParameter);
            assert_eq!(err.message, message);
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
