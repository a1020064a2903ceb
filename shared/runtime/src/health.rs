//! `/healthz` (process up), `/readyz` (NATS and Postgres reachable, schema current) and
//! `/metrics` (Prometheus text).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use pulse_store::Store;
use pulse_telemetry::Metrics;
use serde::Serialize;

/// What `/readyz` checks, and the last answer (the heartbeat reports it).
#[derive(Clone)]
pub struct Readiness {
    nats: async_nats::Client,
    store: Store,
    last: Arc<AtomicBool>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReadinessReport {
    pub ready: bool,
    pub nats: String,
    pub database: String,
}

impl Readiness {
    pub fn new(nats: async_nats::Client, store: Store) -> Self {
        Self {
            nats,
            store,
            last: Arc::new(AtomicBool::new(false)),
        }
    }

    pub async fn check(&self) -> ReadinessReport {
        let nats_ok = self.nats.connection_state() == async_nats::connection::State::Connected;
        let database =
            match tokio::time::timeout(Duration::from_secs(3), self.store.check_ready()).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timed out".to_owned()),
            };
        let ready = nats_ok && database.is_ok();
        self.last.store(ready, Ordering::Relaxed);
        ReadinessReport {
            ready,
            nats: if nats_ok {
                "ok".to_owned()
            } else {
                format!("{}", self.nats.connection_state())
            },
            database: database.err().unwrap_or_else(|| "ok".to_owned()),
        }
    }

    /// The result of the most recent check.
    pub fn last(&self) -> bool {
        self.last.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct HealthState {
    readiness: Readiness,
    metrics: Metrics,
}

/// The three operational routes, to serve alone or merge into a service's own router.
pub fn health_router(readiness: Readiness, metrics: Metrics) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(render_metrics))
        .with_state(HealthState { readiness, metrics })
}

async fn readyz(State(state): State<HealthState>) -> Response {
    let report = state.readiness.check().await;
    let status = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(report)).into_response()
}

async fn render_metrics(State(state): State<HealthState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
