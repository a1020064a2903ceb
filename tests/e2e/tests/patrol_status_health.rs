//! The Patrol status never says healthy while a finding is active, on every surface that
//! projects it: `GET /api/ai/patrol/status`, the Patrol page of the web UI, the agent context
//! `GET /api/agent/patrol-control/status`, MCP `get_patrol_control_status` through the real
//! `pulse-mcp`, and `pulsectl patrol status`.
//!
//! A real agent supervises `web` and `db`; the real gateway, patrol-scheduler and model-runner
//! run Patrol with the provider simulator (`sim:diligent`). A healthy full run gives the
//! all-clear; then `web` fails and a *scoped* run on it reports a warning finding: every surface
//! says not healthy with one active warning, although the last full run said healthy. Once the
//! fault is reverted and an operator resolves the finding, every surface says healthy again.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use pulse_domain::patrol::run::{RunStatus, RunType};
use pulse_domain::patrol::scope::RawRunRequest;
use pulse_domain::patrol::status::HealthBasis;
use pulse_test_support::cli::{Pulsectl, describe, field, stdout};
use pulse_test_support::fleet::{AgentFleet, FleetSpec, Route};
use pulse_test_support::patrol::{full_run, request_run, terminal_run};
use pulse_test_support::provider_sim::{Script, preflight_reply};
use pulse_test_support::service::binary;
use pulse_test_support::web::WebClient;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const KEY: &str = "sk-status-health-7d20b1";
const RUN_DEADLINE: Duration = Duration::from_secs(60);
const MCP_WITHIN: Duration = Duration::from_secs(30);

/// What one surface said: healthy, the active count, the active warnings.
#[derive(Debug, PartialEq, Eq)]
struct Said {
    healthy: Option<bool>,
    count: u64,
    warnings: u64,
}

fn said_by(status: &Value) -> Said {
    Said {
        healthy: status["healthy"].as_bool(),
        count: status["findings_count"].as_u64().unwrap_or(u64::MAX),
        warnings: status["active_findings"]["warning"]
            .as_u64()
            .unwrap_or(u64::MAX),
    }
}

/// `get_patrol_control_status` through `pulse-mcp` (stdio, one JSON-RPC message per line).
async fn mcp_patrol_control_status(gateway_url: &str, token: &str) -> anyhow::Result<Value> {
    let mut child = tokio::process::Command::new(binary("pulse-mcp")?)
        .args(["--base-url", gateway_url])
        .env("PULSE_API_TOKEN", token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "status-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "get_patrol_control_status", "arguments": {}}}),
    ];
    for request in requests {
        stdin.write_all(format!("{request}\n").as_bytes()).await?;
    }
    let answer = tokio::time::timeout(MCP_WITHIN, async {
        loop {
            let line = lines
                .next_line()
                .await?
                .context("pulse-mcp closed stdout")?;
            let message: Value = serde_json::from_str(&line)?;
            if message["id"] == 2 {
                return anyhow::Ok(message);
            }
        }
    })
    .await
    .context("no tools/call answer from pulse-mcp")??;
    drop(stdin);
    let _ = tokio::time::timeout(MCP_WITHIN, child.wait()).await;
    anyhow::ensure!(answer["result"]["isError"] == false, "{answer}");
    Ok(answer["result"]["structuredContent"].clone())
}

struct Stack {
    fleet: AgentFleet,
    reader: String,
    web: WebClient,
}

impl Stack {
    async fn start() -> anyhow::Result<Self> {
        let route = Route::OpenAi {
            key: KEY.to_owned(),
        };
        let fleet = AgentFleet::start(
            FleetSpec::web_and_db("statush", route, "sim:diligent"),
            Script::turns([]).with_tool_offer_reply(preflight_reply()),
        )
        .await?;
        let reader = fleet
            .stack
            .create_token("reader", &["monitoring:read"])
            .await?;
        let gateway = &fleet.stack.gateway;
        let password = std::fs::read_to_string(gateway.state_dir.join("admin-password"))
            .context("the bootstrap admin's password file")?;
        let mut web = WebClient::new(&gateway.url)?;
        web.sign_in("default", "admin", password.trim()).await?;
        Ok(Self { fleet, reader, web })
    }

