//! Pulse Assistant latency through the real gateway and model-runner binaries with the provider
//! simulator answering at zero latency (`sim:lazy`: one text turn): the time from sending
//! `POST /api/ai/chat` to the `session` event (target p95 <= 50 ms) and to the first `content`
//! event (target p95 <= 100 ms), measured by the client, and the gateway's own time until it
//! answered (`Server-Timing`). Three phases:
//!
//! 1. one chat at a time;
//! 2. the same while 100 other chat sessions (another tenant) are open and streaming, each mid
//!    turn on a provider that went silent: 100 concurrent sessions held by the gateway and the
//!    runner;
//! 3. 100 chats started at the same instant (a burst: each its own session and turn).

use std::time::{Duration, Instant};

use pulse_domain::{Scope, TenantId};
use pulse_test_support::action_api::user_token;
use pulse_test_support::patrol::{openai_chat_route, save_settings, save_settings_as};
use pulse_test_support::provider_sim::{ProviderSim, Script};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::service::TestGateway;
use pulse_test_support::sse::SseReader;
use serde_json::json;

use crate::{BenchArgs, figure, quantile};

const BENCH: &str = "chat";
const SESSION_TARGET_MS: f64 = 50.0;
const CONTENT_TARGET_MS: f64 = 100.0;
const DEADLINE: Duration = Duration::from_secs(60);

