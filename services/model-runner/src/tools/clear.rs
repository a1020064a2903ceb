//! `patrol_clear_signal`: the model judges one deterministic signal of a resource (a problem
//! triage flag or a firing alert) expected and benign, with evidence. It writes nothing durable:
//! the clear is recorded in the run's ledger, counts towards the run's all-clear accounting
//! ([`crate::tools::signals`]) and is listed in the run's analysis, so an operator sees every
//! signal the model waved through and why.
//!
//! A clear must say why the signal is expected. One whose evidence and reason only restate the
//! signal (a real 1.5B model cleared `alert_agent_offline` with "The alert 'agent_offline' was not
//! reported or assessed.", Pulse's own review words, and its run became an all-clear) is refused:
//! see [`says_why`]. So is one that describes a problem with nothing that makes it expected
//! ([`asserts_a_problem`]), and a clear on a resource the same run reported as a problem.

use serde_json::json;

use pulse_capabilities::ToolName;
use pulse_domain::resource::truncate_chars;

use super::{RunLedger, ToolContext, blank_field, json_result, signature, text_arg};
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// Characters kept of the evidence and reason of a clear.
const MAX_TEXT: usize = 500;

pub fn clear(ctx: &ToolContext, ledger: &RunLedger, call: &ToolCall) -> ToolResult {
    let signature = signature(call);
    if ledger.was_accepted(&signature) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "this signal was already cleared in this run; it is not repeated",
        );
    }
    if let Some(field) = blank_field(ToolName::PatrolClearSignal, &call.arguments) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            format!(
                "the clear was refused: {field} says nothing (it is empty, punctuation or an unfilled <placeholder>)"
            ),
        );
    }
    let (Some(resource_id), Some(signal), Some(evidence), Some(reason)) = (
        text_arg(&call.arguments, "resource_id"),
        text_arg(&call.arguments, "signal"),
        text_arg(&call.arguments, "evidence"),
        text_arg(&call.arguments, "reason"),
    ) else {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "the clear was refused: resource_id, signal, evidence and reason are required",
        );
    };
    let book = ledger.signals();
    if !book.has(resource_id, signal) {
        ledger.reject();
        let known = book.of(resource_id);
        let message = if known.is_empty() {
            format!("the clear was refused: {resource_id} carries no signal in this run")
        } else {
            format!(
                "the clear was refused: {resource_id} carries {} in this run, not {signal}",
                known.join(", ")
            )
        };
        return ToolResult::error(&call.id, message);
    }
    // A report says the resource has a problem; a clear of one of its signals would say the
    // opposite (a real 1.5B model reported a failing check and cleared it in the same run).
    if ledger
        .reports()
        .iter()
        .any(|r| r.resource_id == resource_id)
    {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            format!(
                "the clear was refused: this run reported {resource_id} as a problem, which \
                 already addresses its signals; a clear would say the opposite. Nothing was \
                 cleared"
            ),
        );
    }
    if let Some(word) = asserts_a_problem(evidence, reason) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            format!(
                "the clear was refused: its evidence and reason say {resource_id} has a problem \
                 ({word:?}) and nothing that makes {signal} expected (maintenance, a planned \
                 change, a test, a decommissioning). Report the problem with \
                 patrol_report_finding instead; nothing was cleared"
            ),
        );
    }
    // The resource's own names restate it too ("the alert on host 'vm'").
    let names = ctx
        .in_scope(resource_id)
        .map(|r| format!("{} {}", r.name, r.agent_id))
        .unwrap_or_default();
    if !says_why(evidence, reason, &format!("{resource_id} {names}"), signal) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            format!(
                "the clear was refused: its evidence and reason only restate that {resource_id} \
                 carries {signal}; a clear needs what shows the signal is expected (a label, a \
                 maintenance note, what a read returned). When nothing shows that, report the \
                 problem with patrol_report_finding instead; nothing was cleared"
            ),
        );
    }
    ledger.accept_clear(
        signature,
        resource_id.to_owned(),
        signal.to_owned(),
        format!(
            "{} ({})",
            truncate_chars(reason, MAX_TEXT),
            truncate_chars(evidence, MAX_TEXT)
        ),
    );
    json_result(
        call,
        &json!({
            "cleared": true,
            "resource_id": resource_id,
            "signal": signal,
            "still_unaddressed": ledger.still_unaddressed(),
        }),
    )
}

/// Words that say nothing about why a signal is expected: function words, the words of Pulse's
/// own review and refusal texts, and the words of a resource's state. Whatever a clear says
/// beyond these, the signal's name and the resource's id is its reason.
const RESTATING_WORDS: &[&str] = &[
    "a",
    "an",
    "the",
    "and",
    "or",
    "nor",
    "not",
    "no",
    "neither",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "it",
    "its",
    "this",
    "that",
    "these",
    "those",
    "of",
    "on",
    "in",
    "for",
    "to",
    "by",
    "with",
    "as",
    "at",
    "has",
    "have",
    "had",
    "does",
    "did",
    "do",
    "so",
    "which",
    "still",
    "there",
    "here",
    "carries",
    "carry",
    "carrying",
    "signal",
    "signals",
    "alert",
    "alerts",
    "flag",
    "flags",
    "flagged",
    "triage",
    "deterministic",
    "reported",
    "report",
    "reports",
    "assessed",
    "assess",
    "cleared",
    "clear",
    "addressed",
    "address",
    "review",
    "incomplete",
    "model",
    "firing",
    "fired",
    "fires",
    "critical",
    "warning",
    "page",
    "value",
    "threshold",
    "against",
    "expected",
    "benign",
    "normal",
    "fine",
    "ok",
    "okay",
    "status",
    "state",
    "health",
    "healthy",
    "unhealthy",
    "unknown",
    "running",
    "exited",
    "offline",
    "online",
    "down",
    "up",
    "failing",
    "failed",
    "fails",
    "resource",
    "resources",
    "service",
    "host",
    "container",
    "storage",
    "because",
    "since",
    "therefore",
    "listed",
    "inventory",
    "shown",
    "shows",
    "showing",
    "functioning",
    "working",
    "works",
    "problem",
    "problems",
    "issue",
    "issues",
    "error",
    "errors",
    "current",
    "currently",
    "seems",
    "appears",
    "any",
    "all",
];

