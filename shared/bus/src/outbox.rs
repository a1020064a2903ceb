//! The transactional outbox: [`enqueue`] a message in the same transaction as the change it
//! announces; [`OutboxRelay`] publishes committed rows to JetStream and marks them published.
//!
//! Exactly-once publishing: the relay publishes each row with the row's `message_id` as
//! `Nats-Msg-Id` and marks it only after the stream acked it. A relay that dies between the ack
//! and the mark leaves the row unmarked; the next relay publishes it again and the stream drops
//! the copy as a duplicate, provided that happens within the stream's duplicate window (2 minutes
//! by default). Two relays can run at once: rows are claimed with `FOR UPDATE SKIP LOCKED`.
//!
//! No message lost to a reused id: a row's `message_id` is `outbox-<random UUID>`, fixed by the
//! database when the row is inserted. It is never derived from the row id, which restarts in
//! every database: two databases relaying to one NATS server (a second installation, a shard, a
//! database re-created or restored from a backup) would otherwise send the same ids within one
//! duplicate window, and the stream would drop one database's messages as copies of the other's.
//! See [`crate::message_id`] for every kind of message id the bus sends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::header::{HeaderName, HeaderValue};
use async_nats::jetstream;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use pulse_domain::TenantId;
use pulse_domain::backoff::Backoff;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_postgres::GenericClient;
use tokio_postgres::types::Type;
use tokio_util::sync::CancellationToken;

use crate::bus::js_publish;
use crate::envelope::{EnvelopeError, Message, check_header_value, headers, schema_header};
use crate::error::BusError;
use crate::subjects::{SubjectError, Subjects, check_publish_subject, check_token};
use crate::trace;

/// Why the outbox could not take or relay a message.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("outbox database error: {0}")]
    Db(#[from] tokio_postgres::Error),
    #[error("outbox pool error: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    #[error(transparent)]
    Subject(#[from] SubjectError),
    #[error("bad outbox header {name:?}")]
    BadHeader { name: String },
    #[error("schema version {0} does not fit the outbox")]
    BadSchema(u32),
}

/// One message waiting in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboxRow {
    pub tenant: TenantId,
    pub subject: String,
    pub message_type: String,
    pub schema: u32,
    /// Extra headers, e.g. `traceparent`. The relay adds `Nats-Msg-Id`, `Pulse-Type`,
    /// `Pulse-Schema` and `Pulse-Tenant` itself.
    pub headers: BTreeMap<String, String>,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

impl OutboxRow {
    /// A row for `msg` on `subject`, carrying the current trace context.
    pub fn new<M: Message>(
        tenant: &TenantId,
        subject: impl Into<String>,
        msg: &M,
    ) -> Result<Self, OutboxError> {
        let subject = subject.into();
        check_publish_subject(&subject)?;
        let payload = serde_json::to_value(msg).map_err(|source| EnvelopeError::Encode {
            message_type: M::TYPE,
            source,
        })?;
        let mut extra = BTreeMap::new();
        if let Some(tp) = trace::current_traceparent() {
            extra.insert(headers::TRACEPARENT.to_owned(), tp);
        }
        Ok(Self {
            tenant: tenant.clone(),
            subject,
            message_type: M::TYPE.to_owned(),
            schema: M::SCHEMA,
            headers: extra,
            payload,
            created_at: Utc::now(),
        })
    }

    /// A row for an event on `pulse.<tenant>.events.<domain>.<event>`.
    pub fn event<M: Message>(
        subjects: &Subjects,
        tenant: &TenantId,
        domain: &str,
        event: &str,
        msg: &M,
    ) -> Result<Self, OutboxError> {
        check_token(domain)?;
        Self::new(tenant, subjects.event(tenant, domain, event), msg)
    }

    /// A row for a job on `pulse.<tenant>.jobs.<kind>`.
    pub fn job<M: Message>(
        subjects: &Subjects,
        tenant: &TenantId,
        kind: &str,
        msg: &M,
    ) -> Result<Self, OutboxError> {
        check_token(kind)?;
        Self::new(tenant, subjects.job(tenant, kind), msg)
    }
}

/// Inserts `row` through `client`, normally the caller's open transaction, so the message is
/// published if and only if the transaction commits. Returns the row id. The row's message id is
/// chosen by the database at insert ([`crate::message_id`]); [`message_id_of`] reads it.
pub async fn enqueue<C: GenericClient>(client: &C, row: OutboxRow) -> Result<i64, OutboxError> {
    check_publish_subject(&row.subject)?;
    for (name, value) in &row.headers {
        header_pair(name, value)?;
    }
    let schema = i32::try_from(row.schema).map_err(|_| OutboxError::BadSchema(row.schema))?;
    let headers_json =
        serde_json::to_value(&row.headers).map_err(|source| EnvelopeError::Encode {
            message_type: "outbox headers",
            source,
        })?;
    // Typed parameters: one round trip, no separate prepare.
    let inserted = client
        .query_typed_one(
            "INSERT INTO outbox \
                (tenant_id, subject, message_type, schema_version, headers, payload, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) \
             RETURNING id",
            &[
                (&row.tenant.as_str(), Type::TEXT),
                (&row.subject, Type::TEXT),
                (&row.message_type, Type::TEXT),
                (&schema, Type::INT4),
                (&headers_json, Type::JSONB),
                (&row.payload, Type::JSONB),
                (&row.created_at, Type::TIMESTAMPTZ),
            ],
        )
        .await?;
    Ok(inserted.try_get(0)?)
}

/// The `Nats-Msg-Id` outbox row `id` is (or will be) published with; `None` when there is no
/// such row.
pub async fn message_id_of<C: GenericClient>(
    client: &C,
    id: i64,
) -> Result<Option<String>, OutboxError> {
    let row = client
        .query_typed_opt(
            "SELECT message_id FROM outbox WHERE id = $1",
            &[(&id, Type::INT8)],
        )
        .await?;
    Ok(row.map(|row| row.try_get(0)).transpose()?)
}

/// What waits in the outbox, every tenant together: rows not yet published (and not given up
/// as malformed), and the age of the oldest of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OutboxBacklog {
    pub pending: i64,
    /// Seconds since the oldest pending row was created; 0 when nothing is pending.
    pub oldest_age_seconds: f64,
}

