//! Patrol readiness, pure part: what the settings, the route's key and the last preflight say
//! about each readiness check. The status route, the scheduler's admission and the runner all
//! evaluate readiness through [`assess`], then gate with
//! [`readiness_gate`](super::status::readiness_gate).
//!
//! A check fails only on what is known: no route, a missing required key, or a failed last
//! preflight of the same route (same `provider:model` and base URL). A configured route with no
//! preflight yet is not blocked; its tool-calling check is `not_assessed`. A rate-limited
//! preflight is a soft warning: the provider works, it was only busy. The last check, `budget`,
//! fails while a tenant spend budget is used up ([`super::budget::decide`]) and carries the
//! period boundary when it frees itself.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::budget::{self, BUDGET_SETTINGS_HINT, TenantBudgets, TenantSpend};
use super::status::{BlockedCause, CheckStatus, ReadinessCheck, ReadinessCheckId};
use crate::ai_settings::{AiSettings, ModelRoute};
use crate::connection::ConnectionState;

/// Where an operator fixes the Patrol provider and model.
pub const SETTINGS_HINT: &str = "fix the Patrol provider and model in the AI settings (PUT \
     /api/settings/ai), then run POST /api/ai/patrol/preflight";

/// Whether calling `provider` needs an API key, as the provider table says; an id the table does
/// not know needs one.
pub fn provider_needs_key(provider: &str) -> bool {
    pulse_providers::registry::lookup(provider).is_none_or(|entry| entry.needs_key())
}

/// The stored outcome of a tenant's last Patrol preflight. Safe fields only: no key, no raw
/// provider error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct PreflightRecord {
    /// The `provider:model` route checked.
    pub route: String,
    pub model: String,
    /// The provider base URL from the settings at the time; `None`: the provider's default.
    pub base_url: Option<String>,
    pub ok: bool,
    /// The model called the preflight tool: the only proof that tool calling works.
    pub tool_call_observed: bool,
    /// Calls the model wrote as text that Pulse took as tool calls: the preflight passed only
    /// because of that (absent in records written before it was counted).
    #[serde(default)]
    pub tool_calls_recovered: u32,
    /// The classified cause when not ok (`auth`, `quota`, `not_configured`, ...).
    pub cause: Option<String>,
    pub summary: String,
    pub recommendation: Option<String>,
    /// Where to fix it, when not ok.
    pub action: Option<String>,
    pub checked_at: DateTime<Utc>,
    /// How the model's answer came when it answered: streamed, or buffered because the route
    /// does not stream (its setting, or a server that refused a streamed request with tools).
    #[serde(default)]
    pub transport: Option<TurnTransport>,
}

/// How a model turn reached Pulse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TurnTransport {
    /// As a stream of events.
    Streamed,
    /// As one answer.
    Buffered,
}

impl TurnTransport {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Streamed => "streamed",
            Self::Buffered => "buffered",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Streamed, Self::Buffered]
            .into_iter()
            .find(|t| t.as_str() == text)
    }
}

/// The verdict of a preflight, for the settings view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PreflightState {
    /// The model answered and called the tool.
    Passed,
    /// Not proven, not known broken (the provider rate limited the check).
    Warning,
    Failed,
}

impl PreflightState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Warning => "warning",
            Self::Failed => "failed",
        }
    }
}

/// What a failed preflight's cause says, per check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finding {
    Fail(ReadinessCheckId, BlockedCause),
    Warn(ReadinessCheckId),
}

fn classify(cause: Option<&str>) -> Finding {
    use BlockedCause as C;
    use ReadinessCheckId as Id;
    match cause.unwrap_or("provider_error") {
        "rate_limit" => Finding::Warn(Id::Provider),
        "not_configured" => Finding::Fail(Id::Provider, C::ProviderNotConfigured),
        "auth" => Finding::Fail(Id::Provider, C::ProviderAuth),
        "quota" => Finding::Fail(Id::Provider, C::ProviderQuota),
        "model_not_found" | "context_window" => Finding::Fail(Id::Model, C::ModelNotSelected),
        "no_tool_support" | "tool_choice_rejected" => {
            Finding::Fail(Id::ToolCalling, C::ModelWithoutTools)
        }
        // connectivity, timeout, provider_error, malformed_response and anything newer.
        _ => Finding::Fail(Id::Provider, C::ProviderUnreachable),
    }
}

