//! The Watch finding lifecycle tools, all writing through `pulse_store::findings` (the only
//! writer path):
//!
//! - `patrol_get_findings`: the active findings on the run's resources, read once; later calls
//!   in the run answer the same snapshot. Every finding shown needs a verdict before the run
//!   ends. A `resource_id` that names no resource of the run does not narrow the snapshot (it
//!   would read as "no active finding"); the snapshot names the nearest real ids instead.
//! - `patrol_report_finding`: one finding on a resource that resolves exactly (canonical id in
//!   the run's scope, matching type and name) whose claim the resource's typed state does not
//!   contradict ([`contradiction`](super::contradiction)). A report on a resource with no
//!   signal in the run needs a read of this run that named it first: otherwise nothing Pulse
//!   holds points at a problem and the report is refused as a guess. The store decides new / re-detection / merge /
//!   regression with the resource's deterministic signals in this run ([`run_signals`]: its
//!   problem triage flags and firing alerts), which settle a merge the keys' words cannot
//!   decide. A
//!   report that merged into an existing finding answers which one (`merged_into`, id and key)
//!   and what to do instead of reporting it again.
//! - `patrol_assess_finding`: a verdict on a finding shown to the run, only after
//!   `patrol_get_findings`. `resolved` on a key with a deterministic verifier asks the verifier
//!   service (`verify.resolution`); no answer in time is inconclusive, which refuses.
//!
//! A call accepted once is never applied again in the same run (a repeat is refused).

use std::str::FromStr;

use chrono::Utc;
use pulse_bus::VerifierClient;
use pulse_bus::verify_api::{ResolutionCheckReply, ResolutionCheckRequest};
use pulse_capabilities::ToolName;
use pulse_domain::finding::equivalence::ResourceSignals;
use pulse_domain::finding::{
    Finding, FindingId, ReportKind, ReportedFinding, VerdictInput, VerifierKey, VerifierOutcome,
};
use pulse_domain::resource::truncate_chars;
use pulse_store::findings::{self, FindingsError, ListFilter};
use serde_json::{Value, json};

use super::{
    AcceptedReport, AcceptedVerdict, RunLedger, ToolContext, blank_field, json_result, signature,
    text_arg,
};
use crate::tools::contradiction::contradiction;
use crate::tools::signals::ALERT_PREFIX;
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// Findings in one snapshot.
pub const MAX_SNAPSHOT_FINDINGS: i64 = 100;
/// Characters of a finding's evidence shown in the snapshot.
const SNAPSHOT_EVIDENCE_CHARS: usize = 400;

/// One finding as the model sees it: what a verdict needs. Name, type and category are in the
/// inventory or one `pulse_query get` away; every row listed is active. A finding the seed
/// already listed (`in_seed`) leaves out its severity and title: they are on its seed line.
pub fn finding_row(finding: &Finding, in_seed: bool) -> Value {
    let mut row = json!({
        "finding_id": finding.id.as_hex(),
        "key": finding.key.as_str(),
        "resource_id": finding.resource_id,
        "times_raised": finding.times_raised,
        "evidence": truncate_chars(&finding.evidence, SNAPSHOT_EVIDENCE_CHARS),
    });
    if !in_seed {
        row["severity"] = json!(finding.severity.as_str());
        row["title"] = json!(truncate_chars(&finding.title, 256));
    }
    row
}

/// The active findings on the run's resources (every finding of a full run's inventory).
pub async fn active_in_scope(ctx: &ToolContext) -> Result<Vec<Finding>, String> {
    let tx = ctx
        .store
        .tenant_tx(&ctx.tenant)
        .await
        .map_err(|e| e.to_string())?;
    let listed = findings::list(
        &tx,
        ListFilter::Active,
        Some(MAX_SNAPSHOT_FINDINGS),
        Utc::now(),
    )
    .await
    .map_err(|e| e.to_string())?;
    Ok(listed
        .into_iter()
        .map(|s| s.finding)
        .filter(|f| ctx.in_scope(&f.resource_id).is_some())
        .collect())
}

