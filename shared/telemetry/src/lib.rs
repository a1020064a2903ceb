//! Telemetry for every Pulse binary: structured logs (tracing), optional OpenTelemetry trace
//! export over OTLP/HTTP, and a Prometheus registry rendered at `/metrics`.

use std::sync::{Arc, Mutex};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use prometheus_client::registry::Registry;
use pulse_config::{LogFormat, TelemetryConfig};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("invalid log filter '{filter}': {reason}")]
    Filter { filter: String, reason: String },
    #[error("cannot build the OTLP exporter for {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Keeps the exporter alive; call [`TelemetryGuard::shutdown`] before exit to flush spans.
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// Flushes and stops trace export. The batch exporter blocks, so it runs off the runtime.
    pub async fn shutdown(mut self) {
        if let Some(provider) = self.provider.take() {
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(error) = provider.shutdown() {
                    eprintln!("telemetry: trace export shutdown failed: {error}");
                }
            })
            .await;
        }
    }
}

/// Installs the global subscriber for `service`. Logs go to stderr.
pub fn init(service: &str, config: &TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let filter = EnvFilter::try_new(&config.log_filter).map_err(|e| TelemetryError::Filter {
        filter: config.log_filter.clone(),
        reason: e.to_string(),
    })?;
    let provider = match &config.otel_endpoint {
        Some(endpoint) => Some(otlp_provider(service, endpoint)?),
        None => None,
    };
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let otel_layer = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer().with_tracer(provider.tracer(service.to_owned()))
    });
    let (text, json) = match config.log_format {
        LogFormat::Text => (
            Some(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_writer(std::io::stderr),
            ),
            None,
        ),
        LogFormat::Json => (
            None,
            Some(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            ),
        ),
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .with(otel_layer)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    Ok(TelemetryGuard { provider })
}

fn otlp_provider(service: &str, endpoint: &str) -> Result<SdkTracerProvider, TelemetryError> {
    use opentelemetry_otlp::WithExportConfig;
    let traces_url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url)
        .with_timeout(std::time::Duration::from_secs(5))
        .build()
        .map_err(|e| TelemetryError::Exporter {
            endpoint: endpoint.to_owned(),
            reason: e.to_string(),
        })?;
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build())
}

/// The process's Prometheus registry, shared by every component that exports metrics.
#[derive(Clone, Default)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
}

impl Metrics {
    pub fn new(service: &str) -> Self {
        let registry = Registry::with_prefix_and_labels(
            "pulse",
            [(
                std::borrow::Cow::Borrowed("service"),
                std::borrow::Cow::Owned(service.to_owned()),
            )]
            .into_iter(),
        );
        Self {
            registry: Arc::new(Mutex::new(registry)),
        }
    }

    /// Registers a metric; `f` gets the registry for the duration of the call.
    pub fn register<F: FnOnce(&mut Registry)>(&self, f: F) {
        let mut registry = match self.registry.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut registry);
    }

    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let registry = match self.registry.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn renders_registered_metrics_with_service_label() {
        let metrics = Metrics::new("verifier");
        let counter: Counter = Counter::default();
        metrics.register(|r| r.register("checks", "checks run", counter.clone()));
        counter.inc_by(3);
        let text = metrics.render();
        assert!(
            text.contains("pulse_checks_total{service=\"verifier\"} 3"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"));
    }

    #[test]
    fn bad_filter_is_a_clear_error() {
        let config = TelemetryConfig {
            log_filter: "info,[".to_owned(),
            log_format: LogFormat::Text,
            otel_endpoint: None,
        };
        let err = init("test", &config).err().expect("must fail");
        assert!(err.to_string().contains("invalid log filter"), "{err}");
    }
}
