//! Checks made before any service starts: Postgres and NATS reachable, the database present,
//! the listeners free. Each failure says what to do about it.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio_postgres::config::Host;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dependency {
    Postgres,
    Nats,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    pub dependency: Dependency,
    pub target: String,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error("{}", render_unreachable(.0))]
    Unreachable(Vec<Unreachable>),
    #[error("invalid Postgres URL '{url}': {reason}")]
    DatabaseUrl { url: String, reason: String },
    #[error("invalid NATS URL '{url}': {reason}")]
    NatsUrl { url: String, reason: String },
    #[error(
        "Postgres at {target} accepted the connection but refused the session: {reason}\n  \
         check the user and authentication in PULSE_DATABASE_URL"
    )]
    DatabaseSession { target: String, reason: String },
    #[error("cannot create database '{name}' on {target}: {reason}")]
    CreateDatabase {
        name: String,
        target: String,
        reason: String,
    },
    #[error("{}", render_ports(.0))]
    PortsInUse(Vec<(String, SocketAddr)>),
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dependency::Postgres => "Postgres",
            Dependency::Nats => "NATS",
        })
    }
}

fn render_unreachable(all: &[Unreachable]) -> String {
    let mut out = Vec::new();
    for u in all {
        let how = match u.dependency {
            Dependency::Postgres => format!(
                "start it with `pg_ctlcluster {} main start` (or `systemctl start postgresql`), \
                 point PULSE_DATABASE_URL at a running server,\n  or run `pulsectl up --spawn-deps` \
                 to start a private Postgres for this stack",
                postgres_cluster_version().unwrap_or_else(|| "<version>".to_owned())
            ),
            Dependency::Nats => "start it with `nats-server -js` (JetStream is required), point \
                 PULSE_NATS_URL at a running server,\n  or run `pulsectl up --spawn-deps` to start \
                 a private NATS server for this stack"
                .to_owned(),
        };
        out.push(format!(
            "{} is unreachable at {} ({})\n  {how}",
            u.dependency, u.target, u.reason
        ));
    }
    out.join("\n")
}

fn render_ports(ports: &[(String, SocketAddr)]) -> String {
    let list: Vec<String> = ports
        .iter()
        .map(|(what, addr)| format!("{addr} ({what})"))
        .collect();
    format!(
        "already in use: {}\n  is another stack running? stop it (`pulsectl down`) or choose other \
         listeners (see `pulsectl up --help`)",
        list.join(", ")
    )
}

/// The highest Postgres version with a Debian cluster configured (`/etc/postgresql/<v>/main`).
fn postgres_cluster_version() -> Option<String> {
    let mut versions: Vec<(u32, String)> = std::fs::read_dir("/etc/postgresql")
        .ok()?
        .flatten()
        .filter(|entry| entry.path().join("main").is_dir())
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let major = name.split('.').next()?.parse().ok()?;
            Some((major, name))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, name)| name)
}

/// Where a Postgres URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgTarget {
    Tcp { host: String, port: u16 },
    Socket { path: std::path::PathBuf },
}

impl fmt::Display for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgTarget::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            PgTarget::Tcp { host, port } => write!(f, "{host}:{port}"),
            PgTarget::Socket { path } => write!(f, "{}", path.display()),
        }
    }
}

/// The servers a Postgres URL names, in order.
pub fn postgres_targets(url: &str) -> Result<Vec<PgTarget>, PreflightError> {
    let config: tokio_postgres::Config =
        url.parse()
            .map_err(|err: tokio_postgres::Error| PreflightError::DatabaseUrl {
                url: url.to_owned(),
                reason: err.to_string(),
            })?;
    let ports = config.get_ports();
    let port_at = |i: usize| match ports.len() {
        0 => 5432,
        1 => ports[0],
        _ => ports.get(i).copied().unwrap_or(5432),
    };
    let targets: Vec<PgTarget> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) => PgTarget::Tcp {
                host: name.clone(),
                port: port_at(i),
            },
            Host::Unix(dir) => PgTarget::Socket {
                path: dir.join(format!(".s.PGSQL.{}", port_at(i))),
            },
        })
        .collect();
    if targets.is_empty() {
        return Err(PreflightError::DatabaseUrl {
            url: url.to_owned(),
            reason: "no host".to_owned(),
        });
    }
    Ok(targets)
}

