//! Patrol on a weak local model, end to end: a real `pulse-agent` supervises `web` (failing its
//! health check) and a healthy `db`; the real gateway, patrol-scheduler and model-runner run
//! Patrol on a llama.cpp route whose model (the provider simulator) misbehaves the ways a real
//! 1.5B model did:
//!
//! - `sim:false-alarm` reports "health check is unknown" on the healthy `db`: the report is
//!   refused with the contradiction named, and only the real fault becomes a finding.
//! - `sim:repeating` writes each call 41 times in one answer: each distinct call runs once and
//!   the fault is recorded once.
//! - `sim:inventing` reads 20 made-up ids in one answer: 6 run (this route's cap on one
//!   answer, its calls coming as text) and are answered with the
//!   nearest real ids, the rest are refused with a message the model can act on, and the run
//!   still finds the fault.
//! - `sim:looping` calls its first tool again and again: the first repeat is answered with a
//!   note instead of running, the run goes straight to its decision turn, and it ends without
//!   an all-clear.
//! - A model that only ever answers in prose, from the opening turn on, is sent back to read
//!   exactly once, and the run ends without an all-clear.

use pulse_domain::patrol::run::{PatrolRun, RunStatus, ToolCallRecord};
use pulse_test_support::fleet::{AgentFleet, FleetSpec, Route};
use pulse_test_support::provider_sim::{
    FALSE_ALARM_KEY, INVENTED_READS, REPEATED_CALLS, Script, preflight_reply,
};
use serde_json::Value;

async fn fleet(model: &str) -> anyhow::Result<AgentFleet> {
    let spec = FleetSpec::web_and_db("weak", Route::LlamaCpp, model).web_failing();
    AgentFleet::start(
        spec,
        Script::turns([]).with_tool_offer_reply(preflight_reply()),
    )
    .await
}

fn calls_of<'a>(run: &'a PatrolRun, tool: &str) -> Vec<&'a ToolCallRecord> {
    run.tool_calls
        .iter()
        .filter(|c| c.tool_name == tool)
        .collect()
}

/// The run found exactly the fault: one new finding, on `web`, and nothing else is stored.
async fn only_the_fault_is_recorded(fleet: &AgentFleet, run: &PatrolRun) -> anyhow::Result<()> {
    assert_eq!(
        run.status,
        RunStatus::IssuesFound,
        "{run:?}\n{}",
        fleet.runner_log()
    );
    assert_eq!(run.new_findings, 1, "{run:?}");
    let stored = fleet.findings().await?;
    let resources: Vec<&str> = stored
        .iter()
        .map(|f| f.finding.resource_id.as_str())
        .collect();
    assert_eq!(resources, vec![fleet.service_id("web")], "{stored:?}");
    assert_eq!(stored[0].finding.times_raised, 1, "{stored:?}");
    Ok(())
}

#[tokio::test]
async fn a_report_the_resource_state_contradicts_is_refused_and_never_becomes_a_finding()
-> anyhow::Result<()> {
    let fleet = fleet("sim:false-alarm").await?;
    let db = fleet.service_id("db");

    let run = fleet.run().await?;
    only_the_fault_is_recorded(&fleet, &run).await?;
    let guess = calls_of(&run, "patrol_report_finding")
        .into_iter()
        .find(|c| c.input.contains(FALSE_ALARM_KEY))
        .unwrap_or_else(|| panic!("the model made its guess: {run:?}"));
    assert!(!guess.success, "{guess:?}");
    for said in [
        format!("contradicts the current state of {db}"),
        "the report says its health is unknown".to_owned(),
        "its health check reports healthy".to_owned(),
        "nothing was recorded".to_owned(),
    ] {
        assert!(guess.output.contains(&said), "{said}: {guess:?}");
    }
    assert!(run.rejected_findings >= 1, "{run:?}");

    fleet.stop().await
}

#[tokio::test]
async fn identical_calls_in_one_answer_run_once() -> anyhow::Result<()> {
    let fleet = fleet("sim:repeating").await?;

    let run = fleet.run().await?;
    only_the_fault_is_recorded(&fleet, &run).await?;
    // Every call the model wrote counts; the record keeps each distinct call once, so the
    // report is on it although the repeats of earlier answers came first.
    let distinct = run.tool_calls.len();
    assert_eq!(
        run.tool_call_count as usize,
        distinct * REPEATED_CALLS,
        "{run:?}"
    );
    let reports = calls_of(&run, "patrol_report_finding");
    assert_eq!(reports.len(), 1, "{run:?}");
    assert!(reports[0].success, "{reports:?}");
    assert!(
        run.tool_calls
            .iter()
            .all(|c| !c.output.contains("same call as")),
        "{run:?}"
    );
    // A repeat is not a refused report: nothing was asked of the store twice.
    assert_eq!(run.rejected_findings, 0, "{run:?}");

    fleet.stop().await
}

