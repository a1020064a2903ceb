//! Prometheus scrapes a running stack (acceptance 5): the real `pulsectl up --demo` starts every
//! service, the provider simulator and a demo agent; Debian's `prometheus` scrapes each service's
//! `/metrics` every second until every target is `up`. The metric names the Grafana dashboard
//! (`deploy/grafana/pulse-intelligence.json`) uses are read from its PromQL, so the test follows
//! the dashboard: each must be known to Prometheus before the events, and each counter and
//! histogram must have grown after them (agent reports, a Patrol run on the simulator, an action
//! approved and verified, a fresh preflight, a malformed job dead-lettered); each gauge must have
//! a series, the connected agents at least one.
//!
//! A few series count events this stack cannot produce on demand; [`NOT_DRIVEN`] names them and
//! why, and the test still requires Prometheus to know them. `promtool check rules` validates
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
use pulse_test_support::action_api::send;
use pulse_test_support::service::bin_dir;
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

/// Dashboard series whose event the demo stack does not produce, and why. Prometheus must still
/// know each (its service exports it).
const NOT_DRIVEN: [(&str, &str); 7] = [
    (
        "pulse_model_cost_usd_total",
        "the simulator's route has no price",
    ),
    (
        "pulse_model_cached_input_tokens_total",
        "the simulator reports no prompt-cache reads",
    ),
    (
        "pulse_model_provider_failures_total",
        "the demo's diligent simulator model does not fail",
    ),
    ("pulse_patrol_run_errors_total", "the demo's runs succeed"),
    (
        "pulse_job_redeliveries_total",
        "needs a job handler that fails and is retried",
    ),
    (
        "pulse_relay_reports_rejected_total",
        "the demo agent sends valid reports",
    ),
    (
        "pulse_relay_observations_total",
        "only a verification observes fresh state, and it is counted under the verifier's checks",
    ),
];

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
    let not_driven: BTreeMap<&str, &str> = NOT_DRIVEN.into_iter().collect();
    for name in not_driven.keys() {
        anyhow::ensure!(
            wanted.contains(*name),
            "{name} is listed as not driven but the dashboard does not use it"
        );
    }

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
        // A model-runner series labelled by provider exists once the provider is in use.
        let after_first_call = not_driven.contains_key(name.as_str());
        if !declared && !after_first_call && !prometheus.knows(name).await {
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

    // A scoped Patrol run of our own (the demo's full run may have ended before the baseline).
    let run = http
        .post(format!("{gateway}/api/ai/patrol/run"))
        .bearer_auth(&admin);
    let (status, accepted) = send(run, Some(json!({"resource_ids": [DEMO_WEB]}))).await?;
    anyhow::ensure!(
        status.is_success(),
        "requesting a scoped run: {status} {accepted}"
    );

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

    // Moved after the events: every counter and histogram grew; every gauge has a series.
    let driven: Vec<&String> = wanted
        .iter()
        .filter(|name| !not_driven.contains_key(name.as_str()))
        .collect();
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
    // The series not driven here exist too, by now (after the stack's model calls).
    let mut exposition = String::new();
    for addr in targets.values() {
        exposition.push_str(&http_text(&format!("http://{addr}/metrics")).await?);
    }
    for name in not_driven.keys() {
        let family = name.strip_suffix("_total").unwrap_or(name);
        anyhow::ensure!(
            exposition.contains(&format!("# TYPE {family} ")),
            "{name} is exported by no service"
        );
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
    println!(
        "prometheus scraped {} services; {} dashboard metrics moved, {} not driven by this stack:",
        SERVICES.len(),
        driven.len(),
        not_driven.len()
    );
    for line in report {
        println!("{line}");
    }

    up.interrupt();
    let status = up.wait_exit(Duration::from_secs(30)).await?;
    anyhow::ensure!(status.success(), "pulsectl exited with {status}");
    Ok(())
}
