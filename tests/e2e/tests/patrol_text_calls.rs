//! Tool calls a small local model writes as text, end to end: a real `pulse-agent` supervises
//! two services, the real gateway, patrol-scheduler and model-runner run Patrol on a llama.cpp
//! route whose model (the provider simulator) never calls a tool natively.
//!
//! - `sim:text-calls:function-tag` writes every call as `<function name=".." arguments='..'/>`
//!   (the form seen from a 1.5B model on llama.cpp's server): the preflight passes and says its
//!   call was recovered from text, a run on a failing service records its finding through
//!   recovered calls, and the run record, its tool calls and the model-runner's metrics count
//!   them. The next run, in the Hermes form, gives the finding its verdict the same way.
//! - `sim:text-calls-invalid` writes its calls under a name no run offers and with an argument
//!   no schema declares: nothing runs, no finding is recorded, and nothing is counted.

use pulse_domain::patrol::run::{PatrolRun, RunStatus};
use pulse_test_support::fleet::{AgentFleet, FleetSpec, Route, STARTUP};
use pulse_test_support::provider_sim::{Script, preflight_reply};
use pulse_test_support::wait;
use reqwest::Method;
use serde_json::Value;

/// The stack, an agent supervising `web` (failing its health check from the start) and a
/// healthy `db`, the simulator with `script`, and the Patrol route `llamacpp:<model>` at the
/// simulator: a local model server, so calls written as text are recovered by default.
async fn start(model: &str, script: Script) -> anyhow::Result<AgentFleet> {
    let spec = FleetSpec::web_and_db("textcalls", Route::LlamaCpp, model).web_failing();
    AgentFleet::start(spec, script).await
}

