//! `GET /api/ai/patrol/stream` end to end: the real gateway and patrol-scheduler, a real HTTP
//! client reading the SSE body as it arrives. Accepted runs arrive as `run.accepted` events with
//! ids; a client that reconnects with the last id it saw gets exactly the events it missed, once
//! and in order, and reconnecting never requests a run; a resume point the stream no longer
//! retains starts with a `gap` event; another tenant's stream sees none of these events; bad ids
//! and too many streams are refused with stable codes; a closed stream's consumer is deleted.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use pulse_domain::resource::ObservedResource;
use pulse_domain::{Scope, TenantId};
use pulse_store::tokens::{self, NewToken};
use pulse_test_support::patrol::select_keyless_model;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::seed::{self, service_resource};
use pulse_test_support::service::TestGateway;
use pulse_test_support::wait;
use serde_json::{Value, json};

/// Time for an accepted run's event to go through the outbox and JetStream on a loaded machine.
const EVENT_DEADLINE: Duration = Duration::from_secs(20);
/// A closed connection is noticed at the latest by the next keepalive write (15 s).
const CLOSE_DEADLINE: Duration = Duration::from_secs(40);
const STREAM_PATH: &str = "/api/ai/patrol/stream";
/// The gateway's default `gateway.max_streams_per_tenant`.
const MAX_STREAMS: usize = 16;

/// One SSE event as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    event: String,
    id: Option<String>,
    data: String,
}

impl Frame {
    fn sequence(&self) -> u64 {
        self.id
            .as_deref()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("frame without a numeric id: {self:?}"))
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

/// Reads SSE frames off a response body incrementally. Comment-only frames (keepalives) are
/// skipped; `data` lines are joined with `\n` as the SSE format says.
struct SseReader {
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
}

impl SseReader {
    fn new(response: reqwest::Response) -> Self {
        Self {
            body: response
                .bytes_stream()
                .map(|chunk| chunk.map(|b| b.to_vec()))
                .boxed(),
            buffer: String::new(),
        }
    }

    /// The next frame with an event, or an error when the body ends or `deadline` passes.
    async fn next_frame(&mut self, deadline: Duration) -> anyhow::Result<Frame> {
        tokio::time::timeout(deadline, async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    if let Some(frame) = parse_block(&block) {
                        return Ok(frame);
                    }
                }
                let chunk = self
                    .body
                    .next()
                    .await
                    .ok_or_else(|| anyhow::anyhow!("the event stream ended"))??;
                self.buffer
                    .push_str(&String::from_utf8(chunk)?.replace("\r\n", "\n"));
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("no event within {deadline:?}"))?
    }

    /// Frames up to and including the `run.accepted` event of `run_id`.
    async fn until_accepted(&mut self, run_id: &str) -> anyhow::Result<Vec<Frame>> {
        let mut frames = Vec::new();
        loop {
            let frame = self
                .next_frame(EVENT_DEADLINE)
                .await
                .map_err(|e| anyhow::anyhow!("{e} while waiting for {run_id}; got {frames:?}"))?;
            let done = frame.event == "run.accepted" && frame.json()["run_id"] == run_id;
            frames.push(frame);
            if done {
                return Ok(frames);
            }
        }
    }
}

fn parse_block(block: &str) -> Option<Frame> {
    let mut event = None;
    let mut id = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "id" => id = Some(value.to_owned()),
            "data" => data.push(value),
            _ => {}
        }
    }
    if event.is_none() && id.is_none() && data.is_empty() {
        return None;
    }
    Some(Frame {
        event: event.unwrap_or_else(|| "message".to_owned()),
        id,
        data: data.join("\n"),
    })
}

/// A client without the gateway client's total timeout, which would cut a long-lived body.
fn sse_client() -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?)
}

/// `GET /api/ai/patrol/stream` with an optional `Last-Event-ID` header and query string.
async fn open(
    http: &reqwest::Client,
    gateway: &TestGateway,
    token: &str,
    last_event_id: Option<&str>,
    query: &str,
) -> anyhow::Result<reqwest::Response> {
    let mut request = http
        .get(gateway.url(&format!("{STREAM_PATH}{query}")))
        .bearer_auth(token)
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    let response = tokio::time::timeout(Duration::from_secs(20), request.send()).await??;
    Ok(response)
}