#[tokio::test]
async fn made_up_ids_get_the_nearest_real_ids_and_calls_past_the_cap_are_refused()
-> anyhow::Result<()> {
    let fleet = fleet("sim:inventing").await?;
    let web = fleet.service_id("web");

    let run = fleet.run().await?;
    only_the_fault_is_recorded(&fleet, &run).await?;
    let invented: Vec<&ToolCallRecord> = calls_of(&run, "pulse_query")
        .into_iter()
        .filter(|c| c.input.contains(&format!("{web}-")))
        .collect();
    assert_eq!(invented.len(), INVENTED_READS, "{run:?}");
    let answered: Vec<_> = invented
        .iter()
        .filter(|c| c.output.contains("nearest ids") && c.output.contains(&web))
        .collect();
    let capped: Vec<_> = invented
        .iter()
        .filter(|c| {
            c.output
                .contains("too many tool calls in one answer: at most 6 run")
        })
        .collect();
    assert_eq!(answered.len(), 6, "{invented:?}");
    assert_eq!(capped.len(), INVENTED_READS - 6, "{invented:?}");
    assert!(capped.iter().all(|c| !c.success), "{capped:?}");

    fleet.stop().await
}

#[tokio::test]
async fn a_model_that_loops_gets_no_all_clear() -> anyhow::Result<()> {
    let fleet = fleet("sim:looping").await?;

    let run = fleet.run().await?;
    assert_ne!(run.status, RunStatus::Healthy, "{run:?}");
    assert_eq!(run.new_findings, 0, "{run:?}");
    assert!(fleet.findings().await?.is_empty());
    assert!(run.tool_call_count > 0, "{run:?}");

    // The loop was bounded by the repeat rule, not by a budget: the first repeat of the read is
    // answered with a note instead of running again, and the very next request is the decision
    // turn, which admits no read.
    let watch: Vec<Value> = fleet
        .sim
        .requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| b["messages"].to_string().contains("Inventory:"))
        .collect();
    let notes = |body: &Value| {
        body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter(|m| m["role"] == "tool")
                    .filter(|m| {
                        m["content"]
                            .as_str()
                            .is_some_and(|c| c.starts_with(REPEATED))
                    })
                    .count()
            })
            .unwrap_or_default()
    };
    // Every request after the opening lists the same tools, so a local server's prompt cache
    // holds from turn to turn; what each turn may write is bounded by what it is for, tighter on
    // this route (its calls come as text): the opening reads (512), the others investigate
    // (768), the decision turn decides (1,024).
    let listed = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(
        !listed(&watch[0]).iter().any(|t| t.starts_with("patrol_")),
        "{}",
        watch[0]
    );
    assert!(
        watch[1..].iter().all(|b| listed(b) == listed(&watch[1])),
        "{watch:?}"
    );
    assert!(listed(&watch[1]).iter().any(|t| t == "pulse_query"));
    assert!(
        listed(&watch[1])
            .iter()
            .any(|t| t == "patrol_report_finding")
    );
    assert_eq!(watch[0]["max_tokens"], 512, "{}", watch[0]);
    let first = watch
        .iter()
        .position(|b| notes(b) > 0)
        .unwrap_or_else(|| panic!("no request carries the repeat note: {watch:?}"));
    assert_eq!(notes(&watch[first]), 1, "{:?}", watch[first]);
    assert!(
        watch[1..first].iter().all(|b| b["max_tokens"] == 768),
        "{watch:?}"
    );
    let last_user = watch[first]["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    assert!(
        last_user.starts_with("Final decision turn"),
        "the request after the repeat is the decision turn: {last_user}"
    );
    assert_eq!(watch[first]["max_tokens"], 1024, "{}", watch[first]);
    // Nothing read again afterwards: every later request has the same single note.
    assert!(watch[first..].iter().all(|b| notes(b) == 1), "{watch:?}");

    fleet.stop().await
}

/// The words the note for a repeated read opens with.
const REPEATED: &str = "You already made this exact call in this run";

/// The words the runtime's read-first push-back opens with.
const READ_FIRST: &str = "Nothing has been read in this run yet";

#[tokio::test]
async fn a_conclusion_before_any_read_is_sent_back_to_read_exactly_once() -> anyhow::Result<()> {
    let spec = FleetSpec::web_and_db("prose", Route::LlamaCpp, "qwen-prose").web_failing();
    let fleet = AgentFleet::start(
        spec,
        Script::lazy("All services look fine to me.").with_tool_offer_reply(preflight_reply()),
    )
    .await?;

    let run = fleet.run().await?;
    assert_ne!(run.status, RunStatus::Healthy, "{run:?}");
    assert_eq!(run.new_findings, 0, "{run:?}");
    assert!(fleet.findings().await?.is_empty());

    // The Watch requests of the run (the preflight's probes name no inventory).
    let watch: Vec<Vec<Value>> = fleet
        .sim
        .requests()
        .into_iter()
        .filter_map(|r| r.body["messages"].as_array().cloned())
        .filter(|m| m.iter().any(|m| m.to_string().contains("Inventory:")))
        .collect();
    assert!(watch.len() >= 3, "{} Watch requests", watch.len());
    let last_text = |messages: &[Value]| {
        messages
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    // The opening turn's prose answer is what is sent back: the second request ends with the
    // push-back, the first did not carry it.
    assert!(!last_text(&watch[0]).contains(READ_FIRST), "{:?}", watch[0]);
    assert!(
        last_text(&watch[1]).starts_with(READ_FIRST),
        "{:?}",
        watch[1]
    );
    // Exactly once, however often the model concluded without reading.
    let pushed = watch
        .last()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| {
                    m["content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with(READ_FIRST))
                })
                .count()
        })
        .unwrap_or_default();
    assert_eq!(pushed, 1, "{:?}", watch.last());

    fleet.stop().await
}