pub async fn get_findings(ctx: &ToolContext, ledger: &RunLedger, call: &ToolCall) -> ToolResult {
    if let Some(snapshot) = ledger.snapshot() {
        return ToolResult::ok(&call.id, snapshot);
    }
    let active = match active_in_scope(ctx).await {
        Ok(active) => active,
        Err(error) => {
            tracing::warn!(run_id = %ctx.run_id, %error, "active findings could not be read");
            ledger.error("the active findings could not be read");
            return ToolResult::error(&call.id, "the active findings are unavailable right now");
        }
    };
    // An id that names no resource of the run would filter the snapshot down to nothing, which
    // reads as "no active finding": the snapshot covers every resource instead and says so.
    let asked = text_arg(&call.arguments, "resource_id");
    let unknown = asked.filter(|id| ctx.in_scope(id).is_none());
    let resource = asked.filter(|_| unknown.is_none());
    let severity = text_arg(&call.arguments, "severity");
    let shown: Vec<&Finding> = active
        .iter()
        .filter(|f| resource.is_none_or(|r| f.resource_id == r))
        .filter(|f| severity.is_none_or(|s| f.severity.as_str() == s))
        .collect();
    // Presented before this call: the findings the seed listed.
    let in_seed = ledger.presented();
    ledger.present(shown.iter().map(|f| (f.id, f.title.clone())));
    let mut snapshot = json!({
        "active_findings": shown
            .iter()
            .map(|f| finding_row(f, in_seed.contains_key(&f.id)))
            .collect::<Vec<_>>(),
        "instruction": if shown.is_empty() {
            "no active finding on the resources of this run"
        } else {
            "each needs a patrol_assess_finding verdict; final for this run"
        },
    });
    if let Some(id) = unknown {
        snapshot["note"] = json!(format!(
            "{}; shown: the active findings of every resource of this run",
            ctx.unknown_resource(id)
        ));
    }
    let snapshot = snapshot.to_string();
    ledger.set_snapshot(&snapshot);
    ToolResult::ok(&call.id, snapshot)
}

/// Why a report does not name an in-scope resource exactly; `None` when it does.
fn resolution_problem(ctx: &ToolContext, reported: &ReportedFinding) -> Option<String> {
    let id = reported.resource_id.trim();
    let Some(resource) = ctx.in_scope(id) else {
        return Some(format!(
            "resource_id must be the canonical id of a resource in this run's scope (as listed in the inventory): {}",
            ctx.unknown_resource(id)
        ));
    };
    if reported.resource_type != resource.resource_type.as_str() {
        return Some(format!(
            "resource_type must be {} for {}",
            resource.resource_type.as_str(),
            resource.id
        ));
    }
    let name = reported.resource_name.trim();
    if name != resource.name
        && name != resource.source_id
        && !resource.aliases.iter().any(|a| a == name)
    {
        return Some(format!(
            "resource_name does not name {}; use its inventory name",
            resource.id
        ));
    }
    None
}

/// The deterministic signals that hold for `resource_id` in this run, as the run read them at
/// its start (the run's [`SignalBook`](crate::tools::signals::SignalBook), the one owner): its
/// problem triage flags (`health_check_failing`, ...) and its firing alerts, each alert under the
/// spellings a report's evidence may cite (`alert_<rule>`, and the alert key
/// `<resource_id>:<rule>`).
pub fn run_signals(ledger: &RunLedger, resource_id: &str) -> ResourceSignals {
    let book = ledger.signals();
    book.of(resource_id)
        .into_iter()
        .fold(ResourceSignals::default(), |signals, signal| {
            let spelling = match signal.strip_prefix(ALERT_PREFIX) {
                Some(rule) => format!("{resource_id}:{rule}"),
                None => signal.to_owned(),
            };
            signals.with_spelling(signal, &spelling)
        })
}

