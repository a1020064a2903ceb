//! The body of `POST /api/ai/patrol/run` as clients send it: `{}` (what most HTTP clients and
//! SDKs send for "no parameters") is a full run, like no body at all; an explicit empty scope
//! (`{"resource_ids": []}`) is refused with `invalid_request`, since it is a caller bug rather
//! than a request to look at everything. Real gateway and patrol-scheduler.

use pulse_test_support::patrol::select_keyless_model;
use pulse_test_support::scheduler::TestScheduler;
use pulse_test_support::service::TestGateway;
use serde_json::Value;

async fn post_json(gateway: &TestGateway, body: &str) -> anyhow::Result<(u16, Value)> {
    let response = gateway
        .http
        .post(gateway.url("/api/ai/patrol/run"))
        .bearer_auth(&gateway.admin_token)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

#[tokio::test]
async fn an_empty_object_is_a_full_run_and_an_empty_scope_is_refused() -> anyhow::Result<()> {
    pulse_test_support::install_crypto_provider();
    let gateway = TestGateway::start().await?;
    let scheduler =
        TestScheduler::start(&gateway, &gateway.state_dir.join("scheduler"), &[]).await?;
    let result = async {
        select_keyless_model(&gateway, &gateway.admin_token).await?;

        // `{}` is a full run. On a fresh tenant the scheduler's own `startup` full run may get
        // there first: then `{}` meets the one-full-run-at-a-time rule (409
        // patrol_run_in_progress), which only a full-run request meets.
        let (status, answer) = post_json(&gateway, "{}").await?;
        let (status, run) = match status {
            202 => {
                anyhow::ensure!(answer["type"] == "full", "{answer}");
                let run_id = answer["run_id"]
                    .as_str()
                    .ok_or_else(|| anyhow::anyhow!("no run_id in {answer}"))?;
                gateway
                    .get_json(
                        &gateway.admin_token,
                        &format!("/api/ai/patrol/runs/{run_id}"),
                    )
                    .await?
            }
            409 if answer["error"] == "patrol_run_in_progress" => {
                let (status, listed) = gateway
                    .get_json(&gateway.admin_token, "/api/ai/patrol/runs")
                    .await?;
                let startup = listed["runs"]
                    .as_array()
                    .and_then(|runs| runs.first())
                    .cloned()
                    .unwrap_or(Value::Null);
                anyhow::ensure!(startup["trigger_reason"] == "startup", "{listed}");
                (status, startup)
            }
            _ => anyhow::bail!("{{}} answered {status} {answer}"),
        };
        anyhow::ensure!(status == 200, "{run}");
        anyhow::ensure!(
            run["type"] == "full"
                && matches!(run["trigger_reason"].as_str(), Some("manual" | "startup")),
            "{run}"
        );

        for body in [
            r#"{"resource_ids": []}"#,
            r#"{"context": "everything please"}"#,
        ] {
            let (status, refused) = post_json(&gateway, body).await?;
            anyhow::ensure!(
                status == 422 && refused["error"] == "invalid_request",
                "{body} answered {status} {refused}"
            );
            let message = refused["message"].as_str().unwrap_or_default();
            anyhow::ensure!(message.contains("resource_ids"), "{message}");
        }
        // Only the one full run was recorded.
        let (_, listed) = gateway
            .get_json(&gateway.admin_token, "/api/ai/patrol/runs")
            .await?;
        anyhow::ensure!(
            listed["runs"].as_array().map(Vec::len) == Some(1),
            "{listed}"
        );
        Ok(())
    }
    .await;
    scheduler.stop().await?;
    gateway.stop().await?;
    result
}
