//! `pulsectl up --demo`, the newcomer's first run (acceptance 9): the real pulsectl starts the
//! stack, the provider simulator and a demo agent supervising three demo services, points Patrol
//! at the simulator in mode `approval`, injects a fault on `demo-web` and requests a run. Through
//! the API the test then waits for the finding on `demo-web`, for an action on it pending
//! approval, approves it, and waits for the action to be `verified` and the finding's
//! investigation outcome to be `fix_verified`.
//!
//! Needs the binaries built first (`cargo build --workspace --bins`, which includes
//! `pulse-provider-sim`). Each failure names the stage that was not reached.

use std::time::Duration;

use anyhow::Context as _;
use pulse_test_support::action_api::send;
use pulse_test_support::service::bin_dir;
use pulse_test_support::stack::{self, PulsectlUp, StackOptions, process_alive};
use pulse_test_support::wait;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Stack start plus the demo's setup (token, settings, preflight, fault, run request).
const SET_UP_WITHIN: Duration = Duration::from_secs(240);
/// Each stage after the setup.
const STAGE_WITHIN: Duration = Duration::from_secs(90);
const DEMO_WEB: &str = "service:pulse-demo:demo-web";
const BANNER: &str = "SIMULATED MODEL: pulse-provider-sim (no real AI)";

struct Demo {
    http: reqwest::Client,
    options: StackOptions,
    up: PulsectlUp,
    admin: String,
}

impl Demo {
    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let request = self
            .http
            .request(method, format!("{}{path}", self.options.gateway_url()))
            .bearer_auth(&self.admin);
        send(request, body).await
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let (status, body) = self.request(reqwest::Method::GET, path, None).await.ok()?;
        (status == StatusCode::OK).then_some(body)
    }

    /// Waits for `check`; fails naming `stage` (and with pulsectl's output and the service
    /// logs) when it times out or pulsectl exits.
    async fn stage<T, F, Fut>(&self, stage: &str, check: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let pid = self.up.pid();
        let mut check = check;
        let reached = wait::until(STAGE_WITHIN, stage, || {
            let next = check();
            async move {
                if !process_alive(pid) {
                    return Some(None);
                }
                next.await.map(Some)
            }
        })
        .await;
        match reached {
            Ok(Some(value)) => Ok(value),
            Ok(None) => anyhow::bail!(
                "demo stage not reached: {stage} (pulsectl exited)\n{}",
                self.diagnostics()
            ),
            Err(error) => anyhow::bail!(
                "demo stage not reached: {stage}: {error}\n{}",
                self.diagnostics()
            ),
        }
    }

    fn diagnostics(&self) -> String {
        let logs = self.options.state_dir.join("logs");
        let mut text = self.up.output();
        for name in [
            "demo-agent",
            "model-runner",
            "action-broker",
            "verifier",
            "provider-sim",
        ] {
            let path = logs.join(format!("{name}.log"));
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(25)..].join("\n");
            text.push_str(&format!("\n--- last lines of {name}.log ---\n{tail}"));
        }
        text
    }
}

/// Waits until pulsectl printed the demo's next steps; fails on a setup error or an exit.
async fn wait_for_setup(up: &mut PulsectlUp) -> anyhow::Result<()> {
    // `Some` once the setup ended either way: done, failed, or pulsectl gone.
    let outcome = wait::until(SET_UP_WITHIN, "the demo's setup", || {
        let ended = if let Some(status) = up.exited() {
            Some(Err(format!("pulsectl exited with {status}")))
        } else {
            let stdout = up.stdout();
            if stdout.contains("demo: setup failed") {
                Some(Err("setup failed".to_owned()))
            } else if stdout.contains("Demo running:") {
                Some(Ok(()))
            } else {
                None
            }
        };
        async move { ended }
    })
    .await;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => anyhow::bail!("demo stage not reached: setup ({why})\n{}", up.output()),
        Err(error) => anyhow::bail!("demo stage not reached: setup ({error})\n{}", up.output()),
    }
}

#[tokio::test]
async fn demo_reaches_a_pending_approval_and_a_verified_fix() -> anyhow::Result<()> {
    stack::require_stack_binaries()?;
    anyhow::ensure!(
        bin_dir()?.join("pulse-provider-sim").is_file(),
        "pulse-provider-sim is missing; run `cargo build --workspace --bins` first"
    );
    pulse_test_support::install_crypto_provider();
    let options = StackOptions::isolated("demo")?;
    let result = run_demo(options.clone()).await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}

