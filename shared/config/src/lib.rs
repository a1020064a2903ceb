//! Configuration for every Pulse binary.
//!
//! Layering: compiled defaults -> optional TOML file named by `PULSE_CONFIG` -> `PULSE_*`
//! environment variables, with `__` separating nested keys (`PULSE_NATS__SUBJECT_PREFIX`).
//! A few flat names are honoured as aliases because operators expect them:
//! `PULSE_DATABASE_URL`, `PULSE_NATS_URL`, `PULSE_OTEL_ENDPOINT`, `PULSE_STATE_DIR`.
//! Every setting is documented in `docs/configuration.md`.

pub mod listening;

use std::net::SocketAddr;
use std::path::PathBuf;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use figment::value::Value;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(#[from] Box<figment::Error>);

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PulseConfig {
    /// Where local state lives: logs, the admin token, agent state.
    pub state_dir: PathBuf,
    pub database: DatabaseConfig,
    pub nats: NatsConfig,
    pub telemetry: TelemetryConfig,
    pub http: HttpConfig,
    pub gateway: GatewayConfig,
    pub relay: RelayConfig,
    pub heartbeat: HeartbeatConfig,
    pub alerts: AlertsConfig,
    pub secrets: SecretsConfig,
    /// Patrol run execution: job leases of the model-runner and the sweeper that ends lost runs.
    #[serde(default)]
    pub runner: RunnerConfig,
    /// Patrol run dispatch in the patrol-scheduler: capacity, jitter and queue bounds.
    #[serde(default)]
    pub patrol: PatrolConfig,
    /// The verifier's postcondition checks of executed actions.
    #[serde(default)]
    pub verify: VerifyConfig,
    /// The connector's polling of Proxmox VE clusters (ADR 0013).
    #[serde(default)]
    pub connector: ConnectorConfig,
    /// Headless AI settings: defaults under every tenant's stored `/api/settings/ai`.
    pub ai: AiConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Connection string of the schema owner: runs migrations, creates the application role.
    pub url: String,
    /// Password for the application role; unset for trust or peer authentication.
    pub app_password: Option<String>,
    /// Full connection string for the application role (`pulse_app`, the non-owner role the
    /// migrations grant to); overrides `url` with that user.
    pub app_url: Option<String>,
    pub pool_size: usize,
    pub connect_timeout_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    pub url: String,
    /// Prepended to every subject and stream name; lets several stacks share one server.
    pub subject_prefix: Option<String>,
    pub request_timeout_ms: u64,
    pub streams: StreamLimits,
}

/// Size limits of the JetStream streams. JetStream reserves `max_bytes` of storage per stream
/// up front, so these also bound what a deployment claims on its NATS server.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StreamLimits {
    pub jobs_max_bytes: i64,
    pub events_max_bytes: i64,
    pub dlq_max_bytes: i64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `tracing` filter directives, e.g. `info,pulse_bus=debug`.
    pub log_filter: String,
    pub log_format: LogFormat,
    /// OTLP/HTTP endpoint (e.g. `http://127.0.0.1:4318`); traces are exported only when set.
    pub otel_endpoint: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address for this process's `/healthz`, `/readyz` and `/metrics`. Unset: the
    /// service's default port (gateway and relay serve them on their main listener).
    pub listen: Option<SocketAddr>,
    /// Let several processes bind the same main listener (`SO_REUSEPORT`): the kernel spreads
    /// new connections over them, and the survivors keep serving when one exits. For replicas
    /// of the gateway or the relay on one host (`pulsectl up --replicas`); off by default so
    /// two stacks configured with one port fail loudly instead of sharing it.
    #[serde(default)]
    pub reuse_port: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    pub listen: SocketAddr,
    /// A service instance whose last heartbeat is older than this is not counted.
    pub heartbeat_stale_ms: u64,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Event streams (`GET /api/ai/patrol/stream`) one tenant may hold open on one gateway.
    pub max_streams_per_tenant: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    pub listen: SocketAddr,
    /// An agent with no report for this long goes offline and its resources become `unknown`.
    pub agent_offline_after_ms: u64,
    /// Largest agent message accepted, in bytes; larger reports are rejected.
    pub max_report_bytes: usize,
    /// Sustained reports per second accepted from one agent (bursts of 4x are allowed).
    pub max_reports_per_sec: u32,
    /// How long `relay.command|observe|read` wait for the agent's answer.
    pub request_timeout_ms: u64,
    /// Sustained requests per second forwarded to one agent (bursts of 4x are allowed); the
    /// same budget bounds the answers accepted back.
    pub max_requests_per_sec: u32,
    /// Largest answer (receipt, observation, read result) accepted from an agent, in bytes.
    pub max_response_bytes: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    pub interval_ms: u64,
}

