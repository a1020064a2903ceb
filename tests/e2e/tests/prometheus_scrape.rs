//! Prometheus scrapes a running stack (acceptance 5): the real `pulsectl up --demo` starts every
//! service, the provider simulator and a demo agent; Debian's `prometheus` scrapes each service's
//! `/metrics` every second until every target is `up`. The metric names the Grafana dashboard
//! (`deploy/grafana/pulse-intelligence.json`) uses are read from its PromQL, so the test follows
//! the dashboard: each must be known to Prometheus before the events, and each counter and
//! histogram must have grown after them; each gauge must have a series, the connected agents at
//! least one. The events: agent reports; a scoped Patrol run while the demo's fault is still
//! there (its turns read the prompt cache); an action approved and verified (the verifier's
//! fresh observation over `relay.observe`); a fresh preflight on the simulator; a malformed job dead-lettered; a malformed report over the agent WebSocket
//! (rejected); two assistant turns on a route with a price (Anthropic's wire, a scripted
//! simulator); and a Patrol run whose
//! first start hits an injected transient database fault (the watch job is redelivered) and
//! whose simulated model then fails (a provider failure and a run error).
//!
//! `promtool check rules` validates
//! `deploy/prometheus/alerts.yml` in its own test.
//!
//! Needs the binaries built first (`cargo build --workspace --bins`) and `/usr/bin/prometheus`
//! and `/usr/bin/promtool` (Debian's `prometheus` package).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{AGENT_WS_PATH, PROTOCOL_VERSION};
use pulse_test_support::action_api::send;
use pulse_test_support::provider_sim::{ProviderSim, Script, Turn};
use pulse_test_support::service::bin_dir;
use pulse_test_support::sse::SseReader;
use pulse_test_support::stack::{self, PulsectlUp, StackOptions};
use pulse_test_support::wait;
use reqwest::StatusCode;
use serde_json::{Value, json};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";
const SET_UP_WITHIN: Duration = Duration::from_secs(240);
const STAGE_WITHIN: Duration = Duration::from_secs(120);
const DEMO_WEB: &str = "service:pulse-demo:demo-web";
/// The services scraped, by the name of their log file (and of their Prometheus job).
const SERVICES: [&str; 6] = [
    "gateway",
    "agent-relay",
    "patrol-scheduler",
    "model-runner",
    "action-broker",
    "verifier",
];

/// A model in the price table, so its calls have a cost.
const PRICED_MODEL: &str = "claude-3-5-haiku-20241022";
const PRICED_KEY: &str = "sk-ant-scrape-4c1e9b27";
/// A simulated model whose every call fails with a provider error (HTTP 500).
const FAILING_MODEL: &str = "openai:sim:error-500";
/// Fails the first `queued -> running` write of a Patrol run once, as a lost connection or a
/// failover would (a sequence counts outside the failing transaction).
const FAIL_FIRST_START: &str = "
CREATE SEQUENCE pulse_scrape_start_faults START 1 MINVALUE 0;
SELECT setval('pulse_scrape_start_faults', 0, true);
GRANT USAGE, SELECT ON SEQUENCE pulse_scrape_start_faults TO PUBLIC;
CREATE FUNCTION pulse_scrape_fail_first_start() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'queued' AND NEW.status = 'running'
        AND (SELECT last_value FROM pulse_scrape_start_faults) = 0
        AND nextval('pulse_scrape_start_faults') = 1 THEN
        RAISE EXCEPTION 'injected transient fault';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER pulse_scrape_fail_first_start BEFORE UPDATE ON patrol_runs
    FOR EACH ROW EXECUTE FUNCTION pulse_scrape_fail_first_start();
";
const CLEAR_FAULT: &str = "
DROP TRIGGER pulse_scrape_fail_first_start ON patrol_runs;
DROP FUNCTION pulse_scrape_fail_first_start();
DROP SEQUENCE pulse_scrape_start_faults;
";

