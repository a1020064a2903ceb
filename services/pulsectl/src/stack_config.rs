//! What every process of a local stack is told: one resolution of the `PULSE_*` configuration,
//! turned into each child's environment.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use pulse_config::{ConfigError, DatabaseConfig, PulseConfig};

use crate::cli::{PULSECTL_ONLY_ENV, UpArgs};
use crate::service::{HealthListener, Service};

#[derive(Debug, thiserror::Error)]
pub enum StackConfigError {
    #[error("{0}")]
    Invalid(#[source] ConfigError),
    #[error("{service} would not accept its configuration: {source}")]
    Service {
        service: &'static str,
        #[source]
        source: ConfigError,
    },
    #[error("{first} and {second} would both listen on {addr}; give them distinct addresses")]
    SharedListener {
        first: String,
        second: String,
        addr: SocketAddr,
    },
}

/// Variables pulsectl sets itself; nested spellings of the same keys are removed so the values
/// below are the only ones a service sees.
const OWNED_ENV: [&str; 7] = [
    "PULSE_HTTP__REUSE_PORT",
    "PULSE_DATABASE_URL",
    "PULSE_DATABASE__URL",
    "PULSE_NATS_URL",
    "PULSE_NATS__URL",
    "PULSE_STATE_DIR",
    "PULSE_HTTP__LISTEN",
];

/// The relay's and the gateway's listen addresses.
pub const RELAY_LISTEN: &str = "PULSE_RELAY__LISTEN";
pub const GATEWAY_LISTEN: &str = "PULSE_GATEWAY__LISTEN";
/// Each process's Postgres pool size.
pub const POOL_SIZE: &str = "PULSE_DATABASE__POOL_SIZE";
/// The smallest pool a replica gets: below it a busy replica (the dispatcher holds one
/// connection for its lease) waits on its own pool.
const MIN_REPLICA_POOL: usize = 8;
/// Lets the replicas of the gateway or the relay share their main listener.
pub const REUSE_PORT: &str = "PULSE_HTTP__REUSE_PORT";

#[derive(Debug, Clone)]
pub struct StackConfig {
    pub state_dir: PathBuf,
    pub database_url: String,
    pub nats_url: String,
    pub gateway_listen: SocketAddr,
    pub relay_listen: SocketAddr,
    /// Each process's Postgres pool size as configured (`PULSE_DATABASE__POOL_SIZE`).
    pub pool_size: usize,
    /// `PULSE_*` variables of pulsectl's environment the services also understand.
    inherited: Vec<(String, String)>,
}

impl StackConfig {
    /// Resolves the configuration the services will see from pulsectl's environment (`env`),
    /// with `state_dir` as the state directory.
    pub fn resolve(
        state_dir: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, StackConfigError> {
        let inherited: Vec<(String, String)> = env
            .into_iter()
            .filter(|(key, _)| key.starts_with("PULSE_"))
            .filter(|(key, _)| !PULSECTL_ONLY_ENV.contains(&key.as_str()))
            .collect();
        let config = PulseConfig::figment(inherited.clone())
            .and_then(PulseConfig::from_figment)
            .map_err(StackConfigError::Invalid)?;
        Ok(Self {
            state_dir: state_dir.to_path_buf(),
            database_url: config.database.url,
            nats_url: config.nats.url,
            gateway_listen: config.gateway.listen,
            relay_listen: config.relay.listen,
            pool_size: config.database.pool_size,
            inherited,
        })
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }

    pub fn admin_token_path(&self) -> PathBuf {
        self.state_dir.join("admin-token")
    }

    /// The database settings the services get (application role, timeouts), with the URL in
    /// force (`--spawn-deps` replaces it).
    pub fn database_config(&self) -> Result<DatabaseConfig, StackConfigError> {
        let mut database = PulseConfig::figment(self.inherited.clone())
            .and_then(PulseConfig::from_figment)
            .map_err(StackConfigError::Invalid)?
            .database;
        database.url.clone_from(&self.database_url);
        Ok(database)
    }

    /// The gateway as a client reaches it (a wildcard listener is reached on loopback).
    pub fn gateway_url(&self) -> String {
        let mut addr = self.gateway_listen;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr.ip() {
                IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            });
        }
        format!("http://{addr}")
    }

