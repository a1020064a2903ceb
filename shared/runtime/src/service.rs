use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_bus::{Bus, Subjects};
use pulse_config::PulseConfig;
use pulse_store::Store;
use pulse_telemetry::Metrics;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::heartbeat::{self, HeartbeatIdentity};
use crate::outbox::OutboxSlot;
use crate::{ConnectError, Readiness, RetryPolicy, connect_nats, connect_store, health_router};

/// What distinguishes one service from another to the harness.
#[derive(Debug, Clone, Copy)]
pub struct ServiceSpec {
    /// Short name, as shown by `/api/health`: `gateway`, `patrol-scheduler`, ...
    pub name: &'static str,
    /// Port of the separate health listener (`http.listen` overrides it). `None` for services
    /// that serve the health routes on their own listener (gateway, agent-relay).
    pub health_port: Option<u16>,
}

/// Everything a running service shares with its harness.
#[derive(Clone)]
pub struct ServiceContext {
    pub spec: ServiceSpec,
    pub config: PulseConfig,
    pub bus: Bus,
    pub store: Store,
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub shutdown: CancellationToken,
    pub instance_id: String,
    pub started_at: DateTime<Utc>,
    /// The harness's background tasks (heartbeat, health listener, outbox relay).
    tasks: TaskTracker,
    outbox: OutboxSlot,
}

impl ServiceContext {
    /// Starts this process's outbox relay (the first call; later calls share it) and returns
    /// what wakes it: notify it after committing a transaction that enqueued outbox rows. The
    /// relay also polls, so a missed wake-up only delays. It keeps publishing while the service
    /// drains after shutdown and stops once `run` has returned.
    pub fn outbox_relay(&self) -> Arc<Notify> {
        self.outbox.start(&self.bus, &self.store, &self.tasks)
    }

    /// The relay's wake-up without starting it, for writers built before the relay may start
    /// (a consumer of the events it publishes must exist first).
    pub fn outbox_notify(&self) -> Arc<Notify> {
        self.outbox.notify()
    }
}

/// The harness's side of a started service: its background tasks and their stop.
pub struct Background {
    shutdown: CancellationToken,
    tasks: TaskTracker,
    outbox: OutboxSlot,
}

impl Background {
    /// After the service's `run` returned: stops the heartbeat, the health listener and the
    /// outbox relay, and waits for them.
    pub async fn finish(self) {
        self.shutdown.cancel();
        self.outbox.stop();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// Connects to NATS and Postgres (migrating), ensures the JetStream streams, and starts the
/// heartbeat and (when the spec has one) the health listener. [`Background::finish`] stops them
/// (and the outbox relay) once the service is done.
pub async fn start(
    spec: ServiceSpec,
    config: PulseConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<(ServiceContext, Background)> {
    let instance_id = format!("{}-{}", spec.name, uuid::Uuid::now_v7().simple());
    let policy = RetryPolicy::default();
    let nats = tokio::select! {
        result = connect_nats(&config, &policy, &instance_id) => result?,
        _ = shutdown.cancelled() => return Err(ConnectError::Cancelled.into()),
    };
    let store = tokio::select! {
        result = connect_store(&config, &policy) => result?,
        _ = shutdown.cancelled() => return Err(ConnectError::Cancelled.into()),
    };
    let subjects = Subjects::try_new(config.nats.subject_prefix.as_deref())?;
    // The store's writers enqueue their events (finding lifecycle) on the same subjects.
    let store = store.with_subjects(subjects.clone());
    let bus = Bus::new(nats.clone(), subjects);
    let limits = &config.nats.streams;
    bus.ensure_streams_with(&pulse_bus::StreamSettings {
        jobs_max_bytes: limits.jobs_max_bytes,
        events_max_bytes: limits.events_max_bytes,
        dlq_max_bytes: limits.dlq_max_bytes,
        ..pulse_bus::StreamSettings::default()
    })
    .await?;
    let metrics = Metrics::new(spec.name);
    let readiness = Readiness::new(nats, store.clone());
    let started_at = Utc::now();
    let tasks = TaskTracker::new();
    let context = ServiceContext {
        spec,
        config,
        bus,
        store,
        metrics,
        readiness,
        shutdown,
        instance_id,
        started_at,
        tasks: tasks.clone(),
        outbox: OutboxSlot::default(),
    };
    let background = Background {
        shutdown: context.shutdown.clone(),
        tasks: tasks.clone(),
        outbox: context.outbox.clone(),
    };
    tasks.spawn(heartbeat::run(
        context.bus.clone(),
        context.readiness.clone(),
        HeartbeatIdentity {
            service: spec.name.to_owned(),
            instance_id: context.instance_id.clone(),
            started_at,
        },
        Duration::from_millis(context.config.heartbeat.interval_ms.max(100)),
        context.shutdown.clone(),
    ));
    tasks.spawn(
        crate::metrics::RuntimeMetrics::register(&context.metrics)
            .run(context.store.clone(), context.shutdown.clone()),
    );
    if let Some(port) = spec.health_port {
        let addr = context
            .config
            .http
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], port)));
        let listener = bind(addr, "health checks", false).await?;
        tracing::info!(addr = %listener.local_addr()?, "health listener up");
        let router = health_router(context.readiness.clone(), context.metrics.clone());
        let stop = context.shutdown.clone();
        tasks.spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(error) = served {
                tracing::error!(%error, "health listener failed");
            }
        });
    }
    Ok((context, background))
}

