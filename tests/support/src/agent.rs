//! An agent stack for tests: the gateway and agent-relay binaries on one test database and
//! subject prefix, plus `pulse-agent` processes reporting to the relay.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pulse_domain::resource::Resource;

use crate::service::{ANY_PORT, ServiceProcess, TestGateway, scratch_dir, small_streams_env};

/// Gateway + relay. Dropping it kills both; [`AgentStack::stop`] also cleans up.
pub struct AgentStack {
    pub gateway: TestGateway,
    pub relay: ServiceProcess,
    /// `http://127.0.0.1:<port>` of the relay.
    pub relay_url: String,
    pub dir: PathBuf,
    /// The relay's environment, for [`AgentStack::restart_relay`].
    relay_env: Vec<(String, String)>,
    relay_starts: u32,
}

/// How to start one agent.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub host_id: String,
    pub token: String,
    pub services_dir: PathBuf,
    pub state_dir: PathBuf,
    pub interval: Duration,
    /// Start the agent with `--enable-commands`.
    pub enable_commands: bool,
    /// Start the agent with `--allow-read-exec`.
    pub allow_read_exec: bool,
    /// `DOCKER_HOST` for the agent; without it the agent's Docker collector is off.
    pub docker_host: Option<String>,
}

impl AgentStack {
    /// Starts the gateway, then the relay with `relay_env` (e.g.
    /// `PULSE_RELAY__AGENT_OFFLINE_AFTER_MS`) on the same database and prefix.
    pub async fn start(relay_env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let gateway = TestGateway::start().await?;
        let dir = scratch_dir("agent-stack")?;
        let mut env = vec![
            (
                "PULSE_DATABASE_URL".to_owned(),
                gateway.db.owner_url().to_owned(),
            ),
            ("PULSE_NATS_URL".to_owned(), crate::nats::nats_url()),
            (
                "PULSE_NATS__SUBJECT_PREFIX".to_owned(),
                gateway.prefix.clone(),
            ),
            ("PULSE_STATE_DIR".to_owned(), dir.display().to_string()),
            ("PULSE_RELAY__LISTEN".to_owned(), ANY_PORT.to_owned()),
            ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "info".to_owned()),
        ];
        env.extend(small_streams_env());
        env.extend(
            relay_env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let mut relay = ServiceProcess::spawn("pulse-agent-relay", &env, &dir.join("relay.log"))?;
        let addr = relay.wait_listening().await?;
        let relay_url = format!("http://{addr}");
        relay.wait_ready(&gateway.http, &relay_url).await?;
        // A restarted relay binds the port this one got: its agents keep their relay URL.
        set_env(&mut env, "PULSE_RELAY__LISTEN", addr.to_string());
        Ok(Self {
            gateway,
            relay,
            relay_url,
            dir,
            relay_env: env,
            relay_starts: 1,
        })
    }

    /// Stops the relay (SIGTERM) and starts it again on the same port and database; connected
    /// agents lose their session and reconnect.
    pub async fn restart_relay(&mut self) -> anyhow::Result<()> {
        self.restart_relay_after(libc::SIGTERM).await
    }

    /// Kills the relay (SIGKILL: no drain, requests in flight are lost) and starts it again.
    pub async fn kill_and_restart_relay(&mut self) -> anyhow::Result<()> {
        self.restart_relay_after(libc::SIGKILL).await
    }

    async fn restart_relay_after(&mut self, signal: i32) -> anyhow::Result<()> {
        if let Some(pid) = self.relay.pid() {
            crate::service::signal(pid, signal);
        }
        let addr = self
            .relay_url
            .trim_start_matches("http://")
            .parse::<std::net::SocketAddr>()?;
        crate::wait::until(
            Duration::from_secs(20),
            "the old relay to exit",
            || async move { std::net::TcpListener::bind(addr).ok().map(drop) },
        )
        .await?;
        self.relay_starts += 1;
        let log = self.dir.join(format!("relay-{}.log", self.relay_starts));
        let next = ServiceProcess::spawn("pulse-agent-relay", &self.relay_env, &log)?;
        // The old process has exited; dropping its handle reaps it.
        drop(std::mem::replace(&mut self.relay, next));
        self.relay
            .wait_ready(&self.gateway.http, &self.relay_url)
            .await
    }