/// A token of one scope, created by the admin.
async fn create_token(
    http: &reqwest::Client,
    gateway: &str,
    admin: &str,
    name: &str,
    scope: &str,
) -> anyhow::Result<String> {
    let request = http
        .post(format!("{gateway}/api/tokens"))
        .bearer_auth(admin);
    let (status, body) = send(request, Some(json!({"name": name, "scopes": [scope]}))).await?;
    anyhow::ensure!(status.is_success(), "creating a token: {status} {body}");
    body["token"]
        .as_str()
        .map(str::to_owned)
        .context("no token in the response")
}

/// Says hello to the relay at `relay` as an agent and sends a report that is not JSON; the
/// relay's reply.
async fn malformed_report(relay: SocketAddr, token: &str) -> anyhow::Result<Value> {
    use futures::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let mut request = format!("ws://{relay}{AGENT_WS_PATH}").into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    let (mut socket, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(request),
    )
    .await??;
    let hello = json!({"type": "hello", "protocol": PROTOCOL_VERSION, "agent_id": "scrape-raw",
                       "hostname": "scrape-raw", "agent_version": "test",
                       "report_interval_ms": 1000});
    socket.send(Message::text(hello.to_string())).await?;
    let mut replies = Vec::new();
    for frame in [None, Some("{\"type\": \"report\", ")] {
        if let Some(frame) = frame {
            socket.send(Message::text(frame)).await?;
        }
        let reply = loop {
            let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
                .await?
                .context("the relay closed the connection")??;
            if let Message::Text(text) = message {
                break serde_json::from_str::<Value>(text.as_str())?;
            }
        };
        replies.push(reply);
    }
    anyhow::ensure!(replies[0]["type"] == "welcome", "hello: {}", replies[0]);
    Ok(replies.pop().unwrap_or_default())
}

