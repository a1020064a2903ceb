//! Resources and alerts: every resource with its health; one resource with its metric history
//! and capacity forecast, its alerts, its open findings and its operator state.

use axum::extract::{Path, State};
use axum::response::Response;
use chrono::Utc;
use maud::html;
use pulse_api::alerts::{Alert, AlertsQuery};
use pulse_api::constraints::ResourceRef;
use pulse_api::forecast::{DEFAULT_WINDOW_HOURS, ForecastQuery};
use pulse_api::operator_state::{OperatorStateBody, OperatorStateView, WindowBody};
use pulse_api::resources::ListQuery;
use pulse_domain::finding::operator_state::Criticality;
use pulse_domain::resource::Resource;

use super::layout::{self, Nav, at, at_opt, badge, raw, segment, shown, wire_name};
use super::session::WebUser;
use super::svg;
use crate::authorized::MonitoringReadScope;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::forecast::{MAX_SAMPLES, default_metric};
use crate::state::AppState;

pub async fn list(State(state): State<AppState>, user: WebUser) -> Response {
    let loaded = async {
        let auth = user.authorized::<MonitoringReadScope>()?;
        let resources = layout::answer(
            crate::resources::list(
                State(state.clone()),
                auth,
                ApiQuery::new(ListQuery {
                    resource_type: None,
                }),
            )
            .await,
        )?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let alerts = layout::answer(
            crate::alerts::list(
                State(state.clone()),
                auth,
                ApiQuery::new(AlertsQuery::default()),
            )
            .await,
        )?;
        Ok::<_, ApiError>((resources.resources, alerts.alerts))
    }
    .await;
    let (resources, alerts) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let body = html! {
        h1 { "Resources" }
        div id="resources" data-live {
            @if resources.is_empty() {
                p { "No resources reported yet: start the host agent (pulsectl up starts one)." }
            } @else {
                div class="table-wrap" {
                    table {
                        thead { tr { th { "Resource" } th { "Type" } th { "Status" } th { "Health" } th class="opt" { "Observed" } } }
                        tbody {
                            @for r in &resources {
                                tr {
                                    td { a href={"/resources/" (segment(r.id.as_str()))} { (shown(Some(&r.name))) } br; code { (shown(Some(r.id.as_str()))) } }
                                    td { (r.resource_type.as_str()) }
                                    td { (badge(r.status.as_str())) }
                                    td { (badge(r.health.as_str())) }
                                    td class="opt" { (at(&r.observed_at)) }
                                }
                            }
                        }
                    }
                }
            }
            h2 { "Alerts" }
            (alert_table(&alerts))
        }
    };
    layout::page(&user, "Resources", Nav::Resources, body)
}