    /// Starts one more relay replica on the same database and prefix, on its own port; returns
    /// it with its `http://127.0.0.1:<port>` URL.
    pub async fn start_replica(&mut self) -> anyhow::Result<(ServiceProcess, String)> {
        self.relay_starts += 1;
        let mut env = self.relay_env.clone();
        set_env(&mut env, "PULSE_RELAY__LISTEN", ANY_PORT.to_owned());
        let log = self.dir.join(format!("relay-{}.log", self.relay_starts));
        let mut replica = ServiceProcess::spawn("pulse-agent-relay", &env, &log)?;
        let url = replica.wait_base_url().await?;
        replica.wait_ready(&self.gateway.http, &url).await?;
        Ok((replica, url))
    }

    /// A new token of the admin's tenant with `scopes`, through `POST /api/tokens`.
    pub async fn create_token(&self, name: &str, scopes: &[&str]) -> anyhow::Result<String> {
        self.gateway.create_token(name, scopes).await
    }

    /// `GET /api/resources` with `token`: the list, or the refusal.
    pub async fn resources(&self, token: &str) -> anyhow::Result<Vec<Resource>> {
        let query = pulse_api::resources::ListQuery::default();
        let list = self.gateway.client_as(token)?.resources(&query).await;
        Ok(list
            .map_err(|e| anyhow::anyhow!("GET /api/resources: {e}"))?
            .resources)
    }

    /// `GET /api/resources/{reference}` with `token`: the resource, or the refusal with its
    /// status and stable code.
    pub async fn resource(
        &self,
        token: &str,
        reference: &str,
    ) -> Result<Resource, pulse_client::Error> {
        self.gateway.client_as(token)?.resource(reference).await
    }

    /// Waits until service `name` of agent `host` is a resource (read with `token`); its id.
    pub async fn service_resource_id(
        &self,
        token: &str,
        host: &str,
        name: &str,
        deadline: Duration,
    ) -> anyhow::Result<String> {
        crate::wait::until(
            deadline,
            &format!("the {name} service resource"),
            || async {
                let list = self.resources(token).await.ok()?;
                list.into_iter()
                    .find(|r| r.agent_id == host && r.name == name)
                    .map(|r| r.id.to_string())
            },
        )
        .await
    }

    /// Waits until resource `id` (read with `token`) has `health`.
    pub async fn wait_health(
        &self,
        token: &str,
        id: &str,
        health: &str,
        deadline: Duration,
    ) -> anyhow::Result<()> {
        crate::wait::until(deadline, &format!("{id} to be {health}"), || async {
            let resource = self.resource(token, id).await.ok()?;
            (resource.health.as_str() == health).then_some(())
        })
        .await
    }

    /// Starts an agent `host` with `--enable-commands` (a token with `agent:report` and
    /// `agent:exec`) supervising `services` (file name, definition).
    pub async fn spawn_command_agent(
        &self,
        host: &str,
        interval: Duration,
        services: &[(&str, String)],
    ) -> anyhow::Result<(AgentSpec, ServiceProcess)> {
        let token = self
            .create_token("agent-exec", &["agent:report", "agent:exec"])
            .await?;
        let mut spec = self.agent_spec(host, &token, interval)?;
        spec.enable_commands = true;
        for (file, definition) in services {
            write_service(&spec.services_dir, file, definition)?;
        }
        let agent = self.spawn_agent(&spec)?;
        Ok((spec, agent))
    }

    /// A fresh agent spec with its own directories under the stack's scratch dir.
    pub fn agent_spec(
        &self,
        host_id: &str,
        token: &str,
        interval: Duration,
    ) -> anyhow::Result<AgentSpec> {
        let state_dir = self.dir.join(format!("agent-{host_id}"));
        let services_dir = state_dir.join("services.d");
        std::fs::create_dir_all(&services_dir)?;
        Ok(AgentSpec {
            host_id: host_id.to_owned(),
            token: token.to_owned(),
            services_dir,
            state_dir,
            interval,
            enable_commands: false,
            allow_read_exec: false,
            docker_host: None,
        })
    }