/// Binds `addr` for `what` and announces the bound address on stdout
/// ([`pulse_config::listening`]): with port 0 the OS chooses it, and whoever started the process
/// learns it there. With `reuse_port` (`PULSE_HTTP__REUSE_PORT`), other processes may bind the
/// same address too (replicas behind one port).
pub async fn bind(
    addr: SocketAddr,
    what: &str,
    reuse_port: bool,
) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = if reuse_port {
        shared_listener(addr)
    } else {
        tokio::net::TcpListener::bind(addr).await
    }
    .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for {what}: {e}"))?;
    pulse_config::listening::announce(listener.local_addr()?);
    Ok(listener)
}

/// A listener other processes of the same user may also bind (`SO_REUSEPORT`).
fn shared_listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The whole life of a service process; returns its exit code.
pub async fn main<F, Fut>(spec: ServiceSpec, run: F) -> ExitCode
where
    F: FnOnce(ServiceContext) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    crate::install_crypto_provider();
    let config = match PulseConfig::load() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("pulse-{}: {error}", spec.name);
            return ExitCode::from(2);
        }
    };
    let telemetry = match pulse_telemetry::init(spec.name, &config.telemetry) {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("pulse-{}: {error}", spec.name);
            return ExitCode::from(2);
        }
    };
    let shutdown = CancellationToken::new();
    crate::shutdown_signal(shutdown.clone());
    let code = match start(spec, config, shutdown.clone()).await {
        Ok((context, background)) => {
            tracing::info!(instance = %context.instance_id, "service started");
            let bus = context.bus.clone();
            let result = run(context).await;
            // The service returned: whatever the reason, stop the background tasks too.
            background.finish().await;
            let _ = bus.client().flush().await;
            match result {
                Ok(()) => {
                    tracing::info!("service stopped");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    tracing::error!(error = %format!("{error:#}"), "service failed");
                    eprintln!("pulse-{}: {error:#}", spec.name);
                    ExitCode::FAILURE
                }
            }
        }
        Err(error) if shutdown.is_cancelled() => {
            tracing::info!(%error, "stopped during startup");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(error = %format!("{error:#}"), "startup failed");
            eprintln!("pulse-{}: {error:#}", spec.name);
            ExitCode::FAILURE
        }
    };
    telemetry.shutdown().await;
    code
}
