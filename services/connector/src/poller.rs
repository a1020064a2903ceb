//! One connection's poller: while this replica holds the connection's lease, it keeps an agent
//! session with the relay and, every cadence, renews the lease, reads the cluster, sends the
//! report and records the connection's state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use pulse_agent_session::{Backlog, ConnectionConfig};
use pulse_capabilities::ErrorCode;
use pulse_domain::agent_protocol::{Hello, PROTOCOL_VERSION, Report};
use pulse_domain::connection::{ConnectionKind, ConnectionState};
use pulse_proxmox::{Client, Secret, Timeouts, TlsMode, inventory, pbs};
use pulse_store::connections::{self, Connection, Lease, Observation};
use pulse_store::settings::MasterKey;
use pulse_store::{Store, TenantTx};
use tokio_util::sync::CancellationToken;

/// Reports waiting for the relay: the newest two (a report is a full snapshot, so an older one
/// waiting behind a newer one is worth nothing).
const BACKLOG: usize = 2;

/// What every poller of a process shares.
#[derive(Clone)]
pub struct PollerSettings {
    pub store: Store,
    pub key: Arc<MasterKey>,
    pub relay_url: String,
    /// How long one request to the Proxmox API may take.
    pub request_timeout: Duration,
    /// What `guest.shutdown` and `guest.reboot` give the guest's OS.
    pub shutdown_timeout: Duration,
}

/// What a connection's poller and its command handler share: the store under the connection's
/// tenant, and a fresh Proxmox client built from the stored connection.
pub(crate) struct Access {
    pub(crate) settings: PollerSettings,
    pub(crate) tenant: pulse_domain::TenantId,
    pub(crate) connection: uuid::Uuid,
}

/// Why no client could be built for a connection.
pub(crate) enum NoClient {
    /// The connection was removed.
    Removed,
    /// The stored secret does not open with this master key.
    Unsealable,
    /// The store could not be read.
    Store(String),
    /// The stored connection cannot make a client (its trust or secret).
    Proxmox(pulse_proxmox::Error),
}

impl Access {
    pub(crate) async fn tx(&self) -> Result<TenantTx, String> {
        self.settings
            .store
            .tenant_tx(&self.tenant)
            .await
            .map_err(|e| e.to_string())
    }

    /// The connection as stored now; `None` once removed.
    pub(crate) async fn current(&self, tx: &TenantTx) -> Result<Option<Connection>, String> {
        connections::get(tx, self.connection)
            .await
            .map_err(|e| e.to_string())
    }

    /// The connection's token secret, opened for one use only.
    async fn secret(&self) -> Result<Option<String>, NoClient> {
        let tx = self.tx().await.map_err(NoClient::Store)?;
        let secret = connections::secret(&tx, &self.settings.key, self.connection).await;
        let _ = tx.rollback().await;
        secret.map_err(|error| match error {
            connections::ConnectionStoreError::Sealing { .. } => {
                tracing::error!(connection = %self.connection, %error, "the connection's token secret cannot be opened");
                NoClient::Unsealable
            }
            other => NoClient::Store(other.to_string()),
        })
    }

    /// A fresh client for `connection`: the TLS verifier's record of what the server presented
    /// is this use's, and a changed trust applies at once.
    pub(crate) async fn client(&self, connection: &Connection) -> Result<Client, NoClient> {
        let secret = self.secret().await?.ok_or(NoClient::Removed)?;
        Secret::new(secret)
            .and_then(|secret| {
                let tls = TlsMode::from_trust(&connection.tls)?;
                Client::new(
                    connection.kind,
                    &connection.url,
                    &connection.token_id,
                    &secret,
                    &tls,
                    Timeouts {
                        connect: Duration::from_secs(5),
                        request: self.settings.request_timeout,
                    },
                )
            })
            .map_err(NoClient::Proxmox)
    }
}

pub struct Poller {
    access: Arc<Access>,
    lease: Lease,
    stop: CancellationToken,
}

/// Why a poller stopped.
#[derive(Debug)]
enum Ended {
    /// The process is stopping: give the lease up.
    Shutdown,
    /// Another replica holds the lease now, or the connection was removed.
    LeaseLost,
    /// The store could not be reached: the lease lapses and a replica claims it again.
    Store(String),
}