    fn service_id(&self, name: &str) -> String {
        self.fleet.service_id(name)
    }

    async fn wait_health(&self, name: &str, health: &str) -> anyhow::Result<()> {
        self.fleet.wait_health(name, health).await
    }

    fn runner_log(&self) -> String {
        self.fleet.runner_log()
    }

    /// What each of the five surfaces says, by name.
    async fn surfaces(&mut self) -> anyhow::Result<Vec<(&'static str, Said)>> {
        let gateway = &self.fleet.stack.gateway;
        let mut said = Vec::new();

        let (code, status) = gateway
            .request_json(Method::GET, &self.reader, "/api/ai/patrol/status", None)
            .await?;
        anyhow::ensure!(code == 200, "status answered {code} {status}");
        said.push(("GET /api/ai/patrol/status", said_by(&status)));

        let (code, control) = gateway
            .request_json(
                Method::GET,
                &self.reader,
                "/api/agent/patrol-control/status",
                None,
            )
            .await?;
        anyhow::ensure!(code == 200, "patrol-control answered {code} {control}");
        said.push(("GET /api/agent/patrol-control/status", said_by(&control)));
        // The agent context's own counts agree with its verdict.
        anyhow::ensure!(
            control["active_findings"]["total"] == control["findings_count"],
            "{control}"
        );

        let mcp = mcp_patrol_control_status(&gateway.url, &self.reader).await?;
        said.push(("MCP get_patrol_control_status", said_by(&mcp)));

        let page = self.web.get("/patrol").await?;
        anyhow::ensure!(page.status == 200, "/patrol answered {}", page.status);
        said.push(("the Patrol page", said_by_page(&page.body)?));

        let cli = Pulsectl::new(gateway, Duration::from_secs(30));
        let output = cli.run(&self.reader, &["patrol", "status"]).await?;
        anyhow::ensure!(output.status.success(), "{}", describe(&output));
        said.push(("pulsectl patrol status", said_by_cli(&stdout(&output))?));
        Ok(said)
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.fleet.stop().await
    }
}

/// The Patrol page's health and active-findings facts.
fn said_by_page(html: &str) -> anyhow::Result<Said> {
    let fact = |id: &str| -> anyhow::Result<String> {
        let start = html
            .find(&format!("id=\"{id}\""))
            .with_context(|| format!("no #{id} on the Patrol page"))?;
        let rest = &html[start..];
        let open = rest.find('>').context("unterminated tag")? + 1;
        let close = rest.find("</dd>").context("no </dd>")?;
        // The text of the fact, tags removed.
        let mut text = String::new();
        let mut in_tag = false;
        for c in rest[open..close].chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => text.push(c),
                _ => {}
            }
        }
        Ok(text.trim().to_owned())
    };
    let health = fact("patrol-health")?;
    let healthy = if health.starts_with("unhealthy") {
        Some(false)
    } else if health.starts_with("healthy") {
        Some(true)
    } else {
        None
    };
    let findings = fact("patrol-active-findings")?;
    Ok(Said {
        healthy,
        count: leading_number(&findings)?,
        warnings: number_before(&findings, " warning")?,
    })
}

/// `pulsectl patrol status`'s `health` and `active findings` rows.
fn said_by_cli(text: &str) -> anyhow::Result<Said> {
    let health = field(text, "health").with_context(|| format!("no health row in {text}"))?;
    let healthy = if health.starts_with("unhealthy") {
        Some(false)
    } else if health.starts_with("healthy") {
        Some(true)
    } else {
        None
    };
    let findings =
        field(text, "active findings").with_context(|| format!("no findings row in {text}"))?;
    Ok(Said {
        healthy,
        count: leading_number(findings)?,
        warnings: number_before(findings, " warning")?,
    })
}