/// The outbox's [`OutboxBacklog`], read over the relay's own index.
pub async fn backlog<C: GenericClient>(client: &C) -> Result<OutboxBacklog, OutboxError> {
    let row = client
        .query_one(
            "SELECT count(*), \
                    COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0) \
             FROM outbox WHERE published_at IS NULL AND failed_at IS NULL",
            &[],
        )
        .await?;
    Ok(OutboxBacklog {
        pending: row.try_get(0)?,
        oldest_age_seconds: row.try_get::<_, f64>(1)?.max(0.0),
    })
}

fn header_pair(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), OutboxError> {
    let bad = || OutboxError::BadHeader {
        name: name.to_owned(),
    };
    let header_name = HeaderName::try_from(name).map_err(|_| bad())?;
    check_header_value(value).map_err(|_| bad())?;
    let header_value: HeaderValue = value.parse().map_err(|_| bad())?;
    Ok((header_name, header_value))
}

/// Called after the stream acked row `id` and before the row is marked published. For tests
/// that crash the relay exactly there.
pub type AfterPublishHook = Arc<dyn Fn(i64) -> BoxFuture<'static, ()> + Send + Sync>;

/// Fault-injection seams of the relay.
#[derive(Clone, Default)]
pub struct RelayHooks {
    pub after_publish_ack: Option<AfterPublishHook>,
}

impl std::fmt::Debug for RelayHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayHooks")
            .field("after_publish_ack", &self.after_publish_ack.is_some())
            .finish()
    }
}

/// How the relay runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// Rows claimed per round.
    pub batch_size: i64,
    /// Wake-up interval when nothing notified the relay.
    pub interval: Duration,
    /// Upper bound of the pause after a failed round (the pauses grow from `interval`,
    /// jittered).
    pub max_backoff: Duration,
}

