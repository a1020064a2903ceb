//! Supervised-service definitions: one TOML file per service in the services directory.
//! `docs/agent.md` documents the format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::health::HealthCheck;
use pulse_domain::backoff::Backoff;

/// When to start a service again after it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    Never,
    OnFailure,
    Always,
}

impl RestartPolicy {
    /// Whether an exit with `code` (`None`: killed by a signal or failed to start) restarts.
    pub fn restarts(self, code: Option<i32>) -> bool {
        match self {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => code != Some(0),
            RestartPolicy::Always => true,
        }
    }
}

/// A validated service definition.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceDefinition {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub working_dir: Option<PathBuf>,
    pub labels: BTreeMap<String, String>,
    pub restart: RestartPolicy,
    pub backoff: Backoff,
    pub health: Option<HealthSpec>,
}

/// A health check and how often it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSpec {
    pub check: HealthCheck,
    pub interval: Duration,
    pub timeout: Duration,
}

/// Why a definition file was refused. The message names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefinition {
    name: String,
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    working_dir: Option<PathBuf>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    restart: RawRestart,
    health: Option<RawHealth>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRestart {
    #[serde(default = "default_policy")]
    policy: RestartPolicy,
    #[serde(default = "default_initial_backoff_ms")]
    initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff_ms")]
    max_backoff_ms: u64,
}

impl Default for RawRestart {
    fn default() -> Self {
        Self {
            policy: default_policy(),
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
        }
    }
}

fn default_policy() -> RestartPolicy {
    RestartPolicy::OnFailure
}
fn default_initial_backoff_ms() -> u64 {
    1_000
}
fn default_max_backoff_ms() -> u64 {
    60_000
}
fn default_interval_ms() -> u64 {
    10_000
}
fn default_timeout_ms() -> u64 {
    5_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    #[serde(rename = "type")]
    kind: String,
    url: Option<String>,
    expect_status: Option<u16>,
    address: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    path: Option<PathBuf>,
    #[serde(default = "default_interval_ms")]
    interval_ms: u64,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

/// Service names end up in resource ids (`service:<host>:<name>`).
pub fn valid_service_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Parses and validates one definition; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<ServiceDefinition, DefinitionError> {
    let fail = |message: String| DefinitionError::Invalid {
        path: path.display().to_string(),
        message,
    };
    let raw: RawDefinition = toml::from_str(text).map_err(|e| fail(e.message().to_owned()))?;
    if !valid_service_name(&raw.name) {
        return Err(fail(format!(
            "name: {:?} must be 1 to 64 of A-Z a-z 0-9 . _ -",
            raw.name
        )));
    }
    if raw.command.trim().is_empty() {
        return Err(fail("command: must not be empty".to_owned()));
    }
    if raw.restart.initial_backoff_ms == 0 {
        return Err(fail(
            "restart.initial_backoff_ms: must be above 0".to_owned(),
        ));
    }
    if raw.restart.max_backoff_ms < raw.restart.initial_backoff_ms {
        return Err(fail(
            "restart.max_backoff_ms: must be at least restart.initial_backoff_ms".to_owned(),
        ));
    }
    let health = raw
        .health
        .map(|h| health_spec(h).map_err(|m| fail(format!("health: {m}"))))
        .transpose()?;
    Ok(ServiceDefinition {
        name: raw.name,
        command: raw.command,
        args: raw.args,
        env: raw.env,
        working_dir: raw.working_dir,
        labels: raw.labels,
        restart: raw.restart.policy,
        backoff: Backoff::new(
            Duration::from_millis(raw.restart.initial_backoff_ms),
            Duration::from_millis(raw.restart.max_backoff_ms),
        ),
        health,
    })
}

fn health_spec(raw: RawHealth) -> Result<HealthSpec, String> {
    let only = |allowed: &[&str]| -> Result<(), String> {
        let present = [
            ("url", raw.url.is_some()),
            ("expect_status", raw.expect_status.is_some()),
            ("address", raw.address.is_some()),
            ("command", raw.command.is_some()),
            ("args", !raw.args.is_empty()),
            ("path", raw.path.is_some()),
        ];
        match present
            .iter()
            .find(|(name, set)| *set && !allowed.contains(name))
        {
            Some((name, _)) => Err(format!("{name} does not apply to type {:?}", raw.kind)),
            None => Ok(()),
        }
    };
    let check = match raw.kind.as_str() {
        "http" => {
            only(&["url", "expect_status"])?;
            let url = raw.url.clone().ok_or("url is required for type \"http\"")?;
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("url {url:?} must start with http:// or https://"));
            }
            HealthCheck::Http {
                url,
                expect_status: raw.expect_status.unwrap_or(200),
            }
        }
        "tcp" => {
            only(&["address"])?;
            let address = raw
                .address
                .clone()
                .ok_or("address (host:port) is required for type \"tcp\"")?;
            if address
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
            {
                return Err(format!("address {address:?} must be host:port"));
            }
            HealthCheck::Tcp { address }
        }
        "exec" => {
            only(&["command", "args"])?;
            let command = raw
                .command
                .clone()
                .filter(|c| !c.trim().is_empty())
                .ok_or("command is required for type \"exec\"")?;
            HealthCheck::Exec {
                command,
                args: raw.args.clone(),
            }
        }
        "file-absent" => {
            only(&["path"])?;
            let path = raw
                .path
                .clone()
                .ok_or("path is required for type \"file-absent\"")?;
            HealthCheck::FileAbsent { path }
        }
        other => {
            return Err(format!(
                "type {other:?} is not one of http, tcp, exec, file-absent"
            ));
        }
    };
    if raw.interval_ms < 100 {
        return Err("interval_ms: must be at least 100".to_owned());
    }
    if raw.timeout_ms == 0 {
        return Err("timeout_ms: must be above 0".to_owned());
    }
    Ok(HealthSpec {
        check,
        interval: Duration::from_millis(raw.interval_ms),
        timeout: Duration::from_millis(raw.timeout_ms),
    })
}