impl PreflightRecord {
    pub fn state(&self) -> PreflightState {
        if self.ok && self.tool_call_observed {
            PreflightState::Passed
        } else if !self.ok && matches!(classify(self.cause.as_deref()), Finding::Warn(_)) {
            PreflightState::Warning
        } else {
            PreflightState::Failed
        }
    }

    /// Whether this outcome is about `route` at `base_url` (the current settings).
    pub fn is_for(&self, route: &ModelRoute, base_url: Option<&str>) -> bool {
        self.route == route.to_string() && self.base_url.as_deref() == base_url
    }

    fn finding(&self) -> Option<Finding> {
        match (self.ok, self.tool_call_observed) {
            (true, true) => None,
            (true, false) => Some(Finding::Fail(
                ReadinessCheckId::ToolCalling,
                BlockedCause::ModelWithoutTools,
            )),
            (false, _) => Some(classify(self.cause.as_deref())),
        }
    }
}

/// "3m", "2h", "4d": how long ago, for check messages.
fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let seconds = (now - then).num_seconds().max(0);
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3_600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3_600),
        s => format!("{}d", s / 86_400),
    }
}

fn check(
    id: ReadinessCheckId,
    status: CheckStatus,
    message: impl Into<String>,
    cause: Option<BlockedCause>,
) -> ReadinessCheck {
    ReadinessCheck {
        id,
        status,
        message: message.into(),
        cause,
        resets_at: None,
    }
}

/// Every readiness check, in [`ReadinessCheckId::ALL`] order.
///
/// - `spend`: the tenant's ledger totals for the current UTC day and month; `None` when no
///   budget is set (nothing needs summing) or they were not read.
///
/// - `settings`: the tenant's effective settings; `None` when the stored document no longer
///   resolves.
/// - `has_key_for_route`: a key for the route's provider is stored or comes from config
///   (ignored for providers that need none).
/// - `preflight`: the last stored preflight; used only when it is for the current route and
///   base URL.
pub fn assess(
    settings: Option<&AiSettings>,
    has_key_for_route: bool,
    preflight: Option<&PreflightRecord>,
    spend: Option<&TenantSpend>,
    connections: &[ConnectionReading],
    now: DateTime<Utc>,
) -> Vec<ReadinessCheck> {
    let mut checks = route_checks(settings, has_key_for_route, preflight, now);
    checks.push(budget_check(settings, spend, now));
    checks.push(connections_check(connections));
    checks
}

/// A platform connection as the readiness check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionReading {
    pub name: String,
    pub state: ConnectionState,
    pub cause: Option<String>,
}

/// Whether every platform connection can be read. A connection that cannot (a refused token,
/// a certificate that changed, nothing answering) is a warning naming it: Patrol still runs,
/// but what the connection holds is not seen, and the status gives no health verdict. A
/// cluster without quorum is still read; a connection not checked yet is not counted.
pub fn connections_check(connections: &[ConnectionReading]) -> ReadinessCheck {
    let id = ReadinessCheckId::Connections;
    if connections.is_empty() {
        return check(
            id,
            CheckStatus::Pass,
            "no platform connection is set up",
            None,
        );
    }
    let unreadable: Vec<&ConnectionReading> = connections
        .iter()
        .filter(|c| !c.state.is_reading() && c.state != ConnectionState::Pending)
        .collect();
    if unreadable.is_empty() {
        return check(
            id,
            CheckStatus::Pass,
            format!(
                "all {} platform connection(s) can be read",
                connections.len()
            ),
            None,
        );
    }
    let named: Vec<String> = unreadable
        .iter()
        .map(|c| match &c.cause {
            Some(cause) => format!("{} ({}: {cause})", c.name, c.state),
            None => format!("{} ({})", c.name, c.state),
        })
        .collect();
    check(
        id,
        CheckStatus::Warning,
        format!(
            "{} of {} platform connection(s) cannot be read, so Patrol sees nothing of them: {}; \
             fix each and check it again (POST /api/connections/{{id}}/test)",
            unreadable.len(),
            connections.len(),
            named.join("; ")
        ),
        Some(BlockedCause::ConnectionUnreadable),
    )
}