    /// The listener each process will bind, by process name.
    pub fn listeners(&self, args: &UpArgs, stack: &[Service]) -> Vec<(String, SocketAddr)> {
        stack
            .iter()
            .filter_map(|service| {
                let addr = match (service.health, service.name) {
                    (HealthListener::Main, "gateway") => Some(self.gateway_listen),
                    (HealthListener::Main, _) => Some(self.relay_listen),
                    (HealthListener::Own, name) => args.health_listen(name),
                }?;
                Some((service.name.to_owned(), addr))
            })
            .collect()
    }

    /// Refuses two processes on one address (they would fight over it in a restart loop). Port 0
    /// is never shared: each process gets its own port from the OS.
    pub fn check_distinct(listeners: &[(String, SocketAddr)]) -> Result<(), StackConfigError> {
        for (i, (first, addr)) in listeners.iter().enumerate() {
            if addr.port() == 0 {
                continue;
            }
            if let Some((second, _)) = listeners[i + 1..].iter().find(|(_, other)| other == addr) {
                return Err(StackConfigError::SharedListener {
                    first: first.clone(),
                    second: second.clone(),
                    addr: *addr,
                });
            }
        }
        Ok(())
    }

    /// What to set and what to remove in `service`'s environment.
    pub fn service_env(&self, service: &Service, args: &UpArgs) -> ServiceEnv {
        let mut set = vec![
            ("PULSE_DATABASE_URL".to_owned(), self.database_url.clone()),
            ("PULSE_NATS_URL".to_owned(), self.nats_url.clone()),
            (
                "PULSE_STATE_DIR".to_owned(),
                self.state_dir.display().to_string(),
            ),
        ];
        // The relay as bound: the agent's default relay URL (with port 0 configured, the
        // relay's own restarts keep the port it got first).
        if self.relay_listen.port() != 0 {
            set.push((RELAY_LISTEN.to_owned(), self.relay_listen.to_string()));
        }
        let own_listener = args
            .health_listen(service.name)
            .filter(|_| service.health == HealthListener::Own);
        if let Some(addr) = own_listener {
            set.push(("PULSE_HTTP__LISTEN".to_owned(), addr.to_string()));
        }
        let mut remove: Vec<String> = PULSECTL_ONLY_ENV.iter().map(|k| (*k).to_owned()).collect();
        remove.extend(OWNED_ENV.iter().map(|k| (*k).to_owned()));
        ServiceEnv { set, remove }
    }

    /// [`Self::service_env`] for replica `replica` (1-based) of `service`. With more than one
    /// replica, the gateway's and the relay's replicas all bind the main listener with
    /// `SO_REUSEPORT` (replicas after the first get the address the first one bound), and
    /// replicas after the first of a service with its own health listener get a port from the
    /// OS on the same interface.
    pub fn replica_env(&self, service: &Service, args: &UpArgs, replica: u8) -> ServiceEnv {
        let mut env = self.service_env(service, args);
        if args.replicas <= 1 || !service.in_fleet_health {
            return env;
        }
        // The replicas of a service share its connections: N of them together keep to about
        // the pool one would have, so a stack stays within the server's max_connections.
        let shared = (self.pool_size / usize::from(args.replicas))
            .max(MIN_REPLICA_POOL)
            .min(self.pool_size.max(1));
        env.put(POOL_SIZE, shared.to_string());
        match service.health {
            HealthListener::Main => {
                env.put(REUSE_PORT, "true".to_owned());
                if replica > 1 {
                    let (key, addr) = match service.name {
                        "gateway" => (GATEWAY_LISTEN, self.gateway_listen),
                        _ => (RELAY_LISTEN, self.relay_listen),
                    };
                    env.put(key, addr.to_string());
                }
            }
            HealthListener::Own => {
                if let Some(mut addr) = args.health_listen(service.name).filter(|_| replica > 1) {
                    addr.set_port(0);
                    env.put("PULSE_HTTP__LISTEN", addr.to_string());
                }
            }
        }
        env
    }