/// Every `*.toml` of `dir`, parsed, in file-name order. Bad files and a second definition of a
/// name are returned as errors; the good ones still load.
pub async fn load_dir(dir: &Path) -> (Vec<ServiceDefinition>, Vec<DefinitionError>) {
    let mut files = Vec::new();
    if let Ok(mut entries) = tokio::fs::read_dir(dir).await {
        while let Ok(Some(entry)) = entries.next_entry().await {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "toml") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut definitions: Vec<ServiceDefinition> = Vec::new();
    let mut errors = Vec::new();
    for path in files {
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(text) => text,
            Err(e) => {
                errors.push(DefinitionError::Invalid {
                    path: path.display().to_string(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        match parse(&path, &text) {
            Ok(def) if definitions.iter().any(|d| d.name == def.name) => {
                errors.push(DefinitionError::Invalid {
                    path: path.display().to_string(),
                    message: format!("name: {:?} is already defined by another file", def.name),
                });
            }
            Ok(def) => definitions.push(def),
            Err(e) => errors.push(e),
        }
    }
    (definitions, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<ServiceDefinition, String> {
        parse(Path::new("svc.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn full_definition() {
        let def = parse_str(
            r#"
name = "web"
command = "python3"
args = ["-m", "http.server", "8080"]
working_dir = "/srv"
env = { PYTHONUNBUFFERED = "1" }
labels = { team = "ops" }

[restart]
policy = "always"
initial_backoff_ms = 500
max_backoff_ms = 8000

[health]
type = "http"
url = "http://127.0.0.1:8080/"
expect_status = 200
interval_ms = 5000
timeout_ms = 1000
"#,
        )
        .unwrap();
        assert_eq!(def.name, "web");
        assert_eq!(def.args.len(), 3);
        assert_eq!(def.restart, RestartPolicy::Always);
        assert_eq!(def.env["PYTHONUNBUFFERED"], "1");
        let health = def.health.unwrap();
        assert_eq!(
            health.check,
            HealthCheck::Http {
                url: "http://127.0.0.1:8080/".into(),
                expect_status: 200
            }
        );
        assert_eq!(health.interval, Duration::from_secs(5));
    }

    #[test]
    fn minimal_definition_gets_defaults() {
        let def = parse_str("name = \"s\"\ncommand = \"sleep\"\nargs = [\"60\"]\n").unwrap();
        assert_eq!(def.restart, RestartPolicy::OnFailure);
        assert_eq!(
            def.backoff,
            Backoff::new(Duration::from_secs(1), Duration::from_secs(60))
        );
        assert!(def.health.is_none());
    }

    #[test]
    fn each_check_type() {
        let tcp =
            parse_str("name='a'\ncommand='x'\n[health]\ntype='tcp'\naddress='127.0.0.1:5432'\n")
                .unwrap();
        assert!(matches!(tcp.health.unwrap().check, HealthCheck::Tcp { .. }));
        let exec = parse_str(
            "name='a'\ncommand='x'\n[health]\ntype='exec'\ncommand='test'\nargs=['-f','/x']\n",
        )
        .unwrap();
        assert!(matches!(
            exec.health.unwrap().check,
            HealthCheck::Exec { .. }
        ));
        let file =
            parse_str("name='a'\ncommand='x'\n[health]\ntype='file-absent'\npath='/tmp/m'\n")
                .unwrap();
        assert!(matches!(
            file.health.unwrap().check,
            HealthCheck::FileAbsent { .. }
        ));
    }

    #[test]
    fn bad_definitions_have_clear_errors() {
        let cases = [
            ("command = 'x'", "missing field `name`"),
            ("name = 'a b'\ncommand='x'", "name: \"a b\" must be"),
            ("name = 'a'\ncommand=''", "command: must not be empty"),
            ("name = 'a'\ncommand='x'\ncmd='y'", "unknown field `cmd`"),
            (
                "name = 'a'\ncommand='x'\n[restart]\npolicy='sometimes'",
                "unknown variant `sometimes`",
            ),
            (
                "name = 'a'\ncommand='x'\n[restart]\ninitial_backoff_ms=5000\nmax_backoff_ms=10",
                "max_backoff_ms: must be at least",
            ),
            (
                "name='a'\ncommand='x'\n[health]\ntype='ping'",
                "health: type \"ping\" is not one of",
            ),
            (
                "name='a'\ncommand='x'\n[health]\ntype='http'",
                "health: url is required",
            ),
            (
                "name='a'\ncommand='x'\n[health]\ntype='tcp'\naddress='localhost'",
                "must be host:port",
            ),
            (
                "name='a'\ncommand='x'\n[health]\ntype='file-absent'\nurl='http://x'",
                "health: url does not apply to type \"file-absent\"",
            ),
            (
                "name='a'\ncommand='x'\n[health]\ntype='file-absent'\npath='/x'\ninterval_ms=1",
                "interval_ms: must be at least 100",
            ),
            ("name = 'a'\ncommand = [", "svc.toml:"),
        ];
        for (text, expected) in cases {
            let error = parse_str(text).expect_err(text);
            assert!(
                error.contains(expected),
                "{text:?}: {error:?} does not contain {expected:?}"
            );
            assert!(error.starts_with("svc.toml: "), "{error}");
        }
    }

    #[tokio::test]
    async fn directory_loading_reports_bad_files_and_duplicates() {
        let dir = std::env::temp_dir().join(format!("pulse-defs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.toml"), "name='one'\ncommand='sleep'\n").unwrap();
        std::fs::write(dir.join("b.toml"), "name='one'\ncommand='sleep'\n").unwrap();
        std::fs::write(dir.join("c.toml"), "nonsense").unwrap();
        std::fs::write(dir.join("d.txt"), "ignored").unwrap();
        let (defs, errors) = load_dir(&dir).await;
        assert_eq!(defs.len(), 1);
        assert_eq!(errors.len(), 2);
        assert!(errors[0].to_string().contains("already defined"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