/// The patrol-scheduler's deterministic alert floor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunnerConfig {
    /// How long a runner's hold on a running Patrol run lasts without renewal. The runner renews
    /// every third of it; a run whose lease lapses ends `error` (cause `runner_lost`). Also the
    /// ack wait of the `jobs.watch` consumer, so a dead runner's job is redelivered after it.
    /// Investigation attempts are held under the same lease: one whose runner stops renewing
    /// is taken over by another model-runner.
    pub lease_ms: u64,
    /// How often the patrol-scheduler looks for runs whose lease lapsed.
    pub lease_sweep_ms: u64,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            lease_ms: 30_000,
            lease_sweep_ms: 2_000,
        }
    }
}

impl RunnerConfig {
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.lease_ms.max(300))
    }

    /// The renewal interval: a third of the lease.
    pub fn heartbeat(&self) -> std::time::Duration {
        self.lease() / 3
    }

    pub fn lease_sweep(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.lease_sweep_ms.max(100))
    }
}

/// The patrol-scheduler's run dispatcher. Each tenant's cadence comes from its AI settings
/// (`patrol_interval_minutes`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PatrolConfig {
    /// Dispatched Patrol runs in flight at once across all tenants.
    pub max_in_flight: usize,
    /// Jitter of each tenant's cadence slot, percent of its interval (at most 40).
    pub jitter_pct: u32,
    /// Scoped runs of one tenant waiting to start before new ones are refused.
    pub scoped_queue_limit: usize,
    /// Scoped runs of one tenant running at the same time.
    pub max_scoped_in_flight: usize,
    /// How often the dispatcher looks for ended runs and runs accepted by other replicas.
    pub dispatch_poll_ms: u64,
    /// How often the dispatcher re-reads every tenant's cadence (also on a settings change).
    pub schedule_refresh_ms: u64,
    /// One cadence for every tenant, overriding their settings; for tests and benchmarks.
    pub cadence_override_ms: Option<u64>,
    /// How long the dispatcher's leadership outlives a silent holder: Postgres ends the lock's
    /// session after this long without a query (`idle_session_timeout`), so a frozen or
    /// partitioned leader hands the cadence over to another replica. At least 5x
    /// `dispatch_poll_ms`.
    pub leader_lease_ms: u64,
    /// How long a dispatched run may stay `queued` (no runner took its job) before its job is
    /// written again.
    pub take_deadline_ms: u64,
    /// How many times an untaken run's job is written again before the run ends `error` with
    /// cause `runner_unavailable`.
    pub max_redispatches: u32,
}

impl Default for PatrolConfig {
    fn default() -> Self {
        Self {
            max_in_flight: 64,
            jitter_pct: 10,
            scoped_queue_limit: 20,
            max_scoped_in_flight: 1,
            dispatch_poll_ms: 1_000,
            schedule_refresh_ms: 60_000,
            cadence_override_ms: None,
            leader_lease_ms: 15_000,
            take_deadline_ms: 120_000,
            max_redispatches: 2,
        }
    }
}

impl PatrolConfig {
    /// The take deadline, at least a second.
    pub fn take_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.take_deadline_ms.max(1_000))
    }
}