async fn run_demo(options: StackOptions) -> anyhow::Result<()> {
    let ports = stack::free_ports(2)?;
    let demo_agent = format!("127.0.0.1:{}", ports[0]);
    let simulator = format!("127.0.0.1:{}", ports[1]);
    let mut up = PulsectlUp::spawn(
        &options,
        &[
            "--demo",
            "--demo-agent-health-listen",
            &demo_agent,
            "--provider-sim-listen",
            &simulator,
        ],
    )?;
    wait_for_setup(&mut up).await?;
    let stdout = up.stdout();
    anyhow::ensure!(
        stdout.contains(BANNER),
        "no simulated-model banner\n{stdout}"
    );
    anyhow::ensure!(
        stdout.contains("pulsectl approvals approve <id>"),
        "no next steps\n{stdout}"
    );
    let admin = std::fs::read_to_string(options.admin_token_path())
        .context("the admin token")?
        .trim()
        .to_owned();
    let demo = Demo {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?,
        options,
        up,
        admin,
    };

    // The API labels the simulated model; Patrol asks first.
    let settings = demo
        .get("/api/settings/ai")
        .await
        .context("GET /api/settings/ai")?;
    anyhow::ensure!(
        settings["patrol_model_simulated"] == true
            && settings["patrol_model"] == "openai:sim:diligent"
            && settings["autonomy_level"] == "approval",
        "demo settings: {settings}"
    );

    let finding = demo
        .stage("a Patrol finding on demo-web", || async {
            let list = demo
                .get("/api/ai/patrol/findings?include_resolved=true")
                .await?;
            list["findings"]
                .as_array()?
                .iter()
                .find(|f| f["resource_id"] == DEMO_WEB)
                .cloned()
        })
        .await?;
    let finding_id = finding["id"]
        .as_str()
        .context("finding without id")?
        .to_owned();

    let action = demo
        .stage("an action on demo-web pending approval", || async {
            let list = demo.get("/api/actions/pending").await?;
            list.as_array()?
                .iter()
                .find(|a| a["resource_id"] == DEMO_WEB && a["state"] == "pending_approval")
                .cloned()
        })
        .await?;
    let action_id = action["action_id"]
        .as_str()
        .context("action without action_id")?
        .to_owned();

    let (status, decided) = demo
        .request(
            reqwest::Method::POST,
            &format!("/api/actions/{action_id}/decision"),
            Some(json!({"outcome": "approved", "reason": "demo: approved by the newcomer"})),
        )
        .await?;
    anyhow::ensure!(
        status == StatusCode::OK && decided["state"] == "approved",
        "approving {action_id}: {status} {decided}"
    );

    demo.stage("the action verified", || async {
        let action = demo.get(&format!("/api/actions/{action_id}")).await?;
        (action["verification"] == "verified").then_some(())
    })
    .await?;
    demo.stage("the finding's outcome fix_verified", || async {
        let answer = demo
            .get(&format!("/api/ai/patrol/findings/{finding_id}"))
            .await?;
        (answer["finding"]["investigation_outcome"] == "fix_verified").then_some(())
    })
    .await?;

    // The verified fix resolved the finding; the restart ran once (one execution, a receipt the
    // agent did not replay); the tenant's audit chain verifies.
    let answer = demo
        .get(&format!("/api/ai/patrol/findings/{finding_id}"))
        .await
        .context("the finding after the fix")?;
    anyhow::ensure!(
        answer["finding"]["status"] == "resolved",
        "finding after a verified fix: {answer}"
    );
    let action = demo
        .get(&format!("/api/actions/{action_id}"))
        .await
        .context("the action after the fix")?;
    anyhow::ensure!(
        action["state"] == "completed" && action["result"]["replayed"] == false,
        "action after the fix: {action}"
    );
    let audit = demo
        .get(&format!("/api/actions/{action_id}/audit"))
        .await
        .context("the action's audit")?;
    let executions = audit.as_array().map(|rows| {
        rows.iter()
            .filter(|r| r["payload"]["to"] == "executing")
            .count()
    });
    anyhow::ensure!(executions == Some(1), "executions in the audit: {audit}");
    let chain = demo
        .get("/api/audit/verify")
        .await
        .context("GET /api/audit/verify")?;
    anyhow::ensure!(chain["ok"] == true, "audit chain: {chain}");

    let Demo { mut up, .. } = demo;
    up.interrupt();
    let status = up.wait_exit(Duration::from_secs(30)).await?;
    anyhow::ensure!(
        status.success(),
        "pulsectl exited with {status}\n{}",
        up.output()
    );
    Ok(())
}
