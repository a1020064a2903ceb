//! Settings: providers (keys write-only), the Patrol model route, the preflight result and a
//! button to re-run it, cadence with a cost preview per schedule, alert triggers, budgets with
//! their state.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::patrol::RunsQuery;
use pulse_domain::Scope;
use serde_json::{Map, Value, json};

use super::layout::{self, Nav, badge, csrf, text, time};
use super::patrol::{save_settings, status};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::authorized::{AdminScope, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::ApiQuery;
use crate::patrol::PatrolExecuteScope;
use crate::state::AppState;

/// Cadences the cost preview is shown for, in minutes.
const PREVIEW_CADENCES: &[u32] = &[15, 60, 360, 1440];

/// What one full run costs on average, from the recent completed full runs: (runs measured,
/// mean tokens, mean dollars when every measured run had a price).
fn measured(runs: &[Value]) -> (usize, f64, Option<f64>) {
    let full: Vec<&Value> = runs
        .iter()
        .filter(|r| r["status"].as_str() == Some("completed"))
        .filter(|r| {
            r["effective_scope_resource_ids"]
                .as_array()
                .is_none_or(|ids| ids.is_empty())
        })
        .take(20)
        .collect();
    if full.is_empty() {
        return (0, 0.0, None);
    }
    let n = full.len() as f64;
    let tokens = full
        .iter()
        .map(|r| {
            r["input_tokens"].as_f64().unwrap_or(0.0) + r["output_tokens"].as_f64().unwrap_or(0.0)
        })
        .sum::<f64>()
        / n;
    let dollars: Option<Vec<f64>> = full.iter().map(|r| r["cost_usd"].as_f64()).collect();
    (
        full.len(),
        tokens,
        dollars.map(|d| d.iter().sum::<f64>() / n),
    )
}

fn cost_preview(runs: &[Value], current: Option<u64>) -> Markup {
    let (count, tokens, dollars) = measured(runs);
    html! {
        @if count == 0 {
            p class="hint" { "No completed full run yet, so there is nothing measured to preview cost from." }
        } @else {
            p class="hint" {
                "From the last " (count) " completed full run(s): about " (format!("{tokens:.0}")) " tokens per run"
                @if let Some(d) = dollars { ", $" (format!("{d:.4}")) " per run" } @else { ", price unknown for this route" }
                "."
            }
            div class="table-wrap" {
                table id="cost-preview" {
                    thead { tr { th { "Every" } th { "Runs a day" } th { "Tokens a day" } th { "Cost a day" } th { "Cost a month (30 d)" } } }
                    tbody {
                        @for minutes in PREVIEW_CADENCES {
                            @let per_day = 1440.0 / f64::from(*minutes);
                            tr {
                                td {
                                    (if *minutes >= 60 { format!("{} h", minutes / 60) } else { format!("{minutes} min") })
                                    @if current == Some(u64::from(*minutes)) { " (current)" }
                                }
                                td { (format!("{per_day:.0}")) }
                                td { (format!("{:.0}", tokens * per_day)) }
                                td { @match dollars { Some(d) => (format!("${:.2}", d * per_day)), None => "unknown" } }
                                td { @match dollars { Some(d) => (format!("${:.2}", d * per_day * 30.0)), None => "unknown" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn number(value: &Value) -> String {
    match value {
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

pub async fn page(State(state): State<AppState>, user: WebUser) -> Response {
    let loaded = async {
        let auth = user.authorized::<AdminScope>()?;
        let settings =
            layout::response_value(crate::settings::get(State(state.clone()), auth).await).await?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let runs = layout::value(
            crate::patrol::list(
                State(state.clone()),
                auth,
                ApiQuery::new(RunsQuery { limit: Some(50) }),
            )
            .await,
        )?;
        let status = status(&state, &user).await?;
        Ok::<_, ApiError>((settings, runs, status))
    }
    .await;
    let (settings, runs, status) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let runs = runs["runs"].as_array().cloned().unwrap_or_default();
    let providers = settings["providers"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let triggers = &settings["alert_triggers"];
    let budgets = &settings["budgets"];
    let preflight = &settings["patrol_preflight"];
    let budget_checks: Vec<&Value> = status["readiness_checks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["id"].as_str().is_some_and(|id| id.contains("budget")))
        .collect();
    let body = html! {
        h1 { "Settings" }
        section class="panel" id="preflight" data-live {
            h2 { "Preflight" }
            p { "Result: " (badge(settings["preflight_state"].as_str().unwrap_or("not_run"))) }
            @if preflight.is_object() {
                dl class="facts" {
                    @for (key, value) in preflight.as_object().into_iter().flatten() {
                        @if !value.is_object() && !value.is_array() {
                            dt { (key.replace('_', " ")) }
                            dd { @if key.ends_with("_at") { (time(value)) } @else { (text(value)) } }
                        }
                    }
                }
            }
            @if user.can(Scope::AiExecute) {
                form method="post" action="/settings/preflight" {
                    (csrf(&user))
                    button type="submit" class="secondary" { "Run preflight again" }
                }
            }
        }
        form method="post" action="/settings" id="settings-form" {
            (csrf(&user))
            section class="panel" {
                h2 { "Model providers" }
                p class="hint" { "Keys are write-only: they are stored encrypted and never shown again. Leave a key empty to keep it." }
                div class="table-wrap" {
                    table {
                        thead { tr { th { "Provider" } th { "Key" } th { "New key" } th { "Clear" } } }
                        tbody {
                            @for (id, provider) in &providers {
                                tr {
                                    td { (id) }
                                    td {
                                        @if provider["configured"].as_bool() == Some(true) {
                                            (badge("configured")) " from " (text(&provider["key_source"]))
                                        } @else { "not set" }
                                    }
                                    td {
                                        label class="visually-hidden" for={"key-" (id)} { "New " (id) " key" }
                                        input type="password" id={"key-" (id)} name={"key." (id)} autocomplete="off" size="20";
                                    }
                                    td {
                                        @if provider["key_source"].as_str() == Some("settings") {
                                            label class="visually-hidden" for={"clear-" (id)} { "Clear the " (id) " key" }
                                            input type="checkbox" id={"clear-" (id)} name={"clear." (id)} value="yes";
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                p {
                    label for="patrol_model" { "Patrol model (provider:model)" }
                    input id="patrol_model" name="patrol_model" value=(settings["patrol_model"].as_str().unwrap_or("")) size="40";
                }
            }
            section class="panel" {
                h2 { "Cadence" }
                p {
                    label for="patrol_interval_minutes" { "Full patrol every (minutes)" }
                    input id="patrol_interval_minutes" name="patrol_interval_minutes" type="number" min="0"
                        value=(number(&settings["patrol_interval_minutes"]));
                }
                (cost_preview(&runs, settings["patrol_interval_minutes"].as_u64()))
            }
            section class="panel" {
                h2 { "Alert triggers" }
                input type="hidden" name="alert_triggers.present" value="1";
                p class="inline" {
                    input type="checkbox" id="triggers-enabled" name="alert_triggers.enabled" value="yes"
                        checked[triggers["enabled"].as_bool() == Some(true)];
                    " " label for="triggers-enabled" { "A firing alert starts a Patrol investigation of its resource" }
                }
                p {
                    label for="min-severity" { "Lowest alert level that triggers" }
                    select id="min-severity" name="alert_triggers.min_severity" {
                        @for level in ["warning", "critical"] {
                            option value=(level) selected[triggers["min_severity"].as_str() == Some(level)] { (level) }
                        }
                    }
                }
            }
            section class="panel" {
                h2 { "Budgets" }
                p class="hint" { "Empty means no limit. When a budget is used up Patrol pauses until it resets." }
                div class="grid" {
                    @for (field, label) in [("daily_usd", "Dollars a day"), ("monthly_usd", "Dollars a month"), ("daily_tokens", "Tokens a day"), ("monthly_tokens", "Tokens a month")] {
                        p {
                            label for={"budget-" (field)} { (label) }
                            input id={"budget-" (field)} name={"budgets." (field)} type="number" min="0" step="any"
                                value=(number(&budgets[field]));
                        }
                    }
                }
                @if !budget_checks.is_empty() {
                    ul id="budget-state" {
                        @for check in &budget_checks {
                            li { (badge(check["status"].as_str().unwrap_or("unknown"))) " " (text(&check["message"])) }
                        }
                    }
                }
                p { a href="/cost" { "Spend by day and run" } }
            }
            p { button type="submit" { "Save settings" } }
        }
    };
    layout::page(&user, "Settings", Nav::Settings, body)
}

/// The settings patch a submitted form asks for; only what the form holds is patched.
fn patch(form: &HashMap<String, String>) -> Result<Value, ApiError> {
    let invalid = |field: &str, why: &str| {
        ApiError::new(
            pulse_capabilities::ErrorCode::InvalidParameter,
            format!("{field}: {why}"),
        )
    };
    let mut patch = Map::new();
    let mut providers = Map::new();
    for (key, value) in form {
        if let Some(provider) = key.strip_prefix("key.") {
            if !value.trim().is_empty() {
                providers.insert(provider.to_owned(), json!({"api_key": value.trim()}));
            }
        } else if let Some(provider) = key.strip_prefix("clear.") {
            if value == "yes" {
                providers.insert(provider.to_owned(), json!({"api_key": null}));
            }
        }
    }
    if !providers.is_empty() {
        patch.insert("providers".to_owned(), Value::Object(providers));
    }
    if let Some(model) = form.get("patrol_model") {
        let model = model.trim();
        patch.insert(
            "patrol_model".to_owned(),
            if model.is_empty() {
                Value::Null
            } else {
                json!(model)
            },
        );
    }
    if let Some(minutes) = form.get("patrol_interval_minutes").map(|m| m.trim()) {
        if !minutes.is_empty() {
            let minutes: u64 = minutes
                .parse()
                .map_err(|_| invalid("patrol_interval_minutes", "a whole number of minutes"))?;
            patch.insert("patrol_interval_minutes".to_owned(), json!(minutes));
        }
    }
    if form.contains_key("alert_triggers.present") {
        let mut triggers = Map::new();
        triggers.insert(
            "enabled".to_owned(),
            json!(form.get("alert_triggers.enabled").map(String::as_str) == Some("yes")),
        );
        if let Some(level) = form.get("alert_triggers.min_severity") {
            triggers.insert("min_severity".to_owned(), json!(level));
        }
        patch.insert("alert_triggers".to_owned(), Value::Object(triggers));
    }
    let mut budgets = Map::new();
    for field in ["daily_usd", "monthly_usd", "daily_tokens", "monthly_tokens"] {
        if let Some(raw) = form.get(&format!("budgets.{field}")).map(|v| v.trim()) {
            let value = if raw.is_empty() {
                Value::Null
            } else if field.ends_with("_usd") {
                json!(
                    raw.parse::<f64>()
                        .map_err(|_| invalid(field, "a number of dollars"))?
                )
            } else {
                json!(
                    raw.parse::<u64>()
                        .map_err(|_| invalid(field, "a whole number of tokens"))?
                )
            };
            budgets.insert(field.to_owned(), value);
        }
    }
    if !budgets.is_empty() {
        patch.insert("budgets".to_owned(), Value::Object(budgets));
    }
    Ok(Value::Object(patch))
}

pub async fn save(
    State(state): State<AppState>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let CsrfForm { user, form } = form;
    let saved = async {
        let patch = patch(&form)?;
        save_settings(&state, &user, patch).await
    }
    .await;
    let flash = match saved {
        Ok(view) => Flash::ok(format!(
            "Settings saved (version {}).",
            text(&view["version"])
        )),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/settings", flash)
}

pub async fn preflight(
    State(state): State<AppState>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let user = form.user;
    let answer = async {
        let auth = user.authorized::<PatrolExecuteScope>()?;
        layout::value(crate::patrol::preflight(State(state.clone()), auth).await)
    }
    .await;
    let flash = match answer {
        Ok(result) => Flash::ok(format!(
            "Preflight finished: {}.",
            text(&result["preflight_state"])
        )),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/settings", flash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_form_patches_only_what_it_holds_and_keys_only_when_typed() {
        let patch = patch(&form(&[
            ("key.openai", ""),
            ("key.anthropic", " sk-ant "),
            ("clear.groq", "yes"),
            ("patrol_interval_minutes", "60"),
            ("alert_triggers.present", "1"),
            ("alert_triggers.min_severity", "warning"),
            ("budgets.daily_usd", "2.5"),
            ("budgets.monthly_tokens", ""),
        ]))
        .unwrap();
        assert_eq!(
            patch,
            json!({
                "providers": {"anthropic": {"api_key": "sk-ant"}, "groq": {"api_key": null}},
                "patrol_interval_minutes": 60,
                "alert_triggers": {"enabled": false, "min_severity": "warning"},
                "budgets": {"daily_usd": 2.5, "monthly_tokens": null},
            })
        );
        let err = patch_err(&[("budgets.daily_tokens", "many")]);
        assert!(err.message.starts_with("daily_tokens"), "{}", err.message);
    }

    fn patch_err(pairs: &[(&str, &str)]) -> ApiError {
        patch(&form(pairs)).expect_err("refused")
    }
}
