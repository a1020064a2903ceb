//! Pulse MCP through the official MCP SDKs, against a whole `pulsectl up --demo` stack, both
//! `pulse-mcp` over stdio and the gateway's `/mcp` over streamable HTTP:
//!
//! - the Python SDK (pip package `mcp`, pinned in `tests/mcp/requirements.txt`, installed in a
//!   virtual environment the test builds), each transport with an admin token and with a token
//!   lacking `actions:plan`. `tests/mcp/mcp_client_check.py` runs the checks: initialize,
//!   `tools/list` equal to the manifest's allowlist, fleet context, findings, planning an action
//!   (an approval card), a capability outside the allowlist refused by name, `missing_scope` for
//!   the token without the scope, `prompts/get pulse_operations_loop`, `resources/list|read`;
//! - the TypeScript SDK (npm `@modelcontextprotocol/sdk`, pinned in `tests/mcp/ts/package.json`
//!   and its lock file; `npm ci --prefix tests/mcp/ts`, which `scripts/test` runs when it is
//!   missing), the client most desktop and IDE agents are built on. It validates every answer
//!   with its own schemas and refuses a whole tool list over one schema it does not take.
//!   `tests/mcp/ts/mcp_client_check.mjs` runs initialize, `tools/list` (every input schema also
//!   compiled by the SDK's validator), a read-only `tools/call`, `resources/list|read` and
//!   `prompts/list|get`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use pulse_test_support::python::{ensure_success, run, venv_python};
use pulse_test_support::service::bin_dir;
use pulse_test_support::stack::{self, PulsectlUp, StackOptions};
use pulse_test_support::wait;
use serde_json::Value;

const REQUIREMENTS: &str = include_str!("../../mcp/requirements.txt");
const SET_UP_WITHIN: Duration = Duration::from_secs(240);
const CHECKS_WITHIN: Duration = Duration::from_secs(180);
const RESOURCE: &str = "service:pulse-demo:demo-cache";

fn mcp_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../mcp")
}

fn ts_dir() -> PathBuf {
    mcp_dir().join("ts")
}

fn adapter() -> anyhow::Result<PathBuf> {
    let adapter = bin_dir()?.join("pulse-mcp");
    anyhow::ensure!(
        adapter.is_file(),
        "pulse-mcp is missing; run `cargo build --workspace --bins` first"
    );
    Ok(adapter)
}