impl Default for RelayConfig {
    fn default() -> Self {
        Self {
            batch_size: 200,
            interval: Duration::from_millis(500),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// Publishes committed outbox rows to JetStream.
#[derive(Debug, Clone)]
pub struct OutboxRelay {
    pool: deadpool_postgres::Pool,
    js: jetstream::Context,
    config: RelayConfig,
    notify: Option<Arc<Notify>>,
    hooks: RelayHooks,
}

impl OutboxRelay {
    pub fn new(pool: deadpool_postgres::Pool, js: jetstream::Context, config: RelayConfig) -> Self {
        Self {
            pool,
            js,
            config,
            notify: None,
            hooks: RelayHooks::default(),
        }
    }

    /// Also wake up when `notify` is notified (e.g. by the writer after its commit).
    pub fn with_notify(mut self, notify: Arc<Notify>) -> Self {
        self.notify = Some(notify);
        self
    }

    pub fn with_hooks(mut self, hooks: RelayHooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Relays until `shutdown` is cancelled. A failed round is logged and retried after a
    /// bounded, jittered backoff.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new(self.config.interval, self.config.max_backoff);
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let pause = match self.relay_batch().await {
                Ok(n) if n as i64 >= self.config.batch_size => {
                    backoff.reset();
                    continue;
                }
                Ok(_) => {
                    backoff.reset();
                    self.config.interval
                }
                Err(err) => {
                    let pause = backoff.next_delay();
                    tracing::warn!(error = %err, failures = backoff.attempts(), pause_ms = pause.as_millis() as u64, "outbox relay round failed");
                    pause
                }
            };
            let failing = backoff.attempts() > 0;
            let notified = async {
                match &self.notify {
                    Some(n) => n.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = notified, if !failing => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One round: claims up to `batch_size` unpublished rows in id order, publishes each and
    /// awaits its ack, then marks them published in the same transaction. Returns how many rows
    /// were published. Stops at the first publish error, keeping the rows acked before it.
    pub async fn relay_batch(&self) -> Result<usize, OutboxError> {
        let mut conn = self.pool.get().await?;
        let tx = conn.transaction().await?;
        let rows = tx
            .query(
                "SELECT id, message_id, tenant_id, subject, message_type, schema_version, headers, payload \
                 FROM outbox \
                 WHERE published_at IS NULL AND failed_at IS NULL \
                 ORDER BY id \
                 LIMIT $1 \
                 FOR UPDATE SKIP LOCKED",
                &[&self.config.batch_size],
            )
            .await?;
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(0);
        }

        let mut published = Vec::with_capacity(rows.len());
        let mut failed: Vec<(i64, String)> = Vec::new();
        let mut error = None;
        // Send every publish first, then await the acks: one round trip for the batch.
        let mut pending = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: i64 = row.try_get("id")?;
            match build_message(row) {
                Ok((subject, headers, body)) => pending.push((id, subject, headers, body)),
                Err(err) => {
                    tracing::error!(outbox_id = id, error = %err, "malformed outbox row skipped");
                    failed.push((id, err.to_string()));
                }
            }
        }
        let acks = futures::future::join_all(pending.into_iter().map(
            |(id, subject, headers, body)| async move {
                (id, js_publish(&self.js, &subject, headers, body).await)
            },
        ))
        .await;
        for (id, ack) in acks {
            match ack {
                Ok(ack) => {
                    if ack.duplicate {
                        tracing::debug!(outbox_id = id, "outbox row was already in the stream");
                    }
                    if let Some(hook) = &self.hooks.after_publish_ack {
                        hook(id).await;
                    }
                    published.push(id);
                }
                Err(err) => {
                    // In id order: keep what was acked before the first failure.
                    error = Some(err);
                    break;
                }
            }
        }

        if !published.is_empty() {
            tx.execute(
                "UPDATE outbox SET published_at = now() WHERE id = ANY($1)",
                &[&published],
            )
            .await?;
        }
        for (id, reason) in &failed {
            tx.execute(
                "UPDATE outbox SET failed_at = now(), last_error = $2 WHERE id = $1",
                &[id, reason],
            )
            .await?;
        }
        tx.commit().await?;
        match error {
            Some(err) => Err(err.into()),
            None => Ok(published.len()),
        }
    }
}

fn build_message(row: &tokio_postgres::Row) -> Result<(String, HeaderMap, Bytes), OutboxError> {
    let message_id: String = row.try_get("message_id")?;
    let tenant: String = row.try_get("tenant_id")?;
    let subject: String = row.try_get("subject")?;
    let message_type: String = row.try_get("message_type")?;
    let schema: i32 = row.try_get("schema_version")?;
    let extra: serde_json::Value = row.try_get("headers")?;
    let payload: serde_json::Value = row.try_get("payload")?;

    check_publish_subject(&subject)?;
    let mut map = HeaderMap::new();
    if let serde_json::Value::Object(extra) = extra {
        for (name, value) in extra {
            let value = value
                .as_str()
                .ok_or_else(|| OutboxError::BadHeader { name: name.clone() })?;
            let (name, value) = header_pair(&name, value)?;
            map.insert(name, value);
        }
    }
    let schema = u32::try_from(schema).map_err(|_| OutboxError::BadSchema(0))?;
    for (name, value) in [
        (headers::TYPE, message_type.as_str()),
        (headers::TENANT, tenant.as_str()),
    ] {
        let (name, value) = header_pair(name, value)?;
        map.insert(name, value);
    }
    map.insert(headers::SCHEMA, schema_header(schema));
    let (name, value) = header_pair(headers::MSG_ID, &message_id)?;
    map.insert(name, value);
    let body = serde_json::to_vec(&payload).map_err(|source| EnvelopeError::Encode {
        message_type: "outbox payload",
        source,
    })?;
    Ok((subject, map, Bytes::from(body)))
}