/// What the model should do about a report that merged into `finding`, instead of reporting
/// the same problem again: a verdict when the finding was shown to this run (the only findings
/// `patrol_assess_finding` accepts), nothing when this run reported it itself.
fn merge_instruction(ledger: &RunLedger, finding: &Finding) -> String {
    let (id, key) = (finding.id.as_hex(), finding.key.as_str());
    if ledger.presented().contains_key(&finding.id) {
        let first = if ledger.snapshot().is_none() {
            "call patrol_get_findings, then "
        } else {
            ""
        };
        return format!(
            "this is the problem already recorded as finding {id} ({key}): do not report it \
             again under another key; {first}give finding {id} a patrol_assess_finding verdict \
             instead"
        );
    }
    if ledger.reports().iter().any(|r| r.finding_id == finding.id) {
        return format!(
            "this is the problem you already reported in this run as finding {id} ({key}): it \
             is recorded once and needs nothing more; do not report it again"
        );
    }
    format!(
        "this is the problem already recorded as finding {id} ({key}): it is recorded once and \
         needs nothing more in this run; do not report it again"
    )
}

pub async fn report(ctx: &ToolContext, ledger: &RunLedger, call: &ToolCall) -> ToolResult {
    let signature = signature(call);
    if ledger.was_accepted(&signature) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "this report was already accepted in this run; it is not repeated",
        );
    }
    if let Some(field) = blank_field(ToolName::PatrolReportFinding, &call.arguments) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            format!(
                "the report was refused: {field} says nothing (it is empty, punctuation or an unfilled <placeholder>)"
            ),
        );
    }
    let mut reported: ReportedFinding = match serde_json::from_value(call.arguments.clone()) {
        Ok(reported) => reported,
        Err(error) => {
            ledger.reject();
            return ToolResult::error(&call.id, format!("the report is not valid: {error}"));
        }
    };
    let repaired_key = repair_key(&mut reported);
    if let Err(error) = reported.identity() {
        ledger.reject();
        // A weak model was seen writing the resource id as the key; say what a key is.
        let hint =
            if reported.key.contains(':') || reported.key.trim() == reported.resource_id.trim() {
                "; key names the kind of problem in a few kebab-case words (such as \
             service-unhealthy, service-exited, restart-loop, memory-high), not the resource: \
             resource_id already names it"
            } else {
                ""
            };
        return ToolResult::error(&call.id, format!("the report was refused: {error}{hint}"));
    }
    if let Some(problem) = resolution_problem(ctx, &reported) {
        ledger.reject();
        return ToolResult::error(&call.id, format!("the report was refused: {problem}"));
    }
    if let Some(resource) = ctx.in_scope(reported.resource_id.trim()) {
        let book = ledger.signals();
        let signals = book.of(resource.id.as_str());
        if let Some(refusal) = contradiction(&reported, resource, &signals) {
            tracing::info!(run_id = %ctx.run_id, resource_id = %resource.id, key = %reported.key,
                "report refused: the resource's state contradicts it");
            ledger.reject();
            return ToolResult::error(&call.id, format!("the report was refused: {refusal}"));
        }
        if signals.is_empty() && !ledger.looked_at(resource.id.as_str()) {
            tracing::info!(run_id = %ctx.run_id, resource_id = %resource.id, key = %reported.key,
                "report refused: a quiet resource reported without a read of it");
            ledger.reject();
            return ToolResult::error(&call.id, unlooked_refusal(resource.id.as_str()));
        }
        // A turn that offers no read (the decision turn) keeps what the seed shows.
        if !ledger.has_read() && !ledger.reads_closed() {
            tracing::info!(run_id = %ctx.run_id, resource_id = %resource.id, key = %reported.key,
                "report refused: nothing was read in this run");
            ledger.reject();
            return ToolResult::error(&call.id, unread_refusal(resource.id.as_str()));
        }
    }
    let signals = run_signals(ledger, &reported.resource_id);
    let written = async {
        let tx = ctx.store.tenant_tx(&ctx.tenant).await?;
        let outcome =
            findings::report_with_signals(&tx, &reported, &signals, Some(ctx.run_id), Utc::now())
                .await?;
        tx.commit().await?;
        Ok::<_, FindingsError>(outcome)
    }
    .await;
    match written {
        Ok(outcome) => {
            let finding = &outcome.finding.finding;
            let mut answer = json!({
                "accepted": true,
                "finding_id": finding.id.as_hex(),
                "outcome": outcome.kind,
            });
            if let Some(key) = &repaired_key {
                answer["key"] = json!(key);
                answer["note"] = json!(
                    "the key you wrote named the resource, not the problem; the key was taken \
                     from your title"
                );
            }
            if outcome.kind == ReportKind::Merged {
                let mut merged_into = json!({
                    "finding_id": finding.id.as_hex(),
                    "key": finding.key.as_str(),
                });
                if let Some(basis) = &outcome.merge_basis {
                    merged_into["merged_by"] = json!(basis.as_str());
                }
                answer["merged_into"] = merged_into;
                answer["instruction"] = json!(merge_instruction(ledger, finding));
            }
            ledger.accept_report(
                signature,
                AcceptedReport {
                    finding_id: finding.id,
                    kind: outcome.kind,
                    severity: finding.severity,
                    resource_id: finding.resource_id.clone(),
                    title: finding.title.clone(),
                },
            );
            answer["still_unaddressed"] = ledger.still_unaddressed();
            json_result(call, &answer)
        }
        Err(FindingsError::Report(error)) => {
            ledger.reject();
            ToolResult::error(&call.id, format!("the report was refused: {error}"))
        }
        Err(error) => {
            tracing::warn!(run_id = %ctx.run_id, %error, "finding report could not be written");
            ledger.error("a finding report could not be written");
            ToolResult::error(&call.id, "the finding could not be recorded right now")
        }
    }
}

