//! Per-request span (exported over OTLP when configured), request counters for `/metrics`, and
//! the server's own time in a `Server-Timing: app;dur=<ms>` header (time until the answer's
//! head is ready; for an event stream, until it opened).

use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tracing::Instrument as _;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

/// An error answer whose code its route does not declare (see `declared_errors`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UndeclaredLabels {
    pub method: String,
    pub route: String,
    pub code: String,
}

/// `pulse_http_requests_total{service="gateway",method,route,status}`.
#[derive(Clone, Default)]
pub struct HttpMetrics {
    pub requests: Family<RequestLabels, Counter>,
    /// `pulse_http_undeclared_errors_total{method,route,code}`: error answers whose code the
    /// route does not declare (see `declared_errors`); always zero in a correct build.
    pub undeclared_errors: Family<UndeclaredLabels, Counter>,
}

impl HttpMetrics {
    pub fn register(metrics: &pulse_telemetry::Metrics) -> Self {
        let this = Self::default();
        let requests = this.requests.clone();
        let undeclared = this.undeclared_errors.clone();
        metrics.register(|registry| {
            registry.register("http_requests", "HTTP requests answered", requests);
            registry.register(
                "http_undeclared_errors",
                "error answers with a code their route does not declare",
                undeclared,
            );
        });
        this
    }
}

pub async fn observe(State(metrics): State<HttpMetrics>, req: Request, next: Next) -> Response {
    let method = req.method().as_str().to_owned();
    // The route template, not the raw path: ids must not explode label cardinality.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format!("{method} {route}"),
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
    );
    let started = std::time::Instant::now();
    let mut response = next.run(req).instrument(span.clone()).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(value) = HeaderValue::from_str(&format!("app;dur={elapsed_ms:.2}")) {
        response.headers_mut().insert("server-timing", value);
    }
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    metrics
        .requests
        .get_or_create(&RequestLabels {
            method,
            route,
            status,
        })
        .inc();
    response
}
