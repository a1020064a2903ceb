//! JetStream setup: the JOBS, EVENTS and DLQ streams and the per-kind durable job consumers.
//! Everything here is idempotent and safe to run from several processes at once.

use std::time::Duration;

use async_nats::jetstream::{
    self, ErrorCode,
    consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
    context::CreateStreamErrorKind,
    stream::{self, DiscardPolicy, RetentionPolicy, StorageType},
};

use futures::TryStreamExt;

use crate::error::BusError;
use crate::subjects::{Subjects, check_token};

const MIB: i64 = 1024 * 1024;

/// Limits of the three streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    pub storage: StorageType,
    /// How long a `Nats-Msg-Id` is remembered (jobs, events and dead letters alike). The outbox
    /// relay's exactly-once publishing holds only while a crashed relay is replaced within it.
    pub duplicate_window: Duration,
    pub jobs_max_age: Duration,
    /// Jobs are never dropped to make room: past this size publishing fails instead.
    pub jobs_max_bytes: i64,
    pub events_max_age: Duration,
    pub events_max_bytes: i64,
    pub dlq_max_age: Duration,
    pub dlq_max_bytes: i64,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            storage: StorageType::File,
            duplicate_window: Duration::from_secs(120),
            jobs_max_age: Duration::from_secs(7 * 24 * 3600),
            jobs_max_bytes: 1024 * MIB,
            events_max_age: Duration::from_secs(7 * 24 * 3600),
            events_max_bytes: 1024 * MIB,
            dlq_max_age: Duration::from_secs(30 * 24 * 3600),
            dlq_max_bytes: 256 * MIB,
        }
    }
}

impl StreamSettings {
    /// Small limits for tests and benchmarks, which create many short-lived streams.
    pub fn small() -> Self {
        Self {
            jobs_max_age: Duration::from_secs(3600),
            jobs_max_bytes: 64 * MIB,
            events_max_age: Duration::from_secs(3600),
            events_max_bytes: 64 * MIB,
            dlq_max_age: Duration::from_secs(3600),
            dlq_max_bytes: 16 * MIB,
            ..Self::default()
        }
    }
}

/// The three stream configurations for `subjects`.
pub fn stream_configs(subjects: &Subjects, settings: &StreamSettings) -> [stream::Config; 3] {
    let jobs = stream::Config {
        name: subjects.jobs_stream(),
        description: Some("pulse durable jobs (work queue)".to_owned()),
        subjects: vec![subjects.jobs_wildcard()],
        retention: RetentionPolicy::WorkQueue,
        storage: settings.storage,
        max_age: settings.jobs_max_age,
        max_bytes: settings.jobs_max_bytes,
        discard: DiscardPolicy::New,
        duplicate_window: settings.duplicate_window,
        num_replicas: 1,
        ..Default::default()
    };
    let events = stream::Config {
        name: subjects.events_stream(),
        description: Some("pulse events (replayable)".to_owned()),
        subjects: vec![subjects.events_wildcard()],
        retention: RetentionPolicy::Limits,
        storage: settings.storage,
        max_age: settings.events_max_age,
        max_bytes: settings.events_max_bytes,
        discard: DiscardPolicy::Old,
        duplicate_window: settings.duplicate_window,
        num_replicas: 1,
        ..Default::default()
    };
    let dlq = stream::Config {
        name: subjects.dlq_stream(),
        description: Some("pulse dead-lettered jobs".to_owned()),
        subjects: vec![subjects.dlq_wildcard()],
        retention: RetentionPolicy::Limits,
        storage: settings.storage,
        max_age: settings.dlq_max_age,
        max_bytes: settings.dlq_max_bytes,
        discard: DiscardPolicy::Old,
        duplicate_window: settings.duplicate_window,
        num_replicas: 1,
        ..Default::default()
    };
    [jobs, events, dlq]
}

/// Creates or updates the JOBS, EVENTS and DLQ streams with the default limits.
pub async fn ensure_streams(js: &jetstream::Context, subjects: &Subjects) -> Result<(), BusError> {
    ensure_streams_with(js, subjects, &StreamSettings::default()).await
}

/// Creates or updates the JOBS, EVENTS and DLQ streams.
pub async fn ensure_streams_with(
    js: &jetstream::Context,
    subjects: &Subjects,
    settings: &StreamSettings,
) -> Result<(), BusError> {
    for config in stream_configs(subjects, settings) {
        ensure_stream(js, config).await?;
    }
    Ok(())
}