/// Words of a title short enough to stand in for a finding key.
const TITLE_KEY_WORDS: usize = 6;

/// Words of a title that name nothing: left out of a key taken from a title.
const TITLE_FILLER: &[&str] = &[
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "has", "have", "had", "in", "on",
    "of", "for", "its", "it", "and", "with", "since", "at", "to", "by", "from",
];

/// A key that names the resource instead of the problem (a real 1.5B model wrote the resource
/// id as the key in five of seven runs) is replaced by the key its title spells once the
/// resource's own name and id and filler words are left out (`Service Unhealthy` ->
/// `service-unhealthy`; `Service thumbnail-worker is in an unknown state` ->
/// `service-unknown-state`); the new key, when there is one. A key that is not the resource's
/// id or name is left alone, and so is one whose title still has more than
/// [`TITLE_KEY_WORDS`] words: the report is then refused with what a key is.
fn repair_key(reported: &mut ReportedFinding) -> Option<String> {
    let key = reported.key.trim();
    let id = reported.resource_id.trim().to_lowercase();
    let name = reported.resource_name.trim().to_lowercase();
    let names_resource = !key.is_empty()
        && (key == reported.resource_id.trim()
            || key == reported.resource_name.trim()
            || key.contains(reported.resource_id.trim()));
    if !names_resource {
        return None;
    }
    let words: Vec<String> = reported
        .title
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty() && !TITLE_FILLER.contains(&w.as_str()))
        .filter(|w| {
            let possessive = w.strip_suffix("'s").unwrap_or(w);
            possessive != id && possessive != name && !id.ends_with(&format!(":{possessive}"))
        })
        .collect();
    if words.is_empty() || words.len() > TITLE_KEY_WORDS {
        return None;
    }
    let from_title = pulse_domain::finding::FindingKey::normalize(&words.join(" ")).ok()?;
    reported.key = from_title.as_str().to_owned();
    Some(reported.key.clone())
}