/// The verifier's postcondition checks: it polls fresh observations of the acted-on resource
/// until the postcondition holds or the wait runs out.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyConfig {
    /// How long a postcondition check keeps polling when the request names no wait.
    pub postcondition_wait_ms: u64,
    /// Pause between two fresh observations of one postcondition check.
    pub postcondition_poll_ms: u64,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self {
            postcondition_wait_ms: 30_000,
            postcondition_poll_ms: 1_000,
        }
    }
}

/// The connector: which connections one process polls and how it reaches the relay.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectorConfig {
    /// Base URL of the agent relay it reports through (unset: `http://<relay.listen>`).
    pub relay_url: Option<String>,
    /// Connections one connector process polls at most; the rest wait for another replica.
    pub max_connections: usize,
    /// How often it looks for connections whose lease is free or lapsed.
    pub claim_every_ms: u64,
    /// How long one request to a Proxmox API may take.
    pub request_timeout_ms: u64,
    /// How long a `guest.shutdown` or `guest.reboot` gives the guest's OS to shut down (sent to
    /// Proxmox as the task's `timeout`); past it the action fails, it is never forced.
    pub shutdown_timeout_seconds: u32,
}

impl Default for ConnectorConfig {
    fn default() -> Self {
        Self {
            relay_url: None,
            max_connections: 64,
            claim_every_ms: 5_000,
            request_timeout_ms: 20_000,
            shutdown_timeout_seconds: 120,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// How often the scheduler looks for agents that reported since their last evaluation.
    pub tick_ms: u64,
    /// Agents evaluated per batch (one transaction per tenant per batch).
    pub batch_size: u32,
}

/// Where the key that seals stored secrets (provider API keys) lives.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SecretsConfig {
    /// 32 random bytes; unset: `<state_dir>/secrets/master.key`, created (mode 0600) on first use.
    pub master_key_file: Option<PathBuf>,
}

/// A secret from config or the environment; never printed by `Debug`.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct SecretString(pub String);

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One provider's connection settings from config (`ai.providers.<id>`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AiProviderConfig {
    pub api_key: Option<SecretString>,
    pub base_url: Option<String>,
    /// `auto`, `on` or `off`, as `/api/settings/ai` names it (checked there).
    pub streaming: Option<String>,
    /// `auto`, `on` or `off`.
    pub tool_calls_from_text: Option<String>,
    pub request_timeout_seconds: Option<u32>,
    /// Ollama only.
    pub keep_alive: Option<String>,
    /// Ollama only.
    pub num_ctx: Option<u32>,
    /// Ollama only.
    pub think: Option<bool>,
}

/// AI settings for headless installs, same names as `/api/settings/ai`. Values a tenant stored
/// through the API take precedence; these fill what the tenant did not set.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AiConfig {
    pub providers: std::collections::BTreeMap<String, AiProviderConfig>,
    pub model: Option<String>,
    pub chat_model: Option<String>,
    pub patrol_model: Option<String>,
    pub auto_fix_model: Option<String>,
    pub patrol_interval_minutes: Option<u32>,
    pub autonomy_level: Option<String>,
}