/// Whether a clear's evidence and reason hold a word that is not a restatement: not in
/// [`RESTATING_WORDS`], not a word of the signal's name or of `resource` (its id and names),
/// and not a number.
pub fn says_why(evidence: &str, reason: &str, resource: &str, signal: &str) -> bool {
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let own: Vec<String> = words(resource).into_iter().chain(words(signal)).collect();
    words(evidence).into_iter().chain(words(reason)).any(|w| {
        !w.chars().all(|c| c.is_ascii_digit())
            && !RESTATING_WORDS.contains(&w.as_str())
            && !own.contains(&w)
    })
}

/// Words that say a resource has a problem.
const PROBLEM_WORDS: &[&str] = &[
    "fail",
    "fails",
    "failed",
    "failing",
    "failure",
    "failures",
    "error",
    "errors",
    "issue",
    "issues",
    "problem",
    "problems",
    "unhealthy",
    "crash",
    "crashed",
    "crashes",
    "crashing",
    "broken",
    "unresponsive",
    "malfunction",
    "malfunctioning",
    "degraded",
];

/// What "not" before it turns into a problem ("not responding").
const NEGATED_WORKING: &[&str] = &["functioning", "responding", "working", "running"];

/// Words that say why a problem-looking signal is expected (a bare "expected" is not one: a
/// weak model writes "not functioning as expected").
const EXPECTATION_WORDS: &[&str] = &[
    "intentional",
    "intentionally",
    "deliberate",
    "deliberately",
    "purpose",
    "planned",
    "scheduled",
    "maintenance",
    "migration",
    "migrating",
    "migrated",
    "upgrade",
    "upgrading",
    "decommissioned",
    "decommissioning",
    "retired",
    "test",
    "testing",
    "disabled",
    "design",
    "known",
    "acknowledged",
];

/// The first word of a clear's evidence or reason that says the resource has a problem, when
/// nothing in them says why that is expected: such a clear describes a problem to report.
pub fn asserts_a_problem(evidence: &str, reason: &str) -> Option<String> {
    let words: Vec<String> = format!("{evidence} {reason}")
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    if words
        .iter()
        .any(|w| EXPECTATION_WORDS.contains(&w.as_str()))
    {
        return None;
    }
    words.iter().enumerate().find_map(|(i, w)| {
        if PROBLEM_WORDS.contains(&w.as_str()) {
            return Some(w.clone());
        }
        let negated = i > 0 && matches!(words[i - 1].as_str(), "not" | "no" | "never");
        (negated && NEGATED_WORKING.contains(&w.as_str())).then(|| format!("not {w}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_that_describes_a_problem_is_a_report_in_disguise() {
        // What a real 1.5B model wrote to clear a failing health check (the client of a stopped
        // dependency) and a check it had just reported.
        assert_eq!(
            asserts_a_problem(
                "The health check failed, indicating an issue with the service.",
                "The service is in an unhealthy state due to a health check failure."
            ),
            Some("failed".to_owned())
        );
        assert_eq!(
            asserts_a_problem(
                "The health check is failing because the service is not responding to requests.",
                "The health check is failing."
            ),
            Some("failing".to_owned())
        );
        assert_eq!(
            asserts_a_problem("it is not responding", "see above"),
            Some("not responding".to_owned())
        );
        // Expected problems say why.
        assert_eq!(
            asserts_a_problem(
                "the web service is being migrated; its check is expected to fail",
                "planned maintenance"
            ),
            None
        );
        assert_eq!(
            asserts_a_problem("label lifecycle=retired", "the host was decommissioned"),
            None
        );
        assert_eq!(
            asserts_a_problem(
                "no health check is configured for this service",
                "an unknown health is what a service without a check reports"
            ),
            None
        );
    }

    #[test]
    fn a_clear_that_only_restates_its_signal_says_nothing() {
        let host = "host:node-3ee8qich";
        // What a real 1.5B model wrote, in both fields.
        let parroted = "The alert 'agent_offline' was not reported or assessed.";
        assert!(!says_why(parroted, parroted, host, "alert_agent_offline"));
        // Its other spellings name the host, which restates it too.
        let named = "The alert 'agent_offline' on host 'vm' is expected.";
        assert!(!says_why(
            named,
            named,
            &format!("{host} vm node-3ee8qich"),
            "alert_agent_offline"
        ));
        assert!(!says_why(
            "host:node-3ee8qich status unknown, health unknown; value 1 against threshold 1",
            "it is expected",
            host,
            "alert_agent_offline"
        ));
        // Also as a real 1.5B model wrote it: the evidence says the problem holds.
        assert!(!says_why(
            "The service 'catalog-worker-n4' is listed as unhealthy in the inventory.",
            "The service is not functioning as expected.",
            "service:node-n4:catalog-worker-n4",
            "alert_unhealthy"
        ));
        let web = "service:h1:web";
        assert!(says_why(
            "the web service is being migrated; its check is expected to fail",
            "planned maintenance",
            web,
            "health_check_failing"
        ));
        assert!(says_why(
            "label lifecycle=retired",
            "the host was decommissioned",
            host,
            "alert_agent_offline"
        ));
    }
}
