//! compose.yaml on this machine's Docker engine (issue acceptance: the images build on the
//! local engine and the compose stack comes up to a healthy `/api/health` and a Patrol run
//! against the simulator, with no image pull).
//!
//! `deploy/docker/build-local-images.sh` builds the images from the binaries of this build on
//! a Debian base made with debootstrap (kept while it exists); the stack runs with
//! `deploy/compose/host-network.yaml` through `deploy/compose/host-network` (host networking,
//! ports chosen here so nothing collides with the machine's own Postgres, NATS or another
//! test). The test acts as an operator: reads
//! the bootstrap admin token from the gateway's volume, issues the agent's token and starts the
//! agent with it, routes Patrol to the provider simulator (which runs in this process on
//! 127.0.0.1, reached by the containers over the host network), runs one Patrol run through
//! the API to its healthy end, and finally removes every container, volume and network the
//! project made, checking nothing it made is left and nothing that was there is gone.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use pulse_test_support::provider_sim::{ProviderSim, Script, preflight_reply};
use pulse_test_support::python::{ensure_success, run, tail};
use pulse_test_support::stack;
use pulse_test_support::wait;
use reqwest::Method;
use serde_json::{Value, json};

const BUILD_WITHIN: Duration = Duration::from_secs(900);
const UP_WITHIN: Duration = Duration::from_secs(300);
const HEALTHY_WITHIN: Duration = Duration::from_secs(180);
const RUN_WITHIN: Duration = Duration::from_secs(120);
const DOWN_WITHIN: Duration = Duration::from_secs(180);
const KEY: &str = "sk-compose-e2e-41c9d2";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Containers, volumes and networks on the engine, by name.
async fn inventory() -> anyhow::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for (kind, args) in [
        ("container", &["ps", "-a", "--format", "{{.Names}}"][..]),
        ("volume", &["volume", "ls", "--format", "{{.Name}}"][..]),
        ("network", &["network", "ls", "--format", "{{.Name}}"][..]),
    ] {
        let out = run(
            tokio::process::Command::new("docker").args(args),
            Duration::from_secs(60),
            "docker inventory",
        )
        .await?;
        ensure_success(&out, "docker inventory")?;
        names.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|name| format!("{kind}:{name}")),
        );
    }
    Ok(names)
}

/// One compose project: its name, the variables its files read and the files.
struct Project {
    name: String,
    env: Vec<(String, String)>,
    gateway_url: String,
}

impl Project {
    fn command(&self) -> tokio::process::Command {
        let root = repo_root();
        let mut cmd = tokio::process::Command::new(root.join("deploy/compose/host-network"));
        cmd.current_dir(&root)
            .args(["-p", &self.name])
            // Only the variables named here reach compose: nothing from the machine's PULSE_*.
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", std::env::var("HOME").unwrap_or_default())
            .envs(self.env.iter().cloned());
        cmd
    }

