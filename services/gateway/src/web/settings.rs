//! Settings: providers (keys write-only), the models each provider lists (with a test per
//! model that saves nothing), the Patrol and chat model routes (offered from those lists, any
//! other route still typed freely), the preflight result and a button to re-run it, cadence
//! with a cost preview per schedule, alert triggers, budgets with their state, and the Proxmox
//! connections (`super::connections`).

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use pulse_api::models::{ModelCatalogue, ProviderTestBody};
use pulse_api::patrol::RunsQuery;
use pulse_api::settings::{KeySource, PreflightView};
use pulse_domain::Scope;
use pulse_domain::ai_settings::{
    AlertTriggersPatch, AutoSwitch, Budgets, BudgetsPatch, MinSeverity, PatchBody, ProviderPatch,
    default_base_url, is_dollar_amount, is_ollama,
};
use pulse_domain::patrol::run::PatrolRun;
use pulse_domain::patrol::status::ReadinessCheckId;

use super::layout::{self, Nav, at, badge, csrf, shown, wire_name};
use super::session::{CsrfForm, Flash, WebUser, redirect_with};
use crate::authorized::{AdminScope, MonitoringReadScope};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::patrol::PatrolExecuteScope;
use crate::state::AppState;

/// Cadences the cost preview is shown for, in minutes.
const PREVIEW_CADENCES: &[u32] = &[15, 60, 360, 1440];

/// What one full run costs on average, from the recent completed full runs: (runs measured,
/// mean tokens, mean dollars when every measured run had a price).
fn measured(runs: &[PatrolRun]) -> (usize, f64, Option<f64>) {
    let full: Vec<&PatrolRun> = runs
        .iter()
        .filter(|r| r.status.is_success())
        .filter(|r| r.effective_scope_resource_ids.is_empty())
        .take(20)
        .collect();
    if full.is_empty() {
        return (0, 0.0, None);
    }
    let n = full.len() as f64;
    let tokens = full
        .iter()
        .map(|r| (r.input_tokens + r.output_tokens) as f64)
        .sum::<f64>()
        / n;
    let dollars: Option<Vec<f64>> = full.iter().map(|r| r.cost_usd).collect();
    (
        full.len(),
        tokens,
        dollars.map(|d| d.iter().sum::<f64>() / n),
    )
}

fn cost_preview(runs: &[PatrolRun], current: Option<u32>) -> Markup {
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
                                    @if current == Some(*minutes) { " (current)" }
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

/// A budget the form sets: its form field, its label, and where it sits in the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Budget {
    DailyUsd,
    MonthlyUsd,
    DailyTokens,
    MonthlyTokens,
}

impl Budget {
    const ALL: [Budget; 4] = [
        Self::DailyUsd,
        Self::MonthlyUsd,
        Self::DailyTokens,
        Self::MonthlyTokens,
    ];

    /// The form field (after `budgets.`) and the input's id (after `budget-`).
    fn field(self) -> &'static str {
        match self {
            Self::DailyUsd => "daily_usd",
            Self::MonthlyUsd => "monthly_usd",
            Self::DailyTokens => "daily_tokens",
            Self::MonthlyTokens => "monthly_tokens",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::DailyUsd => "Dollars a day",
            Self::MonthlyUsd => "Dollars a month",
            Self::DailyTokens => "Tokens a day",
            Self::MonthlyTokens => "Tokens a month",
        }
    }

    /// The current limit as the input shows it (empty: no limit).
    fn shown(self, budgets: &Budgets) -> String {
        match self {
            Self::DailyUsd => budgets.daily_usd.clone().unwrap_or_default(),
            Self::MonthlyUsd => budgets.monthly_usd.clone().unwrap_or_default(),
            Self::DailyTokens => budgets
                .daily_tokens
                .map(|t| t.to_string())
                .unwrap_or_default(),
            Self::MonthlyTokens => budgets
                .monthly_tokens
                .map(|t| t.to_string())
                .unwrap_or_default(),
        }
    }

    /// Sets this budget in `patch` from the submitted text (empty: no limit).
    fn read(self, raw: &str, patch: &mut BudgetsPatch) -> Result<(), ApiError> {
        let field = self.field();
        match self {
            Self::DailyUsd | Self::MonthlyUsd => {
                let dollars = match raw {
                    "" => None,
                    raw if is_dollar_amount(raw) => Some(raw.to_owned()),
                    _ => return Err(invalid(field, "a number of dollars, like 12.50")),
                };
                match self {
                    Self::DailyUsd => patch.daily_usd = Some(dollars),
                    _ => patch.monthly_usd = Some(dollars),
                }
            }
            Self::DailyTokens | Self::MonthlyTokens => {
                let tokens = match raw {
                    "" => None,
                    raw => Some(
                        raw.parse::<u64>()
                            .map_err(|_| invalid(field, "a whole number of tokens"))?,
                    ),
                };
                match self {
                    Self::DailyTokens => patch.daily_tokens = Some(tokens),
                    _ => patch.monthly_tokens = Some(tokens),
                }
            }
        }
        Ok(())
    }
}