/// The refusal of a report on `id`, a resource with no triage flag and no firing alert in this
/// run that no read of the run has looked at: nothing Pulse holds says anything is wrong with
/// it, so the report could only be a guess. Seen from a real 1.5B model: a "critical state"
/// reported on a quiet service in its first answer, without a single read.
fn unlooked_refusal(id: &str) -> String {
    format!(
        "the report was refused: {id} has no triage flag and no firing alert in this run, and \
         no read of this run has looked at it, so nothing shows a problem; read it first \
         (pulse_query get, pulse_metrics or pulse_read with resource_id {id}) and report only \
         what that shows; nothing was recorded"
    )
}

/// A finding is evidence an operator acts on, so it rests on at least one read of this run,
/// even on a flagged resource: the seed says where to look, a read says what is there. A weak
/// model was seen reporting straight from the seed; the refusal names the read to make.
fn unread_refusal(id: &str) -> String {
    format!(
        "the report was refused: nothing has been read in this run, so the finding would have \
         no evidence; read {id} first (pulse_query with action get and resource_id {id}, or \
         pulse_metrics or pulse_read with resource_id {id}), then report what the read shows \
         and quote it in evidence; nothing was recorded"
    )
}

/// The verifier's fresh outcome for a `resolved` verdict; inconclusive when it cannot answer.
async fn verify(ctx: &ToolContext, finding: &Finding) -> (VerifierOutcome, Option<String>) {
    if VerifierKey::for_key(&finding.key).is_none() {
        return (VerifierOutcome::NotRun, None);
    }
    let Some(bus) = &ctx.bus else {
        return (
            VerifierOutcome::Inconclusive,
            Some("the verifier is not reachable from this run".to_owned()),
        );
    };
    let request = ResolutionCheckRequest {
        finding_id: finding.id,
        key: finding.key.clone(),
        resource_id: finding.resource_id.clone(),
    };
    let reply: Result<ResolutionCheckReply, _> = VerifierClient::new(bus.clone())
        .resolution(&ctx.tenant, &request, ctx.backend_timeout)
        .await;
    match reply {
        Ok(reply) => (reply.outcome, Some(reply.reason)),
        Err(error) => {
            tracing::info!(finding_id = %finding.id, %error, "resolution check unanswered; inconclusive");
            (
                VerifierOutcome::Inconclusive,
                Some("the verifier did not answer in time".to_owned()),
            )
        }
    }
}