impl Default for PulseConfig {
    fn default() -> Self {
        Self {
            state_dir: PathBuf::from(".pulse"),
            database: DatabaseConfig {
                url: "postgres://root@127.0.0.1:5432/pulse".to_owned(),
                app_password: None,
                app_url: None,
                pool_size: 16,
                connect_timeout_ms: 5_000,
            },
            nats: NatsConfig {
                url: "nats://127.0.0.1:4222".to_owned(),
                subject_prefix: None,
                request_timeout_ms: 5_000,
                streams: StreamLimits {
                    jobs_max_bytes: 1 << 30,
                    events_max_bytes: 1 << 30,
                    dlq_max_bytes: 256 << 20,
                },
            },
            telemetry: TelemetryConfig {
                log_filter: "info".to_owned(),
                log_format: LogFormat::Text,
                otel_endpoint: None,
            },
            http: HttpConfig {
                listen: None,
                reuse_port: false,
            },
            gateway: GatewayConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 7655)),
                heartbeat_stale_ms: 15_000,
                max_body_bytes: 1024 * 1024,
                max_streams_per_tenant: 16,
            },
            relay: RelayConfig {
                listen: SocketAddr::from(([127, 0, 0, 1], 7656)),
                agent_offline_after_ms: 30_000,
                max_report_bytes: 10 * 1024 * 1024,
                max_reports_per_sec: 5,
                request_timeout_ms: 30_000,
                max_requests_per_sec: 10,
                max_response_bytes: 1024 * 1024,
            },
            heartbeat: HeartbeatConfig { interval_ms: 2_000 },
            alerts: AlertsConfig {
                tick_ms: 1_000,
                batch_size: 100,
            },
            secrets: SecretsConfig::default(),
            runner: RunnerConfig::default(),
            patrol: PatrolConfig::default(),
            verify: VerifyConfig::default(),
            connector: ConnectorConfig::default(),
            ai: AiConfig::default(),
        }
    }
}

/// Flat environment names operators expect, mapped onto nested keys.
const ENV_ALIASES: [(&str, &str); 4] = [
    ("database_url", "database.url"),
    ("nats_url", "nats.url"),
    ("otel_endpoint", "telemetry.otel_endpoint"),
    ("state_dir", "state_dir"),
];

impl PulseConfig {
    /// Defaults, then the `PULSE_CONFIG` file, then the `PULSE_*` variables of this process.
    pub fn load() -> Result<Self, ConfigError> {
        Self::from_figment(Self::figment(std::env::vars())?)
    }

    /// The layered sources built from an explicit environment, for callers that merge further
    /// values (tests, CLI flags) without touching the process environment.
    pub fn figment(
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Figment, ConfigError> {
        let vars: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(key, _)| key.starts_with("PULSE_"))
            .collect();
        let mut figment = Figment::from(Serialized::defaults(PulseConfig::default()));
        if let Some((_, path)) = vars.iter().find(|(key, _)| key == "PULSE_CONFIG") {
            figment = figment.merge(Toml::file_exact(path));
        }
        for (key, value) in &vars {
            let Some(path) = env_key_to_path(key) else {
                continue;
            };
            let value: Value = value.parse().unwrap_or_else(|_| Value::from(value.clone()));
            figment = figment.merge((path, value));
        }
        Ok(figment)
    }

    pub fn from_figment(figment: Figment) -> Result<Self, ConfigError> {
        figment.extract().map_err(|e| ConfigError(Box::new(e)))
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }

    pub fn admin_token_path(&self) -> PathBuf {
        self.state_dir.join("admin-token")
    }

    /// The bootstrap admin's web UI password, written once beside the admin token.
    pub fn admin_password_path(&self) -> PathBuf {
        self.state_dir.join("admin-password")
    }

    pub fn master_key_path(&self) -> PathBuf {
        self.secrets
            .master_key_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join("secrets").join("master.key"))
    }
}

/// Top-level keys of [`PulseConfig`]. Variables naming anything else (`PULSE_TOKEN` for the CLI,
/// `PULSE_TEST_DATABASE_URL` for tests) belong to other programs and are left alone; an unknown
/// key inside a known section (`PULSE_NATS__URLL`) is still an error.
const TOP_LEVEL_KEYS: [&str; 15] = [
    "connector",
    "state_dir",
    "database",
    "nats",
    "telemetry",
    "http",
    "gateway",
    "relay",
    "heartbeat",
    "alerts",
    "secrets",
    "runner",
    "patrol",
    "verify",
    "ai",
];