fn leading_number(text: &str) -> anyhow::Result<u64> {
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no leading count in {text:?}"))
}

/// The number right before `label` in `text` (`... 1 warning, ...`).
fn number_before(text: &str, label: &str) -> anyhow::Result<u64> {
    let at = text
        .find(label)
        .with_context(|| format!("no {label:?} in {text:?}"))?;
    text[..at]
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no number before {label:?} in {text:?}"))
}

fn assert_all_say(said: &[(&str, Said)], want: &Said, when: &str) {
    for (surface, what) in said {
        assert_eq!(what, want, "{surface} {when}: {said:?}");
    }
}

#[tokio::test]
async fn a_finding_of_a_scoped_run_denies_the_all_clear_on_every_surface_until_resolved()
-> anyhow::Result<()> {
    let mut fleet = Stack::start().await?;
    let result = async {
        // 1. A healthy full run: the all-clear, with nothing active.
        let full = full_run(&fleet.fleet.stack.gateway, RUN_DEADLINE).await?;
        anyhow::ensure!(
            full.status == RunStatus::Healthy,
            "{full:?}\n{}",
            fleet.runner_log()
        );
        let said = fleet.surfaces().await?;
        let clear = Said {
            healthy: Some(true),
            count: 0,
            warnings: 0,
        };
        assert_all_say(&said, &clear, "after a healthy full run");

        // 2. web fails; a scoped run on it finds it. The last full run still says healthy.
        let marker = fleet.fleet.marker("web");
        std::fs::write(&marker, "fault")?;
        fleet.wait_health("web", "unhealthy").await?;
        let web = fleet.service_id("web");
        let request = RawRunRequest {
            resource_ids: Some(vec![web]),
            ..RawRunRequest::default()
        };
        let id = request_run(&fleet.fleet.stack.gateway, &request).await?;
        let scoped = terminal_run(&fleet.fleet.stack.gateway, id, RUN_DEADLINE).await?;
        anyhow::ensure!(
            scoped.run_type == RunType::Scoped && scoped.status == RunStatus::IssuesFound,
            "{scoped:?}\n{}",
            fleet.runner_log()
        );
        let status = fleet.fleet.stack.gateway.client()?.patrol_status().await?;
        assert_eq!(
            status.health_basis,
            HealthBasis::ActiveFindings,
            "{status:?}"
        );
        assert_eq!(
            status.last_patrol_at, full.completed_at,
            "the last full run is still the healthy one: {status:?}"
        );
        let said = fleet.surfaces().await?;
        let found = Said {
            healthy: Some(false),
            count: 1,
            warnings: 1,
        };
        assert_all_say(&said, &found, "with the scoped run's finding active");

        // 3. The fault is reverted and an operator resolves the finding: healthy again.
        std::fs::remove_file(&marker)?;
        fleet.wait_health("web", "healthy").await?;
        let (_, findings) = fleet
            .fleet
            .stack
            .gateway
            .admin_json(Method::GET, "/api/ai/patrol/findings", None)
            .await?;
        let finding_id = findings["findings"]
            .as_array()
            .and_then(|list| list.first())
            .and_then(|f| f["id"].as_str())
            .with_context(|| format!("no active finding in {findings}"))?
            .to_owned();
        let (code, answer) = fleet
            .fleet
            .stack
            .gateway
            .admin_json(
                Method::POST,
                "/api/ai/patrol/resolve",
                Some(json!({"finding_id": finding_id, "note": "web is back"})),
            )
            .await?;
        anyhow::ensure!(code == 200, "resolve answered {code} {answer}");
        let said = fleet.surfaces().await?;
        assert_all_say(&said, &clear, "after the finding was resolved");
        Ok(())
    }
    .await;
    let stopped = Box::pin(fleet.stop()).await;
    result?;
    stopped
}