/// Update first (the common case at start-up), create when missing; a create that loses a race
/// with another process sees "name already in use" and goes round to the update again.
async fn ensure_stream(js: &jetstream::Context, config: stream::Config) -> Result<(), BusError> {
    const ATTEMPTS: usize = 5;
    let mut last_error = None;
    for attempt in 0..ATTEMPTS {
        match js.update_stream(&config).await {
            Ok(_) => return Ok(()),
            Err(err) if err.kind() == CreateStreamErrorKind::NotFound => {}
            Err(err) => return Err(BusError::nats("stream update", err)),
        }
        match js.create_stream(config.clone()).await {
            Ok(_) => return Ok(()),
            Err(err) => match err.kind() {
                CreateStreamErrorKind::JetStream(e)
                    if e.error_code() == ErrorCode::STREAM_NAME_EXIST =>
                {
                    tracing::debug!(stream = %config.name, attempt, "stream created concurrently, updating");
                    last_error = Some(err);
                }
                _ => return Err(BusError::nats("stream create", err)),
            },
        }
    }
    match last_error {
        Some(err) => Err(BusError::nats("stream create", err)),
        None => Err(BusError::nats(
            "stream create",
            std::io::Error::other("stream could not be created or updated"),
        )),
    }
}

/// Settings of the durable consumer of one job kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobConsumerConfig {
    /// How long a delivery may go without an ack or progress before it is redelivered.
    pub ack_wait: Duration,
    /// Deliveries before the job is dead-lettered (the worker does it on the last one).
    pub max_deliver: i64,
    /// Jobs handed out and not yet acked, across every worker of the kind.
    pub max_ack_pending: i64,
}

impl Default for JobConsumerConfig {
    fn default() -> Self {
        Self {
            ack_wait: Duration::from_secs(30),
            max_deliver: 5,
            max_ack_pending: 1000,
        }
    }
}

/// The consumer configuration for one job kind: durable `jobs-<kind>`, filter
/// `pulse.*.jobs.<kind>`, explicit acks.
pub fn job_consumer_config(
    subjects: &Subjects,
    kind: &str,
    config: &JobConsumerConfig,
) -> pull::Config {
    pull::Config {
        durable_name: Some(subjects.job_consumer(kind)),
        description: Some(format!("pulse {kind} jobs")),
        filter_subject: subjects.job_kind_filter(kind),
        ack_policy: AckPolicy::Explicit,
        deliver_policy: DeliverPolicy::All,
        ack_wait: config.ack_wait,
        max_deliver: config.max_deliver,
        max_ack_pending: config.max_ack_pending,
        ..Default::default()
    }
}

/// Creates (or updates) the durable pull consumer of one job kind on the JOBS stream.
pub async fn ensure_job_consumer(
    js: &jetstream::Context,
    subjects: &Subjects,
    kind: &str,
    config: &JobConsumerConfig,
) -> Result<PullConsumer, BusError> {
    check_token(kind)?;
    js.create_consumer_on_stream(
        job_consumer_config(subjects, kind, config),
        subjects.jobs_stream(),
    )
    .await
    .map_err(|err| BusError::nats("consumer create", err))
}

/// Deletes the streams of `subjects`: with a prefix, every stream whose name starts with
/// `<PREFIX>_`; without one, only the three pulse streams. Returns the names deleted. For test
/// clean-up and `pulsectl` resets; a missing stream is not an error.
pub async fn delete_streams(
    js: &jetstream::Context,
    subjects: &Subjects,
) -> Result<Vec<String>, BusError> {
    let names: Vec<String> = if subjects.prefix().is_some() {
        let prefix = subjects.stream_name_prefix();
        let all: Vec<String> = js
            .stream_names()
            .try_collect()
            .await
            .map_err(|err| BusError::nats("stream list", err))?;
        all.into_iter().filter(|n| n.starts_with(&prefix)).collect()
    } else {
        vec![
            subjects.jobs_stream(),
            subjects.events_stream(),
            subjects.dlq_stream(),
        ]
    };
    let mut deleted = Vec::new();
    for name in names {
        match js.delete_stream(&name).await {
            Ok(_) => deleted.push(name),
            Err(err) => match err.kind() {
                jetstream::context::DeleteStreamErrorKind::JetStream(e)
                    if e.error_code() == ErrorCode::STREAM_NOT_FOUND => {}
                _ => return Err(BusError::nats("stream delete", err)),
            },
        }
    }
    Ok(deleted)
}

/// Removes every message of `tenant` (`<prefix>pulse.<tenant>.>`) from the JOBS, EVENTS and DLQ
/// streams; returns how many were removed. A missing stream holds nothing. For tenant deletion.
pub async fn purge_tenant(
    js: &jetstream::Context,
    subjects: &Subjects,
    tenant: &pulse_domain::TenantId,
) -> Result<u64, BusError> {
    let filter = subjects.tenant_all(tenant);
    let mut purged = 0;
    for name in [
        subjects.jobs_stream(),
        subjects.events_stream(),
        subjects.dlq_stream(),
    ] {
        let stream = match js.get_stream(&name).await {
            Ok(stream) => stream,
            Err(err) => match err.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(e)
                    if e.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    continue;
                }
                _ => return Err(BusError::nats("stream info", err)),
            },
        };
        let response = stream
            .purge()
            .filter(filter.clone())
            .await
            .map_err(|err| BusError::nats("stream purge", err))?;
        purged += response.purged;
    }
    Ok(purged)
}
