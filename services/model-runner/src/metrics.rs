//! The model-runner's series for `/metrics`: every provider call (requests by outcome, input and
//! output tokens, priced cost, calls whose price is unknown, failures by class), counted where
//! the cost ledger takes the call ([`pulse_agent_loop::cost::LedgerUsageSink`], which is handed
//! these series as its [`CallMetrics`]), and the Patrol preflight
//! (checks by state and cause, and how many tenants this process last saw in each state).
//! Patrol runs that end here count into [`pulse_runtime::metrics::PatrolRunMetrics`]. Tool
//! calls a model wrote as text and the loop (or the preflight) recovered are counted by route:
//! a route that needs them has no working native tool calling.
//!
//! Labels are the surface (`patrol`, `investigation`, `chat`...), the provider id and the route
//! class: fixed sets named in code and in the provider table; never a tenant or a model name.
//!
//! Cached input tokens are the part of the input tokens the provider reported as read from its
//! prompt cache (`Usage::cached_input_tokens`); cache writes likewise. Both are zero on providers
//! that report no caching.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use pulse_domain::TenantId;
use pulse_domain::patrol::readiness::PreflightRecord;

use pulse_agent_loop::agent_loop::{CallOutcome, ProviderCallUsage};
use pulse_agent_loop::cost::CallMetrics;
use pulse_agent_loop::pricing::{Cost, cost_for_class};
use pulse_agent_loop::provider::FailureCause;
use pulse_agent_loop::registry::RouteClass;
use pulse_agent_loop::route::Route;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub surface: String,
    pub provider: &'static str,
    pub route_class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub surface: String,
    pub provider: &'static str,
    pub route_class: &'static str,
    /// `completed` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub provider: &'static str,
    /// The classified failure (`auth`, `rate_limit`, `timeout`...).
    pub class: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreflightLabels {
    /// `ready`, `no_tool_call` (answered without calling the tool) or `not_ready`.
    pub state: &'static str,
    /// The classified cause when not ready; empty otherwise.
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

/// `pulse_model_requests_total`, `pulse_model_input_tokens_total`,
/// `pulse_model_output_tokens_total`, `pulse_model_cached_input_tokens_total`,
/// `pulse_model_cache_write_input_tokens_total`, `pulse_model_cost_usd_total`,
/// `pulse_model_unpriced_requests_total`, `pulse_model_provider_failures_total`,
/// `pulse_model_tool_calls_recovered_total`, `pulse_patrol_preflights_total` and
/// `pulse_patrol_preflight_tenants`.
#[derive(Clone, Default)]
pub struct ModelMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub input_tokens: Family<CallLabels, Counter>,
    pub output_tokens: Family<CallLabels, Counter>,
    pub cached_input_tokens: Family<CallLabels, Counter>,
    pub cache_write_input_tokens: Family<CallLabels, Counter>,
    pub cost_usd: Family<CallLabels, Counter<f64>>,
    pub unpriced: Family<CallLabels, Counter>,
    pub failures: Family<FailureLabels, Counter>,
    pub tool_calls_recovered: Family<CallLabels, Counter>,
    pub preflights: Family<PreflightLabels, Counter>,
    pub preflight_tenants: Family<StateLabels, Gauge>,
    /// The state of each tenant's last preflight here, to count tenants by state.
    last_preflight: std::sync::Arc<Mutex<HashMap<TenantId, &'static str>>>,
}

/// Every classified provider failure.
const FAILURE_CLASSES: [FailureCause; 11] = [
    FailureCause::Auth,
    FailureCause::Quota,
    FailureCause::RateLimit,
    FailureCause::ContextWindow,
    FailureCause::ModelNotFound,
    FailureCause::NoToolSupport,
    FailureCause::ToolChoiceRejected,
    FailureCause::Connectivity,
    FailureCause::Timeout,
    FailureCause::MalformedResponse,
    FailureCause::ProviderError,
];

const PREFLIGHT_STATES: [&str; 3] = ["ready", "no_tool_call", "not_ready"];

