//! The gateway's fleet view (`GET /api/health`) and how pulsectl summarises it.

use std::time::Duration;

use pulse_api::system::HealthReport;
use pulse_client::StatusCode;

use crate::service::FLEET;

/// What one poll of the gateway saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Report(HealthReport),
    /// No answer (not listening yet, timeout) or an answer that is not a health report.
    Unreachable(String),
}

#[derive(Debug, Clone)]
pub struct HealthProbe {
    api: pulse_client::Client,
}

/// Why the probe could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error(transparent)]
    Client(#[from] pulse_client::Error),
}

impl HealthProbe {
    pub fn new(gateway: &str) -> Result<Self, ProbeError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(1_500))
            .connect_timeout(Duration::from_millis(500))
            // The stack is local: an HTTP proxy from the environment must not be asked.
            .no_proxy()
            .build()?;
        let api = pulse_client::Client::with_http(gateway, None, http)?;
        Ok(Self { api })
    }

    pub async fn observe(&self) -> Observation {
        match self.api.health().await {
            Ok(report) => Observation::Report(report),
            Err(err) => Observation::Unreachable(unreachable(err)),
        }
    }
}

/// Why a poll saw no report, in a few words.
fn unreachable(err: pulse_client::Error) -> String {
    match err {
        pulse_client::Error::ConnectionRefused { .. } => "gateway not listening".to_owned(),
        pulse_client::Error::Transport { source, .. } if source.is_connect() => {
            "gateway not listening".to_owned()
        }
        pulse_client::Error::Transport { source, .. } if source.is_timeout() => {
            "gateway did not answer in time".to_owned()
        }
        pulse_client::Error::Transport { source, .. } => source.to_string(),
        pulse_client::Error::Api { status, .. } | pulse_client::Error::Status { status, .. } => {
            let status = StatusCode::from_u16(status)
                .map_or_else(|_| status.to_string(), |status| status.to_string());
            format!("unexpected answer ({status})")
        }
        other => format!("unexpected answer ({other})"),
    }
}

impl Observation {
    /// Fleet services that are not ready (all of them when the gateway did not answer).
    pub fn not_ready(&self) -> Vec<&'static str> {
        match self {
            Observation::Unreachable(_) => FLEET.to_vec(),
            Observation::Report(report) => FLEET
                .into_iter()
                .filter(|name| !report.services.get(*name).is_some_and(|s| s.ready))
                .collect(),
        }
    }

    /// Whether every fleet service reports at least `replicas` fresh instances.
    pub fn all_instances(&self, replicas: u8) -> bool {
        match self {
            Observation::Unreachable(_) => false,
            Observation::Report(report) => FLEET.into_iter().all(|name| {
                report
                    .services
                    .get(name)
                    .is_some_and(|s| s.instances >= usize::from(replicas))
            }),
        }
    }

    /// Every fleet service ready, each with at least `replicas` instances.
    pub fn all_ready_with(&self, replicas: u8) -> bool {
        self.all_ready() && self.all_instances(replicas)
    }

    pub fn all_ready(&self) -> bool {
        self.not_ready().is_empty()
    }

    /// One compact line, e.g. `ok: 6/6 ready` or
    /// `degraded: 5/6 ready; not ready: verifier (0 instances)`.
    pub fn status_line(&self) -> String {
        let report = match self {
            Observation::Unreachable(reason) => return format!("gateway unreachable: {reason}"),
            Observation::Report(report) => report,
        };
        let not_ready = self.not_ready();
        let ready = FLEET.len() - not_ready.len();
        let mut line = format!("{}: {ready}/{} ready", report.status, FLEET.len());
        if !not_ready.is_empty() {
            let detail: Vec<String> = not_ready
                .iter()
                .map(|name| match report.services.get(*name) {
                    None => format!("{name} (not reporting)"),
                    Some(health) => format!(
                        "{name} ({} instance{})",
                        health.instances,
                        if health.instances == 1 { "" } else { "s" }
                    ),
                })
                .collect();
            line.push_str("; not ready: ");
            line.push_str(&detail.join(", "));
        }
        let scaled: Vec<String> = FLEET
            .iter()
            .filter_map(|name| {
                let health = report.services.get(*name)?;
                (health.ready && health.instances > 1)
                    .then(|| format!("{name} x{}", health.instances))
            })
            .collect();
        if !scaled.is_empty() {
            line.push_str("; replicas: ");
            line.push_str(&scaled.join(", "));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(json: &str) -> Observation {
        Observation::Report(serde_json::from_str(json).unwrap())
    }

    const ALL_READY: &str = r#"{"status": "ok", "services": {
        "gateway": {"ready": true, "instances": 1},
        "patrol-scheduler": {"ready": true, "instances": 1},
        "model-runner": {"ready": true, "instances": 2},
        "action-broker": {"ready": true, "instances": 1},
        "verifier": {"ready": true, "instances": 1},
        "agent-relay": {"ready": true, "instances": 1},
        "connector": {"ready": true, "instances": 1}}}"#;

    #[test]
    fn all_ready_names_replicas_only_when_scaled() {
        let observation = report(ALL_READY);
        assert!(observation.all_ready());
        assert_eq!(
            observation.status_line(),
            "ok: 7/7 ready; replicas: model-runner x2"
        );
    }

    #[test]
    fn degraded_lists_what_is_not_ready_in_fleet_order() {
        let observation = report(
            r#"{"status": "degraded", "services": {
                "gateway": {"ready": true, "instances": 1},
                "verifier": {"ready": false, "instances": 0},
                "agent-relay": {"ready": false, "instances": 1},
                "unknown-extra": {"ready": true, "instances": 1}}}"#,
        );
        assert!(!observation.all_ready());
        assert_eq!(
            observation.not_ready(),
            [
                "patrol-scheduler",
                "model-runner",
                "action-broker",
                "verifier",
                "agent-relay",
                "connector"
            ]
        );
        assert_eq!(
            observation.status_line(),
            "degraded: 1/7 ready; not ready: patrol-scheduler (not reporting), \
             model-runner (not reporting), action-broker (not reporting), \
             verifier (0 instances), agent-relay (1 instance), connector (not reporting)"
        );
    }

    #[test]
    fn unreachable_gateway_means_nothing_is_ready() {
        let observation = Observation::Unreachable("gateway not listening".into());
        assert_eq!(observation.not_ready().len(), 7);
        assert_eq!(
            observation.status_line(),
            "gateway unreachable: gateway not listening"
        );
    }

    #[test]
    fn a_report_with_status_ok_but_missing_services_is_not_all_ready() {
        let observation = report(r#"{"status": "ok", "services": {}}"#);
        assert!(!observation.all_ready());
    }
}