/// `PULSE_NATS__SUBJECT_PREFIX` -> `nats.subject_prefix`; flat aliases map to their nested key;
/// `PULSE_CONFIG` names the file and is not itself a setting.
fn env_key_to_path(key: &str) -> Option<String> {
    let rest = key.strip_prefix("PULSE_")?.to_ascii_lowercase();
    if let Some((_, nested)) = ENV_ALIASES.iter().find(|(flat, _)| *flat == rest) {
        return Some((*nested).to_owned());
    }
    let path = rest.replace("__", ".");
    let top = path.split('.').next().unwrap_or_default();
    TOP_LEVEL_KEYS.contains(&top).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every leaf key of the configuration, dotted (`database.url`); the provider table is
    /// keyed by provider name, so its entries are documented by pattern, not enumerated.
    fn leaf_keys(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) if prefix != "ai.providers" => {
                for (key, child) in map {
                    let dotted = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    leaf_keys(&dotted, child, out);
                }
            }
            serde_json::Value::Object(_) => out.push(format!("{prefix}.<id>")),
            _ => out.push(prefix.to_owned()),
        }
    }

    #[test]
    fn every_setting_is_documented() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
        )
        .expect("docs/configuration.md");
        let mut keys = Vec::new();
        leaf_keys(
            "",
            &serde_json::to_value(PulseConfig::default()).expect("config serializes"),
            &mut keys,
        );
        assert!(keys.len() > 20, "{keys:?}");
        let missing: Vec<&String> = keys
            .iter()
            .filter(|key| !doc.contains(&format!("`{key}")))
            .collect();
        assert!(
            missing.is_empty(),
            "settings missing from docs/configuration.md: {missing:?}"
        );
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn temp_toml(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pulse-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pulse.toml");
        std::fs::write(&path, body).unwrap();
        path
    }

    #[test]
    fn defaults_are_the_documented_local_stack() {
        let config = PulseConfig::from_figment(PulseConfig::figment(vars(&[])).unwrap()).unwrap();
        assert_eq!(config, PulseConfig::default());
        assert_eq!(config.gateway.listen.to_string(), "127.0.0.1:7655");
        assert_eq!(config.relay.listen.to_string(), "127.0.0.1:7656");
        assert_eq!(config.state_dir, PathBuf::from(".pulse"));
    }

    #[test]
    fn file_then_env_layering_with_aliases() {
        let file = temp_toml(
            "layering",
            r#"
            state_dir = "/from-file"
            [nats]
            url = "nats://file:4222"
            subject_prefix = "filep"
            "#,
        );
        let env = vars(&[
            ("PULSE_CONFIG", file.to_str().unwrap()),
            ("PULSE_NATS_URL", "nats://env:4222"),
            ("PULSE_DATABASE_URL", "postgres://env/db"),
            ("PULSE_GATEWAY__HEARTBEAT_STALE_MS", "999"),
            ("PULSE_OTEL_ENDPOINT", "http://otel:4318"),
            ("PULSE_HTTP__LISTEN", "127.0.0.1:9999"),
            ("HOME", "/ignored"),
        ]);
        let config = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap();
        assert_eq!(config.state_dir, PathBuf::from("/from-file"));
        assert_eq!(config.nats.url, "nats://env:4222");
        assert_eq!(config.nats.subject_prefix.as_deref(), Some("filep"));
        assert_eq!(config.database.url, "postgres://env/db");
        assert_eq!(config.gateway.heartbeat_stale_ms, 999);
        assert_eq!(config.http.listen.unwrap().to_string(), "127.0.0.1:9999");
        assert_eq!(
            config.telemetry.otel_endpoint.as_deref(),
            Some("http://otel:4318")
        );
    }

    #[test]
    fn unknown_keys_are_an_error_not_silently_ignored() {
        let file = temp_toml("unknown", "[nats]\nurll = \"x\"\n");
        let env = vars(&[("PULSE_CONFIG", file.to_str().unwrap())]);
        let err = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap_err();
        assert!(err.to_string().contains("urll"), "{err}");
    }

    #[test]
    fn other_programs_variables_are_ignored_but_typos_in_sections_are_not() {
        let env = vars(&[
            ("PULSE_TOKEN", "pulse_x"),
            ("PULSE_GATEWAY_URL", "http://127.0.0.1:7655"),
            ("PULSE_TEST_DATABASE_URL", "postgres://x"),
            ("PULSE_NATS__STREAMS__JOBS_MAX_BYTES", "1024"),
        ]);
        let config = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap();
        assert_eq!(config.nats.streams.jobs_max_bytes, 1024);
        let env = vars(&[("PULSE_NATS__URLL", "nats://x")]);
        let err = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap_err();
        assert!(err.to_string().contains("urll"), "{err}");
    }

    #[test]
    fn alerts_section_defaults_and_overrides() {
        let config = PulseConfig::from_figment(PulseConfig::figment(vars(&[])).unwrap()).unwrap();
        assert_eq!(config.alerts.tick_ms, 1_000);
        assert_eq!(config.alerts.batch_size, 100);
        let env = vars(&[
            ("PULSE_ALERTS__TICK_MS", "200"),
            ("PULSE_ALERTS__BATCH_SIZE", "50"),
        ]);
        let config = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap();
        assert_eq!((config.alerts.tick_ms, config.alerts.batch_size), (200, 50));
        let env = vars(&[("PULSE_ALERTS__TICKMS", "200")]);
        let err = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap_err();
        assert!(err.to_string().contains("tickms"), "{err}");
    }

    #[test]
    fn patrol_section_defaults_and_overrides() {
        let config = PulseConfig::from_figment(PulseConfig::figment(vars(&[])).unwrap()).unwrap();
        assert_eq!(config.patrol, PatrolConfig::default());
        assert_eq!(config.patrol.cadence_override_ms, None);
        let env = vars(&[
            ("PULSE_PATROL__MAX_IN_FLIGHT", "8"),
            ("PULSE_PATROL__CADENCE_OVERRIDE_MS", "10000"),
        ]);
        let config = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap();
        assert_eq!(config.patrol.max_in_flight, 8);
        assert_eq!(config.patrol.cadence_override_ms, Some(10_000));
        assert_eq!(config.patrol.scoped_queue_limit, 20);
        let env = vars(&[("PULSE_PATROL__MAX_INFLIGHT", "8")]);
        let err = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap_err();
        assert!(err.to_string().contains("max_inflight"), "{err}");
    }

    #[test]
    fn ai_and_secrets_from_the_environment() {
        let config = PulseConfig::from_figment(PulseConfig::figment(vars(&[])).unwrap()).unwrap();
        assert_eq!(
            config.master_key_path(),
            PathBuf::from(".pulse/secrets/master.key")
        );
        assert!(config.ai.providers.is_empty());
        let env = vars(&[
            ("PULSE_AI__PATROL_MODEL", "openai:gpt-4.1-mini"),
            ("PULSE_AI__PROVIDERS__OPENAI__API_KEY", "sk-from-env"),
            (
                "PULSE_AI__PROVIDERS__OPENAI__BASE_URL",
                "http://127.0.0.1:9/v1",
            ),
            ("PULSE_SECRETS__MASTER_KEY_FILE", "/keys/pulse.key"),
        ]);
        let config = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap();
        assert_eq!(
            config.ai.patrol_model.as_deref(),
            Some("openai:gpt-4.1-mini")
        );
        let openai = &config.ai.providers["openai"];
        assert_eq!(openai.api_key, Some(SecretString("sk-from-env".to_owned())));
        assert_eq!(openai.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(config.master_key_path(), PathBuf::from("/keys/pulse.key"));
        assert!(!format!("{config:?}").contains("sk-from-env"));
    }

    #[test]
    fn wrongly_typed_values_are_an_error() {
        let env = vars(&[("PULSE_GATEWAY__HEARTBEAT_STALE_MS", "soon")]);
        let err = PulseConfig::from_figment(PulseConfig::figment(env).unwrap()).unwrap_err();
        assert!(err.to_string().contains("heartbeat_stale_ms"), "{err}");
    }
}