/// The spend-budget check: fails while a budget is used up, with its reset time. The route's
/// own price is not known here; the model-runner checks it before each provider call.
pub fn budget_check(
    settings: Option<&AiSettings>,
    spend: Option<&TenantSpend>,
    now: DateTime<Utc>,
) -> ReadinessCheck {
    use CheckStatus::{Fail, NotAssessed, Pass};
    let id = ReadinessCheckId::Budget;
    let Some(settings) = settings else {
        return check(
            id,
            NotAssessed,
            "not assessed: the stored settings do not resolve",
            None,
        );
    };
    let budgets = match TenantBudgets::from_settings(&settings.budgets) {
        Ok(budgets) => budgets,
        Err(error) => {
            return check(
                id,
                Fail,
                format!("{error}; save the budgets again with {BUDGET_SETTINGS_HINT}"),
                Some(BlockedCause::ConfigurationIncomplete),
            );
        }
    };
    if budgets.is_unlimited() {
        return check(id, Pass, "no spend budget is set", None);
    }
    let Some(spend) = spend else {
        return check(
            id,
            NotAssessed,
            "not assessed: the cost ledger was not read",
            None,
        );
    };
    match budget::decide(&budgets, spend, now, None) {
        Ok(()) => check(
            id,
            Pass,
            format!(
                "within the spend budgets: {} tokens and {} USD of known price today, {} tokens \
                 this month",
                spend.day.tokens, spend.day.dollars.known, spend.month.tokens
            ),
            None,
        ),
        Err(refused) => ReadinessCheck {
            resets_at: Some(refused.resets_at),
            ..check(
                id,
                Fail,
                refused.message(),
                Some(BlockedCause::BudgetExceeded),
            )
        },
    }
}