/// One read of the cluster: the state to record and the report to send.
struct Cycle {
    observed: Observation,
    report: Option<Report>,
}

impl Poller {
    pub fn new(settings: PollerSettings, lease: Lease, stop: CancellationToken) -> Self {
        Self {
            access: Arc::new(Access {
                settings,
                tenant: lease.tenant.clone(),
                connection: lease.connection,
            }),
            lease,
            stop,
        }
    }

    /// Polls until the lease is lost, the connection removed or the process stops.
    pub async fn run(self) {
        let ended = self.poll().await;
        let lease = &self.lease;
        match &ended {
            Ended::Shutdown => {
                if let Err(error) = self.release().await {
                    tracing::warn!(connection = %lease.connection, %error, "lease not given up; it lapses instead");
                }
            }
            Ended::LeaseLost => {}
            Ended::Store(error) => {
                tracing::warn!(connection = %lease.connection, %error, "store unreachable; polling stops until the lease is claimed again");
            }
        }
        tracing::info!(tenant = %lease.tenant, connection = %lease.connection, ended = ?ended, "connection poller stopped");
    }

    async fn release(&self) -> Result<(), pulse_store::StoreError> {
        let tx = self
            .access
            .settings
            .store
            .tenant_tx(&self.lease.tenant)
            .await?;
        connections::release(&tx, &self.lease).await?;
        tx.commit().await
    }

    async fn tx(&self) -> Result<TenantTx, String> {
        self.access.tx().await
    }

    async fn current(&self, tx: &TenantTx) -> Result<Option<Connection>, String> {
        self.access.current(tx).await
    }