    /// Loads `env` the way the service will, so a bad value fails here with the service named
    /// instead of in a restart loop.
    pub fn validate(
        &self,
        service: &'static str,
        env: &ServiceEnv,
    ) -> Result<(), StackConfigError> {
        let vars = self
            .inherited
            .iter()
            .filter(|(key, _)| !env.remove.contains(key))
            .cloned()
            .chain(env.set.iter().cloned());
        PulseConfig::figment(vars)
            .and_then(PulseConfig::from_figment)
            .map(drop)
            .map_err(|source| StackConfigError::Service { service, source })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEnv {
    pub set: Vec<(String, String)>,
    pub remove: Vec<String>,
}

impl ServiceEnv {
    /// Sets `key` to `value`, replacing what was set before.
    pub fn put(&mut self, key: &str, value: String) {
        self.set.retain(|(k, _)| k != key);
        self.set.push((key.to_owned(), value));
    }

    pub fn set_os(&self) -> Vec<(String, OsString)> {
        self.set
            .iter()
            .map(|(key, value)| (key.clone(), OsString::from(value)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::service::STACK;
    use clap::Parser;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn up_args(extra: &[&str]) -> UpArgs {
        let mut argv = vec!["pulsectl", "up"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Up(args) => args,
            other => panic!("{other:?}"),
        }
    }

    fn service(name: &str) -> Service {
        *STACK.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn defaults_and_overrides_resolve_like_the_services_do() {
        let config = StackConfig::resolve(Path::new("/s"), env(&[])).unwrap();
        assert_eq!(config.database_url, "postgres://root@127.0.0.1:5432/pulse");
        assert_eq!(config.gateway_url(), "http://127.0.0.1:7655");

        let config = StackConfig::resolve(
            Path::new("/s"),
            env(&[
                ("PULSE_DATABASE_URL", "postgres://root@127.0.0.1:5432/other"),
                ("PULSE_GATEWAY__LISTEN", "0.0.0.0:9000"),
                ("PULSE_TOKEN", "secret"),
                ("PULSE_VERIFIER_HEALTH_LISTEN", "127.0.0.1:1"),
                ("HOME", "/root"),
            ]),
        )
        .unwrap();
        assert_eq!(config.database_url, "postgres://root@127.0.0.1:5432/other");
        assert_eq!(config.gateway_url(), "http://127.0.0.1:9000");
        assert!(
            config
                .inherited
                .iter()
                .all(|(k, _)| k.starts_with("PULSE_"))
        );
        assert!(!config.inherited.iter().any(|(k, _)| k == "PULSE_TOKEN"));
    }

    #[test]
    fn each_service_gets_its_own_health_listener_and_no_pulsectl_variables() {
        let config = StackConfig::resolve(
            Path::new("/state"),
            env(&[
                ("PULSE_NATS__SUBJECT_PREFIX", "t1"),
                ("PULSE_GATEWAY_URL", "x"),
            ]),
        )
        .unwrap();
        let args = up_args(&["--verifier-health-listen", "127.0.0.1:17664"]);

        let verifier = config.service_env(&service("verifier"), &args);
        assert!(
            verifier
                .set
                .contains(&("PULSE_HTTP__LISTEN".into(), "127.0.0.1:17664".into()))
        );
        assert!(
            verifier
                .set
                .contains(&("PULSE_STATE_DIR".into(), "/state".into()))
        );
        assert!(verifier.remove.contains(&"PULSE_GATEWAY_URL".to_owned()));
        config.validate("verifier", &verifier).unwrap();

        let gateway = config.service_env(&service("gateway"), &args);
        assert!(!gateway.set.iter().any(|(k, _)| k == "PULSE_HTTP__LISTEN"));
        assert!(gateway.remove.contains(&"PULSE_HTTP__LISTEN".to_owned()));
        config.validate("gateway", &gateway).unwrap();

        let listeners = config.listeners(&args, &STACK);
        assert_eq!(listeners.len(), STACK.len());
        assert!(listeners.contains(&("verifier".into(), "127.0.0.1:17664".parse().unwrap())));
        assert!(listeners.contains(&("agent-relay".into(), "127.0.0.1:7656".parse().unwrap())));
        StackConfig::check_distinct(&listeners).unwrap();
    }

    #[test]
    fn unknown_pulse_variables_fail_before_anything_starts() {
        let err =
            StackConfig::resolve(Path::new("/s"), env(&[("PULSE_NATS__URLL", "x")])).unwrap_err();
        assert!(err.to_string().contains("urll"), "{err}");
    }

    fn value<'a>(env: &'a ServiceEnv, key: &str) -> Option<&'a str> {
        env.set
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn replicas_share_the_main_listeners_and_get_their_own_health_ports() {
        let args = up_args(&["--replicas", "2"]);
        let config = StackConfig::resolve(
            Path::new("/state"),
            env(&[("PULSE_GATEWAY__LISTEN", "127.0.0.1:7000")]),
        )
        .unwrap();
        for replica in [1, 2] {
            let gateway = config.replica_env(&service("gateway"), &args, replica);
            assert_eq!(value(&gateway, REUSE_PORT), Some("true"));
            let relay = config.replica_env(&service("agent-relay"), &args, replica);
            assert_eq!(value(&relay, REUSE_PORT), Some("true"));
            assert_eq!(value(&relay, RELAY_LISTEN), Some("127.0.0.1:7656"));
            config
                .validate("gateway", &gateway)
                .expect("a replica's configuration loads");
        }
        let second = config.replica_env(&service("gateway"), &args, 2);
        assert_eq!(value(&second, GATEWAY_LISTEN), Some("127.0.0.1:7000"));
        // Two replicas of the default 16-connection pool: 8 each.
        assert_eq!(value(&second, POOL_SIZE), Some("8"));

        let first = config.replica_env(&service("verifier"), &args, 1);
        assert_eq!(value(&first, "PULSE_HTTP__LISTEN"), Some("127.0.0.1:7664"));
        let second = config.replica_env(&service("verifier"), &args, 2);
        assert_eq!(value(&second, "PULSE_HTTP__LISTEN"), Some("127.0.0.1:0"));
        assert_eq!(value(&second, REUSE_PORT), None);
        assert_eq!(
            second
                .set
                .iter()
                .filter(|(k, _)| k == "PULSE_HTTP__LISTEN")
                .count(),
            1
        );
    }

    #[test]
    fn one_replica_changes_nothing_and_the_agent_stays_one() {
        let config = StackConfig::resolve(Path::new("/state"), env(&[])).unwrap();
        let one = up_args(&[]);
        for service in STACK {
            assert_eq!(
                config.replica_env(&service, &one, 1),
                config.service_env(&service, &one)
            );
        }
        let two = up_args(&["--replicas", "2"]);
        assert_eq!(
            config.replica_env(&service("agent"), &two, 1),
            config.service_env(&service("agent"), &two)
        );
        assert_eq!(crate::up::replicas_of(&service("agent"), &two), 1);
        assert_eq!(crate::up::replicas_of(&service("verifier"), &two), 2);
        assert_eq!(crate::up::replica_name("verifier", 1), "verifier");
        assert_eq!(crate::up::replica_name("verifier", 2), "verifier-2");
    }

    #[test]
    fn replicas_out_of_range_are_refused() {
        for bad in ["0", "9", "two"] {
            let argv = ["pulsectl", "up", "--replicas", bad];
            assert!(Cli::try_parse_from(argv).is_err(), "--replicas {bad}");
        }
    }

    #[test]
    fn two_processes_on_one_port_are_refused() {
        let config = StackConfig::resolve(Path::new("/s"), env(&[])).unwrap();
        let args = up_args(&["--agent-health-listen", "127.0.0.1:7655"]);
        let err = StackConfig::check_distinct(&config.listeners(&args, &STACK)).unwrap_err();
        assert!(err.to_string().contains("127.0.0.1:7655"), "{err}");
    }
}