/// The AI settings once the stored preflight satisfies `done`.
async fn preflight_when(
    fleet: &AgentFleet,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let gateway = &fleet.stack.gateway;
    wait::until(STARTUP, what, || async {
        let (status, body) = gateway
            .admin_json(Method::GET, "/api/settings/ai", None)
            .await
            .ok()?;
        (status == 200 && done(&body["patrol_preflight"])).then_some(body)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; runner log:\n{}", fleet.runner_log()))
}

/// The model-runner's `pulse_model_tool_calls_recovered_total` for `surface` on this llama.cpp
/// route (0 before the first).
async fn recovered_metric(fleet: &AgentFleet, surface: &str) -> anyhow::Result<f64> {
    let text = fleet.runner_metrics().await?;
    let labels = [
        format!("surface=\"{surface}\""),
        "provider=\"llamacpp\"".to_owned(),
        "route_class=\"local_model_server\"".to_owned(),
    ];
    Ok(text
        .lines()
        .filter(|line| line.starts_with("pulse_model_tool_calls_recovered_total{"))
        .find(|line| labels.iter().all(|l| line.contains(l.as_str())))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0))
}

/// The run's tool calls and how many of them say they were recovered from text.
fn recovered_calls(run: &PatrolRun) -> (usize, usize) {
    let recovered = run
        .tool_calls
        .iter()
        .filter(|c| c.recovered_from_text)
        .count();
    (run.tool_calls.len(), recovered)
}

#[tokio::test]
async fn a_finding_is_recorded_and_reassessed_through_calls_written_as_text() -> anyhow::Result<()>
{
    // No script: the persona answers the preflight too, with its call written as text.
    let fleet = start("sim:text-calls:function-tag", Script::turns([])).await?;
    let web = fleet.service_id("web");

    let settings = preflight_when(&fleet, "a preflight passed through a recovered call", |p| {
        p["ok"] == true && p["tool_calls_recovered"] == 1
    })
    .await?;
    let preflight = &settings["patrol_preflight"];
    assert_eq!(preflight["tool_call_observed"], true, "{preflight}");
    assert!(
        preflight["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("tool calls recovered from text"),
        "{preflight}"
    );
    assert_eq!(settings["preflight_state"], "passed", "{settings}");

    // 1. The failing service gets its finding through recovered calls.
    let first = fleet.run().await?;
    assert_eq!(
        first.status,
        RunStatus::IssuesFound,
        "{first:?}\n{}",
        fleet.runner_log()
    );
    assert_eq!(first.new_findings, 1, "{first:?}");
    let stored = fleet.findings().await?;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let finding = &stored[0].finding;
    assert_eq!(finding.resource_id, web);
    assert_eq!(finding.severity.as_str(), "warning");
    assert_eq!(finding.category.as_str(), "reliability");
    let (calls, recovered) = recovered_calls(&first);
    assert!(calls > 0, "{first:?}");
    assert_eq!(
        recovered, calls,
        "every call was written as text: {first:?}"
    );
    assert_eq!(first.tool_calls_recovered as usize, calls, "{first:?}");
    assert_eq!(first.tool_call_count as usize, calls, "{first:?}");
    let reported = first
        .tool_calls
        .iter()
        .any(|c| c.tool_name == "patrol_report_finding" && c.success);
    assert!(
        reported,
        "the finding came from a recovered call: {first:?}"
    );
    assert!(
        recovered_metric(&fleet, "patrol").await? >= calls as f64,
        "patrol metric: {}",
        fleet.runner_metrics().await?
    );
    assert!(
        recovered_metric(&fleet, "patrol_preflight").await? >= 1.0,
        "preflight metric"
    );
    // No request ever offered the model a way to call natively that it used: every answer was
    // text, and every later request carries the recovered calls as tool calls.
    let carried = fleet.sim.requests().iter().any(|r| {
        r.body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| {
                m["role"] == "assistant"
                    && m["tool_calls"].as_array().is_some_and(|c| !c.is_empty())
            })
    });
    assert!(
        carried,
        "recovered calls go back to the model as tool calls"
    );

    // 2. The next run, in the Hermes form, reconfirms it.
    fleet.set_model("sim:text-calls:hermes").await?;
    preflight_when(&fleet, "the Hermes route's preflight", |p| {
        p["route"] == "llamacpp:sim:text-calls:hermes" && p["tool_calls_recovered"] == 1
    })
    .await?;
    let second = fleet.run().await?;
    assert_eq!(
        second.status,
        RunStatus::IssuesFound,
        "{second:?}\n{}",
        fleet.runner_log()
    );
    assert_eq!(second.new_findings, 0, "{second:?}");
    let assessments = &second.finding_assessments;
    assert_eq!(assessments.len(), 1, "{second:?}");
    assert_eq!(assessments[0].finding_id, finding.id.as_hex());
    assert_eq!(assessments[0].verdict, "present");
    let (calls, recovered) = recovered_calls(&second);
    assert!(calls > 0 && recovered == calls, "{second:?}");
    assert_eq!(second.tool_calls_recovered as usize, calls, "{second:?}");

    fleet.stop().await
}

#[tokio::test]
async fn calls_written_to_an_unoffered_tool_or_with_invalid_arguments_stay_text()
-> anyhow::Result<()> {
    // The preflight is answered natively, so the run is admitted and reaches the model.
    let fleet = start(
        "sim:text-calls-invalid",
        Script::turns([]).with_tool_offer_reply(preflight_reply()),
    )
    .await?;
    preflight_when(&fleet, "a passed preflight", |p| {
        p["ok"] == true && p["tool_calls_recovered"] == 0
    })
    .await?;

    let run = fleet.run().await?;
    assert_ne!(run.status, RunStatus::IssuesFound, "{run:?}");
    assert_eq!(run.new_findings, 0, "{run:?}");
    assert_eq!(run.tool_call_count, 0, "{run:?}");
    assert_eq!(run.tool_calls_recovered, 0, "{run:?}");
    assert!(fleet.findings().await?.is_empty());
    // The model was asked, and answered with the misspelt calls as text.
    let answered = fleet.sim.requests().iter().any(|r| {
        r.model == "sim:text-calls-invalid"
            && r.body["tools"].as_array().is_some_and(|t| t.len() > 1)
    });
    assert!(answered, "the run reached the model");
    assert_eq!(recovered_metric(&fleet, "patrol").await?, 0.0);

    fleet.stop().await
}