/// Milliseconds from the request to the `session` event and to the first `content` event, and
/// the gateway's own time until it answered (`Server-Timing`).
async fn one_chat(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    prompt: &str,
) -> anyhow::Result<(f64, f64, f64)> {
    let started = Instant::now();
    let response = http
        .post(url)
        .bearer_auth(token)
        .json(&json!({"prompt": prompt}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == 200,
        "chat answered {}",
        response.status()
    );
    let server_ms = response
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').find_map(|p| p.trim().strip_prefix("dur=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    let mut reader = SseReader::new(response);
    let first = reader.next_frame(DEADLINE).await?;
    anyhow::ensure!(first.event == "session", "first event {}", first.event);
    let session_ms = started.elapsed().as_secs_f64() * 1000.0;
    loop {
        let frame = reader.next_frame(DEADLINE).await?;
        match frame.event.as_str() {
            "content" => break,
            "done" | "error" => anyhow::bail!("the turn ended without content: {}", frame.data),
            _ => {}
        }
    }
    let content_ms = started.elapsed().as_secs_f64() * 1000.0;
    // Read to the end, so the session is idle before the next measurement.
    loop {
        let frame = reader.next_frame(DEADLINE).await?;
        if frame.event == "done" || frame.event == "error" {
            break;
        }
    }
    Ok((session_ms, content_ms, server_ms))
}

fn report(phase: &str, mut session: Vec<f64>, mut content: Vec<f64>, mut server: Vec<f64>) {
    session.sort_by(f64::total_cmp);
    content.sort_by(f64::total_cmp);
    server.sort_by(f64::total_cmp);
    for (name, samples) in [
        ("session event", &session),
        ("first content", &content),
        ("gateway time to answer", &server),
    ] {
        figure(
            BENCH,
            &format!("{phase} {name} p50"),
            quantile(samples, 0.5),
            "ms",
        );
        figure(
            BENCH,
            &format!("{phase} {name} p95"),
            quantile(samples, 0.95),
            "ms",
        );
    }
    let (s95, c95) = (quantile(&session, 0.95), quantile(&content, 0.95));
    let verdict = |v: f64, t: f64| if v <= t { "met" } else { "NOT MET" };
    println!(
        "{BENCH:<8} {phase}: session p95 {s95:.2} ms (target <= {SESSION_TARGET_MS} ms: {}), \
         first content p95 {c95:.2} ms (target <= {CONTENT_TARGET_MS} ms: {})",
        verdict(s95, SESSION_TARGET_MS),
        verdict(c95, CONTENT_TARGET_MS)
    );
}

/// Opens a chat in `tenant`'s stalled route and returns its stream once the turn is running.
async fn open_stalled(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    i: usize,
) -> anyhow::Result<(SseReader, String)> {
    let response = http
        .post(url)
        .bearer_auth(token)
        .json(&json!({"prompt": format!("background question {i}")}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == 200,
        "chat answered {}",
        response.status()
    );
    let mut reader = SseReader::new(response);
    let first = reader.next_frame(DEADLINE).await?;
    let session = first.json()["session_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The turn runs once the runner said what it is doing.
    loop {
        let frame = reader.next_frame(DEADLINE).await?;
        match frame.event.as_str() {
            "workflow_state" if frame.data.contains("provider_start") => break,
            "done" | "error" => anyhow::bail!("a background turn ended: {}", frame.data),
            _ => {}
        }
    }
    Ok((reader, session))
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let sequential = if args.quick { 20 } else { 200 };
    let concurrent = if args.quick { 20 } else { 100 };
    let gw = TestGateway::start().await?;
    let sim = ProviderSim::start(Script::turns([])).await?;
    let runner = TestModelRunner::start(&gw, &gw.state_dir.join("runner"), &[]).await?;
    let result = async {
        save_settings(
            &gw,
            &openai_chat_route("sim:lazy", "sk-bench", &sim.openai_base_url()),
        )
        .await?;
        let token = user_token(
            gw.db.store(),
            &TenantId::default_tenant(),
            Some("bench"),
            &[Scope::AiChat],
        )
        .await?;
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(concurrent)
            .build()?;
        let url = gw.url("/api/ai/chat");
        // Warm up connections, prepared statements and the runner's policy cache.
        for i in 0..5 {
            one_chat(&http, &url, &token, &format!("warm-up {i}")).await?;
        }
        let (mut session, mut content, mut server) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..sequential {
            let (s, c, g) = one_chat(&http, &url, &token, &format!("question {i}")).await?;
            session.push(s);
            content.push(c);
            server.push(g);
        }
        report("one at a time", session, content, server);

        // 100 other sessions open and mid-turn (another tenant, a provider gone silent).
        let other = TenantId::new("bench-background")?;
        pulse_store::tenants::create(gw.db.store(), &other, "Background").await?;
        let other_admin =
            user_token(gw.db.store(), &other, Some("bg-admin"), &[Scope::Admin]).await?;
        save_settings_as(
            &gw,
            &other_admin,
            &openai_chat_route("sim:stall", "sk-bench", &sim.openai_base_url()),
        )
        .await?;
        let other_chat =
            user_token(gw.db.store(), &other, Some("bg-chat"), &[Scope::AiChat]).await?;
        let opened = futures::future::join_all((0..concurrent).map(|i| {
            let (http, url, token) = (http.clone(), url.clone(), other_chat.clone());
            async move { open_stalled(&http, &url, &token, i).await }
        }))
        .await;
        let mut background = Vec::new();
        for stream in opened {
            background.push(stream?);
        }
        figure(
            BENCH,
            "sessions open and streaming",
            background.len() as f64,
            "sessions",
        );
        let (mut session, mut content, mut server) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..sequential {
            let (s, c, g) = one_chat(&http, &url, &token, &format!("beside {i}")).await?;
            session.push(s);
            content.push(c);
            server.push(g);
        }
        report(
            &format!("beside {concurrent} open sessions"),
            session,
            content,
            server,
        );
        for (_, id) in &background {
            let stopped = http
                .post(gw.url(&format!("/api/ai/sessions/{id}/abort")))
                .bearer_auth(&other_chat)
                .send()
                .await?;
            anyhow::ensure!(stopped.status().is_success(), "abort: {}", stopped.status());
        }
        for (mut reader, _) in background {
            while let Ok(frame) = reader.next_frame(DEADLINE).await {
                if frame.event == "done" || frame.event == "error" {
                    break;
                }
            }
        }

        let chats = (0..concurrent).map(|i| {
            let (http, url, token) = (http.clone(), url.clone(), token.clone());
            tokio::spawn(async move {
                one_chat(&http, &url, &token, &format!("concurrent question {i}")).await
            })
        });
        let started = Instant::now();
        let (mut session, mut content, mut server) = (Vec::new(), Vec::new(), Vec::new());
        for chat in futures::future::join_all(chats).await {
            let (s, c, g) = chat??;
            session.push(s);
            content.push(c);
            server.push(g);
        }
        figure(
            BENCH,
            &format!("{concurrent} concurrent chats wall time"),
            started.elapsed().as_secs_f64() * 1000.0,
            "ms",
        );
        report(&format!("{concurrent} at once"), session, content, server);
        anyhow::Ok(())
    }
    .await;
    runner.stop().await?;
    drop(sim);
    gw.stop().await?;
    result
}