/// The route checks (everything but the budget), in [`ReadinessCheckId::ALL`] order.
fn route_checks(
    settings: Option<&AiSettings>,
    has_key_for_route: bool,
    preflight: Option<&PreflightRecord>,
    now: DateTime<Utc>,
) -> Vec<ReadinessCheck> {
    use CheckStatus::{Fail, NotAssessed, Pass, Warning};
    use ReadinessCheckId as Id;

    let persistence = check(
        Id::SettingsPersistence,
        Pass,
        "the settings store is reachable",
        None,
    );
    let Some(settings) = settings else {
        let unknown = |id| {
            check(
                id,
                NotAssessed,
                "not assessed: the stored settings do not resolve",
                None,
            )
        };
        return vec![
            check(
                Id::Configuration,
                Fail,
                format!(
                    "the stored AI settings are invalid; save them again with PUT \
                     /api/settings/ai; {SETTINGS_HINT}"
                ),
                Some(BlockedCause::ConfigurationIncomplete),
            ),
            unknown(Id::Provider),
            unknown(Id::Model),
            persistence,
            unknown(Id::ToolCalling),
        ];
    };
    let configuration = check(
        Id::Configuration,
        Pass,
        format!(
            "Patrol mode {:?}, every {} minutes",
            settings.autonomy_level, settings.patrol_interval_minutes
        )
        .to_lowercase(),
        None,
    );
    let Some(route) = settings.patrol_route() else {
        return vec![
            configuration,
            check(
                Id::Provider,
                Fail,
                format!(
                    "no Patrol provider is selected: set patrol_model to provider:model; {SETTINGS_HINT}"
                ),
                Some(BlockedCause::ProviderNotConfigured),
            ),
            check(
                Id::Model,
                Fail,
                format!("no Patrol model is selected; {SETTINGS_HINT}"),
                Some(BlockedCause::ModelNotSelected),
            ),
            persistence,
            check(
                Id::ToolCalling,
                NotAssessed,
                "not assessed: no Patrol model is selected",
                None,
            ),
        ];
    };
    let provider = route.provider;
    let model = check(Id::Model, Pass, format!("Patrol uses {route}"), None);
    if provider_needs_key(provider) && !has_key_for_route {
        return vec![
            configuration,
            check(
                Id::Provider,
                Fail,
                format!("provider {provider} has no API key; {SETTINGS_HINT}"),
                Some(BlockedCause::ProviderNotConfigured),
            ),
            model,
            persistence,
            check(
                Id::ToolCalling,
                NotAssessed,
                "not assessed: the provider cannot be called without an API key",
                None,
            ),
        ];
    }
    let current = preflight.filter(|p| p.is_for(&route, settings.base_url(provider)));
    let Some(record) = current else {
        return vec![
            configuration,
            check(
                Id::Provider,
                Pass,
                format!("provider {provider} is configured; not verified by a preflight yet"),
                None,
            ),
            model,
            persistence,
            check(
                Id::ToolCalling,
                NotAssessed,
                format!(
                    "not assessed: no preflight of {route} yet; run POST /api/ai/patrol/preflight"
                ),
                None,
            ),
        ];
    };
    let when = format!("last preflight {} ago", age(now, record.checked_at));
    let failure = |what: &str| {
        let mut text = format!("{what} ({when}): {}", record.summary);
        if let Some(recommendation) = &record.recommendation {
            text.push_str(&format!("; {recommendation}"));
        }
        text.push_str(&format!("; {SETTINGS_HINT}"));
        text
    };
    let mut checks = vec![
        configuration,
        check(
            Id::Provider,
            Pass,
            format!("provider {provider} answered the {when}"),
            None,
        ),
        model,
        persistence,
        check(
            Id::ToolCalling,
            Pass,
            format!("{route} called the preflight tool ({when})"),
            None,
        ),
    ];
    match record.finding() {
        None => {}
        Some(Finding::Warn(id)) => {
            set(
                &mut checks,
                id,
                Warning,
                failure("the provider was busy"),
                None,
            );
            set(
                &mut checks,
                Id::ToolCalling,
                NotAssessed,
                format!("not assessed: the {when} did not reach the model"),
                None,
            );
        }
        Some(Finding::Fail(id, cause)) => {
            let what = match id {
                Id::ToolCalling => format!("{route} did not call the preflight tool"),
                Id::Model => format!("the provider refused model {}", route.model),
                _ => format!("provider {provider} failed the preflight"),
            };
            set(&mut checks, id, Fail, failure(&what), Some(cause));
            if id != Id::ToolCalling {
                set(
                    &mut checks,
                    Id::ToolCalling,
                    NotAssessed,
                    format!("not assessed: the {when} failed before a tool call"),
                    None,
                );
            }
        }
    }
    checks
}