/// The last preflight's facts, as label and value.
fn preflight_facts(preflight: &PreflightView) -> Markup {
    let yes_no = |b: bool| if b { "true" } else { "false" };
    html! {
        dl class="facts" {
            dt { "route" } dd { (shown(Some(&preflight.route))) }
            dt { "model" } dd { (shown(Some(&preflight.model))) }
            dt { "ok" } dd { (yes_no(preflight.ok)) }
            dt { "tool call observed" } dd { (yes_no(preflight.tool_call_observed)) }
            @if preflight.tool_calls_recovered > 0 {
                dt { "tool calls recovered from text" } dd { (preflight.tool_calls_recovered) }
            }
            dt { "cause" } dd { (shown(preflight.cause.as_deref())) }
            dt { "summary" } dd { (shown(Some(&preflight.summary))) }
            dt { "recommendation" } dd { (shown(preflight.recommendation.as_deref())) }
            dt { "action" } dd { (shown(preflight.action.as_deref())) }
            dt { "checked at" } dd { (at(&preflight.checked_at)) }
            dt { "answer came" } dd { (shown(preflight.transport.map(|t| t.as_str()))) }
        }
    }
}

pub async fn page(State(state): State<AppState>, user: WebUser) -> Response {
    let loaded = async {
        let auth = user.authorized::<AdminScope>()?;
        let settings = crate::settings::current(&state, &auth).await?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let runs = layout::answer(
            crate::patrol::list(
                State(state.clone()),
                auth,
                ApiQuery::new(RunsQuery { limit: Some(50) }),
            )
            .await,
        )?;
        let auth = user.authorized::<MonitoringReadScope>()?;
        let status = layout::answer(crate::patrol::status(State(state.clone()), auth).await)?;
        // A model list that cannot be had (no model-runner) leaves the page usable: the model
        // fields still take any route.
        let catalogue = match user.authorized::<AdminScope>() {
            Ok(auth) => layout::answer(crate::models::catalogue(State(state.clone()), auth).await),
            Err(error) => Err(error),
        };
        let connections = match user.authorized::<MonitoringReadScope>() {
            Ok(auth) => crate::connections::listed(&state, &auth).await,
            Err(error) => Err(error),
        };
        Ok::<_, ApiError>((settings, runs.runs, status, catalogue, connections))
    }
    .await;
    let (settings, runs, status, catalogue, connections) = match loaded {
        Ok(loaded) => loaded,
        Err(error) => return layout::error_page(Some(&user), &error),
    };
    let triggers = &settings.alert_triggers;
    let budget_checks: Vec<_> = status
        .readiness_checks
        .iter()
        .filter(|c| c.id == ReadinessCheckId::Budget)
        .collect();
    let body = html! {
        h1 { "Settings" }
        section class="panel" id="preflight" data-live {
            h2 { "Preflight" }
            p { "Result: " (badge(&wire_name(&settings.preflight_state))) }
            @if let Some(preflight) = &settings.patrol_preflight {
                (preflight_facts(preflight))
            }
            @if user.can(Scope::AiExecute) {
                form method="post" action="/settings/preflight" {
                    (csrf(&user))
                    button type="submit" class="secondary" { "Run preflight again" }
                }
            }
        }
        (models_panel(&user, &catalogue))
        (super::connections::panel(&user, &connections))
        form method="post" action="/settings" id="settings-form" {
            (csrf(&user))
            section class="panel" {
                h2 { "Model providers" }
                p class="hint" { "Keys are write-only: they are stored encrypted and never shown again. Leave a key empty to keep it." }
                div class="table-wrap" {
                    table {
                        thead { tr { th { "Provider" } th { "Key" } th { "New key" } th { "Clear" } } }
                        tbody {
                            @for (id, provider) in &settings.providers {
                                tr {
                                    td { (id) }
                                    td {
                                        @if provider.configured {
                                            (badge("configured")) " from " (shown(provider.key_source.map(KeySource::as_str)))
                                        } @else { "not set" }
                                    }
                                    td {
                                        label class="visually-hidden" for={"key-" (id)} { "New " (id) " key" }
                                        input type="password" id={"key-" (id)} name={"key." (id)} autocomplete="off" size="20";
                                    }
                                    td {
                                        @if provider.key_source == Some(KeySource::Settings) {
                                            label class="visually-hidden" for={"clear-" (id)} { "Clear the " (id) " key" }
                                            input type="checkbox" id={"clear-" (id)} name={"clear." (id)} value="yes";
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                h3 { "Connection" }
                p class="hint" {
                    "An empty base URL is the provider's default. Streaming auto asks again without streaming when a server refuses a streamed request with tools. "
                    "Tool calls from text auto is on for model servers you run. An empty timeout is "
                    (pulse_domain::ai_settings::DEFAULT_REQUEST_TIMEOUT_SECONDS) " s."
                }
                div class="table-wrap" {
                    table id="provider-connections" {
                        thead { tr { th { "Provider" } th { "Base URL" } th { "Streaming" } th { "Tool calls from text" } th { "Timeout (s)" } } }
                        tbody {
                            @for (id, provider) in &settings.providers {
                                tr {
                                    td { (id) }
                                    td {
                                        (remembered(&format!("base_url.{id}"), provider.base_url.as_deref().unwrap_or("")))
                                        label class="visually-hidden" for={"base-url-" (id)} { (id) " base URL" }
                                        input id={"base-url-" (id)} name={"base_url." (id)} type="url" size="28"
                                            placeholder=(default_base_url(id).unwrap_or("required"))
                                            value=(provider.base_url.as_deref().unwrap_or(""));
                                    }
                                    td { (switch_select(&format!("streaming.{id}"), &format!("{id} streaming"), provider.options.streaming)) }
                                    td { (switch_select(&format!("tool_calls_from_text.{id}"), &format!("{id} tool calls from text"), provider.options.tool_calls_from_text)) }
                                    td {
                                        @let timeout = provider.options.request_timeout_seconds.map(|s| s.to_string()).unwrap_or_default();
                                        (remembered(&format!("request_timeout_seconds.{id}"), &timeout))
                                        label class="visually-hidden" for={"timeout-" (id)} { (id) " request timeout in seconds" }
                                        input id={"timeout-" (id)} name={"request_timeout_seconds." (id)} type="number" size="6"
                                            min=(pulse_domain::ai_settings::REQUEST_TIMEOUT_MIN_SECONDS)
                                            max=(pulse_domain::ai_settings::REQUEST_TIMEOUT_MAX_SECONDS)
                                            value=(timeout);
                                    }
                                }
                            }
                        }
                    }
                }
                @for (id, provider) in settings.providers.iter().filter(|(id, _)| is_ollama(id)) {
                    h3 { "Ollama (" (id) ")" }
                    div class="grid" {
                        p {
                            @let keep = provider.options.keep_alive.clone().unwrap_or_default();
                            (remembered(&format!("keep_alive.{id}"), &keep))
                            label for={"keep-alive-" (id)} { "Keep the model loaded for (10m; -1m: always; empty: server default)" }
                            input id={"keep-alive-" (id)} name={"keep_alive." (id)} size="8" value=(keep);
                        }
                        p {
                            @let ctx = provider.options.num_ctx.map(|n| n.to_string()).unwrap_or_default();
                            (remembered(&format!("num_ctx.{id}"), &ctx))
                            label for={"num-ctx-" (id)} { "Context window in tokens (empty: server default)" }
                            input id={"num-ctx-" (id)} name={"num_ctx." (id)} type="number" size="8"
                                min=(pulse_domain::ai_settings::NUM_CTX_MIN) max=(pulse_domain::ai_settings::NUM_CTX_MAX) value=(ctx);
                        }
                        p {
                            @let think = match provider.options.think { None => "", Some(true) => "on", Some(false) => "off" };
                            (remembered(&format!("think.{id}"), think))
                            label for={"think-" (id)} { "Thinking models think first" }
                            select id={"think-" (id)} name={"think." (id)} {
                                option value="" selected[think.is_empty()] { "server default" }
                                option value="on" selected[think == "on"] { "on" }
                                option value="off" selected[think == "off"] { "off" }
                            }
                        }
                    }
                }
                datalist id="catalogue-routes" {
                    @if let Ok(catalogue) = &catalogue {
                        @for route in catalogue.routes() { option value=(route) {} }
                    }
                }
                p {
                    label for="patrol_model" { "Patrol model (provider:model)" }
                    input id="patrol_model" name="patrol_model" list="catalogue-routes" autocomplete="off"
                        value=(settings.patrol_model.as_deref().unwrap_or("")) size="40";
                }
                p {
                    @let chat = settings.chat_model.as_deref().unwrap_or("");
                    (remembered("chat_model", chat))
                    label for="chat_model" { "Chat model (provider:model; empty: the default model)" }
                    input id="chat_model" name="chat_model" list="catalogue-routes" autocomplete="off"
                        value=(chat) size="40";
                }
                p class="hint" { "The lists offer the models your providers list; a route they lack can still be typed." }
            }
            section class="panel" {
                h2 { "Cadence" }
                p {
                    label for="patrol_interval_minutes" { "Full patrol every (minutes)" }
                    input id="patrol_interval_minutes" name="patrol_interval_minutes" type="number" min="0"
                        value=(settings.patrol_interval_minutes);
                }
                (cost_preview(&runs, Some(settings.patrol_interval_minutes)))
            }
            section class="panel" {
                h2 { "Alert triggers" }
                input type="hidden" name="alert_triggers.present" value="1";
                p class="inline" {
                    input type="checkbox" id="triggers-enabled" name="alert_triggers.enabled" value="yes"
                        checked[triggers.enabled];
                    " " label for="triggers-enabled" { "A firing alert starts a Patrol investigation of its resource" }
                }
                p {
                    label for="min-severity" { "Lowest alert level that triggers" }
                    select id="min-severity" name="alert_triggers.min_severity" {
                        @for level in MinSeverity::ALL {
                            option value=(level.as_str()) selected[triggers.min_severity == level] { (level.as_str()) }
                        }
                    }
                }
            }
            section class="panel" {
                h2 { "Budgets" }
                p class="hint" { "Empty means no limit. When a budget is used up Patrol pauses until it resets." }
                div class="grid" {
                    @for budget in Budget::ALL {
                        p {
                            label for={"budget-" (budget.field())} { (budget.label()) }
                            input id={"budget-" (budget.field())} name={"budgets." (budget.field())} type="number" min="0" step="any"
                                value=(budget.shown(&settings.budgets));
                        }
                    }
                }
                @if !budget_checks.is_empty() {
                    ul id="budget-state" {
                        @for check in &budget_checks {
                            li { (badge(check.status.as_str())) " " (shown(Some(&check.message))) }
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

/// One Test button: the preflight's model turn on `provider:model`, nothing saved.
fn test_button(user: &WebUser, provider: &str, model: &str) -> Markup {
    html! {
        form method="post" action="/settings/test" class="inline" {
            (csrf(user))
            input type="hidden" name="route" value={(provider) ":" (model)};
            button type="submit" class="secondary" aria-label={"Test " (provider) ":" (model)} { "Test" }
        }
    }
}

/// The models each provider lists, or its error and what to do; a Test per model and one for
/// any typed route.
fn models_panel(user: &WebUser, catalogue: &Result<ModelCatalogue, ApiError>) -> Markup {
    let can_test = user.can(Scope::AiExecute);
    html! {
        section class="panel" id="models" {
            h2 { "Models" }
            p class="hint" { "What each provider you use lists at its own model list. Test runs the preflight's one model turn on a model with that provider's settings; it saves nothing." }
            @match catalogue {
                Err(error) => p class="hint" id="models-unavailable" { "The model lists are unavailable: " (error.message) " (" (error.code.code()) ")" }
                Ok(catalogue) => {
                    @if catalogue.providers.is_empty() {
                        p class="hint" { "No provider is set up yet: give one an API key or a base URL below." }
                    }
                    @for provider in &catalogue.providers {
                        div class="provider-models" data-provider=(provider.provider) {
                            h3 { (provider.display_name) " (" (provider.provider) ")" }
                            @if let Some(error) = &provider.error {
                                p class="provider-error" {
                                    (badge(error.code.as_str())) " " (error.message) ". " (error.remedy) "."
                                }
                            } @else if provider.models.is_empty() {
                                p class="hint" { "The provider lists no models." }
                            } @else {
                                div class="table-wrap" {
                                    table class="catalogue" {
                                        thead { tr { th { "Route" } th { "Name" } th { "Context" } @if can_test { th { "Test" } } } }
                                        tbody {
                                            @for model in &provider.models {
                                                tr {
                                                    td { code { (model.route) } }
                                                    td { (shown(model.display_name.as_deref().or(model.details.as_deref()))) }
                                                    td { (shown(model.context_window.map(|n| n.to_string()).as_deref())) }
                                                    @if can_test { td { (test_button(user, &provider.provider, &model.id)) } }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if can_test {
                form method="post" action="/settings/test" id="test-route" {
                    (csrf(user))
                    label for="test-route-input" { "Test any route (provider:model)" }
                    input id="test-route-input" name="route" list="catalogue-routes" autocomplete="off" size="40";
                    " "
                    button type="submit" class="secondary" { "Test" }
                }
            }
        }
    }
}

/// `text` with a capital first letter, to stand as a sentence.
fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The flash a test answers with: the state, what happened and what to do.
fn test_flash(answer: &pulse_api::models::ProviderTestAnswer) -> Flash {
    let outcome = &answer.outcome;
    let mut text = format!(
        "Test of {}: {}. {}.",
        outcome.route,
        answer.state.as_str(),
        sentence(&outcome.summary)
    );
    if let Some(cause) = &outcome.cause {
        text.push_str(&format!(" Cause: {cause}."));
    }
    if let Some(recommendation) = &outcome.recommendation {
        text.push_str(&format!(" {}.", sentence(recommendation)));
    }
    if let Some(transport) = outcome.transport {
        text.push_str(&format!(" The answer came {}.", transport.as_str()));
    }
    text.push_str(" Nothing was saved.");
    Flash {
        ok: answer.state != pulse_domain::patrol::readiness::PreflightState::Failed,
        text,
    }
}

pub async fn test(
    State(state): State<AppState>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let CsrfForm { user, form } = form;
    let answer = async {
        let route = form.get("route").map(|r| r.trim()).unwrap_or_default();
        let Some((provider, model)) = route.split_once(':') else {
            return Err(invalid("route", "provider:model, like openai:gpt-4.1-mini"));
        };
        let auth = user.authorized::<PatrolExecuteScope>()?;
        let body = ProviderTestBody {
            model: model.to_owned(),
        };
        layout::answer(
            crate::models::test(
                State(state.clone()),
                auth,
                ApiPath::parse(provider.to_owned())?,
                ApiJson::new(body),
            )
            .await,
        )
    }
    .await;
    let flash = match answer {
        Ok(answer) => test_flash(&answer),
        Err(error) => Flash::error(&error),
    };
    redirect_with(&user.headers, "/settings", flash)
}

/// A hidden copy of a field's shown value, so a save patches only the fields the operator
/// changed.
fn remembered(name: &str, value: &str) -> Markup {
    html! { input type="hidden" name={"was." (name)} value=(value); }
}

/// A select of the three switch values for `name`, with its shown value remembered.
fn switch_select(name: &str, label: &str, current: AutoSwitch) -> Markup {
    let id = name.replace('.', "-");
    html! {
        (remembered(name, current.as_str()))
        label class="visually-hidden" for=(id) { (label) }
        select id=(id) name=(name) {
            @for value in AutoSwitch::ALL {
                option value=(value.as_str()) selected[value == current] { (value.as_str()) }
            }
        }
    }
}

/// The submitted value of `name` when it differs from the value the page showed (a field
/// without a remembered value counts as changed). Trimmed.
fn changed<'a>(form: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    let value = form.get(name)?.trim();
    match form.get(&format!("was.{name}")) {
        Some(was) if was.trim() == value => None,
        _ => Some(value),
    }
}

/// The provider fields of a form: each changed one, an empty one resetting to the default.
fn provider_options(form: &HashMap<String, String>, patch: &mut PatchBody) -> Result<(), ApiError> {
    let providers: Vec<String> = form
        .keys()
        .filter_map(|key| {
            [
                "base_url.",
                "streaming.",
                "tool_calls_from_text.",
                "request_timeout_seconds.",
                "keep_alive.",
                "num_ctx.",
                "think.",
            ]
            .iter()
            .find_map(|prefix| key.strip_prefix(prefix))
            .map(str::to_owned)
        })
        .collect();
    for id in providers {
        let text = |field: &str| {
            changed(form, &format!("{field}.{id}"))
                .map(|value| (!value.is_empty()).then(|| value.to_owned()))
        };
        let switch = |field: &str| -> Result<Option<Option<AutoSwitch>>, ApiError> {
            text(field)
                .map(|value| {
                    value
                        .map(|v| {
                            AutoSwitch::parse(&v).ok_or_else(|| {
                                invalid(&format!("providers.{id}.{field}"), "auto, on or off")
                            })
                        })
                        .transpose()
                })
                .transpose()
        };
        let number = |field: &str| -> Result<Option<Option<u32>>, ApiError> {
            text(field)
                .map(|value| {
                    value
                        .map(|v| {
                            v.parse::<u32>().map_err(|_| {
                                invalid(&format!("providers.{id}.{field}"), "a whole number")
                            })
                        })
                        .transpose()
                })
                .transpose()
        };
        let think = match text("think") {
            None => None,
            Some(None) => Some(None),
            Some(Some(v)) if v == "on" => Some(Some(true)),
            Some(Some(v)) if v == "off" => Some(Some(false)),
            Some(Some(_)) => {
                return Err(invalid(
                    &format!("providers.{id}.think"),
                    "on, off or empty",
                ));
            }
        };
        let options = ProviderPatch {
            base_url: text("base_url"),
            streaming: switch("streaming")?,
            tool_calls_from_text: switch("tool_calls_from_text")?,
            request_timeout_seconds: number("request_timeout_seconds")?,
            keep_alive: text("keep_alive"),
            num_ctx: number("num_ctx")?,
            think,
            api_key: None,
        };
        if options != ProviderPatch::default() {
            let entry = patch.providers.entry(id).or_default();
            entry.base_url = options.base_url;
            entry.streaming = options.streaming;
            entry.tool_calls_from_text = options.tool_calls_from_text;
            entry.request_timeout_seconds = options.request_timeout_seconds;
            entry.keep_alive = options.keep_alive;
            entry.num_ctx = options.num_ctx;
            entry.think = options.think;
        }
    }
    Ok(())
}

fn invalid(field: &str, why: &str) -> ApiError {
    ApiError::new(
        pulse_capabilities::ErrorCode::InvalidParameter,
        format!("{field}: {why}"),
    )
}

/// The settings patch a submitted form asks for; only what the form holds is patched.
fn patch(form: &HashMap<String, String>) -> Result<PatchBody, ApiError> {
    let mut patch = PatchBody::default();
    // A cleared key first, so a key typed in the same form wins.
    for (key, value) in form {
        if let Some(provider) = key.strip_prefix("clear.")
            && value == "yes"
        {
            patch
                .providers
                .entry(provider.to_owned())
                .or_default()
                .api_key = Some(None);
        }
    }
    for (key, value) in form {
        if let Some(provider) = key.strip_prefix("key.")
            && !value.trim().is_empty()
        {
            patch
                .providers
                .entry(provider.to_owned())
                .or_default()
                .api_key = Some(Some(value.trim().to_owned()));
        }
    }
    provider_options(form, &mut patch)?;
    if let Some(model) = form.get("patrol_model") {
        let model = model.trim();
        patch.patrol_model = Some((!model.is_empty()).then(|| model.to_owned()));
    }
    // Patched only when changed: a chat route from the configuration is not copied into the
    // tenant's settings by an unrelated save.
    if let Some(model) = changed(form, "chat_model") {
        patch.chat_model = Some((!model.is_empty()).then(|| model.to_owned()));
    }
    if let Some(minutes) = form.get("patrol_interval_minutes").map(|m| m.trim())
        && !minutes.is_empty()
    {
        let minutes: u32 = minutes
            .parse()
            .map_err(|_| invalid("patrol_interval_minutes", "a whole number of minutes"))?;
        patch.patrol_interval_minutes = Some(Some(minutes));
    }
    if form.contains_key("alert_triggers.present") {
        let min_severity = form
            .get("alert_triggers.min_severity")
            .map(|level| {
                MinSeverity::parse(level)
                    .ok_or_else(|| invalid("alert_triggers.min_severity", "warning or critical"))
            })
            .transpose()?;
        patch.alert_triggers = Some(AlertTriggersPatch {
            enabled: Some(Some(
                form.get("alert_triggers.enabled").map(String::as_str) == Some("yes"),
            )),
            min_severity: min_severity.map(Some),
            alert_types: None,
        });
    }
    let mut budgets = BudgetsPatch::default();
    let mut any_budget = false;
    for budget in Budget::ALL {
        if let Some(raw) = form.get(&format!("budgets.{}", budget.field())) {
            budget.read(raw.trim(), &mut budgets)?;
            any_budget = true;
        }
    }
    if any_budget {
        patch.budgets = Some(budgets);
    }
    Ok(patch)
}

pub async fn save(
    State(state): State<AppState>,
    form: CsrfForm<HashMap<String, String>>,
) -> Response {
    let CsrfForm { user, form } = form;
    let saved = async {
        let patch = crate::settings::typed_patch(&patch(&form)?)?;
        let auth = user.authorized::<AdminScope>()?;
        crate::settings::save(&state, &auth, None, patch).await
    }
    .await;
    let flash = match saved {
        Ok(view) => Flash::ok(format!("Settings saved (version {}).", view.version)),
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
        layout::answer(crate::patrol::preflight(State(state.clone()), auth).await)
    }
    .await;
    let flash = match answer {
        Ok(result) => Flash::ok(format!(
            "Preflight finished: {}.",
            shown(Some(result.preflight_state.as_str()))
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
    fn a_preflight_passed_through_a_recovered_call_says_so() {
        let mut view = PreflightView {
            route: "llamacpp:qwen2.5-coder-1.5b".to_owned(),
            model: "qwen2.5-coder-1.5b".to_owned(),
            ok: true,
            tool_call_observed: true,
            tool_calls_recovered: 0,
            cause: None,
            summary: "the model answered and called the preflight tool".to_owned(),
            recommendation: None,
            action: None,
            checked_at: chrono::Utc::now(),
            transport: None,
        };
        let native = preflight_facts(&view).into_string();
        assert!(!native.contains("recovered from text"), "{native}");
        view.tool_calls_recovered = 1;
        let recovered = preflight_facts(&view).into_string();
        assert!(
            recovered.contains("<dt>tool calls recovered from text</dt><dd>1</dd>"),
            "{recovered}"
        );
    }

    #[test]
    fn a_test_outcome_flashes_its_state_cause_and_remedy_and_says_nothing_was_saved() {
        let answer = |ok: bool| pulse_api::models::ProviderTestAnswer {
            provider: "openai".to_owned(),
            model: "sim:lazy".to_owned(),
            state: if ok {
                pulse_domain::patrol::readiness::PreflightState::Passed
            } else {
                pulse_domain::patrol::readiness::PreflightState::Failed
            },
            outcome: PreflightView {
                route: "openai:sim:lazy".to_owned(),
                model: "sim:lazy".to_owned(),
                ok,
                tool_call_observed: ok,
                tool_calls_recovered: 0,
                cause: (!ok).then(|| "no_tool_support".to_owned()),
                summary: "the model answered but did not call the preflight tool".to_owned(),
                recommendation: (!ok)
                    .then(|| "choose a model that supports tool calling".to_owned()),
                action: None,
                checked_at: chrono::Utc::now(),
                transport: Some(pulse_domain::patrol::readiness::TurnTransport::Streamed),
            },
        };
        let failed = test_flash(&answer(false));
        assert!(!failed.ok);
        assert!(
            failed
                .text
                .starts_with("Test of openai:sim:lazy: failed. The model answered"),
            "{}",
            failed.text
        );
        assert!(
            failed
                .text
                .contains("Cause: no_tool_support. Choose a model"),
            "{}",
            failed.text
        );
        assert!(
            failed.text.ends_with("Nothing was saved."),
            "{}",
            failed.text
        );
        assert!(test_flash(&answer(true)).ok);
    }

    #[test]
    fn the_chat_model_field_patches_the_chat_route_only_when_changed() {
        let body = patch(&form(&[("chat_model", " ollama:qwen3:8b ")])).unwrap();
        assert_eq!(body.chat_model, Some(Some("ollama:qwen3:8b".to_owned())));
        let cleared = patch(&form(&[("chat_model", ""), ("was.chat_model", "openai:x")])).unwrap();
        assert_eq!(cleared.chat_model, Some(None));
        let unchanged = patch(&form(&[
            ("chat_model", "openai:x"),
            ("was.chat_model", "openai:x"),
        ]))
        .unwrap();
        assert_eq!(unchanged.chat_model, None);
        assert_eq!(patch(&form(&[])).unwrap().chat_model, None);
    }

    #[test]
    fn a_form_patches_only_what_it_holds_and_keys_only_when_typed() {
        let body = patch(&form(&[
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
        let key = |api_key: Option<&str>| ProviderPatch {
            api_key: Some(api_key.map(str::to_owned)),
            ..ProviderPatch::default()
        };
        assert_eq!(
            body,
            PatchBody {
                providers: [
                    ("anthropic".to_owned(), key(Some("sk-ant"))),
                    ("groq".to_owned(), key(None)),
                ]
                .into(),
                patrol_interval_minutes: Some(Some(60)),
                alert_triggers: Some(AlertTriggersPatch {
                    enabled: Some(Some(false)),
                    min_severity: Some(Some(MinSeverity::Warning)),
                    alert_types: None,
                }),
                budgets: Some(BudgetsPatch {
                    daily_usd: Some(Some("2.5".to_owned())),
                    monthly_tokens: Some(None),
                    ..BudgetsPatch::default()
                }),
                ..PatchBody::default()
            }
        );
        // What the form builds is a patch the settings API accepts.
        let checked = crate::settings::typed_patch(&body).expect("a valid patch");
        assert_eq!(
            checked.changed_fields(),
            [
                "alert_triggers.enabled",
                "alert_triggers.min_severity",
                "budgets.daily_usd",
                "budgets.monthly_tokens",
                "patrol_interval_minutes",
                "providers.anthropic.api_key",
                "providers.groq.api_key",
            ]
        );
        let err = patch_err(&[("budgets.daily_tokens", "many")]);
        assert!(err.message.starts_with("daily_tokens"), "{}", err.message);
        let err = patch_err(&[("budgets.daily_usd", "-1")]);
        assert!(err.message.starts_with("daily_usd"), "{}", err.message);
        let err = patch_err(&[
            ("alert_triggers.present", "1"),
            ("alert_triggers.min_severity", "info"),
        ]);
        assert!(
            err.message.starts_with("alert_triggers.min_severity"),
            "{}",
            err.message
        );
    }

    #[test]
    fn provider_connection_fields_patch_only_what_changed() {
        let body = patch(&form(&[
            // Unchanged: shown and submitted alike.
            ("was.base_url.openai", ""),
            ("base_url.openai", ""),
            ("was.streaming.openai", "auto"),
            ("streaming.openai", "auto"),
            // Changed.
            ("was.base_url.ollama", ""),
            ("base_url.ollama", " http://127.0.0.1:11434 "),
            ("was.streaming.ollama", "auto"),
            ("streaming.ollama", "off"),
            ("was.request_timeout_seconds.ollama", ""),
            ("request_timeout_seconds.ollama", "900"),
            ("was.num_ctx.ollama", ""),
            ("num_ctx.ollama", "8192"),
            ("was.think.ollama", ""),
            ("think.ollama", "off"),
            // Emptied: back to the default.
            ("was.keep_alive.ollama", "10m"),
            ("keep_alive.ollama", ""),
            ("key.ollama", "local-key"),
        ]))
        .unwrap();
        assert!(!body.providers.contains_key("openai"), "{body:?}");
        let ollama = &body.providers["ollama"];
        assert_eq!(
            ollama.base_url,
            Some(Some("http://127.0.0.1:11434".to_owned()))
        );
        assert_eq!(ollama.streaming, Some(Some(AutoSwitch::Off)));
        assert_eq!(ollama.tool_calls_from_text, None);
        assert_eq!(ollama.request_timeout_seconds, Some(Some(900)));
        assert_eq!(ollama.num_ctx, Some(Some(8_192)));
        assert_eq!(ollama.think, Some(Some(false)));
        assert_eq!(ollama.keep_alive, Some(None));
        assert_eq!(ollama.api_key, Some(Some("local-key".to_owned())));
        let checked = crate::settings::typed_patch(&body).expect("a valid patch");
        assert_eq!(
            checked.changed_fields(),
            [
                "providers.ollama.api_key",
                "providers.ollama.base_url",
                "providers.ollama.keep_alive",
                "providers.ollama.num_ctx",
                "providers.ollama.request_timeout_seconds",
                "providers.ollama.streaming",
                "providers.ollama.think",
            ]
        );
        let err = patch_err(&[("streaming.openai", "sometimes")]);
        assert!(
            err.message.starts_with("providers.openai.streaming"),
            "{}",
            err.message
        );
        let err = patch_err(&[("request_timeout_seconds.openai", "soon")]);
        assert!(
            err.message
                .starts_with("providers.openai.request_timeout_seconds"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_typed_key_wins_over_clearing_it() {
        let body = patch(&form(&[("key.openai", "sk-new"), ("clear.openai", "yes")])).unwrap();
        assert_eq!(
            body.providers.get("openai").map(|p| p.api_key.clone()),
            Some(Some(Some("sk-new".to_owned())))
        );
    }

    #[test]
    fn the_cost_preview_measures_full_runs_that_ended_with_a_verdict() {
        use pulse_domain::patrol::run::{RunId, RunStatus, RunType, TriggerReason};
        let run = |status: RunStatus, scoped: bool, tokens: u64, cost: Option<f64>| {
            let mut run = PatrolRun::queued(
                RunId::from_uuid(uuid::Uuid::new_v4()),
                TriggerReason::Scheduled,
                RunType::Full,
                chrono::Utc::now(),
            );
            run.status = status;
            if scoped {
                run.effective_scope_resource_ids = vec!["host:h1".to_owned()];
            }
            run.input_tokens = tokens;
            run.output_tokens = tokens;
            run.cost_usd = cost;
            run
        };
        let runs = [
            run(RunStatus::Healthy, false, 100, Some(0.02)),
            run(RunStatus::IssuesFound, false, 300, Some(0.04)),
            run(RunStatus::Error, false, 5_000, Some(1.0)),
            run(RunStatus::Running, false, 5_000, Some(1.0)),
            run(RunStatus::Healthy, true, 5_000, Some(1.0)),
        ];
        let (count, tokens, dollars) = measured(&runs);
        assert_eq!(count, 2);
        assert!((tokens - 400.0).abs() < 1e-9, "{tokens}");
        assert!(
            dollars.is_some_and(|d| (d - 0.03).abs() < 1e-9),
            "{dollars:?}"
        );
        let unpriced = [run(RunStatus::Healthy, false, 100, None)];
        assert_eq!(measured(&unpriced).2, None);
        assert_eq!(measured(&[]).0, 0);
    }

    fn patch_err(pairs: &[(&str, &str)]) -> ApiError {
        patch(&form(pairs)).expect_err("refused")
    }
}
