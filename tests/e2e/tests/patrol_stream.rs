//! `GET /api/ai/patrol/stream` end to end: the real gateway and patrol-scheduler, a real HTTP
//! client reading the SSE body as it arrives. Accepted runs arrive as `run.accepted` events with
//! ids; a client that reconnects with the last id it saw gets exactly the events it missed, once
//! and in order, and reconnecting never requests a run; a resume point the stream no longer
//! retains starts with a `gap` event; a resume point from before the gateway's tenant feed started
//! is read from JetStream; another tenant's stream sees none of these events; bad ids and too many
//! streams are refused with stable codes; a tenant's open streams share its one feed consumer.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::TryStreamExt;
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::resource::ObservedResource;
use pulse_domain::{Scope, TenantId};
use pulse_store::tokens::{self, NewToken};
use pulse_test_support::patrol::select_keyless_model;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::seed::{self, service_resource};
use pulse_test_support::service::TestGateway;
use pulse_test_support::sse::{self, Frame, SseReader};
use pulse_test_support::wait;
use serde_json::Value;

/// Time for an accepted run's event to go through the outbox and JetStream on a loaded machine.
const EVENT_DEADLINE: Duration = Duration::from_secs(20);
/// A closed connection is noticed at the latest by the next keepalive write (15 s).
const CLOSE_DEADLINE: Duration = Duration::from_secs(40);
const STREAM_PATH: &str = "/api/ai/patrol/stream";
/// The gateway's default `gateway.max_streams_per_tenant`.
const MAX_STREAMS: usize = 16;