/// One assistant turn, read to its end; fails unless it ends `done`.
async fn chat_turn(gateway: &str, token: &str, prompt: &str) -> anyhow::Result<()> {
    let response = reqwest::Client::new()
        .post(format!("{gateway}/api/ai/chat"))
        .bearer_auth(token)
        .json(&json!({"prompt": prompt}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == StatusCode::OK,
        "chat answered {}",
        response.status()
    );
    let frames = SseReader::new(response)
        .frames_until(&["done", "error"], STAGE_WITHIN)
        .await?;
    let last = frames.last().context("a turn without frames")?;
    anyhow::ensure!(last.event == "done", "the turn ended {last:?}");
    Ok(())
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `pulse_*` metric name in the dashboard's PromQL, with histogram suffixes removed.
fn dashboard_metrics() -> anyhow::Result<BTreeSet<String>> {
    let path = repo_root().join("deploy/grafana/pulse-intelligence.json");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?,
    )?;
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"]
        .as_array()
        .context("dashboard without panels")?
    {
        for target in panel["targets"]
            .as_array()
            .context("panel without targets")?
        {
            let expr = target["expr"].as_str().context("target without expr")?;
            let mut rest = expr;
            while let Some(at) = rest.find("pulse_") {
                let tail = &rest[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                let name = &tail[..end];
                let base = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(name);
                names.insert(base.to_owned());
                rest = &tail[end..];
            }
        }
    }
    anyhow::ensure!(names.len() >= 20, "too few dashboard metrics: {names:?}");
    Ok(names)
}

/// Where service `name` of the stack serves `/metrics`: the first address it announced.
fn metrics_address(options: &StackOptions, name: &str) -> Option<SocketAddr> {
    let log =
        std::fs::read_to_string(options.state_dir.join("logs").join(format!("{name}.log"))).ok()?;
    pulse_config::listening::find(&log)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

struct Prometheus {
    url: String,
    http: reqwest::Client,
    _child: tokio::process::Child,
}

impl Prometheus {
    async fn start(dir: &Path, targets: &BTreeMap<&str, SocketAddr>) -> anyhow::Result<Self> {
        let mut config =
            String::from("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n");
        for (name, addr) in targets {
            config.push_str(&format!(
                "  - job_name: pulse-{name}\n    static_configs:\n      - targets: [\"{addr}\"]\n"
            ));
        }
        std::fs::create_dir_all(dir)?;
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config)?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let child = tokio::process::Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {PROMETHEUS}"))?;
        Ok(Self {
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
            _child: child,
        })
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Option<Value> {
        let url = reqwest::Url::parse_with_params(&format!("{}{path}", self.url), query).ok()?;
        let response = self.http.get(url).send().await.ok()?;
        let body: Value = response.json().await.ok()?;
        (body["status"] == "success").then(|| body["data"].clone())
    }

    /// The instant vector of `expr`.
    async fn query(&self, expr: &str) -> Option<Vec<Value>> {
        let data = self.api("/api/v1/query", &[("query", expr)]).await?;
        data["result"].as_array().cloned()
    }

    /// The one value of a scalar-like `expr`, `None` when it has no series.
    async fn value(&self, expr: &str) -> Option<f64> {
        let result = self.query(expr).await?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }

    /// Whether Prometheus has metadata for the family `name` (with or without `_total`).
    async fn knows(&self, name: &str) -> bool {
        for family in [name, name.strip_suffix("_total").unwrap_or(name)] {
            if let Some(data) = self.api("/api/v1/metadata", &[("metric", family)]).await
                && data.as_object().is_some_and(|m| !m.is_empty())
            {
                return true;
            }
        }
        false
    }
}

async fn http_text(url: &str) -> anyhow::Result<String> {
    let response = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    anyhow::ensure!(
        response.status().is_success(),
        "GET {url}: {}",
        response.status()
    );
    Ok(response.text().await?)
}

/// How a series' movement is read: counters and histograms grow.
fn growth_expr(name: &str, histograms: &BTreeSet<String>) -> String {
    if histograms.contains(name) {
        format!("sum({name}_count)")
    } else {
        format!("sum({name})")
    }
}

#[tokio::test]
async fn promtool_accepts_the_alerting_rules() -> anyhow::Result<()> {
    let rules = repo_root().join("deploy/prometheus/alerts.yml");
    let output = std::process::Command::new(PROMTOOL)
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .with_context(|| format!("running {PROMTOOL} (Debian package prometheus)"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    anyhow::ensure!(
        output.status.success(),
        "promtool check rules failed:\n{text}"
    );
    anyhow::ensure!(text.contains("SUCCESS"), "{text}");
    // The example scrape config loads the same rules.
    let config = repo_root().join("deploy/prometheus/prometheus.yml");
    let output = std::process::Command::new(PROMTOOL)
        .arg("check")
        .arg("config")
        .arg(&config)
        .output()?;
    anyhow::ensure!(
        output.status.success(),
        "promtool check config failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn prometheus_scrapes_every_service_and_the_dashboard_metrics_move() -> anyhow::Result<()> {
    stack::require_stack_binaries()?;
    anyhow::ensure!(
        bin_dir()?.join("pulse-provider-sim").is_file(),
        "pulse-provider-sim is missing; run `cargo build --workspace --bins` first"
    );
    anyhow::ensure!(
        Path::new(PROMETHEUS).is_file(),
        "{PROMETHEUS} is missing: apt-get install prometheus"
    );
    pulse_test_support::install_crypto_provider();
    let options = StackOptions::isolated("prometheus")?;
    let result = scrape(options.clone()).await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}

async fn scrape(mut options: StackOptions) -> anyhow::Result<()> {
    let wanted = dashboard_metrics()?;

    let mut up = PulsectlUp::spawn(
        &options,
        &[
            "--demo",
            "--demo-agent-health-listen",
            "127.0.0.1:0",
            "--provider-sim-listen",
            "127.0.0.1:0",
        ],
    )?;
    stack::wait_for_demo_setup(&mut up, SET_UP_WITHIN).await?;
    options.learn_gateway(&up).await?;
    let admin = std::fs::read_to_string(options.admin_token_path())?
        .trim()
        .to_owned();

    let mut targets = BTreeMap::new();
    for name in SERVICES {
        let addr = metrics_address(&options, name)
            .with_context(|| format!("{name} announced no listener\n{}", up.output()))?;
        targets.insert(name, addr);
    }
    let prometheus = Prometheus::start(&options.state_dir.join("prometheus"), &targets).await?;
    wait::until(STAGE_WITHIN, "every service's target up == 1", || async {
        let result = prometheus.query("up").await?;
        let up_jobs: BTreeSet<String> = result
            .iter()
            .filter(|s| s["value"][1] == "1")
            .filter_map(|s| s["metric"]["job"].as_str().map(str::to_owned))
            .collect();
        SERVICES
            .iter()
            .all(|name| up_jobs.contains(&format!("pulse-{name}")))
            .then_some(())
    })
    .await?;

    // Present before the events: Prometheus knows every family the dashboard uses, or (a
    // labelled family with no series yet, of which Prometheus keeps no metadata) a scraped
    // target declares it.
    let mut exposition = String::new();
    for addr in targets.values() {
        let text = http_text(&format!("http://{addr}/metrics")).await?;
        exposition.push_str(&text);
    }
    let mut histograms = BTreeSet::new();
    let mut missing = Vec::new();
    for name in &wanted {
        let family = name.strip_suffix("_total").unwrap_or(name);
        let declared = exposition.contains(&format!("# TYPE {family} "));
        if !declared && !prometheus.knows(name).await {
            missing.push(name.clone());
        }
        if exposition.contains(&format!("# TYPE {family} histogram")) {
            histograms.insert(name.clone());
        }
        if let Some(data) = prometheus
            .api("/api/v1/metadata", &[("metric", name)])
            .await
            && data[name.as_str()][0]["type"] == "histogram"
        {
            histograms.insert(name.clone());
        }
    }
    anyhow::ensure!(
        missing.is_empty(),
        "metrics Prometheus does not know: {missing:?}"
    );
    let mut baseline = BTreeMap::new();
    for name in &wanted {
        let value = prometheus
            .value(&growth_expr(name, &histograms))
            .await
            .unwrap_or(0.0);
        baseline.insert(name.clone(), value);
    }

    // The events: the demo's Patrol run, its finding and action, approved and verified.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let gateway = options.gateway_url();
    let get = |path: String| {
        let request = http.get(format!("{gateway}{path}")).bearer_auth(&admin);
        async move {
            let (status, body) = send(request, None).await.ok()?;
            (status == StatusCode::OK).then_some(body)
        }
    };
    let action_id = wait::until(
        STAGE_WITHIN,
        "an action on demo-web pending approval",
        || {
            let list = get("/api/actions/pending".to_owned());
            async move {
                list.await?
                    .as_array()?
                    .iter()
                    .find(|a| a["resource_id"] == DEMO_WEB && a["state"] == "pending_approval")
                    .and_then(|a| a["action_id"].as_str().map(str::to_owned))
            }
        },
    )
    .await
    .with_context(|| up.output())?;
    // A scoped Patrol run of our own (the demo's full run may have ended before the baseline),
    // while demo-web still fails and its finding is active: such a run is offered every
    // lifecycle tool, so each of its turns re-sends a prompt prefix of over 1,024 tokens, which
    // the simulator serves from its prompt cache as OpenAI does (the cached input tokens). A
    // healthy run's prompt is shorter than a provider caches.
    let run = http
        .post(format!("{gateway}/api/ai/patrol/run"))
        .bearer_auth(&admin);
    let (status, accepted) = send(run, Some(json!({"resource_ids": [DEMO_WEB]}))).await?;
    anyhow::ensure!(
        status.is_success(),
        "requesting a scoped run: {status} {accepted}"
    );
    let scoped = accepted["run_id"].as_str().context("no run id")?.to_owned();
    wait::until(STAGE_WITHIN, "the scoped run to end", || {
        let run = get(format!("/api/ai/patrol/runs/{scoped}"));
        async move {
            let run = run.await?;
            (!matches!(run["status"].as_str(), Some("queued" | "running"))).then_some(())
        }
    })
    .await?;
    let approve = http
        .post(format!("{gateway}/api/actions/{action_id}/decision"))
        .bearer_auth(&admin);
    let (status, decided) = send(
        approve,
        Some(json!({"outcome": "approved", "reason": "scrape test"})),
    )
    .await?;
    anyhow::ensure!(status == StatusCode::OK, "approving: {status} {decided}");
    wait::until(STAGE_WITHIN, "the action verified", || {
        let action = get(format!("/api/actions/{action_id}"));
        async move { (action.await?["verification"] == "verified").then_some(()) }
    })
    .await?;

    // A fresh Patrol preflight of the simulator route.
    let preflight = http
        .post(format!("{gateway}/api/ai/patrol/preflight"))
        .bearer_auth(&admin);
    let (status, checked) = send(preflight, None).await?;
    anyhow::ensure!(status == StatusCode::OK, "preflight: {status} {checked}");

    // A job that cannot be decoded goes to its dead letter.
    let nats = async_nats::connect(&options.nats_url).await?;
    let subjects = pulse_bus::Subjects::try_new(Some(&options.subject_prefix))?;
    nats.publish(
        subjects.job(&TenantId::default_tenant(), "watch"),
        "not a watch job".into(),
    )
    .await?;
    nats.flush().await?;

    // A malformed report over the agent WebSocket, with a valid agent token: rejected.
    let relay = targets["agent-relay"];
    let agent_token = create_token(&http, &gateway, &admin, "scrape-agent", "agent:report").await?;
    let rejected = malformed_report(relay, &agent_token).await?;
    anyhow::ensure!(
        rejected["type"] == "rejected",
        "malformed report: {rejected}"
    );

    // Assistant turns on a priced route (Anthropic's wire, served by a scripted simulator): the
    // price table's row gives them a cost.
    let sim = ProviderSim::start(Script::turns([
        Turn::text("Every demo service is running."),
        Turn::text("Still running."),
    ]))
    .await?;
    let settings = http
        .put(format!("{gateway}/api/settings/ai"))
        .bearer_auth(&admin);
    let body = json!({
        "chat_model": format!("anthropic:{PRICED_MODEL}"),
        "providers": {"anthropic": {"api_key": PRICED_KEY, "base_url": sim.base_url()}},
    });
    let (status, saved) = send(settings, Some(body)).await?;
    anyhow::ensure!(
        status == StatusCode::OK,
        "priced chat route: {status} {saved}"
    );
    for prompt in ["Is the demo healthy?", "And now?"] {
        chat_turn(&gateway, &admin, prompt).await?;
    }

    // A transient database fault on the first start of a run: the watch job is retried and
    // redelivered. That run then calls a simulated model that fails, so the provider failure is
    // counted and the run ends in error.
    let owner = pulse_store::connect_owner(&pulse_config::DatabaseConfig {
        url: options.database_url.clone(),
        app_password: None,
        app_url: None,
        pool_size: 1,
        connect_timeout_ms: 5_000,
    })
    .await?;
    owner.batch_execute(FAIL_FIRST_START).await?;
    let settings = http
        .put(format!("{gateway}/api/settings/ai"))
        .bearer_auth(&admin);
    let (status, saved) = send(settings, Some(json!({"patrol_model": FAILING_MODEL}))).await?;
    anyhow::ensure!(
        status == StatusCode::OK,
        "failing patrol route: {status} {saved}"
    );
    let preflight = http
        .post(format!("{gateway}/api/ai/patrol/preflight"))
        .bearer_auth(&admin);
    let (status, checked) = send(preflight, None).await?;
    anyhow::ensure!(status == StatusCode::OK, "preflight: {status} {checked}");
    let failing = http
        .post(format!("{gateway}/api/ai/patrol/run"))
        .bearer_auth(&admin);
    let (status, accepted) = send(failing, Some(json!({"resource_ids": [DEMO_WEB]}))).await?;
    anyhow::ensure!(
        status.is_success(),
        "requesting the failing run: {status} {accepted}"
    );
    let run_id = accepted["run_id"].as_str().context("no run id")?.to_owned();
    let ended = wait::until(STAGE_WITHIN, "the failing run to end", || {
        let run = get(format!("/api/ai/patrol/runs/{run_id}"));
        async move {
            let run = run.await?;
            (!matches!(run["status"].as_str(), Some("queued" | "running"))).then_some(run)
        }
    })
    .await?;
    anyhow::ensure!(ended["status"] == "error", "the failing run: {ended}");
    let faults: i64 = owner
        .query_one("SELECT last_value FROM pulse_scrape_start_faults", &[])
        .await?
        .get(0);
    anyhow::ensure!(faults >= 1, "the injected fault never fired");
    owner.batch_execute(CLEAR_FAULT).await?;

    // Moved after the events: every counter and histogram grew; every gauge has a series.
    let driven: Vec<&String> = wanted.iter().collect();
    let mut report = Vec::new();
    let still = wait::until(
        STAGE_WITHIN,
        "every driven dashboard metric to move",
        || {
            let (prometheus, baseline, histograms, driven) =
                (&prometheus, &baseline, &histograms, &driven);
            async move {
                let mut still = Vec::new();
                for name in driven.iter() {
                    let counter = name.ends_with("_total") || histograms.contains(name.as_str());
                    let now = prometheus.value(&growth_expr(name, histograms)).await;
                    let moved = match now {
                        Some(now) if counter => now > baseline[name.as_str()],
                        Some(_) => true,
                        None => false,
                    };
                    if !moved {
                        still.push((*name).clone());
                    }
                }
                still.is_empty().then_some(still)
            }
        },
    )
    .await;
    if still.is_err() {
        let mut left = Vec::new();
        for name in &driven {
            let now = prometheus.value(&growth_expr(name, &histograms)).await;
            left.push(format!(
                "{name}: before {:?}, now {now:?}",
                baseline[name.as_str()]
            ));
        }
        anyhow::bail!("dashboard metrics that did not move:\n{}", left.join("\n"));
    }
    for name in &driven {
        let now = prometheus.value(&growth_expr(name, &histograms)).await;
        report.push(format!(
            "  {name}: {:?} -> {:?}",
            baseline[name.as_str()],
            now.unwrap_or_default()
        ));
    }
    // Gauges with a meaning to check: the demo agent is connected; the pools have a size.
    let agents = prometheus.value("sum(pulse_relay_agents_connected)").await;
    anyhow::ensure!(agents >= Some(1.0), "connected agents: {agents:?}");
    let pools = prometheus
        .query("pulse_db_pool_max_connections")
        .await
        .unwrap_or_default();
    anyhow::ensure!(
        pools.len() >= SERVICES.len(),
        "a pool size per service: {pools:?}"
    );
    let dead = prometheus
        .value("sum(pulse_job_dead_letters_total{kind=\"watch\"})")
        .await;
    anyhow::ensure!(
        dead >= Some(1.0),
        "the malformed watch job's dead letter: {dead:?}"
    );
    // Each series moved for its own event, not only for some other call.
    for (expr, what) in [
        (
            "sum(pulse_model_cost_usd_total{provider=\"anthropic\"})",
            "the priced assistant turns' cost",
        ),
        (
            "sum(pulse_model_cached_input_tokens_total{surface=\"patrol\",provider=\"openai\"})",
            "the Patrol runs' prompt-cache reads",
        ),
        (
            "sum(pulse_model_provider_failures_total{class=\"provider_error\"})",
            "the failing model's provider error",
        ),
        (
            "sum(pulse_job_redeliveries_total{kind=\"watch\"})",
            "the faulted watch job's redelivery",
        ),
        (
            "sum(pulse_relay_reports_rejected_total{reason=\"malformed\"})",
            "the malformed report's rejection",
        ),
        (
            "sum(pulse_relay_observations_total{outcome=\"ok\"})",
            "the verifier's fresh observations",
        ),
    ] {
        let value = prometheus.value(expr).await;
        anyhow::ensure!(value > Some(0.0), "{what}: {expr} = {value:?}");
        report.push(format!("  {expr}: {}", value.unwrap_or_default()));
    }
    println!(
        "prometheus scraped {} services; all {} dashboard metrics moved:",
        SERVICES.len(),
        driven.len()
    );
    for line in report {
        println!("{line}");
    }

    up.interrupt();
    let status = up.wait_exit(Duration::from_secs(30)).await?;
    anyhow::ensure!(status.success(), "pulsectl exited with {status}");
    Ok(())
}