    /// Starts `pulse-agent` for `spec`; its log goes to `<state_dir>/agent-<n>.log`.
    pub fn spawn_agent(&self, spec: &AgentSpec) -> anyhow::Result<ServiceProcess> {
        let mut env = vec![
            ("PULSE_AGENT_RELAY_URL".to_owned(), self.relay_url.clone()),
            ("PULSE_AGENT_TOKEN".to_owned(), spec.token.clone()),
            ("PULSE_AGENT_HOST_ID".to_owned(), spec.host_id.clone()),
            (
                "PULSE_AGENT_STATE_DIR".to_owned(),
                spec.state_dir.display().to_string(),
            ),
            (
                "PULSE_AGENT_SERVICES_DIR".to_owned(),
                spec.services_dir.display().to_string(),
            ),
            (
                "PULSE_AGENT_INTERVAL_MS".to_owned(),
                spec.interval.as_millis().to_string(),
            ),
            ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "info".to_owned()),
        ];
        match &spec.docker_host {
            Some(host) => env.push(("DOCKER_HOST".to_owned(), host.clone())),
            // Agents under test never touch a Docker engine of the machine.
            None => env.push(("PULSE_AGENT_NO_DOCKER".to_owned(), "true".to_owned())),
        }
        if spec.enable_commands {
            env.push(("PULSE_AGENT_ENABLE_COMMANDS".to_owned(), "true".to_owned()));
        }
        if spec.allow_read_exec {
            env.push(("PULSE_AGENT_ALLOW_READ_EXEC".to_owned(), "true".to_owned()));
        }
        let log = spec
            .state_dir
            .join(format!("agent-{}.log", uuid::Uuid::now_v7().simple()));
        ServiceProcess::spawn("pulse-agent", &env, &log)
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        let status = self.relay.stop(Duration::from_secs(10)).await?;
        anyhow::ensure!(status.success(), "relay exited with {status}");
        let _ = std::fs::remove_dir_all(&self.dir);
        self.gateway.stop().await
    }
}

/// Sets `key` to `value` in `env`, replacing any earlier value.
fn set_env(env: &mut Vec<(String, String)>, key: &str, value: String) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_owned(), value));
}

/// Writes a supervised-service definition file.
pub fn write_service(services_dir: &Path, file: &str, toml: &str) -> anyhow::Result<()> {
    std::fs::write(services_dir.join(file), toml)?;
    Ok(())
}

/// A host id unique to this test run: `label` plus the random tail of a UUIDv7, so parallel tests
/// on one database never share an agent.
pub fn host_id(label: &str) -> String {
    format!(
        "{label}-{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    )
}

/// The definition of a long-running supervised service `name` (always restarted) whose health
/// check passes while `marker` does not exist: creating the marker is the fault, removing it
/// the fix.
pub fn marker_service(name: &str, marker: &Path) -> String {
    marker_service_running(name, SLEEP_COMMAND, marker)
}

/// The definition of a long-running supervised service `name` (always restarted) with no health
/// check.
pub fn sleeper_service(name: &str) -> String {
    format!("name = \"{name}\"\n{SLEEP_COMMAND}[restart]\npolicy = \"always\"\n")
}

/// The `command` and `args` lines of a service that only sleeps.
pub const SLEEP_COMMAND: &str = "command = \"sleep\"\nargs = [\"3600\"]\n";

/// As [`marker_service`], running `command` (the service table's `command` and `args` lines,
/// and any other of its keys, each line ending in a newline) instead of a plain sleep.
pub fn marker_service_running(name: &str, command: &str, marker: &Path) -> String {
    format!(
        "name = \"{name}\"\n{command}\
         [restart]\npolicy = \"always\"\n\
         [health]\ntype = \"file-absent\"\npath = \"{}\"\ninterval_ms = 200\ntimeout_ms = 1000\n",
        marker.display()
    )
}

/// The `command` and `args` lines of a service that appends a line to `starts` each time it
/// starts, then sleeps.
pub fn counting_command(starts: &Path) -> String {
    format!(
        "command = \"sh\"\nargs = [\"-c\", \"echo started >> '{}'; exec sleep 3600\"]\n",
        starts.display()
    )
}

/// The resources of `list` whose id is or belongs to host `host_id`.
pub fn of_host<'a>(list: &'a [Resource], host_id: &str) -> Vec<&'a Resource> {
    let host = format!("host:{host_id}");
    list.iter()
        .filter(|r| r.agent_id == host_id || r.id.as_str() == host)
        .collect()
}
