//! `pulse-mcp --emit-notifications`: the gateway's agent events reach the MCP client as
//! `notifications/<kind>` lines between the answers, through the real gateway binary.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_store::findings;
use pulse_test_support::service::{TestGateway, binary};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const WITHIN: Duration = Duration::from_secs(30);

/// The next line that satisfies `wanted`, skipping the others.
async fn next_matching<R, F>(lines: &mut tokio::io::Lines<R>, wanted: F) -> anyhow::Result<Value>
where
    R: tokio::io::AsyncBufRead + Unpin,
    F: Fn(&Value) -> bool,
{
    tokio::time::timeout(WITHIN, async {
        loop {
            let line = lines
                .next_line()
                .await?
                .context("pulse-mcp closed stdout")?;
            let message: Value = serde_json::from_str(&line)
                .with_context(|| format!("not one JSON message per line: {line:?}"))?;
            if wanted(&message) {
                return Ok(message);
            }
        }
    })
    .await
    .context("the expected message did not come")?
}

#[tokio::test]
async fn agent_events_become_notifications() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let mut child = tokio::process::Command::new(binary("pulse-mcp")?)
            .args(["--base-url", &gw.url, "--emit-notifications"])
            .env("PULSE_API_TOKEN", &gw.admin_token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdin = child.stdin.take().context("stdin")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();

        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "1"}}});
        stdin.write_all(format!("{request}\n").as_bytes()).await?;
        let answer = next_matching(&mut lines, |m| m["id"] == 1).await?;
        assert_eq!(answer["result"]["serverInfo"]["name"], "pulse", "{answer}");
        next_matching(&mut lines, |m| {
            m["method"] == "notifications/stream.connected"
        })
        .await?;

        let tx = gw.db.store().tenant_tx(&TenantId::default_tenant()).await?;
        let outcome = findings::report(
            &tx,
            &ReportedFinding {
                key: "notify-check".to_owned(),
                severity: Severity::Warning,
                category: Category::Reliability,
                resource_id: "service:h1:web".to_owned(),
                resource_name: "web".to_owned(),
                resource_type: "service".to_owned(),
                title: "web is unhealthy".to_owned(),
                description: "the health check fails".to_owned(),
                recommendation: "look at it".to_owned(),
                evidence: "health=unhealthy".to_owned(),
                impact: String::new(),
            },
            None,
            Utc::now(),
        )
        .await?;
        tx.commit().await?;
        let id = outcome.finding.finding.id.as_hex();
        let note = next_matching(&mut lines, |m| {
            m["method"] == "notifications/finding.created"
        })
        .await?;
        assert_eq!(note["jsonrpc"], "2.0");
        assert!(note.get("id").is_none(), "a notification has no id: {note}");
        assert!(note["params"].to_string().contains(&id), "{note}");

        // Answers keep flowing beside the notifications.
        let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
        stdin.write_all(format!("{ping}\n").as_bytes()).await?;
        let pong = next_matching(&mut lines, |m| m["id"] == 2).await?;
        assert_eq!(pong["result"], json!({}));
        drop(stdin);
        let status = tokio::time::timeout(WITHIN, child.wait()).await??;
        assert!(
            status.success(),
            "pulse-mcp exited with {status} when stdin closed"
        );
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}
