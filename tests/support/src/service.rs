//! Spawning the real service binaries against a per-test database and subject prefix.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::process::{Child, Command};

use crate::db::TestDb;

/// The directory holding the workspace's built binaries (`target/<profile>/`), found from the
/// running test executable (`target/<profile>/deps/<test>`).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let deps = exe.parent().context("test executable has no directory")?;
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().context("deps has no parent")?
    } else {
        deps
    };
    Ok(dir.to_path_buf())
}

/// Path of a built binary, or an error that says how to build it.
pub fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir()?.join(name);
    anyhow::ensure!(
        path.is_file(),
        "{} is not built; run `cargo build --bins` first",
        path.display()
    );
    Ok(path)
}

/// The listen address to give a service: port 0, so the OS picks a free port when the service
/// binds; [`ServiceProcess::wait_listening`] learns which.
pub const ANY_PORT: &str = "127.0.0.1:0";

/// A fresh scratch directory under the system temp dir.
pub fn scratch_dir(label: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("pulse-{label}-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Settings that keep a test stack's JetStream streams small: the server reserves each stream's
/// `max_bytes` up front, and production-sized streams from many parallel tests would exhaust it.
pub fn small_streams_env() -> Vec<(String, String)> {
    [
        ("PULSE_NATS__STREAMS__JOBS_MAX_BYTES", "8388608"),
        ("PULSE_NATS__STREAMS__EVENTS_MAX_BYTES", "8388608"),
        ("PULSE_NATS__STREAMS__DLQ_MAX_BYTES", "4194304"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Deletes the JetStream streams a test stack created under `prefix`.
pub async fn delete_streams(prefix: &str) -> anyhow::Result<()> {
    let client = async_nats::connect(crate::nats::nats_url()).await?;
    let js = async_nats::jetstream::new(client);
    let subjects = pulse_bus::Subjects::try_new(Some(prefix))?;
    pulse_bus::streams::delete_streams(&js, &subjects).await?;
    Ok(())
}

/// A running service binary; killed if dropped without [`ServiceProcess::stop`].
pub struct ServiceProcess {
    pub name: String,
    child: Child,
    pub log: PathBuf,
}

impl ServiceProcess {
    pub fn spawn(name: &str, env: &[(String, String)], log: &Path) -> anyhow::Result<Self> {
        let out = std::fs::File::create(log)?;
        let err = out.try_clone()?;
        let mut command = Command::new(binary(name)?);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log: log.to_path_buf(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits up to 60 s for the address the process announces once its listener is bound
    /// (`listening on <addr>`, see `pulse_config::listening`); the error carries the log tail.
    pub async fn wait_listening(&mut self) -> anyhow::Result<SocketAddr> {
        let what = format!("{} to listen", self.name);
        let (log, name) = (self.log.clone(), self.name.clone());
        let child = &mut self.child;
        // `Some(Err)` ends the wait early: the process exited before it listened.
        let found = crate::wait::until(Duration::from_secs(60), &what, || {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let seen = match pulse_config::listening::find(&log) {
                Some(addr) => Some(Ok(addr)),
                None => match child.try_wait() {
                    Ok(Some(status)) => Some(Err(anyhow::anyhow!(
                        "{name} exited ({status}) before it listened"
                    ))),
                    Ok(None) => None,
                    Err(error) => Some(Err(error.into())),
                },
            };
            std::future::ready(seen)
        })
        .await;
        match found {
            Ok(Ok(addr)) => Ok(addr),
            Ok(Err(error)) | Err(error) => {
                anyhow::bail!("{error}; log:\n{}", self.log_tail(30))
            }
        }
    }

    /// [`Self::wait_listening`] as an `http://` base URL.
    pub async fn wait_base_url(&mut self) -> anyhow::Result<String> {
        Ok(format!("http://{}", self.wait_listening().await?))
    }

    /// SIGTERM, then wait up to `grace` for a clean exit (SIGKILL after it).
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<std::process::ExitStatus> {
        if let Some(pid) = self.child.id() {
            signal(pid, libc::SIGTERM);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                self.child.kill().await?;
                anyhow::bail!("{} did not stop within {grace:?}; killed", self.name)
            }
        }
    }

    /// Waits up to 60 s until `<base_url>/readyz` answers 2xx; the error carries the log tail.
    pub async fn wait_ready(&self, http: &reqwest::Client, base_url: &str) -> anyhow::Result<()> {
        let url = format!("{}/readyz", base_url.trim_end_matches('/'));
        let what = format!("{} {url}", self.name);
        let ready = crate::wait::until(Duration::from_secs(60), &what, || {
            let http = http.clone();
            let url = url.clone();
            async move {
                let response = http.get(url).send().await.ok()?;
                response.status().is_success().then_some(())
            }
        })
        .await;
        if let Err(error) = ready {
            anyhow::bail!("{error}; {} log:\n{}", self.name, self.log_tail(30));
        }
        Ok(())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// Starts a backend service binary (`pulse-patrol-scheduler`, `pulse-model-runner`,
/// `pulse-verifier`, ...) on `gateway`'s database, NATS server, subject prefix and master key,
/// with small test streams and `extra_env` last (so it wins), logging to `<dir>/<name>.log`, and
/// waits until its health listener says ready. Returns the process and its health URL.
pub async fn start_backend(
    gateway: &TestGateway,
    binary: &str,
    dir: &std::path::Path,
    extra_env: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<(ServiceProcess, String)> {
    std::fs::create_dir_all(dir)?;
    let master_key = gateway.state_dir.join("secrets").join("master.key");
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
        ("PULSE_HTTP__LISTEN".to_owned(), ANY_PORT.to_owned()),
        (
            "PULSE_SECRETS__MASTER_KEY_FILE".to_owned(),
            master_key.display().to_string(),
        ),
        ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "info".to_owned()),
    ];
    env.extend(small_streams_env());
    env.extend(extra_env);
    let name = binary.strip_prefix("pulse-").unwrap_or(binary);
    let mut process = ServiceProcess::spawn(binary, &env, &dir.join(format!("{name}.log")))?;
    let health_url = process.wait_base_url().await?;
    process.wait_ready(&gateway.http, &health_url).await?;
    Ok((process, health_url))
}

/// SIGTERM and a clean exit of a backend started by [`start_backend`].
pub async fn stop_backend(process: ServiceProcess, name: &str) -> anyhow::Result<()> {
    let status = process.stop(std::time::Duration::from_secs(10)).await?;
    anyhow::ensure!(status.success(), "{name} exited with {status}");
    Ok(())
}

/// Sends a signal to a process.
pub fn signal(pid: u32, signal: i32) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; a stale pid only yields ESRCH.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, signal);
    }
}

/// The gateway alone (the other services are not needed for the API), on a test database and
/// subject prefix, with its bootstrap admin token.
pub struct TestGateway {
    pub db: TestDb,
    pub url: String,
    pub admin_token: String,
    pub state_dir: PathBuf,
    pub prefix: String,
    pub process: ServiceProcess,
    pub http: reqwest::Client,
}

impl TestGateway {
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(&[]).await
    }

    /// [`Self::start`] with `extra_env` last (so it wins), e.g. a raised
    /// `PULSE_GATEWAY__MAX_STREAMS_PER_TENANT` for a benchmark.
    pub async fn start_with(extra_env: &[(&str, &str)]) -> anyhow::Result<Self> {
        crate::install_crypto_provider();
        let mut db = TestDb::create().await?;
        let state_dir = scratch_dir("gateway")?;
        let prefix = format!("t{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
        // Findings the test writes through the store publish on the gateway's subjects.
        db.use_subjects(pulse_bus::Subjects::try_new(Some(&prefix))?);
        let env = vec![
            ("PULSE_DATABASE_URL".to_owned(), db.owner_url().to_owned()),
            ("PULSE_NATS_URL".to_owned(), crate::nats::nats_url()),
            ("PULSE_NATS__SUBJECT_PREFIX".to_owned(), prefix.clone()),
            (
                "PULSE_STATE_DIR".to_owned(),
                state_dir.display().to_string(),
            ),
            ("PULSE_GATEWAY__LISTEN".to_owned(), ANY_PORT.to_owned()),
            ("PULSE_TELEMETRY__LOG_FILTER".to_owned(), "info".to_owned()),
        ];
        let extra: Vec<(String, String)> = extra_env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let env = [env, small_streams_env(), extra].concat();
        let mut process =
            ServiceProcess::spawn("pulse-gateway", &env, &state_dir.join("gateway.log"))?;
        let url = process.wait_base_url().await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        let token_path = state_dir.join("admin-token");
        let ready = crate::wait::until(Duration::from_secs(60), "gateway /readyz", || {
            let http = http.clone();
            let url = format!("{url}/readyz");
            let token_path = token_path.clone();
            async move {
                let ok = http.get(url).send().await.ok()?.status().is_success();
                (ok && token_path.is_file()).then_some(())
            }
        })
        .await;
        if let Err(error) = ready {
            anyhow::bail!("{error}; gateway log:\n{}", process.log_tail(30));
        }
        let admin_token = std::fs::read_to_string(&token_path)?.trim().to_owned();
        Ok(Self {
            db,
            url,
            admin_token,
            state_dir,
            prefix,
            process,
            http,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// The typed API client, as the admin.
    pub fn client(&self) -> Result<pulse_client::Client, pulse_client::Error> {
        self.client_as(&self.admin_token)
    }

    /// The typed API client, authenticated by `token`.
    pub fn client_as(&self, token: &str) -> Result<pulse_client::Client, pulse_client::Error> {
        pulse_client::Client::new(&self.url, token)
    }

    /// `GET <path>` with bearer `token`: the status and the JSON body (`null` when the body is
    /// not JSON).
    pub async fn get_json(
        &self,
        token: &str,
        path: &str,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        self.request_json(reqwest::Method::GET, token, path, None)
            .await
    }

    /// `<method> <path>` with bearer `token` and `body` as JSON when given: the status and the
    /// JSON body (`null` when the body is not JSON).
    pub async fn request_json(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        let mut request = self.http.request(method, self.url(path)).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        Ok((
            status,
            response.json().await.unwrap_or(serde_json::Value::Null),
        ))
    }

    /// [`Self::request_json`] with the admin token.
    pub async fn admin_json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> anyhow::Result<(u16, serde_json::Value)> {
        self.request_json(method, &self.admin_token, path, body)
            .await
    }

    /// A new token of the admin's tenant with `scopes`, through `POST /api/tokens`.
    pub async fn create_token(&self, name: &str, scopes: &[&str]) -> anyhow::Result<String> {
        let scopes = scopes
            .iter()
            .map(|scope| serde_json::from_value(serde_json::Value::from(*scope)))
            .collect::<Result<_, _>>()?;
        let request = pulse_api::tokens::CreateTokenRequest {
            name: name.to_owned(),
            scopes,
            expires_at: None,
        };
        let created = self
            .client()?
            .create_token(&request)
            .await
            .map_err(|e| anyhow::anyhow!("token creation failed: {e}"))?;
        Ok(created.token)
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        let status = self.process.stop(Duration::from_secs(10)).await?;
        anyhow::ensure!(status.success(), "gateway exited with {status}");
        let _ = std::fs::remove_dir_all(&self.state_dir);
        delete_streams(&self.prefix).await?;
        self.db.cleanup().await
    }
}

/// The value of series `name` on the `/metrics` of the service at `base_url` (all its label sets
/// summed), or `None` when it does not answer. `name{k="v",...}` keeps the label sets holding
/// each of those labels, in any order among the others.
pub async fn metric(http: &reqwest::Client, base_url: &str, name: &str) -> Option<f64> {
    let (name, wanted) = match name.split_once('{') {
        Some((base, labels)) => (
            base,
            labels
                .trim_end_matches('}')
                .split(',')
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>(),
        ),
        None => (name, Vec::new()),
    };
    let text = http
        .get(format!("{}/metrics", base_url.trim_end_matches('/')))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(
        text.lines()
            .filter(|line| {
                line.strip_prefix(name).is_some_and(|rest| {
                    (rest.starts_with(' ') || rest.starts_with('{'))
                        && wanted.iter().all(|label| {
                            rest.split_once(' ').is_some_and(|(labels, _)| {
                                labels
                                    .trim_matches(['{', '}'])
                                    .split(',')
                                    .any(|l| l == *label)
                            })
                        })
                })
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}