    async fn compose(&self, args: &[&str], within: Duration) -> anyhow::Result<String> {
        let what = format!("docker-compose {}", args.join(" "));
        let out = run(self.command().args(args), within, &what).await?;
        ensure_success(&out, &what)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn logs(&self) -> String {
        match run(
            self.command().args(["logs", "--no-color", "--tail", "30"]),
            Duration::from_secs(60),
            "docker-compose logs",
        )
        .await
        {
            Ok(out) => tail(&out.stdout),
            Err(e) => format!("(no logs: {e})"),
        }
    }

    async fn down(&self) -> anyhow::Result<()> {
        self.compose(
            &["down", "--volumes", "--remove-orphans", "--timeout", "10"],
            DOWN_WITHIN,
        )
        .await
        .map(|_| ())
    }
}

async fn api(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value)> {
    let mut request = http
        .request(method, format!("{base}{path}"))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.with_context(|| path.to_owned())?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

#[tokio::test]
async fn compose_stack_on_the_local_engine_comes_up_healthy_and_runs_patrol() -> anyhow::Result<()>
{
    pulse_test_support::install_crypto_provider();
    let bins = stack::require_stack_binaries()?;
    let started = Instant::now();
    let before = inventory().await?;

    let build = run(
        tokio::process::Command::new(repo_root().join("deploy/docker/build-local-images.sh"))
            .env(
                "CARGO_TARGET_DIR",
                // bin_dir is <target>/<profile>.
                bins.parent().context("target dir")?,
            )
            .arg("--profile")
            .arg(bins.file_name().context("profile")?)
            .stdout(Stdio::piped()),
        BUILD_WITHIN,
        "deploy/docker/build-local-images.sh",
    )
    .await?;
    ensure_success(&build, "deploy/docker/build-local-images.sh")?;
    let built_in = started.elapsed();

    let sim = ProviderSim::start(
        Script::lazy("Summary: the compose host and its containers are running; nothing is wrong.")
            .with_tool_offer_reply(preflight_reply()),
    )
    .await?;
    let gateway_port = free_port()?;
    let docker_gid = std::fs::metadata("/var/run/docker.sock")
        .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
        .unwrap_or(0);
    let suffix = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let mut env: Vec<(String, String)> = vec![
        ("PULSE_IMAGE_REGISTRY".into(), "pulse-local".into()),
        ("PULSE_IMAGE_TAG".into(), "dev".into()),
        ("POSTGRES_PASSWORD".into(), format!("pg-{suffix}")),
        ("PULSE_APP_DB_PASSWORD".into(), format!("app-{suffix}")),
        ("PULSE_LOG_FORMAT".into(), "text".into()),
        ("DOCKER_GID".into(), docker_gid.to_string()),
        ("PULSE_AGENT_HOST_ID".into(), format!("compose-{suffix}")),
        (
            "PULSE_COMPOSE_GATEWAY_PORT".into(),
            gateway_port.to_string(),
        ),
    ];
    for name in [
        "RELAY",
        "VERIFIER",
        "CONNECTOR",
        "ACTION_BROKER",
        "MODEL_RUNNER",
        "PATROL_SCHEDULER",
        "POSTGRES",
        "NATS",
        "NATS_MONITOR",
    ] {
        env.push((
            format!("PULSE_COMPOSE_{name}_PORT"),
            free_port()?.to_string(),
        ));
    }
    let name = format!("pulse-compose-{suffix}");
    // The engine is shared with other tests' containers: the agent watches this project's only.
    env.push((
        "PULSE_AGENT_DOCKER_LABEL".into(),
        format!("com.docker.compose.project={name}"),
    ));
    let project = Project {
        name,
        env,
        gateway_url: format!("http://127.0.0.1:{gateway_port}"),
    };

    // A container of another project on the same engine, as other tests' containers are: the
    // project's agent is scoped to its own label and must not report it.
    let foreign = format!("pulse-foreign-{suffix}");
    let created = docker(
        &[
            "create",
            "--name",
            &foreign,
            "--label",
            "com.docker.compose.project=someone-else",
            "--network",
            "none",
            "pulse-local/pulse-agent:dev",
        ],
        "create a foreign container",
    )
    .await;
    let outcome = match created {
        Ok(()) => exercise(&project, &sim, &foreign).await,
        Err(e) => Err(e),
    };
    let removed = docker(&["rm", "-f", &foreign], "remove the foreign container").await;
    let logs = if outcome.is_err() {
        project.logs().await
    } else {
        String::new()
    };
    let down = project.down().await;
    let after = inventory().await?;
    let total = started.elapsed();
    eprintln!(
        "compose stack: images built in {:.0?}, whole test {:.0?}",
        built_in, total
    );
    outcome.map_err(|e| anyhow::anyhow!("{e:#}\ncompose logs:\n{logs}"))?;
    down?;
    removed?;
    // What this test made carries its run suffix (`pulse-compose-<suffix>_*`,
    // `pulse-foreign-<suffix>`): none of it may be left. Whatever else appeared meanwhile is
    // another user's of the shared engine.
    let left: Vec<&String> = after
        .difference(&before)
        .filter(|name| name.contains(suffix))
        .collect();
    anyhow::ensure!(left.is_empty(), "the test left on the engine: {left:?}");
    let gone: Vec<&String> = before.difference(&after).collect();
    anyhow::ensure!(gone.is_empty(), "the engine lost: {gone:?}");
    Ok(())
}

/// `docker <args>`, which must succeed.
async fn docker(args: &[&str], what: &str) -> anyhow::Result<()> {
    let out = run(
        tokio::process::Command::new("docker").args(args),
        Duration::from_secs(60),
        what,
    )
    .await?;
    ensure_success(&out, what)
}

async fn exercise(project: &Project, sim: &ProviderSim, foreign: &str) -> anyhow::Result<()> {
    // The agent waits without a token; start everything, as `docker compose up -d` does.
    project
        .compose(&["up", "-d", "--no-build"], UP_WITHIN)
        .await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let base = &project.gateway_url;

    let report = wait::until(
        HEALTHY_WITHIN,
        "every service ready in /api/health",
        || async {
            let report = stack::health(&http, base).await?;
            stack::not_ready(&report).is_empty().then_some(report)
        },
    )
    .await?;
    for name in stack::FLEET {
        anyhow::ensure!(stack::is_ready(&report, name), "{report:?}");
    }
    // Every service container passes its image's HEALTHCHECK (GET /healthz).
    let ps = project.compose(&["ps"], Duration::from_secs(60)).await?;
    for service in [
        "gateway",
        "agent-relay",
        "verifier",
        "action-broker",
        "model-runner",
        "patrol-scheduler",
    ] {
        wait::until(
            Duration::from_secs(90),
            &format!("{service} healthy"),
            || async {
                let id = project
                    .compose(&["ps", "-q", service], Duration::from_secs(30))
                    .await
                    .ok()?;
                let out = run(
                    tokio::process::Command::new("docker").args([
                        "inspect",
                        "--format",
                        "{{.State.Health.Status}}",
                        id.trim(),
                    ]),
                    Duration::from_secs(30),
                    "docker inspect",
                )
                .await
                .ok()?;
                (String::from_utf8_lossy(&out.stdout).trim() == "healthy").then_some(())
            },
        )
        .await
        .with_context(|| ps.clone())?;
    }

    // The operator's first steps: the bootstrap admin token from the gateway's volume, a token
    // for the agent, the agent restarted with it.
    let admin = project
        .compose(
            &["exec", "-T", "gateway", "cat", "/var/lib/pulse/admin-token"],
            Duration::from_secs(60),
        )
        .await?
        .trim()
        .to_owned();
    anyhow::ensure!(!admin.is_empty(), "the gateway wrote no admin token");
    let (status, created) = api(
        &http,
        base,
        &admin,
        Method::POST,
        "/api/tokens",
        Some(json!({"name": "compose host agent", "scopes": ["agent:report"]})),
    )
    .await?;
    anyhow::ensure!(
        status == 201 || status == 200,
        "token create answered {status} {created}"
    );
    let agent_token = created["token"]
        .as_str()
        .context("no token in the answer")?
        .to_owned();
    let mut with_agent = Project {
        name: project.name.clone(),
        env: project.env.clone(),
        gateway_url: project.gateway_url.clone(),
    };
    with_agent
        .env
        .push(("PULSE_AGENT_TOKEN".into(), agent_token));
    with_agent
        .compose(&["up", "-d", "--no-build", "--no-deps", "agent"], UP_WITHIN)
        .await?;
    // The agent reports the project's own containers (the gateway's among them) and never the
    // foreign one beside them.
    let gateway_container = format!("{}_gateway_1", project.name);
    let listed = wait::until(
        Duration::from_secs(90),
        "the agent's containers",
        || async {
            let (status, list) = api(&http, base, &admin, Method::GET, "/api/resources", None)
                .await
                .ok()?;
            let listed = list["resources"].as_array()?.clone();
            let names: Vec<&str> = listed.iter().filter_map(|r| r["name"].as_str()).collect();
            (status == 200 && names.contains(&gateway_container.as_str())).then_some(listed)
        },
    )
    .await?;
    let resources = listed.len();
    let containers: Vec<&str> = listed
        .iter()
        .filter(|r| r["type"] == "app-container")
        .filter_map(|r| r["name"].as_str())
        .collect();
    anyhow::ensure!(
        !containers.contains(&foreign),
        "the agent reported another project's container: {containers:?}"
    );
    // (compose names them `<project>_<service>_1`; a container it is replacing keeps a name
    // that starts with the old container's id)
    anyhow::ensure!(
        containers.iter().all(|n| n.contains(&project.name)),
        "the agent reported containers outside its project: {containers:?}"
    );

    // The stack settles before Patrol looks at it, as an operator would wait: no container it
    // reports unhealthy (a health check that failed once while the machine was busy raises a
    // flag the scripted model does not address), on two looks in a row a second apart.
    let settle_by = std::time::Instant::now() + Duration::from_secs(120);
    let mut healthy_looks = 0;
    let mut last = Value::Null;
    while healthy_looks < 2 {
        anyhow::ensure!(
            std::time::Instant::now() < settle_by,
            "the containers did not all become healthy: {last}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Ok((200, list)) = api(&http, base, &admin, Method::GET, "/api/resources", None).await
        else {
            continue;
        };
        let healthy = list["resources"].as_array().is_some_and(|all| {
            all.iter()
                .all(|r| r["type"] != "app-container" || r["health"] != "unhealthy")
        });
        healthy_looks = if healthy { healthy_looks + 1 } else { 0 };
        last = list;
    }
    // Patrol through the API, routed to the simulator on the host.
    let (status, saved) = api(
        &http,
        base,
        &admin,
        Method::PUT,
        "/api/settings/ai",
        Some(json!({
            "patrol_model": "openai:gpt-4o-mini",
            "providers": {"openai": {"api_key": KEY, "base_url": sim.openai_base_url()}}
        })),
    )
    .await?;
    anyhow::ensure!(status == 200, "settings answered {status} {saved}");
    let run_id = wait::until(Duration::from_secs(60), "a Patrol run accepted", || async {
        let (status, accepted) = api(
            &http,
            base,
            &admin,
            Method::POST,
            "/api/ai/patrol/run",
            None,
        )
        .await
        .ok()?;
        (status == 202).then(|| accepted["run_id"].as_str().map(str::to_owned))?
    })
    .await?;
    let run = wait::until(RUN_WITHIN, "the Patrol run's terminal record", || async {
        let (status, run) = api(
            &http,
            base,
            &admin,
            Method::GET,
            &format!("/api/ai/patrol/runs/{run_id}"),
            None,
        )
        .await
        .ok()?;
        (status == 200
            && matches!(
                run["status"].as_str(),
                Some("healthy" | "issues_found" | "error")
            ))
        .then_some(run)
    })
    .await?;
    anyhow::ensure!(run["status"] == "healthy", "{run}");
    anyhow::ensure!(run["input_tokens"].as_u64().is_some_and(|n| n > 0), "{run}");
    anyhow::ensure!(
        run["resources_checked"]
            .as_u64()
            .is_some_and(|n| n as usize >= resources.min(1)),
        "{run}"
    );
    // The model-runner in its container called the simulator, and never sent it the key.
    let requests = sim.requests();
    anyhow::ensure!(!requests.is_empty(), "the simulator got no request");
    anyhow::ensure!(
        requests.iter().all(|r| !r.body.to_string().contains(KEY)),
        "a request carried the provider key"
    );
    Ok(())
}