pub async fn assess(ctx: &ToolContext, ledger: &RunLedger, call: &ToolCall) -> ToolResult {
    let signature = signature(call);
    if ledger.was_accepted(&signature) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "this verdict was already accepted in this run; it is not repeated",
        );
    }
    if ledger.snapshot().is_none() {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "call patrol_get_findings first; verdicts are given on the findings it returns",
        );
    }
    if let Some(field) = blank_field(ToolName::PatrolAssessFinding, &call.arguments) {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            format!(
                "the verdict was refused: {field} says nothing (it is empty, punctuation or an unfilled <placeholder>)"
            ),
        );
    }
    let Some(id) =
        text_arg(&call.arguments, "finding_id").and_then(|s| FindingId::from_str(s).ok())
    else {
        ledger.reject();
        return ToolResult::error(&call.id, "finding_id is not a finding id");
    };
    let presented = ledger.presented();
    let Some(title) = presented.get(&id).cloned() else {
        ledger.reject();
        return ToolResult::error(
            &call.id,
            "finding_id is not an active finding shown to this run by patrol_get_findings",
        );
    };
    let input: VerdictInput = match serde_json::from_value(json!({
        "verdict": call.arguments.get("verdict"),
        "evidence": call.arguments.get("evidence"),
        "reason": call.arguments.get("reason"),
    })) {
        Ok(input) => input,
        Err(error) => {
            ledger.reject();
            return ToolResult::error(&call.id, format!("the verdict is not valid: {error}"));
        }
    };
    let stored = async {
        let tx = ctx.store.tenant_tx(&ctx.tenant).await?;
        let found = findings::get(&tx, id).await?;
        Ok::<_, FindingsError>(found)
    }
    .await;
    let finding = match stored {
        Ok(Some(stored)) => stored.finding,
        Ok(None) => {
            ledger.reject();
            return ToolResult::error(&call.id, "no such finding");
        }
        Err(error) => {
            tracing::warn!(run_id = %ctx.run_id, %error, "finding could not be read");
            ledger.error("a finding verdict could not be recorded");
            return ToolResult::error(&call.id, "the verdict could not be recorded right now");
        }
    };
    let (verifier, verifier_reason) = match input.verdict {
        pulse_domain::finding::Verdict::Resolved => verify(ctx, &finding).await,
        _ => (VerifierOutcome::NotRun, None),
    };
    let written = async {
        let tx = ctx.store.tenant_tx(&ctx.tenant).await?;
        let stored = findings::assess(&tx, id, &input, verifier, ctx.run_id, Utc::now()).await?;
        tx.commit().await?;
        Ok::<_, FindingsError>(stored)
    }
    .await;
    match written {
        Ok(stored) => {
            ledger.accept_verdict(
                signature,
                AcceptedVerdict {
                    finding_id: id,
                    verdict: input.verdict,
                    evidence: input.evidence.clone(),
                    reason: input.reason.clone(),
                    title,
                },
            );
            // The finding id is the call's own argument; the verifier only shows when it ran.
            let mut answer = json!({
                "accepted": true,
                "status": stored.finding.status.as_str(),
            });
            if verifier != VerifierOutcome::NotRun {
                answer["verifier"] = json!(verifier.as_str());
            }
            answer["still_unaddressed"] = ledger.still_unaddressed();
            json_result(call, &answer)
        }
        Err(FindingsError::Assess(refusal)) => {
            ledger.reject();
            let mut message = format!("the verdict was refused: {refusal}");
            if let Some(reason) = verifier_reason {
                message.push_str(&format!(" (verifier: {})", truncate_chars(&reason, 300)));
            }
            ToolResult::error(&call.id, message)
        }
        Err(FindingsError::NotFound(_)) => {
            ledger.reject();
            ToolResult::error(&call.id, "no such finding")
        }
        Err(error) => {
            tracing::warn!(run_id = %ctx.run_id, %error, "finding verdict could not be written");
            ledger.error("a finding verdict could not be recorded");
            ToolResult::error(&call.id, "the verdict could not be recorded right now")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::Duration;

    use pulse_domain::TenantId;
    use pulse_domain::finding::{Category, FindingKey, Severity};
    use pulse_domain::patrol::run::RunId;
    use pulse_domain::resource::{Health, Resource};
    use pulse_test_support::db::TestDb;

    use pulse_domain::finding::equivalence::shared_signal;

    use crate::tools::signals::SignalBook;

    use super::super::test_support::{call, resource};
    use super::*;

    async fn context(db: &TestDb) -> anyhow::Result<ToolContext> {
        let tenant = TenantId::new("acme")?;
        pulse_store::tenants::create(db.store(), &tenant, "Acme").await?;
        Ok(ToolContext {
            store: db.store().clone(),
            bus: None,
            tenant,
            run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
            scope: Arc::new(vec![
                resource("h1", "web", Health::Unhealthy),
                resource("h1", "db", Health::Healthy),
            ]),
            backend_timeout: Duration::from_millis(200),
        })
    }

    /// The run's ledger with the signals the run read at its start over `scope`: web's failing
    /// health check and, on db, a firing `restart_loop` alert.
    fn ledger(scope: &[Resource]) -> RunLedger {
        let ledger = RunLedger::new();
        let alerts =
            BTreeMap::from([("service:h1:db".to_owned(), vec!["restart_loop".to_owned()])]);
        ledger.set_signals(SignalBook::new(scope, &alerts));
        // As after the run's first read: a report rests on one.
        ledger.note_read(None);
        ledger
    }

    #[test]
    fn a_reports_signals_are_the_runs_flags_and_alerts_of_its_resource() {
        let scope = [
            resource("h1", "web", Health::Unhealthy),
            resource("h1", "db", Health::Healthy),
        ];
        let ledger = ledger(&scope);
        let of = |id: &str| -> Vec<String> {
            run_signals(&ledger, id).iter().map(str::to_owned).collect()
        };
        assert_eq!(of("service:h1:web"), ["health_check_failing"]);
        assert_eq!(of("service:h1:db"), ["alert_restart_loop"]);
        // The alert is cited by its signal name or its key alike.
        let signals = run_signals(&ledger, "service:h1:db");
        assert_eq!(
            shared_signal(&signals, "alert_restart_loop", "service:h1:db:restart_loop"),
            Some("alert_restart_loop")
        );
        assert!(of("service:h9:x").is_empty());
        assert!(run_signals(&RunLedger::new(), "service:h1:web").is_empty());
    }

    fn args(name: &str, key: &str, evidence: &str) -> Value {
        json!({
            "key": key, "severity": "warning", "category": "reliability",
            "resource_id": format!("service:h1:{name}"), "resource_name": name,
            "resource_type": "service", "title": format!("{name} is not serving"),
            "description": "fails", "recommendation": "look", "evidence": evidence
        })
    }

    async fn answer(ctx: &ToolContext, ledger: &RunLedger, arguments: Value) -> Value {
        let result = report(ctx, ledger, &call("patrol_report_finding", arguments)).await;
        assert!(!result.is_error, "{}", result.content);
        serde_json::from_str(&result.content).expect("a JSON answer")
    }

    #[tokio::test]
    async fn a_findings_read_on_an_unknown_id_shows_every_finding_and_the_nearest_ids()
    -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let ctx = context(&db).await?;
        let reported: ReportedFinding = serde_json::from_value(args(
            "web",
            "service-unhealthy",
            "triage: health_check_failing",
        ))?;
        let tx = ctx.store.tenant_tx(&ctx.tenant).await?;
        let stored = findings::report(&tx, &reported, None, Utc::now()).await?;
        tx.commit().await?;
        let ledger = ledger(&ctx.scope);

        // A made-up id must not read as "no active finding".
        let read = get_findings(
            &ctx,
            &ledger,
            &call(
                "patrol_get_findings",
                json!({"resource_id": "service:h1:web-frontend"}),
            ),
        )
        .await;
        assert!(!read.is_error, "{}", read.content);
        let snapshot: Value = serde_json::from_str(&read.content)?;
        assert_eq!(
            snapshot["active_findings"][0]["finding_id"],
            stored.finding.finding.id.as_hex().as_str(),
            "{snapshot}"
        );
        let note = snapshot["note"].as_str().unwrap_or_default();
        assert!(
            note.contains("no resource service:h1:web-frontend in this run's scope")
                && note.contains("nearest ids: service:h1:web, service:h1:db"),
            "{snapshot}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_merged_report_names_the_finding_to_assess_instead() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let ctx = context(&db).await?;
        // An earlier run recorded web's failing health check; this run's seed showed it.
        let earlier: ReportedFinding = serde_json::from_value(args(
            "web",
            "service-unhealthy",
            "triage: health_check_failing",
        ))?;
        let tx = ctx.store.tenant_tx(&ctx.tenant).await?;
        let stored = findings::report(&tx, &earlier, None, Utc::now()).await?;
        tx.commit().await?;
        let existing = stored.finding.finding;
        let ledger = ledger(&ctx.scope);
        ledger.present([(existing.id, existing.title.clone())]);

        // The same fault under another key: merged, and the answer says which finding to
        // assess instead and how.
        let merged = answer(
            &ctx,
            &ledger,
            args(
                "web",
                "health-check-failing",
                "health_check_failing in triage",
            ),
        )
        .await;
        let id = existing.id.as_hex();
        assert_eq!(merged["outcome"], "merged", "{merged}");
        assert_eq!(merged["finding_id"], id.as_str());
        assert_eq!(
            merged["merged_into"],
            json!({"finding_id": id, "key": "service-unhealthy", "merged_by": "key"})
        );
        let instruction = merged["instruction"].as_str().expect("an instruction");
        assert!(instruction.contains(&id), "{instruction}");
        assert!(instruction.contains("service-unhealthy"), "{instruction}");
        assert!(
            instruction.contains("call patrol_get_findings, then give finding")
                && instruction.contains("patrol_assess_finding verdict instead"),
            "{instruction}"
        );
        let tx = ctx.store.tenant_tx(&ctx.tenant).await?;
        let reported_id = FindingId::derive(
            "service:h1:web",
            Category::Reliability,
            &FindingKey::normalize("health-check-failing")?,
        );
        assert!(findings::get(&tx, reported_id).await?.is_none(), "no row");
        tx.commit().await?;

        // The instruction is one the run accepts: a verdict on that finding.
        let snapshot = get_findings(&ctx, &ledger, &call("patrol_get_findings", json!({}))).await;
        assert!(!snapshot.is_error, "{}", snapshot.content);
        let verdict = assess(
            &ctx,
            &ledger,
            &call(
                "patrol_assess_finding",
                json!({"finding_id": id, "verdict": "present",
                       "evidence": "health_check_failing", "reason": "still failing"}),
            ),
        )
        .await;
        assert!(!verdict.is_error, "{}", verdict.content);

        // Words that cannot tell, with the run's flag cited by both reports: merged by evidence.
        let by_evidence = answer(
            &ctx,
            &ledger,
            args(
                "web",
                "request-timeouts",
                "clients time out; health_check_failing",
            ),
        )
        .await;
        assert_eq!(by_evidence["outcome"], "merged", "{by_evidence}");
        assert_eq!(by_evidence["merged_into"]["merged_by"], "evidence");
        let instruction = by_evidence["instruction"].as_str().unwrap_or_default();
        assert!(
            instruction.starts_with(&format!(
                "this is the problem already recorded as finding {id}"
            )) && !instruction.contains("call patrol_get_findings"),
            "{instruction}"
        );

        // On db the flag does not hold in this run: citing it is no evidence.
        let down = answer(
            &ctx,
            &ledger,
            args("db", "service-down", "health_check_failing"),
        )
        .await;
        assert_eq!(down["outcome"], "new", "{down}");
        assert!(down.get("merged_into").is_none() && down.get("instruction").is_none());
        let timeouts = answer(
            &ctx,
            &ledger,
            args("db", "request-timeouts", "health_check_failing"),
        )
        .await;
        assert_eq!(timeouts["outcome"], "new", "{timeouts}");

        // Reported by this run itself: recorded once, nothing to assess.
        let again = answer(
            &ctx,
            &ledger,
            args("db", "not-responding", "no answer on 5432"),
        )
        .await;
        assert_eq!(again["outcome"], "merged", "{again}");
        assert_eq!(again["finding_id"], down["finding_id"]);
        let instruction = again["instruction"].as_str().unwrap_or_default();
        assert!(
            instruction.contains("already reported in this run")
                && !instruction.contains("patrol_assess_finding"),
            "{instruction}"
        );
        // db's firing alert, cited by its signal name and by its key: one problem.
        let stalls = answer(
            &ctx,
            &ledger,
            args("db", "pgbouncer-timeouts", "alert_restart_loop is firing"),
        )
        .await;
        assert_eq!(stalls["outcome"], "new", "{stalls}");
        let stalled = answer(
            &ctx,
            &ledger,
            args("db", "queries-stalled", "alert service:h1:db:restart_loop"),
        )
        .await;
        assert_eq!(stalled["outcome"], "merged", "{stalled}");
        assert_eq!(stalled["finding_id"], stalls["finding_id"]);
        assert_eq!(stalled["merged_into"]["key"], "pgbouncer-timeouts");
        assert_eq!(stalled["merged_into"]["merged_by"], "evidence");

        let accepted = ledger.reports();
        assert_eq!(accepted.len(), 7);
        assert_eq!(
            accepted
                .iter()
                .filter(|r| r.kind == ReportKind::Merged)
                .count(),
            4
        );
        assert!(accepted.iter().all(|r| r.severity == Severity::Warning));
        Ok(())
    }
}