fn set(
    checks: &mut [ReadinessCheck],
    id: ReadinessCheckId,
    status: CheckStatus,
    message: String,
    cause: Option<BlockedCause>,
) {
    if let Some(c) = checks.iter_mut().find(|c| c.id == id) {
        *c = check(id, status, message, cause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ai_settings::resolve;
    use crate::patrol::status::{Blocked, readiness_gate};
    use chrono::{Duration, TimeZone};
    use serde_json::json;

    fn t(minutes: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap() + Duration::minutes(minutes)
    }

    fn settings(document: serde_json::Value) -> AiSettings {
        resolve(&[&document]).unwrap()
    }

    fn openai() -> AiSettings {
        settings(json!({"patrol_model": "openai:gpt-4.1-mini"}))
    }

    fn record(ok: bool, tool: bool, cause: Option<&str>) -> PreflightRecord {
        PreflightRecord {
            route: "openai:gpt-4.1-mini".to_owned(),
            model: "gpt-4.1-mini".to_owned(),
            base_url: None,
            ok,
            tool_call_observed: tool,
            tool_calls_recovered: 0,
            cause: cause.map(str::to_owned),
            summary: "summary text".to_owned(),
            recommendation: Some("do the thing".to_owned()),
            action: None,
            checked_at: t(-5),
            transport: None,
        }
    }

    fn status_of(checks: &[ReadinessCheck], id: ReadinessCheckId) -> CheckStatus {
        checks.iter().find(|c| c.id == id).unwrap().status
    }

    fn blocked(checks: &[ReadinessCheck]) -> Blocked {
        readiness_gate(checks).expect_err("blocked")
    }

    #[test]
    fn every_outcome_has_all_checks_in_stable_order() {
        let s = openai();
        let r = record(false, false, Some("auth"));
        let cases = [
            assess(None, true, None, None, &[], t(0)),
            assess(Some(&settings(json!({}))), true, None, None, &[], t(0)),
            assess(Some(&s), false, None, None, &[], t(0)),
            assess(Some(&s), true, None, None, &[], t(0)),
            assess(Some(&s), true, Some(&r), None, &[], t(0)),
        ];
        for checks in cases {
            let ids: Vec<_> = checks.iter().map(|c| c.id).collect();
            assert_eq!(ids, ReadinessCheckId::ALL.to_vec());
        }
    }

    #[test]
    fn invalid_settings_block_on_configuration() {
        let checks = assess(None, true, None, None, &[], t(0));
        let b = blocked(&checks);
        assert_eq!(b.check, ReadinessCheckId::Configuration);
        assert_eq!(b.cause, BlockedCause::ConfigurationIncomplete);
        assert!(b.reason.contains("PUT /api/settings/ai"), "{}", b.reason);
    }

    #[test]
    fn no_route_blocks_as_provider_not_configured() {
        let checks = assess(Some(&settings(json!({}))), true, None, None, &[], t(0));
        let b = blocked(&checks);
        assert_eq!(b.cause, BlockedCause::ProviderNotConfigured);
        assert_eq!(
            status_of(&checks, ReadinessCheckId::Model),
            CheckStatus::Fail
        );
        assert!(b.reason.contains("POST /api/ai/patrol/preflight"));
    }

    #[test]
    fn a_required_key_that_is_missing_blocks() {
        let checks = assess(Some(&openai()), false, None, None, &[], t(0));
        let b = blocked(&checks);
        assert_eq!(b.check, ReadinessCheckId::Provider);
        assert_eq!(b.cause, BlockedCause::ProviderNotConfigured);
        assert!(b.reason.contains("openai has no API key"), "{}", b.reason);
    }

    #[test]
    fn keyless_providers_need_no_key() {
        assert!(!provider_needs_key("ollama"));
        assert!(provider_needs_key("anthropic"));
        let s = settings(json!({"patrol_model": "ollama:llama3.1:8b"}));
        let checks = assess(Some(&s), false, None, None, &[], t(0));
        assert!(readiness_gate(&checks).is_ok());
        assert_eq!(
            status_of(&checks, ReadinessCheckId::ToolCalling),
            CheckStatus::NotAssessed
        );
    }

    #[test]
    fn no_preflight_yet_does_not_block() {
        let checks = assess(Some(&openai()), true, None, None, &[], t(0));
        assert!(readiness_gate(&checks).is_ok());
        assert_eq!(
            status_of(&checks, ReadinessCheckId::ToolCalling),
            CheckStatus::NotAssessed
        );
        assert_eq!(
            status_of(&checks, ReadinessCheckId::Provider),
            CheckStatus::Pass
        );
    }

    #[test]
    fn a_passed_preflight_passes_every_check_and_names_its_age() {
        let r = record(true, true, None);
        assert_eq!(r.state(), PreflightState::Passed);
        let checks = assess(Some(&openai()), true, Some(&r), None, &[], t(0));
        assert!(
            checks.iter().all(|c| c.status == CheckStatus::Pass),
            "{checks:?}"
        );
        let tools = &checks[4];
        assert!(
            tools.message.contains("last preflight 5m ago"),
            "{}",
            tools.message
        );
    }

    #[test]
    fn failed_preflight_causes_map_to_checks_and_causes() {
        use BlockedCause as C;
        use ReadinessCheckId as Id;
        let cases = [
            ("auth", Id::Provider, C::ProviderAuth),
            ("quota", Id::Provider, C::ProviderQuota),
            ("not_configured", Id::Provider, C::ProviderNotConfigured),
            ("connectivity", Id::Provider, C::ProviderUnreachable),
            ("timeout", Id::Provider, C::ProviderUnreachable),
            ("provider_error", Id::Provider, C::ProviderUnreachable),
            ("malformed_response", Id::Provider, C::ProviderUnreachable),
            ("something_new", Id::Provider, C::ProviderUnreachable),
            ("model_not_found", Id::Model, C::ModelNotSelected),
            ("context_window", Id::Model, C::ModelNotSelected),
            ("no_tool_support", Id::ToolCalling, C::ModelWithoutTools),
            (
                "tool_choice_rejected",
                Id::ToolCalling,
                C::ModelWithoutTools,
            ),
        ];
        for (cause, id, expected) in cases {
            let r = record(false, false, Some(cause));
            assert_eq!(r.state(), PreflightState::Failed, "{cause}");
            let checks = assess(Some(&openai()), true, Some(&r), None, &[], t(0));
            let b = blocked(&checks);
            assert_eq!((b.check, b.cause), (id, expected), "{cause}");
            assert!(b.reason.contains("summary text"), "{cause}: {}", b.reason);
            assert!(b.reason.contains("do the thing"), "{cause}: {}", b.reason);
            assert!(b.reason.contains("last preflight 5m ago"), "{cause}");
            if id != Id::ToolCalling {
                assert_eq!(
                    status_of(&checks, Id::ToolCalling),
                    CheckStatus::NotAssessed
                );
            }
        }
        // A failure without a cause is still a failure.
        let checks = assess(
            Some(&openai()),
            true,
            Some(&record(false, false, None)),
            None,
            &[],
            t(0),
        );
        assert_eq!(blocked(&checks).cause, C::ProviderUnreachable);
    }

    #[test]
    fn an_answer_without_a_tool_call_blocks_tool_calling() {
        let r = record(true, false, None);
        assert_eq!(r.state(), PreflightState::Failed);
        let b = blocked(&assess(Some(&openai()), true, Some(&r), None, &[], t(0)));
        assert_eq!(b.check, ReadinessCheckId::ToolCalling);
        assert_eq!(b.cause, BlockedCause::ModelWithoutTools);
    }

    #[test]
    fn a_rate_limited_preflight_is_a_warning() {
        let r = record(false, false, Some("rate_limit"));
        assert_eq!(r.state(), PreflightState::Warning);
        let checks = assess(Some(&openai()), true, Some(&r), None, &[], t(0));
        assert!(readiness_gate(&checks).is_ok());
        assert_eq!(
            status_of(&checks, ReadinessCheckId::Provider),
            CheckStatus::Warning
        );
        assert_eq!(
            status_of(&checks, ReadinessCheckId::ToolCalling),
            CheckStatus::NotAssessed
        );
    }

    #[test]
    fn a_preflight_of_another_route_or_address_is_ignored() {
        let failed = record(false, false, Some("auth"));
        let other_model = settings(json!({"patrol_model": "openai:gpt-4.1"}));
        assert!(
            readiness_gate(&assess(
                Some(&other_model),
                true,
                Some(&failed),
                None,
                &[],
                t(0)
            ))
            .is_ok()
        );
        let moved = settings(json!({
            "patrol_model": "openai:gpt-4.1-mini",
            "providers": {"openai": {"base_url": "http://127.0.0.1:9/v1"}}
        }));
        let checks = assess(Some(&moved), true, Some(&failed), None, &[], t(0));
        assert!(readiness_gate(&checks).is_ok());
        let mut here = failed.clone();
        here.base_url = Some("http://127.0.0.1:9/v1".to_owned());
        assert!(readiness_gate(&assess(Some(&moved), true, Some(&here), None, &[], t(0))).is_err());
        // `model` is the fallback route when `patrol_model` is unset.
        let fallback = settings(json!({"model": "openai:gpt-4.1-mini"}));
        assert!(
            readiness_gate(&assess(
                Some(&fallback),
                true,
                Some(&failed),
                None,
                &[],
                t(0)
            ))
            .is_err()
        );
    }

    #[test]
    fn a_missing_key_outranks_a_stale_success() {
        let passed = record(true, true, None);
        let b = blocked(&assess(
            Some(&openai()),
            false,
            Some(&passed),
            None,
            &[],
            t(0),
        ));
        assert_eq!(b.cause, BlockedCause::ProviderNotConfigured);
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(age(t(0), t(0)), "0s");
        assert_eq!(age(t(0), t(-5)), "5m");
        assert_eq!(age(t(0), t(-180)), "3h");
        assert_eq!(age(t(0), t(-60 * 24 * 2)), "2d");
        // A clock that moved backwards does not print a negative age.
        assert_eq!(age(t(0), t(1)), "0s");
    }

    #[test]
    fn a_blocked_assessment_wire_shape() {
        let r = record(false, false, Some("auth"));
        insta::assert_json_snapshot!(
            "readiness_blocked_by_auth",
            assess(Some(&openai()), true, Some(&r), None, &[], t(0))
        );
    }

    #[test]
    fn the_record_round_trips_as_json() {
        let r = record(false, false, Some("auth"));
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<PreflightRecord>(&text).unwrap(), r);
    }

    #[test]
    fn a_used_up_budget_blocks_with_its_reset_time() {
        use crate::patrol::budget::{PeriodSpend, TenantSpend};
        let s = settings(json!({
            "patrol_model": "openai:gpt-4.1-mini",
            "budgets": {"daily_tokens": 1000}
        }));
        let spend = |tokens| TenantSpend {
            day: PeriodSpend {
                tokens,
                ..Default::default()
            },
            month: PeriodSpend {
                tokens,
                ..Default::default()
            },
        };
        let within = assess(Some(&s), true, None, Some(&spend(10)), &[], t(0));
        assert_eq!(
            status_of(&within, ReadinessCheckId::Budget),
            CheckStatus::Pass
        );
        assert!(readiness_gate(&within).is_ok());
        let over = assess(Some(&s), true, None, Some(&spend(1000)), &[], t(0));
        let b = blocked(&over);
        assert_eq!(b.check, ReadinessCheckId::Budget);
        assert_eq!(b.cause, BlockedCause::BudgetExceeded);
        let midnight = Utc.with_ymd_and_hms(2026, 3, 2, 0, 0, 0).unwrap();
        assert_eq!(b.resets_at, Some(midnight));
        assert!(b.reason.contains("2026-03-02T00:00:00Z"), "{}", b.reason);
        assert!(b.reason.contains("PUT /api/settings/ai"), "{}", b.reason);
        // A failing route check comes first in the stable order.
        let no_key = assess(Some(&s), false, None, Some(&spend(1000)), &[], t(0));
        assert_eq!(blocked(&no_key).check, ReadinessCheckId::Provider);
        // No budget set: nothing to sum, the check passes.
        let unlimited = assess(Some(&openai()), true, None, None, &[], t(0));
        assert_eq!(
            status_of(&unlimited, ReadinessCheckId::Budget),
            CheckStatus::Pass
        );
        // A budget set but the ledger not read: not assessed, not blocked.
        let unread = assess(Some(&s), true, None, None, &[], t(0));
        assert_eq!(
            status_of(&unread, ReadinessCheckId::Budget),
            CheckStatus::NotAssessed
        );
    }

    #[test]
    fn a_connection_that_cannot_be_read_is_a_warning_that_names_it() {
        let reading = |name: &str, state: ConnectionState, cause: Option<&str>| ConnectionReading {
            name: name.to_owned(),
            state,
            cause: cause.map(str::to_owned),
        };
        let none = connections_check(&[]);
        assert_eq!(none.status, CheckStatus::Pass);
        let fine = connections_check(&[
            reading("home", ConnectionState::Connected, None),
            reading("lab", ConnectionState::NoQuorum, Some("lost quorum")),
            reading("new", ConnectionState::Pending, None),
        ]);
        assert_eq!(fine.status, CheckStatus::Pass, "{}", fine.message);
        let warned = connections_check(&[
            reading("home", ConnectionState::Connected, None),
            reading(
                "lab",
                ConnectionState::AuthFailed,
                Some("the token was refused"),
            ),
        ]);
        assert_eq!(warned.status, CheckStatus::Warning);
        assert_eq!(warned.cause, Some(BlockedCause::ConnectionUnreadable));
        assert!(
            warned
                .message
                .starts_with("1 of 2 platform connection(s) cannot be read"),
            "{}",
            warned.message
        );
        assert!(
            warned
                .message
                .contains("lab (auth_failed: the token was refused)"),
            "{}",
            warned.message
        );
        // A warning never blocks the gate.
        assert!(super::super::status::readiness_gate(&[warned]).is_ok());
    }
}