/// `host:port` pairs of a NATS URL list (`nats://a:4222,nats://user:pw@b`).
pub fn nats_targets(url: &str) -> Result<Vec<(String, u16)>, PreflightError> {
    let bad = |reason: &str| PreflightError::NatsUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let mut targets = Vec::new();
    for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let rest = part.split_once("://").map_or(part, |(_, rest)| rest);
        let rest = rest.split(['/', '?']).next().unwrap_or_default();
        let authority = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']').ok_or_else(|| bad("unclosed ["))?;
            let port = after.strip_prefix(':').unwrap_or("4222");
            (host, port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, port),
                None => (authority, "4222"),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = port.parse::<u16>().map_err(|_| bad("invalid port"))?;
        targets.push((host.to_owned(), port));
    }
    if targets.is_empty() {
        return Err(bad("no server"));
    }
    Ok(targets)
}

async fn tcp_reachable(host: &str, port: u16) -> Result<(), String> {
    match tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(describe_io(&err)),
        Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
    }
}

async fn socket_reachable(path: &Path) -> Result<(), String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::UnixStream::connect(path)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(describe_io(&err)),
        Err(_) => Err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
    }
}

fn describe_io(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        std::io::ErrorKind::NotFound => "no such socket".to_owned(),
        _ => err.to_string(),
    }
}

/// Whether some server of the Postgres URL answers; the first failure otherwise.
pub async fn check_postgres(url: &str) -> Result<Option<Unreachable>, PreflightError> {
    let targets = postgres_targets(url)?;
    let mut first_failure = None;
    for target in &targets {
        let result = match target {
            PgTarget::Tcp { host, port } => tcp_reachable(host, *port).await,
            PgTarget::Socket { path } => socket_reachable(path).await,
        };
        match result {
            Ok(()) => return Ok(None),
            Err(reason) => {
                first_failure.get_or_insert(Unreachable {
                    dependency: Dependency::Postgres,
                    target: target.to_string(),
                    reason,
                });
            }
        }
    }
    Ok(first_failure)
}

pub async fn check_nats(url: &str) -> Result<Option<Unreachable>, PreflightError> {
    let targets = nats_targets(url)?;
    let mut first_failure = None;
    for (host, port) in &targets {
        match tcp_reachable(host, *port).await {
            Ok(()) => return Ok(None),
            Err(reason) => {
                first_failure.get_or_insert(Unreachable {
                    dependency: Dependency::Nats,
                    target: format!("{host}:{port}"),
                    reason,
                });
            }
        }
    }
    Ok(first_failure)
}

/// Both dependencies at once, so one run reports everything that is missing.
pub async fn check_dependencies(database_url: &str, nats_url: &str) -> Result<(), PreflightError> {
    let (postgres, nats) = tokio::join!(check_postgres(database_url), check_nats(nats_url));
    let unreachable: Vec<Unreachable> = [postgres?, nats?].into_iter().flatten().collect();
    if unreachable.is_empty() {
        Ok(())
    } else {
        Err(PreflightError::Unreachable(unreachable))
    }
}

/// Creates the database named in `url` when it does not exist. Returns whether it did.
pub async fn ensure_database(url: &str) -> Result<bool, PreflightError> {
    let config: tokio_postgres::Config =
        url.parse()
            .map_err(|err: tokio_postgres::Error| PreflightError::DatabaseUrl {
                url: url.to_owned(),
                reason: err.to_string(),
            })?;
    let target = postgres_targets(url)?
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    // libpq's rule: no database name means the user's name.
    let Some(name) = config.get_dbname().or(config.get_user()).map(str::to_owned) else {
        return Err(PreflightError::DatabaseUrl {
            url: url.to_owned(),
            reason: "no database or user name".to_owned(),
        });
    };

    let mut last_error = String::new();
    for maintenance in ["postgres", "template1"] {
        if maintenance == name {
            return Ok(false);
        }
        let mut admin = config.clone();
        admin
            .dbname(maintenance)
            .connect_timeout(Duration::from_secs(5));
        let (client, connection) = match admin.connect(tokio_postgres::NoTls).await {
            Ok(pair) => pair,
            Err(err) => {
                // A missing maintenance database is 3D000; try the next one.
                if err.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_DATABASE) {
                    last_error = err.to_string();
                    continue;
                }
                return Err(PreflightError::DatabaseSession {
                    target,
                    reason: pg_reason(&err),
                });
            }
        };
        let connection = tokio::spawn(connection);
        let result = pulse_store::create_database_if_missing(&client, &name).await;
        drop(client);
        let _ = connection.await;
        return result.map_err(|err| PreflightError::CreateDatabase {
            name,
            target,
            reason: store_reason(&err),
        });
    }
    Err(PreflightError::DatabaseSession {
        target,
        reason: last_error,
    })
}