async fn open_events(
    http: &reqwest::Client,
    gateway: &TestGateway,
    token: &str,
    last_event_id: Option<&str>,
) -> anyhow::Result<SseReader> {
    let response = open(http, gateway, token, last_event_id, "").await?;
    anyhow::ensure!(
        response.status() == 200,
        "stream answered {}: {}",
        response.status(),
        response.text().await.unwrap_or_default()
    );
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    Ok(SseReader::new(response))
}

/// The status and error code of a refused stream request.
async fn refused(response: reqwest::Response) -> anyhow::Result<(u16, String)> {
    let status = response.status().as_u16();
    let body: Value = response.json().await?;
    Ok((
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Gives `tenant` one service, as an agent's report would, so scoped runs have a scope (a full
/// run is accepted only while no other full run is queued).
async fn seed_service(gateway: &TestGateway, tenant: &TenantId) -> anyhow::Result<()> {
    let web = ObservedResource {
        restart_count: None,
        ..service_resource("web")
    };
    seed::seed_service(gateway.db.store(), tenant, "stream", web).await?;
    Ok(())
}

/// A run of every service requested with `token`; its run id.
async fn request_run(gateway: &TestGateway, token: &str) -> anyhow::Result<String> {
    let response = gateway
        .http
        .post(gateway.url("/api/ai/patrol/run"))
        .bearer_auth(token)
        .json(&json!({"resource_types": ["service"]}))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    anyhow::ensure!(status == 202, "run request answered {status} {body}");
    Ok(body["run_id"].as_str().unwrap_or_default().to_owned())
}

async fn run_count(gateway: &TestGateway, token: &str) -> anyhow::Result<usize> {
    let response = gateway
        .http
        .get(gateway.url("/api/ai/patrol/runs?limit=200"))
        .bearer_auth(token)
        .send()
        .await?;
    let body: Value = response.json().await?;
    body["runs"]
        .as_array()
        .map(Vec::len)
        .ok_or_else(|| anyhow::anyhow!("no runs in {body}"))
}

async fn events_stream(
    gateway: &TestGateway,
) -> anyhow::Result<async_nats::jetstream::stream::Stream> {
    let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let js = async_nats::jetstream::new(nats);
    let subjects = pulse_bus::Subjects::try_new(Some(&gateway.prefix))?;
    Ok(js.get_stream(subjects.events_stream()).await?)
}

/// Waits until the events stream has `count` consumers of event streams (other services may
/// hold consumers of their own on it).
async fn wait_consumers(gateway: &TestGateway, count: usize, what: &str) -> anyhow::Result<()> {
    let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let js = async_nats::jetstream::new(nats);
    let name = pulse_bus::Subjects::try_new(Some(&gateway.prefix))?.events_stream();
    wait::until(CLOSE_DEADLINE, what, || {
        let (js, name) = (js.clone(), name.clone());
        async move {
            let stream = js.get_stream(name).await.ok()?;
            let consumers: Vec<_> = stream.consumers().try_collect().await.ok()?;
            let open = consumers
                .iter()
                .filter(|c| {
                    c.config
                        .description
                        .as_deref()
                        .is_some_and(|d| d.starts_with("pulse patrol event stream"))
                })
                .count();
            (open == count).then_some(())
        }
    })
    .await
}

fn accepted_ids(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f.event == "run.accepted")
        .map(|f| f.json()["run_id"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Ids strictly increase across `frames`, every one after `after`.
fn assert_in_order_after(frames: &[Frame], after: u64) {
    let mut last = after;
    for frame in frames {
        let sequence = frame.sequence();
        assert!(sequence > last, "{sequence} after {last}: {frames:?}");
        last = sequence;
    }
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_gets_exactly_the_missed_events() -> anyhow::Result<()> {
    let gateway = TestGateway::start().await?;
    let scheduler =
        TestScheduler::start(&gateway, &gateway.state_dir.join("scheduler"), &[]).await?;
    let admin = gateway.admin_token.clone();
    let reader = gateway.create_token("reader", &["monitoring:read"]).await?;
    seed_service(&gateway, &TenantId::default_tenant()).await?;
    select_keyless_model(&gateway, &admin).await?;
    let http = sse_client()?;

    // Two runs while connected: two run.accepted events with increasing ids.
    let mut live = open_events(&http, &gateway, &reader, None).await?;
    let first = request_run(&gateway, &admin).await?;
    let second = request_run(&gateway, &admin).await?;
    let mut seen = live.until_accepted(&first).await?;
    seen.extend(live.until_accepted(&second).await?);
    assert_eq!(accepted_ids(&seen), vec![first.clone(), second.clone()]);
    assert_in_order_after(&seen, 0);
    let accepted = seen
        .iter()
        .find(|f| f.event == "run.accepted")
        .expect("accepted")
        .json();
    assert_eq!(accepted["type"], "scoped");
    assert_eq!(accepted["trigger_reason"], "manual");
    let last_id = seen.last().expect("frames").sequence();

    // Drop the connection: its consumer goes away.
    drop(live);
    wait_consumers(&gateway, 0, "the closed stream's consumer to be deleted").await?;

    // A run while disconnected, then resume from the last id seen.
    let missed = request_run(&gateway, &admin).await?;
    let runs_before = run_count(&gateway, &reader).await?;
    assert_eq!(runs_before, 3);
    let mut resumed = open_events(&http, &gateway, &reader, Some(&last_id.to_string())).await?;
    // The same resume through the query parameter, for clients that cannot set headers.
    let by_query = open(
        &http,
        &gateway,
        &reader,
        None,
        &format!("?last_event_id={last_id}"),
    )
    .await?;
    assert_eq!(by_query.status(), 200);
    let mut by_query = SseReader::new(by_query);
    let replayed = resumed.until_accepted(&missed).await?;
    assert_eq!(
        accepted_ids(&replayed),
        vec![missed.clone()],
        "{replayed:?}"
    );
    assert_in_order_after(&replayed, last_id);
    let replayed_by_query = by_query.until_accepted(&missed).await?;
    assert_eq!(replayed_by_query, replayed);
    // Opening and resuming streams requested no run.
    assert_eq!(run_count(&gateway, &reader).await?, runs_before);

    // The missed event came once: the next frames are the next run's, nothing repeated.
    let next = request_run(&gateway, &admin).await?;
    let after = resumed.until_accepted(&next).await?;
    assert_eq!(accepted_ids(&after), vec![next.clone()], "{after:?}");
    assert_in_order_after(&after, replayed.last().expect("frames").sequence());
    assert_eq!(run_count(&gateway, &reader).await?, runs_before + 1);
    drop(by_query);

    // Events no longer retained: the stream starts with a gap event, then goes on.
    let mut stream = events_stream(&gateway).await?;
    stream.purge().await?;
    let newest = stream.info().await?.state.last_sequence;
    let mut gapped = open_events(&http, &gateway, &reader, Some(&last_id.to_string())).await?;
    let gap = gapped.next_frame(EVENT_DEADLINE).await?;
    assert_eq!(gap.event, "gap", "{gap:?}");
    assert_eq!(gap.sequence(), newest, "{gap:?}");
    assert_eq!(gap.json()["last_event_id"], last_id.to_string());
    let later = request_run(&gateway, &admin).await?;
    let after_gap = gapped.until_accepted(&later).await?;
    assert_eq!(accepted_ids(&after_gap), vec![later]);
    assert_in_order_after(&after_gap, newest);

    // Malformed ids are refused before anything is opened.
    for bad in ["abc", "-1", "1.5", "18446744073709551616"] {
        let response = open(&http, &gateway, &reader, Some(bad), "").await?;
        assert_eq!(
            refused(response).await?,
            (400, "invalid_last_event_id".to_owned()),
            "{bad}"
        );
    }
    let response = open(&http, &gateway, &reader, None, "?last_event_id=x7").await?;
    assert_eq!(
        refused(response).await?,
        (400, "invalid_last_event_id".to_owned())
    );
    let agent_only = gateway.create_token("agent", &["agent:report"]).await?;
    let response = open(&http, &gateway, &agent_only, None, "").await?;
    assert_eq!(refused(response).await?, (403, "missing_scope".to_owned()));

    drop((resumed, gapped));
    wait_consumers(&gateway, 0, "every stream's consumer to be deleted").await?;
    scheduler.stop().await?;
    gateway.stop().await
}

#[tokio::test]
async fn another_tenants_stream_sees_none_of_these_events() -> anyhow::Result<()> {
    let gateway = TestGateway::start().await?;
    let scheduler =
        TestScheduler::start(&gateway, &gateway.state_dir.join("scheduler"), &[]).await?;
    let http = sse_client()?;
    let reader_a = gateway.create_token("reader", &["monitoring:read"]).await?;

    let tenant_b = TenantId::new(format!(
        "b{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    ))?;
    let store = gateway.db.store();
    pulse_store::tenants::create(store, &tenant_b, "Tenant B").await?;
    let tx = store.tenant_tx(&tenant_b).await?;
    let issue = |name: &str, scopes: &[Scope]| NewToken {
        name: name.to_owned(),
        scopes: scopes.iter().copied().collect::<BTreeSet<_>>(),
        expires_at: None,
        created_by: None,
    };
    let runner_b = tokens::issue(&tx, issue("runner-b", &[Scope::Admin, Scope::AiExecute])).await?;
    let reader_b = tokens::issue(&tx, issue("reader-b", &[Scope::MonitoringRead])).await?;
    tx.commit().await?;
    seed_service(&gateway, &TenantId::default_tenant()).await?;
    seed_service(&gateway, &tenant_b).await?;
    select_keyless_model(&gateway, &gateway.admin_token).await?;
    select_keyless_model(&gateway, runner_b.secret.expose()).await?;

    let mut stream_a = open_events(&http, &gateway, &reader_a, None).await?;
    let mut stream_b = open_events(&http, &gateway, reader_b.secret.expose(), None).await?;
    // A's run is in the events stream before B's, so B's consumer had the chance to see it.
    let run_a = request_run(&gateway, &gateway.admin_token).await?;
    let frames_a = stream_a.until_accepted(&run_a).await?;
    let sequence_a = frames_a.last().expect("frames").sequence();
    let run_b = request_run(&gateway, runner_b.secret.expose()).await?;
    let frames_b = stream_b.until_accepted(&run_b).await?;
    assert!(frames_b.last().expect("frames").sequence() > sequence_a);
    assert_eq!(accepted_ids(&frames_b), vec![run_b.clone()], "{frames_b:?}");
    assert!(
        frames_b.iter().all(|f| !f.data.contains(&run_a)),
        "{frames_b:?}"
    );
    // And A's stream does not get B's run: A's next event is its own next run.
    let run_a2 = request_run(&gateway, &gateway.admin_token).await?;
    let frames_a2 = stream_a.until_accepted(&run_a2).await?;
    assert_eq!(accepted_ids(&frames_a2), vec![run_a2], "{frames_a2:?}");
    assert!(
        frames_a2.iter().all(|f| !f.data.contains(&run_b)),
        "{frames_a2:?}"
    );
    // B resuming from before A's event still gets only its own.
    let mut resumed_b = open_events(
        &http,
        &gateway,
        reader_b.secret.expose(),
        Some(&(sequence_a - 1).to_string()),
    )
    .await?;
    let replayed_b = resumed_b.until_accepted(&run_b).await?;
    assert_eq!(accepted_ids(&replayed_b), vec![run_b], "{replayed_b:?}");

    drop((stream_a, stream_b, resumed_b));
    scheduler.stop().await?;
    gateway.stop().await
}

#[tokio::test]
async fn streams_per_tenant_are_bounded_and_freed_on_disconnect() -> anyhow::Result<()> {
    let gateway = TestGateway::start().await?;
    let http = sse_client()?;
    let reader = gateway.create_token("reader", &["monitoring:read"]).await?;
    let mut open_streams = Vec::new();
    for _ in 0..MAX_STREAMS {
        open_streams.push(open_events(&http, &gateway, &reader, None).await?);
    }
    wait_consumers(&gateway, MAX_STREAMS, "one consumer per open stream").await?;
    let response = open(&http, &gateway, &reader, None, "").await?;
    assert_eq!(
        refused(response).await?,
        (429, "too_many_streams".to_owned())
    );

    // Closing one frees its slot once the gateway notices the disconnect.
    open_streams.pop();
    let reopened = wait::until(CLOSE_DEADLINE, "a freed stream slot", || async {
        let response = open(&http, &gateway, &reader, None, "").await.ok()?;
        (response.status() == 200).then(|| SseReader::new(response))
    })
    .await?;
    drop(open_streams);
    wait_consumers(&gateway, 1, "the closed streams' consumers to be deleted").await?;

    // Shutting down ends the open stream instead of waiting on it forever.
    let mut last_open = reopened;
    gateway.stop().await?;
    let ended = last_open.next_frame(Duration::from_secs(10)).await;
    assert!(
        ended
            .as_ref()
            .is_err_and(|e| e.to_string().contains("ended")),
        "{ended:?}"
    );
    Ok(())
}