impl ModelMetrics {
    /// The process's series (the usage sinks are built in many places; they all count here).
    pub fn shared() -> &'static Self {
        static METRICS: LazyLock<ModelMetrics> = LazyLock::new(ModelMetrics::default);
        &METRICS
    }

    /// Registers the process's series, and the Patrol run series, in `metrics`.
    pub fn register(metrics: &pulse_telemetry::Metrics) {
        let this = Self::shared().clone();
        metrics.register(|registry| {
            registry.register(
                "model_requests",
                "Provider calls, by surface, provider, route class and outcome",
                this.requests,
            );
            registry.register(
                "model_input_tokens",
                "Input tokens the providers reported",
                this.input_tokens,
            );
            registry.register(
                "model_output_tokens",
                "Output tokens the providers reported",
                this.output_tokens,
            );
            registry.register(
                "model_cached_input_tokens",
                "Input tokens the providers reported as read from their prompt cache",
                this.cached_input_tokens,
            );
            registry.register(
                "model_cache_write_input_tokens",
                "Input tokens the providers reported as written to their prompt cache",
                this.cache_write_input_tokens,
            );
            registry.register(
                "model_cost_usd",
                "Cost in US dollars of provider calls with a known price",
                this.cost_usd,
            );
            registry.register(
                "model_unpriced_requests",
                "Metered provider calls whose price is unknown (their cost is not in model_cost_usd)",
                this.unpriced,
            );
            registry.register(
                "model_provider_failures",
                "Provider calls that failed, by classified failure",
                this.failures,
            );
            registry.register(
                "model_tool_calls_recovered",
                "Tool calls the model wrote as text that Pulse turned into tool calls",
                this.tool_calls_recovered,
            );
            registry.register(
                "patrol_preflights",
                "Patrol preflights recorded, by resulting state and cause",
                this.preflights,
            );
            registry.register(
                "patrol_preflight_tenants",
                "Tenants by the state of their last preflight run by this process",
                this.preflight_tenants,
            );
        });
        pulse_runtime::metrics::PatrolRunMetrics::register(metrics);
    }
}

impl CallMetrics for ModelMetrics {
    fn tool_calls_recovered(
        &self,
        surface: &str,
        route: &Route,
        route_class: RouteClass,
        count: u32,
    ) {
        self.tool_calls_recovered
            .get_or_create(&CallLabels {
                surface: surface.to_owned(),
                provider: route.provider_id(),
                route_class: route_class.as_str(),
            })
            .inc_by(u64::from(count));
    }

    /// Counts one provider call of `surface`.
    fn call(&self, surface: &str, call: &ProviderCallUsage<'_>) {
        let provider = call.route.provider_id();
        let route_class = call.route_class.as_str();
        let outcome = match call.outcome {
            CallOutcome::Completed => "completed",
            CallOutcome::Failed(_) => "failed",
        };
        self.requests
            .get_or_create(&RequestLabels {
                surface: surface.to_owned(),
                provider,
                route_class,
                outcome,
            })
            .inc();
        // Every failure class of a provider in use at zero, so each series exists before its
        // first failure.
        for class in FAILURE_CLASSES {
            let _ = self.failures.get_or_create(&FailureLabels {
                provider,
                class: class.as_str(),
            });
        }
        match call.outcome {
            CallOutcome::Failed(cause) => {
                self.failures
                    .get_or_create(&FailureLabels {
                        provider,
                        class: cause.as_str(),
                    })
                    .inc();
            }
            CallOutcome::Completed => {
                let labels = CallLabels {
                    surface: surface.to_owned(),
                    provider,
                    route_class,
                };
                self.input_tokens
                    .get_or_create(&labels)
                    .inc_by(call.usage.input_tokens);
                self.output_tokens
                    .get_or_create(&labels)
                    .inc_by(call.usage.output_tokens);
                self.cached_input_tokens
                    .get_or_create(&labels)
                    .inc_by(call.usage.cached_input_tokens);
                self.cache_write_input_tokens
                    .get_or_create(&labels)
                    .inc_by(call.usage.cache_write_input_tokens);
                // Zero for a call without a known price: the series exists for every route in use.
                let cost = self.cost_usd.get_or_create(&labels);
                match cost_for_class(call.route, call.route_class, call.usage) {
                    Cost::Known(usd) => {
                        cost.inc_by(usd.as_f64());
                    }
                    Cost::Unknown => {
                        self.unpriced.get_or_create(&labels).inc();
                    }
                    Cost::NotMetered => {}
                }
            }
        }
    }
}

impl ModelMetrics {
    /// Counts a recorded preflight of `tenant`.
    pub fn preflight(&self, tenant: &TenantId, record: &PreflightRecord) {
        let state = match (record.ok, record.tool_call_observed) {
            (true, true) => "ready",
            (true, false) => "no_tool_call",
            (false, _) => "not_ready",
        };
        self.preflights
            .get_or_create(&PreflightLabels {
                state,
                cause: if record.ok {
                    String::new()
                } else {
                    record.cause.clone().unwrap_or_default()
                },
            })
            .inc();
        let mut last = match self.last_preflight.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        last.insert(tenant.clone(), state);
        for each in PREFLIGHT_STATES {
            let count = last.values().filter(|s| **s == each).count();
            self.preflight_tenants
                .get_or_create(&StateLabels { state: each })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}