fn pg_reason(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => err.to_string(),
    }
}

/// Why the store could not create the database: the server's own message when it refused.
fn store_reason(err: &pulse_store::StoreError) -> String {
    match err {
        pulse_store::StoreError::Database(err) => pg_reason(err),
        other => other.to_string(),
    }
}

/// Listeners that something already listens on (port 0 is chosen by the OS at bind: never).
pub fn ports_in_use(listeners: &[(String, SocketAddr)]) -> Result<(), PreflightError> {
    let busy: Vec<(String, SocketAddr)> = listeners
        .iter()
        .filter(|(_, addr)| addr.port() != 0)
        .filter(|(_, addr)| {
            matches!(
                std::net::TcpListener::bind(addr),
                Err(err) if err.kind() == std::io::ErrorKind::AddrInUse
            )
        })
        .cloned()
        .collect();
    if busy.is_empty() {
        Ok(())
    } else {
        Err(PreflightError::PortsInUse(busy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_targets_cover_tcp_sockets_and_default_port() {
        assert_eq!(
            postgres_targets("postgres://root@127.0.0.1:5433/pulse").unwrap(),
            [PgTarget::Tcp {
                host: "127.0.0.1".into(),
                port: 5433
            }]
        );
        assert_eq!(
            postgres_targets("postgres://root@localhost/pulse").unwrap()[0].to_string(),
            "localhost:5432"
        );
        assert_eq!(
            postgres_targets("host=/run/postgresql port=5444 dbname=pulse").unwrap(),
            [PgTarget::Socket {
                path: "/run/postgresql/.s.PGSQL.5444".into()
            }]
        );
        assert!(postgres_targets("mysql://nope").is_err());
    }

    #[test]
    fn nats_targets_strip_scheme_credentials_and_default_the_port() {
        assert_eq!(
            nats_targets("nats://127.0.0.1:4222").unwrap(),
            [("127.0.0.1".to_owned(), 4222)]
        );
        assert_eq!(
            nats_targets("nats://user:secret@nats.local, tls://[::1]:4333").unwrap(),
            [("nats.local".to_owned(), 4222), ("::1".to_owned(), 4333)]
        );
        assert_eq!(
            nats_targets("localhost").unwrap(),
            [("localhost".to_owned(), 4222)]
        );
        assert!(nats_targets("nats://host:port").is_err());
        assert!(nats_targets("").is_err());
    }

    #[test]
    fn unreachable_message_says_what_and_how() {
        let message = PreflightError::Unreachable(vec![
            Unreachable {
                dependency: Dependency::Postgres,
                target: "127.0.0.1:5432".into(),
                reason: "connection refused".into(),
            },
            Unreachable {
                dependency: Dependency::Nats,
                target: "127.0.0.1:4222".into(),
                reason: "connection refused".into(),
            },
        ])
        .to_string();
        assert!(
            message.contains("Postgres is unreachable at 127.0.0.1:5432 (connection refused)"),
            "{message}"
        );
        assert!(message.contains("pg_ctlcluster "), "{message}");
        assert!(message.contains("main start"), "{message}");
        assert!(
            message.contains("NATS is unreachable at 127.0.0.1:4222"),
            "{message}"
        );
        assert!(message.contains("nats-server -js"), "{message}");
        assert_eq!(message.matches("--spawn-deps").count(), 2, "{message}");
    }

    #[tokio::test]
    async fn a_closed_port_is_reported_unreachable() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let failure = check_postgres(&format!("postgres://root@127.0.0.1:{port}/x"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(failure.dependency, Dependency::Postgres);
        assert_eq!(failure.reason, "connection refused");
    }

    #[test]
    fn a_bound_port_is_reported_in_use() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let err = ports_in_use(&[("gateway".into(), addr)]).unwrap_err();
        assert!(err.to_string().contains(&format!("{addr} (gateway)")));
        drop(listener);
        assert!(ports_in_use(&[("gateway".into(), addr)]).is_ok());
    }
}