/// Frames up to and including the `run.accepted` event of `run_id`.
async fn until_accepted(reader: &mut SseReader, run_id: &str) -> anyhow::Result<Vec<Frame>> {
    let mut frames = Vec::new();
    loop {
        let frame = reader
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
    let request = RawRunRequest {
        resource_types: Some(vec!["service".to_owned()]),
        ..RawRunRequest::default()
    };
    let accepted = gateway.client_as(token)?.run_patrol(&request).await?;
    Ok(accepted.accepted.run_id.to_string())
}

async fn run_count(gateway: &TestGateway, token: &str) -> anyhow::Result<usize> {
    let runs = gateway.client_as(token)?.patrol_runs(Some(200)).await?;
    Ok(runs.runs.len())
}

async fn events_stream(
    gateway: &TestGateway,
) -> anyhow::Result<async_nats::jetstream::stream::Stream> {
    let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let js = async_nats::jetstream::new(nats);
    let subjects = pulse_bus::Subjects::try_new(Some(&gateway.prefix))?;
    Ok(js.get_stream(subjects.events_stream()).await?)
}

/// The descriptions of the gateway's event-stream consumers on the events stream (other
/// services hold consumers of their own on it).
async fn stream_consumers(gateway: &TestGateway) -> anyhow::Result<Vec<String>> {
    let stream = events_stream(gateway).await?;
    let consumers: Vec<_> = stream.consumers().try_collect().await?;
    let mut descriptions: Vec<String> = consumers
        .into_iter()
        .filter_map(|c| c.config.description)
        .filter(|d| d.starts_with("pulse event "))
        .collect();
    descriptions.sort();
    Ok(descriptions)
}

/// Waits until the gateway's event-stream consumers are exactly `expected`.
async fn wait_consumers(
    gateway: &TestGateway,
    expected: &[String],
    within: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let result = wait::until(within, what, || async {
        let open = stream_consumers(gateway).await.ok()?;
        (open == expected).then_some(())
    })
    .await;
    result.map_err(|e| anyhow::anyhow!("{e}; expected {expected:?}"))
}

/// The one consumer of `tenant`'s feed, which every stream of the tenant on a gateway reads.
fn feed_consumer(tenant: &TenantId) -> String {
    format!("pulse event feed of {tenant}")
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
        let sequence = frame.sequence().expect("a numeric id");
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
    let http = sse::client()?;

    // Two runs while connected: two run.accepted events with increasing ids.
    let mut live = open_events(&http, &gateway, &reader, None).await?;
    let first = request_run(&gateway, &admin).await?;
    let second = request_run(&gateway, &admin).await?;
    let mut seen = until_accepted(&mut live, &first).await?;
    seen.extend(until_accepted(&mut live, &second).await?);
    assert_eq!(accepted_ids(&seen), vec![first.clone(), second.clone()]);
    assert_in_order_after(&seen, 0);
    let accepted = seen
        .iter()
        .find(|f| f.event == "run.accepted")
        .expect("accepted")
        .json();
    assert_eq!(accepted["type"], "scoped");
    assert_eq!(accepted["trigger_reason"], "manual");
    let last_id = seen.last().expect("frames").sequence()?;
    // The stream reads the tenant's feed: no consumer of its own.
    let tenant = TenantId::default_tenant();
    wait_consumers(
        &gateway,
        &[feed_consumer(&tenant)],
        EVENT_DEADLINE,
        "the tenant's feed consumer, and no other",
    )
    .await?;

    // Drop the connection.
    drop(live);

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
    let replayed = until_accepted(&mut resumed, &missed).await?;
    assert_eq!(
        accepted_ids(&replayed),
        vec![missed.clone()],
        "{replayed:?}"
    );
    assert_in_order_after(&replayed, last_id);
    let replayed_by_query = until_accepted(&mut by_query, &missed).await?;
    assert_eq!(replayed_by_query, replayed);
    // Opening and resuming streams requested no run.
    assert_eq!(run_count(&gateway, &reader).await?, runs_before);

    // The missed event came once: the next frames are the next run's, nothing repeated.
    let next = request_run(&gateway, &admin).await?;
    let after = until_accepted(&mut resumed, &next).await?;
    assert_eq!(accepted_ids(&after), vec![next.clone()], "{after:?}");
    assert_in_order_after(&after, replayed.last().expect("frames").sequence()?);
    assert_eq!(run_count(&gateway, &reader).await?, runs_before + 1);
    drop(by_query);

    // Events no longer retained: the stream starts with a gap event, then goes on.
    let mut stream = events_stream(&gateway).await?;
    stream.purge().await?;
    let newest = stream.info().await?.state.last_sequence;
    let mut gapped = open_events(&http, &gateway, &reader, Some(&last_id.to_string())).await?;
    let gap = gapped.next_frame(EVENT_DEADLINE).await?;
    assert_eq!(gap.event, "gap", "{gap:?}");
    assert_eq!(gap.sequence()?, newest, "{gap:?}");
    assert_eq!(gap.json()["last_event_id"], last_id.to_string());
    let later = request_run(&gateway, &admin).await?;
    let after_gap = until_accepted(&mut gapped, &later).await?;
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
    scheduler.stop().await?;
    gateway.stop().await
}

#[tokio::test]
async fn a_resume_from_before_the_feed_started_is_read_from_jetstream() -> anyhow::Result<()> {
    let gateway = TestGateway::start().await?;
    let scheduler =
        TestScheduler::start(&gateway, &gateway.state_dir.join("scheduler"), &[]).await?;
    let admin = gateway.admin_token.clone();
    let reader = gateway.create_token("reader", &["monitoring:read"]).await?;
    let tenant = TenantId::default_tenant();
    seed_service(&gateway, &tenant).await?;
    select_keyless_model(&gateway, &admin).await?;
    let http = sse::client()?;

    // A run accepted while no stream is open: its event is in JetStream before the gateway's
    // tenant feed exists, so the feed (which starts at the newest event) does not hold it.
    let early = request_run(&gateway, &admin).await?;
    let accepted_subject =
        pulse_bus::Subjects::try_new(Some(&gateway.prefix))?.event(&tenant, "run", "accepted");
    let stream = events_stream(&gateway).await?;
    wait::until(
        EVENT_DEADLINE,
        "the early run's event in JetStream",
        || async {
            let message = stream
                .get_last_raw_message_by_subject(&accepted_subject)
                .await
                .ok()?;
            String::from_utf8_lossy(&message.payload)
                .contains(&early)
                .then_some(())
        },
    )
    .await?;

    // Resuming from before it reads it from JetStream, in order, run events only.
    let mut resumed = open_events(&http, &gateway, &reader, Some("0")).await?;
    let replayed = until_accepted(&mut resumed, &early).await?;
    assert_in_order_after(&replayed, 0);
    assert!(
        replayed.iter().all(|f| f.event.starts_with("run.")),
        "{replayed:?}"
    );
    // The short-lived consumer that read it is gone once it caught up (well before the server
    // would expire it), and the feed's is the one left.
    wait_consumers(
        &gateway,
        &[feed_consumer(&tenant)],
        Duration::from_secs(15),
        "the resume consumer deleted, the feed's left",
    )
    .await?;

    // Then live, across the seam with nothing repeated.
    let next = request_run(&gateway, &admin).await?;
    let after = until_accepted(&mut resumed, &next).await?;
    assert_eq!(accepted_ids(&after), vec![next], "{after:?}");
    assert_in_order_after(&after, replayed.last().expect("frames").sequence()?);

    drop(resumed);
    scheduler.stop().await?;
    gateway.stop().await
}

#[tokio::test]
async fn another_tenants_stream_sees_none_of_these_events() -> anyhow::Result<()> {
    let gateway = TestGateway::start().await?;
    let scheduler =
        TestScheduler::start(&gateway, &gateway.state_dir.join("scheduler"), &[]).await?;
    let http = sse::client()?;
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
    let frames_a = until_accepted(&mut stream_a, &run_a).await?;
    let sequence_a = frames_a.last().expect("frames").sequence()?;
    let run_b = request_run(&gateway, runner_b.secret.expose()).await?;
    let frames_b = until_accepted(&mut stream_b, &run_b).await?;
    assert!(frames_b.last().expect("frames").sequence()? > sequence_a);
    assert_eq!(accepted_ids(&frames_b), vec![run_b.clone()], "{frames_b:?}");
    assert!(
        frames_b.iter().all(|f| !f.data.contains(&run_a)),
        "{frames_b:?}"
    );
    // And A's stream does not get B's run: A's next event is its own next run.
    let run_a2 = request_run(&gateway, &gateway.admin_token).await?;
    let frames_a2 = until_accepted(&mut stream_a, &run_a2).await?;
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
    let replayed_b = until_accepted(&mut resumed_b, &run_b).await?;
    assert_eq!(accepted_ids(&replayed_b), vec![run_b], "{replayed_b:?}");

    drop((stream_a, stream_b, resumed_b));
    scheduler.stop().await?;
    gateway.stop().await
}

#[tokio::test]
async fn streams_per_tenant_are_bounded_and_freed_on_disconnect() -> anyhow::Result<()> {
    let gateway = TestGateway::start().await?;
    let http = sse::client()?;
    let reader = gateway.create_token("reader", &["monitoring:read"]).await?;
    let mut open_streams = Vec::new();
    for _ in 0..MAX_STREAMS {
        open_streams.push(open_events(&http, &gateway, &reader, None).await?);
    }
    // However many streams, the tenant's events are read by one consumer.
    wait_consumers(
        &gateway,
        &[feed_consumer(&TenantId::default_tenant())],
        EVENT_DEADLINE,
        "one feed consumer for every open stream",
    )
    .await?;
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