fn alert_table(alerts: &[Alert]) -> maud::Markup {
    html! {
        @if alerts.is_empty() {
            p { "No alerts." }
        } @else {
            div class="table-wrap" {
                table {
                    thead { tr { th { "Alert" } th { "Resource" } th { "Level" } th { "State" } th class="opt" { "Since" } } }
                    tbody {
                        @for a in alerts {
                            tr {
                                td { (a.rule.as_str()) " " (shown(Some(&a.message))) }
                                td { code { (shown(Some(&a.resource_id))) } }
                                td { (badge(a.level.as_str())) }
                                td { (badge(a.state.as_str())) }
                                td class="opt" { (at(&a.fired_at)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The metric's history as chart points and the forecast's projection to `days_to_full` (at
/// most two weeks ahead).
async fn chart(state: &AppState, user: &WebUser, resource: &Resource) -> Option<String> {
    let metric = default_metric(resource.resource_type)?;
    let auth = user.authorized::<MonitoringReadScope>().ok()?;
    let forecast = layout::answer(
        crate::forecast::get(
            State(state.clone()),
            auth,
            ApiPath::parse(resource.id.as_str()).ok()?,
            ApiQuery::new(ForecastQuery::default()),
        )
        .await,
    )
    .ok()?;
    let forecast = forecast.outcome.capacity_forecast();
    let since = Utc::now() - chrono::Duration::hours(DEFAULT_WINDOW_HOURS);
    let tx = state.store.tenant_tx(&user.principal.tenant).await.ok()?;
    let history = pulse_store::metrics::history(&tx, &resource.id, metric, since, MAX_SAMPLES)
        .await
        .ok()?;
    tx.commit().await.ok()?;
    let points: Vec<(f64, f64)> = history
        .iter()
        .map(|(at, value)| (at.timestamp() as f64, *value))
        .collect();
    let projection = match (points.last(), forecast.map(|f| f.daily_change)) {
        (Some((x, y)), Some(daily)) if daily > 0.0 => {
            let days = ((100.0 - y) / daily).clamp(0.0, 14.0);
            Some((x + days * 86_400.0, (y + daily * days).min(100.0)))
        }
        _ => None,
    };
    // `days_to_full` is negative when the metric is stable or falling: nothing to forecast.
    let description = match forecast.map(|f| f.days_to_full).filter(|days| *days >= 0.0) {
        Some(days) => format!(
            "{metric} over the last {} samples; at the current trend it reaches 100% in {days:.1} days",
            points.len()
        ),
        None => format!(
            "{metric} over the last {} samples; no upward trend to forecast",
            points.len()
        ),
    };
    Some(svg::line(
        &format!("{metric} with capacity forecast"),
        &description,
        &points,
        projection,
        100.0,
        "%",
    ))
}

pub async fn detail(
    State(state): State<AppState>,
    user: WebUser,
    Path(id): Path<String>,
) -> Response {
    let loaded = async {
        let auth = user.authorized::<MonitoringReadScope>()?;
        let resource = layout::answer(
            crate::resources::get(State(state.clone()), auth, ApiPath::parse(id.clone())?).await,
        )?;
        let resource_id = ResourceRef::parse(resource.id.as_str().to_owned()).map_err(|_| {
            ApiError::new(
                pulse_capabilities::ErrorCode::InvalidParameter,
                format!("resource_id: {}", ResourceRef::requirement()),
            )
        })?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let alerts = layout::answer(
            crate::alerts::list(
                State(state.clone()),
                auth,
                ApiQuery::new(AlertsQuery {
                    resource_id: Some(resource_id),
                    ..AlertsQuery::default()
                }),
            )
            .await,
        )?;
        Ok::<_, ApiError>((resource, alerts.alerts))
    }
    .await;
    let (resource, alerts) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let chart = chart(&state, &user, &resource).await;
    let operator = operator_state(&state, &user, &resource).await;
    let name = shown(Some(&resource.name));
    let body = html! {
        p { a href="/resources" { "← Resources" } }
        h1 { (name) }
        div id="resource" data-live {
            p {
                (badge(resource.status.as_str())) " "
                (badge(resource.health.as_str()))
            }
            div class="panel" {
                dl class="facts" {
                    dt { "Id" } dd { code { (shown(Some(resource.id.as_str()))) } }
                    dt { "Type" } dd { (resource.resource_type.as_str()) }
                    dt { "Agent" } dd { (shown(Some(&resource.agent_id))) }
                    dt { "Restarts" } dd { (shown(resource.restart_count.map(|n| n.to_string()).as_deref())) }
                    dt { "Observed" } dd { (at(&resource.observed_at)) }
                    @if !resource.labels.is_empty() {
                        dt { "Labels" } dd {
                            @for (k, v) in &resource.labels { code { (k) "=" (shown(Some(v))) } " " }
                        }
                    }
                }
                p { a href={"/findings?resource_id=" (segment(resource.id.as_str()))} { "Findings of this resource" } }
            }
            @if let Some(chart) = chart {
                section class="panel" {
                    h2 { "Metric history and forecast" }
                    (raw(chart))
                }
            }
            @if let Some(operator) = &operator {
                (operator_form(&user, &resource, operator))
            }
            h2 { "Alerts" }
            (alert_table(&alerts))
        }
    };
    layout::page(&user, &name, Nav::Resources, body)
}

async fn operator_state(
    state: &AppState,
    user: &WebUser,
    resource: &Resource,
) -> Option<OperatorStateView> {
    let auth = user.authorized::<MonitoringReadScope>().ok()?;
    layout::answer(
        crate::operator_state::get(
            State(state.clone()),
            auth,
            ApiPath::parse(resource.id.as_str()).ok()?,
        )
        .await,
    )
    .ok()
}

/// `YYYY-MM-DDTHH:MM` (a `datetime-local` input's value, read as UTC) of a time.
fn local_input(value: &chrono::DateTime<Utc>) -> String {
    value.format("%Y-%m-%dT%H:%M").to_string()
}

fn operator_form(
    user: &WebUser,
    resource: &Resource,
    operator: &OperatorStateView,
) -> maud::Markup {
    let id = segment(resource.id.as_str());
    let can_set = user.can(pulse_domain::Scope::ActionsApprove);
    html! {
        section class="panel" id="operator-state" {
            h2 { "Operator state" }
            p {
                @match operator.suppression_cause {
                    Some(cause) => { (badge("suppressed")) " Findings are silenced: " (wire_name(&cause).replace('_', " ")) "." }
                    None => "Patrol treats this resource normally.",
                }
                @if operator.never_auto_remediate {
                    " No fix is dispatched to it (never auto-remediate)."
                }
            }
            @if let Some(set_by) = &operator.set_by {
                p class="hint" { "Set by " (set_by) " at " (at_opt(operator.set_at.as_ref())) "." }
            }
            @if can_set {
                form method="post" action={"/resources/" (id) "/operator-state"} {
                    (super::layout::csrf(user))
                    p {
                        label for="maintenance-until" { "Maintenance until" }
                        input id="maintenance-until" name="maintenance_until" type="datetime-local"
                            value=(operator.maintenance_window.map(|w| local_input(&w.ends_at)).unwrap_or_default());
                        " "
                        span class="hint" { "UTC; empty means no maintenance window." }
                    }
                    p class="inline" {
                        input type="checkbox" id="intentionally-offline" name="intentionally_offline" value="yes"
                            checked[operator.intentionally_offline];
                        " " label for="intentionally-offline" { "Intentionally offline (its findings are expected)" }
                    }
                    p class="inline" {
                        input type="checkbox" id="never-auto-remediate" name="never_auto_remediate" value="yes"
                            checked[operator.never_auto_remediate];
                        " " label for="never-auto-remediate" { "Never auto-remediate (no fix is dispatched, even approved)" }
                    }
                    p {
                        label for="criticality" { "Criticality" }
                        select id="criticality" name="criticality" {
                            option value="" selected[operator.criticality.is_none()] { "not set" }
                            @for level in Criticality::ALL {
                                option value=(level.as_str()) selected[operator.criticality == Some(level)] { (level.as_str()) }
                            }
                        }
                    }
                    p {
                        label for="operator-note" { "Note" }
                        input id="operator-note" name="note" size="50" value=(operator.note);
                    }
                    div class="actions-row" {
                        button type="submit" { "Save operator state" }
                    }
                }
                form method="post" action={"/resources/" (id) "/operator-state/clear"} {
                    (super::layout::csrf(user))
                    button type="submit" class="secondary" { "Clear operator state" }
                }
            }
        }
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct OperatorForm {
    #[serde(default)]
    maintenance_until: String,
    #[serde(default)]
    intentionally_offline: Option<String>,
    #[serde(default)]
    never_auto_remediate: Option<String>,
    #[serde(default)]
    criticality: String,
    #[serde(default)]
    note: String,
}

/// The operator-state body a submitted form asks for.
fn operator_body(form: &OperatorForm) -> Result<OperatorStateBody, ApiError> {
    let invalid =
        |message: String| ApiError::new(pulse_capabilities::ErrorCode::InvalidParameter, message);
    let until = form.maintenance_until.trim();
    let maintenance_window = if until.is_empty() {
        None
    } else {
        let ends_at = chrono::NaiveDateTime::parse_from_str(until, "%Y-%m-%dT%H:%M")
            .map_err(|_| {
                invalid("maintenance until: a date and time (YYYY-MM-DDTHH:MM, UTC)".to_owned())
            })?
            .and_utc();
        Some(WindowBody {
            starts_at: None,
            ends_at,
        })
    };
    let criticality = match form.criticality.as_str() {
        "" => None,
        raw => Some(Criticality::parse(raw).ok_or_else(|| {
            let levels: Vec<&str> = Criticality::ALL.iter().map(|c| c.as_str()).collect();
            invalid(format!(
                "criticality: {raw:?} is not one of {}",
                levels.join(", ")
            ))
        })?),
    };
    let note = form.note.trim();
    Ok(OperatorStateBody {
        maintenance_window,
        intentionally_offline: form.intentionally_offline.as_deref() == Some("yes"),
        never_auto_remediate: form.never_auto_remediate.as_deref() == Some("yes"),
        criticality,
        note: (!note.is_empty()).then(|| note.to_owned()),
    })
}

pub async fn set_operator_state(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: super::session::CsrfForm<OperatorForm>,
) -> Response {
    let super::session::CsrfForm { user, form } = form;
    let back = format!("/resources/{id}");
    let saved = async {
        let body = operator_body(&form)?;
        let auth = user.authorized::<crate::actions::ApproveScope>()?;
        layout::answer(
            crate::operator_state::put(
                State(state.clone()),
                auth,
                ApiPath::parse(id.clone())?,
                crate::extract::ApiJson::new(body),
            )
            .await,
        )
    }
    .await;
    let flash = match saved {
        Ok(view) => {
            let dismissed = view.dismissed_finding_ids.as_ref().map_or(0, Vec::len);
            super::session::Flash::ok(format!(
                "Operator state saved.{}",
                if dismissed > 0 {
                    format!(" {dismissed} open finding(s) were dismissed as expected behavior.")
                } else {
                    String::new()
                }
            ))
        }
        Err(error) => super::session::Flash::error(&error),
    };
    super::session::redirect_with(&user.headers, &back, flash)
}

pub async fn clear_operator_state(
    State(state): State<AppState>,
    Path(id): Path<String>,
    form: super::session::CsrfForm<std::collections::HashMap<String, String>>,
) -> Response {
    let user = form.user;
    let back = format!("/resources/{id}");
    let cleared = async {
        let auth = user.authorized::<crate::actions::ApproveScope>()?;
        layout::answer(
            crate::operator_state::delete(State(state.clone()), auth, ApiPath::parse(id.clone())?)
                .await,
        )
    }
    .await;
    let flash = match cleared {
        Ok(_) => super::session::Flash::ok("Operator state cleared."),
        Err(error) => super::session::Flash::error(&error),
    };
    super::session::redirect_with(&user.headers, &back, flash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(until: &str, criticality: &str, note: &str) -> OperatorForm {
        OperatorForm {
            maintenance_until: until.to_owned(),
            intentionally_offline: Some("yes".to_owned()),
            never_auto_remediate: None,
            criticality: criticality.to_owned(),
            note: note.to_owned(),
        }
    }

    #[test]
    fn the_operator_form_builds_the_typed_body() {
        let body = operator_body(&form("2030-01-02T03:04", "high", "  disk swap  ")).unwrap();
        let window = body.maintenance_window.expect("a window");
        assert_eq!(window.starts_at, None);
        assert_eq!(
            window.ends_at,
            chrono::NaiveDate::from_ymd_opt(2030, 1, 2)
                .and_then(|d| d.and_hms_opt(3, 4, 0))
                .unwrap()
                .and_utc()
        );
        assert!(body.intentionally_offline);
        assert!(!body.never_auto_remediate);
        assert_eq!(body.criticality, Some(Criticality::High));
        assert_eq!(body.note.as_deref(), Some("disk swap"));

        let empty = operator_body(&form("", "", "   ")).unwrap();
        assert!(empty.maintenance_window.is_none());
        assert_eq!(empty.criticality, None);
        assert_eq!(empty.note, None);
    }

    #[test]
    fn a_bad_field_is_refused_by_name() {
        let error = operator_body(&form("tomorrow", "", "")).unwrap_err();
        assert!(
            error.message.starts_with("maintenance until"),
            "{}",
            error.message
        );
        let error = operator_body(&form("", "vital", "")).unwrap_err();
        assert!(
            error.message.starts_with("criticality"),
            "{}",
            error.message
        );
    }
}
