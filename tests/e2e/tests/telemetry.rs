//! Operational surfaces of a real service binary: Prometheus `/metrics`, `/readyz`, and OTLP
//! trace export to a collector when `PULSE_OTEL_ENDPOINT` is set.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use pulse_test_support::db::TestDb;
use pulse_test_support::service::{ANY_PORT, ServiceProcess, scratch_dir};
use pulse_test_support::wait;

#[derive(Default, Clone)]
struct Received(Arc<Mutex<Vec<(String, usize)>>>);

#[tokio::test]
async fn gateway_exports_traces_and_metrics() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    // A minimal OTLP/HTTP receiver: records what the exporter posts.
    let received = Received::default();
    let sink = received.clone();
    let collector = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                sink.0.lock().unwrap().push((content_type, body.len()));
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let collector_addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, collector).await });

    let db = TestDb::create().await?;
    let state = scratch_dir("telemetry")?;
    let prefix = format!("tel{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let env = vec![
        ("PULSE_DATABASE_URL".to_owned(), db.owner_url().to_owned()),
        (
            "PULSE_NATS_URL".to_owned(),
            pulse_test_support::nats::nats_url(),
        ),
        ("PULSE_NATS__SUBJECT_PREFIX".to_owned(), prefix.clone()),
        ("PULSE_STATE_DIR".to_owned(), state.display().to_string()),
        ("PULSE_GATEWAY__LISTEN".to_owned(), ANY_PORT.to_owned()),
        (
            "PULSE_OTEL_ENDPOINT".to_owned(),
            format!("http://{collector_addr}"),
        ),
    ];
    let env = [env, pulse_test_support::service::small_streams_env()].concat();
    let mut gateway = ServiceProcess::spawn("pulse-gateway", &env, &state.join("gateway.log"))?;
    let http = reqwest::Client::new();
    let base = gateway.wait_base_url().await?;
    wait::until(Duration::from_secs(60), "gateway ready", || {
        let http = http.clone();
        let url = format!("{base}/readyz");
        async move {
            http.get(url)
                .send()
                .await
                .ok()?
                .status()
                .is_success()
                .then_some(())
        }
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", gateway.log_tail(30)))?;

    for _ in 0..3 {
        http.get(format!("{base}/api/tokens")).send().await?;
    }
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        metrics.contains("pulse_http_requests_total{service=\"gateway\",method=\"GET\",route=\"/api/tokens\",status=\"401\"} 3"),
        "{metrics}"
    );

    // Stopping flushes the batch exporter.
    let status = gateway.stop(Duration::from_secs(15)).await?;
    assert!(status.success(), "gateway exited with {status}");
    let posts = received.0.lock().unwrap().clone();
    assert!(!posts.is_empty(), "no OTLP export reached the collector");
    assert!(
        posts
            .iter()
            .all(|(ct, len)| ct == "application/x-protobuf" && *len > 0),
        "{posts:?}"
    );
    let _ = std::fs::remove_dir_all(state);
    pulse_test_support::service::delete_streams(&prefix).await?;
    db.cleanup().await
}