    /// The connection and the connector's token for it, read under the lease.
    async fn setup(&self) -> Result<Option<(Connection, String)>, String> {
        let tx = self.tx().await?;
        let Some(connection) = self.current(&tx).await? else {
            return Ok(None);
        };
        let token = connections::agent_token(&tx, &self.access.settings.key, self.lease.connection)
            .await
            .map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())?;
        Ok(token.map(|token| (connection, token)))
    }

    async fn poll(&self) -> Ended {
        let (connection, token) = match self.setup().await {
            Ok(Some(found)) => found,
            Ok(None) => return Ended::LeaseLost,
            Err(error) => return Ended::Store(error),
        };
        let agent_id = connection.agent_id();
        let backlog = Arc::new(Backlog::new(BACKLOG));
        let session_stop = self.stop.child_token();
        let commands = Arc::new(crate::commands::GuestCommands::new(self.access.clone()));
        let session = tokio::spawn(pulse_agent_session::run(
            ConnectionConfig {
                relay_url: self.access.settings.relay_url.clone(),
                token,
                hello: Hello {
                    protocol: PROTOCOL_VERSION,
                    agent_id: agent_id.clone(),
                    hostname: connection.name.clone(),
                    agent_version: env!("CARGO_PKG_VERSION").to_owned(),
                    report_interval_ms: u64::try_from(connection.cadence.as_millis())
                        .unwrap_or(u64::MAX),
                },
            },
            backlog.clone(),
            Some(commands),
            session_stop.clone(),
        ));
        let mut seq = 0_u64;
        let ended = loop {
            let started = Instant::now();
            // Renew first: a replica that lost the lease must not read or report once more.
            let current = match self.renew().await {
                Ok(Some(current)) => current,
                Ok(None) => break Ended::LeaseLost,
                Err(error) => break Ended::Store(error),
            };
            let cycle = self.read(&current, &agent_id, seq + 1).await;
            crate::metrics::ConnectorMetrics::shared().read(
                cycle.observed.state.as_str(),
                started.elapsed(),
                cycle.report.as_ref().map_or(0, |r| r.resources.len()),
            );
            if let Some(report) = cycle.report {
                seq = report.seq;
                if let Some(dropped) = backlog.push(report) {
                    tracing::debug!(connection = %current.id, seq = dropped.seq, "relay behind; an older report was dropped");
                }
            }
            match self.record(&cycle.observed).await {
                Ok(true) => {}
                Ok(false) => break Ended::LeaseLost,
                Err(error) => break Ended::Store(error),
            }
            let next = started + current.cadence;
            tokio::select! {
                _ = self.stop.cancelled() => break Ended::Shutdown,
                _ = tokio::time::sleep_until(next.into()) => {}
            }
        };
        // Give the last report a moment to reach the relay before the session closes.
        if matches!(ended, Ended::Shutdown) {
            backlog.drained(Duration::from_secs(2)).await;
        }
        session_stop.cancel();
        let _ = session.await;
        ended
    }

    /// Renews the lease for three cadences and reads the connection again (its cadence or
    /// trust may have changed). `None` when the lease is lost or the connection removed.
    async fn renew(&self) -> Result<Option<Connection>, String> {
        let tx = self.tx().await?;
        let Some(connection) = self.current(&tx).await? else {
            return Ok(None);
        };
        let lease = (connection.cadence * 3).max(crate::CLAIM_LEASE);
        if !connections::renew(&tx, &self.lease, lease)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(None);
        }
        tx.commit().await.map_err(|e| e.to_string())?;
        Ok(Some(connection))
    }

    async fn record(&self, observed: &Observation) -> Result<bool, String> {
        let tx = self.tx().await?;
        let found = connections::record(&tx, self.lease.connection, observed)
            .await
            .map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())?;
        Ok(found)
    }

    /// One read of the cluster, with a fresh client.
    async fn read(&self, connection: &Connection, agent_id: &str, seq: u64) -> Cycle {
        let failed = |error: pulse_proxmox::Error, presented| Cycle {
            observed: Observation {
                state: error.state().unwrap_or(ConnectionState::Unreachable),
                code: Some(error.code().code().to_owned()),
                cause: Some(error.to_string()),
                presented,
                version: None,
                at: Utc::now(),
            },
            report: None,
        };
        let client = match self.access.client(connection).await {
            Ok(client) => client,
            Err(NoClient::Proxmox(error)) => return failed(error, None),
            Err(NoClient::Removed) => {
                return Cycle {
                    observed: unreadable("the connection was removed"),
                    report: None,
                };
            }
            Err(NoClient::Unsealable) => {
                return Cycle {
                    observed: unreadable(
                        "the stored token secret cannot be opened with this master key; add \
                         the connection again",
                    ),
                    report: None,
                };
            }
            Err(NoClient::Store(error)) => {
                tracing::warn!(connection = %connection.id, %error, "the connection's token secret could not be read");
                return Cycle {
                    observed: Observation {
                        state: connection.state,
                        code: connection.state_code.clone(),
                        cause: connection.state_cause.clone(),
                        presented: connection.presented_fingerprint,
                        version: connection.version.clone(),
                        at: Utc::now(),
                    },
                    report: None,
                };
            }
        };
        let found = match connection.kind {
            ConnectionKind::ProxmoxVe => inventory::read(&client, agent_id)
                .await
                .map(|found| (found.cluster.quorum_cause(), found.resources)),
            ConnectionKind::ProxmoxBackup => pbs::read(&client, agent_id)
                .await
                .map(|resources| (None, resources)),
        };
        match found {
            Ok((cause, resources)) => {
                let at = Utc::now();
                Cycle {
                    observed: Observation {
                        state: if cause.is_some() {
                            ConnectionState::NoQuorum
                        } else {
                            ConnectionState::Connected
                        },
                        code: None,
                        cause,
                        presented: client.presented_fingerprint(),
                        version: None,
                        at,
                    },
                    report: Some(Report {
                        seq,
                        observed_at: at,
                        resources,
                    }),
                }
            }
            Err(error) => {
                let presented = match &error {
                    pulse_proxmox::Error::TlsMismatch { presented, .. } => *presented,
                    _ => client.presented_fingerprint(),
                };
                tracing::info!(connection = %connection.id, state = ?error.state(), %error, "cluster read failed");
                failed(error, presented)
            }
        }
    }
}

fn unreadable(cause: &str) -> Observation {
    Observation {
        state: ConnectionState::AuthFailed,
        code: Some(ErrorCode::ConnectionAuthFailed.code().to_owned()),
        cause: Some(cause.to_owned()),
        presented: None,
        version: None,
        at: Utc::now(),
    }
}