/// The transports to check, each with the program argument the client scripts take: the stdio
/// adapter, then the gateway's own streamable-HTTP endpoint.
fn transports(adapter: &Path) -> [(&'static str, String); 2] {
    [
        ("stdio", adapter.display().to_string()),
        ("http", "-".to_owned()),
    ]
}

/// A running demo stack with its fleet reported, and what the MCP checks need from it.
struct DemoMcp {
    /// The stack's supervisor: the stack lives as long as it does.
    _up: PulsectlUp,
    base: String,
    admin: String,
    /// The manifest's `pulse_mcp` tool allowlist, in offer order.
    expected_tools: Vec<Value>,
}

async fn demo_mcp(options: &mut StackOptions) -> anyhow::Result<DemoMcp> {
    let mut up = PulsectlUp::spawn(
        options,
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
    let base = options.gateway_url();
    let admin = std::fs::read_to_string(options.admin_token_path())?
        .trim()
        .to_owned();
    let http = reqwest::Client::new();
    let manifest: Value = http
        .get(format!("{base}/api/agent/capabilities"))
        .send()
        .await?
        .json()
        .await?;
    let expected_tools: Vec<Value> = manifest["surfaceToolContracts"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["surfaceId"] == "pulse_mcp"))
        .and_then(|c| c["tools"].as_array())
        .context("the manifest's pulse_mcp tool contract")?
        .clone();
    // The demo agent reports its services shortly after the setup.
    wait::until(SET_UP_WITHIN, "the demo resource in the fleet", || {
        let request = http
            .get(format!("{base}/api/resources/{RESOURCE}"))
            .bearer_auth(&admin);
        async move {
            request
                .send()
                .await
                .ok()?
                .status()
                .is_success()
                .then_some(())
        }
    })
    .await?;
    Ok(DemoMcp {
        _up: up,
        base,
        admin,
        expected_tools,
    })
}

#[tokio::test]
async fn the_official_mcp_client_uses_pulse_mcp_with_the_tokens_authority() -> anyhow::Result<()> {
    stack::require_stack_binaries()?;
    pulse_test_support::install_crypto_provider();
    let adapter = adapter()?;
    let python = venv_python(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-sdk"),
        REQUIREMENTS,
        &mcp_dir().join("requirements.txt"),
    )
    .await?;
    let mut options = StackOptions::isolated("mcp-sdk")?;
    let result = async {
        let DemoMcp {
            _up,
            base,
            admin,
            expected_tools: expected,
        } = demo_mcp(&mut options).await?;
        let http = reqwest::Client::new();
        let created: Value = http
            .post(format!("{base}/api/tokens"))
            .bearer_auth(&admin)
            .json(&serde_json::json!({
                "name": "mcp-readonly",
                "scopes": ["monitoring:read", "ai:execute"],
            }))
            .send()
            .await?
            .json()
            .await?;
        let readonly = created["token"]
            .as_str()
            .context("readonly token")?
            .to_owned();
        // The stdio adapter, then the gateway's own streamable-HTTP endpoint.
        for (mode, program) in transports(&adapter) {
            let out = run(
                tokio::process::Command::new(&python)
                    .arg(mcp_dir().join("mcp_client_check.py"))
                    .arg(mode)
                    .arg(&program)
                    .arg(&base)
                    .env("PULSE_API_TOKEN", &admin)
                    .env("PULSE_READONLY_TOKEN", &readonly)
                    .env("PULSE_MCP_RESOURCE", RESOURCE)
                    .env(
                        "PULSE_MCP_EXPECTED_TOOLS",
                        serde_json::to_string(&expected)?,
                    ),
                CHECKS_WITHIN,
                "the MCP SDK client",
            )
            .await?;
            println!("[{mode}]\n{}", String::from_utf8_lossy(&out.stdout));
            ensure_success(&out, &format!("the MCP SDK checks over {mode}"))?;
            anyhow::ensure!(
                String::from_utf8_lossy(&out.stdout).contains("all MCP checks passed"),
                "the checks over {mode} did not finish"
            );
        }
        // /mcp takes a live token and POST only.
        let anonymous = http
            .post(format!("{base}/mcp"))
            .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await?;
        anyhow::ensure!(
            anonymous.status() == 401,
            "no token: {}",
            anonymous.status()
        );
        let stream = http
            .get(format!("{base}/mcp"))
            .bearer_auth(&admin)
            .send()
            .await?;
        anyhow::ensure!(stream.status() == 405, "GET /mcp: {}", stream.status());
        Ok(())
    }
    .await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}

fn require_ts_sdk() -> anyhow::Result<()> {
    anyhow::ensure!(
        ts_dir()
            .join("node_modules/@modelcontextprotocol/sdk/package.json")
            .is_file(),
        "the MCP TypeScript SDK is not installed: run `npm ci --prefix tests/mcp/ts`"
    );
    Ok(())
}

#[tokio::test]
async fn the_typescript_sdk_client_takes_every_answer_of_pulse_mcp() -> anyhow::Result<()> {
    stack::require_stack_binaries()?;
    require_ts_sdk()?;
    pulse_test_support::install_crypto_provider();
    let adapter = adapter()?;
    let mut options = StackOptions::isolated("mcp-ts-sdk")?;
    let result = async {
        let DemoMcp {
            _up,
            base,
            admin,
            expected_tools,
        } = demo_mcp(&mut options).await?;
        // Both transports run even when the first fails, so a failure says which ones it hits.
        let mut failures = Vec::new();
        for (mode, program) in transports(&adapter) {
            let out = run(
                tokio::process::Command::new("node")
                    .arg(ts_dir().join("mcp_client_check.mjs"))
                    .arg(mode)
                    .arg(&program)
                    .arg(&base)
                    .current_dir(ts_dir())
                    .env("PULSE_API_TOKEN", &admin)
                    .env("PULSE_MCP_RESOURCE", RESOURCE)
                    .env(
                        "PULSE_MCP_EXPECTED_TOOLS",
                        serde_json::to_string(&expected_tools)?,
                    ),
                CHECKS_WITHIN,
                "the MCP TypeScript SDK client (node)",
            )
            .await?;
            println!("[{mode}]\n{}", String::from_utf8_lossy(&out.stdout));
            if let Err(error) =
                ensure_success(&out, &format!("the MCP TypeScript SDK checks over {mode}"))
            {
                failures.push(format!("{error:#}"));
            } else if !String::from_utf8_lossy(&out.stdout)
                .contains(&format!("all MCP checks passed over {mode}"))
            {
                failures.push(format!(
                    "the TypeScript SDK checks over {mode} did not finish"
                ));
            }
        }
        anyhow::ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
        Ok(())
    }
    .await;
    let cleanup = options.cleanup().await;
    result?;
    cleanup
}
