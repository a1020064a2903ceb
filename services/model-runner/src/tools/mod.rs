//! The tools shared by Watch runs, investigations and the Assistant, one file per family:
//! [`query`] (`pulse_query`), [`metrics`] (`pulse_metrics`), [`read`] (`pulse_read` through the
//! agent-relay) and [`findings`] (`patrol_get_findings`, `patrol_report_finding`,
//! `patrol_assess_finding`) and [`clear`] (`patrol_clear_signal`), with the problem [`signals`]
//! a run must address.
//!
//! [`WatchTools`] is the run's [`ToolHandler`]: it only ever sees calls the run's gate admitted.
//! Every handler answers bad input and unavailable backends with an error result for the model,
//! never a panic. What the lifecycle tools accepted (and refused) is recorded in the run's
//! [`RunLedger`], the only input of the run's accounting: model prose never counts.

pub mod clear;
pub mod contradiction;
pub mod findings;
pub mod metrics;
pub mod nearest;
pub mod query;
pub mod read;
pub mod signals;
pub mod storage;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pulse_bus::Bus;
use pulse_capabilities::{AdmittedCall, ToolName};
use pulse_domain::TenantId;
use pulse_domain::finding::{FindingId, ReportKind, Severity, Verdict};
use pulse_domain::patrol::run::RunId;
use pulse_domain::resource::Resource;
use pulse_store::Store;
use serde_json::Value;

use crate::tools::signals::{SignalBook, Unaddressed};
use pulse_agent_loop::agent_loop::{BoxFuture, ToolHandler};
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// How long a relay read or a verifier check may take before it counts as unavailable.
pub const BACKEND_TIMEOUT: Duration = Duration::from_secs(10);

/// One offered tool narrowed to its actions (`action` cases) and its arguments.
pub type Narrowing = (ToolName, &'static [&'static str], &'static [&'static str]);

/// The canonical reads served by [`WatchTools`], narrowed to what their handlers read
/// (query.rs, metrics.rs, storage.rs, read.rs): the shared schemas also carry Proxmox/Kubernetes
/// paging and exec arguments. Offered by Watch runs and investigations alike.
pub const CANONICAL_READS: [Narrowing; 4] = [
    (
        ToolName::PulseQuery,
        &["search", "get", "list", "health"],
        &[
            "action",
            "query",
            "resource_type",
            "resource_id",
            "status",
            "limit",
            "offset",
        ],
    ),
    (
        ToolName::PulseMetrics,
        &[],
        &["type", "resource_id", "period"],
    ),
    (
        ToolName::PulseStorage,
        &[],
        &["type", "resource_id", "node", "min_usage", "limit"],
    ),
    (
        ToolName::PulseRead,
        &["logs", "inspect"],
        &["action", "resource_id", "lines", "grep"],
    ),
];

/// Whether `tool` is one of the canonical evidence reads ([`CANONICAL_READS`]).
pub fn is_canonical_read(tool: ToolName) -> bool {
    CANONICAL_READS.iter().any(|(read, _, _)| *read == tool)
}

/// `pulse_read` with every action, for the interactive Assistant: besides `logs` and `inspect`,
/// the host reads `exec` (a read-only command, classified, run only by agents started with
/// `--allow-read-exec`), `file`, `find` and `tail` on a host named by `resource_id` or
/// `target_host` ([`read`]). Watch runs and investigations keep [`CANONICAL_READS`].
pub const ASSISTANT_READ: Narrowing = (
    ToolName::PulseRead,
    &["exec", "file", "find", "tail", "logs", "inspect"],
    &[
        "action",
        "resource_id",
        "target_host",
        "command",
        "path",
        "pattern",
        "lines",
        "grep",
    ],
);

/// [`CANONICAL_READS`] followed by `others`.
pub fn canonical_reads_and(others: &[Narrowing]) -> Vec<Narrowing> {
    CANONICAL_READS.iter().chain(others).copied().collect()
}

/// What a Watch run's tools work over.
#[derive(Clone)]
pub struct ToolContext {
    pub store: Store,
    /// Relay reads and verifier checks; `None` leaves both unavailable (unit tests).
    pub bus: Option<Bus>,
    pub tenant: TenantId,
    /// The Patrol run, or the Assistant session, the tools work for (host reads name it as
    /// their requester).
    pub run_id: RunId,
    /// The resources the run covers, read at start.
    pub scope: Arc<Vec<Resource>>,
    pub backend_timeout: Duration,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("tenant", &self.tenant)
            .field("run_id", &self.run_id)
            .field("scope", &self.scope.len())
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// The in-scope resource with exactly this canonical id.
    pub fn in_scope(&self, id: &str) -> Option<&Resource> {
        self.scope.iter().find(|r| r.id.as_str() == id)
    }

    /// The answer to an `id` that names no in-scope resource, with the nearest in-scope ids
    /// ([`nearest`]) for the model to use instead.
    pub fn unknown_resource(&self, id: &str) -> String {
        let shown = pulse_domain::resource::truncate_chars(id, 160);
        let nearest = nearest::nearest_ids(&self.scope, id, nearest::NEAREST_IDS);
        if nearest.is_empty() {
            return format!("no resource {shown} in this run's scope (the scope is empty)");
        }
        format!(
            "no resource {shown} in this run's scope; nearest ids: {}",
            nearest.join(", ")
        )
    }
}

/// One accepted `patrol_report_finding`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedReport {
    pub finding_id: FindingId,
    pub kind: ReportKind,
    pub severity: Severity,
    pub resource_id: String,
    pub title: String,
}

/// One accepted `patrol_assess_finding`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedVerdict {
    pub finding_id: FindingId,
    pub verdict: Verdict,
    pub evidence: String,
    pub reason: String,
    pub title: String,
}

/// What one batch of lifecycle calls did, between two turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchTally {
    pub accepted: u32,
    pub rejected: u32,
}

impl BatchTally {
    /// Both accepted and rejected lifecycle calls in one batch: the case for a repair turn.
    pub fn is_mixed(&self) -> bool {
        self.accepted > 0 && self.rejected > 0
    }
}

#[derive(Debug, Default)]
struct LedgerState {
    /// The `patrol_get_findings` answer of this run, once taken.
    snapshot: Option<String>,
    /// Active findings shown to the run (in the seed or the snapshot), with their titles.
    presented: BTreeMap<FindingId, String>,
    /// The resource of each active finding of the run's scope: a verdict addresses it.
    finding_resources: BTreeMap<FindingId, String>,
    reports: Vec<AcceptedReport>,
    verdicts: Vec<AcceptedVerdict>,
    /// Lifecycle calls refused by their handler (the gate's denials are in the loop's records).
    rejected: u32,
    /// Failures that leave a question of the run open.
    errors: Vec<String>,
    /// Capabilities found unavailable; later calls are not attempted.
    unavailable: BTreeSet<&'static str>,
    /// Canonical `name + arguments` of accepted lifecycle calls (never repeated).
    accepted_calls: HashSet<String>,
    batch: BatchTally,
    /// The signals the run must address.
    signals: SignalBook,
    /// Signals the model cleared: (resource id, signal) -> reason and evidence.
    cleared: BTreeMap<(String, String), String>,
    /// Resources a read of this run named by id and answered without an error.
    looked_at: BTreeSet<String>,
    /// Reads of this run answered without an error, whatever they named.
    reads: u32,
    /// Whether the current turn can read (the decision, repair and review turns cannot).
    reads_closed: bool,
    /// Canonical `name + arguments` of the reads answered without an error.
    served_reads: HashSet<String>,
    /// A read repeated an earlier turn's since the runtime last looked.
    repeated_read: bool,
}

/// An active finding shown to the run without a verdict yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unjudged {
    pub finding_id: FindingId,
    pub title: String,
    pub resource_id: Option<String>,
}

/// What a Watch run's tools accepted, refused and failed at. Shared by the handlers and the
/// runtime; the runtime's accounting reads it after the loop.
#[derive(Debug, Default)]
pub struct RunLedger {
    state: Mutex<LedgerState>,
}

impl RunLedger {
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut LedgerState) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }

    /// Marks active findings as shown to the run: each needs a verdict (or a re-report).
    pub fn present(&self, findings: impl IntoIterator<Item = (FindingId, String)>) {
        self.with(|s| s.presented.extend(findings));
    }

    /// Tells the ledger the resource of each active finding in scope.
    pub fn locate_findings(&self, resources: BTreeMap<FindingId, String>) {
        self.with(|s| s.finding_resources = resources);
    }

    /// The signals no accepted report, verdict or clear has addressed yet: a report or a verdict
    /// addresses every signal of its resource, a clear only its own signal.
    pub fn unaddressed(&self) -> Vec<Unaddressed> {
        self.with(|s| {
            let addressed: BTreeSet<String> = s
                .reports
                .iter()
                .map(|r| r.resource_id.clone())
                .chain(
                    s.verdicts
                        .iter()
                        .filter_map(|v| s.finding_resources.get(&v.finding_id).cloned()),
                )
                .collect();
            let cleared: BTreeSet<(String, String)> = s.cleared.keys().cloned().collect();
            s.signals.unaddressed(&addressed, &cleared)
        })
    }

    /// The active findings shown to the run that no accepted verdict or re-report covers yet,
    /// in id order, each with the resource it is on (when the run located it).
    pub fn unjudged(&self) -> Vec<Unjudged> {
        self.with(|s| {
            let covered: BTreeSet<FindingId> = s
                .reports
                .iter()
                .map(|r| r.finding_id)
                .chain(s.verdicts.iter().map(|v| v.finding_id))
                .collect();
            s.presented
                .iter()
                .filter(|(id, _)| !covered.contains(*id))
                .map(|(id, title)| Unjudged {
                    finding_id: *id,
                    title: title.clone(),
                    resource_id: s.finding_resources.get(id).cloned(),
                })
                .collect()
        })
    }

    /// What an accepted lifecycle call's result adds: the flagged resources still waiting for a
    /// report, verdict or clear, so a model that just wrote one sees the next (a real 1.5B model
    /// reported one of two flagged resources and stopped). Empty when nothing is left.
    pub fn still_unaddressed(&self) -> Value {
        let left = self.unaddressed();
        let grouped = signals::by_resource(&left);
        let listed: Vec<Value> = grouped
            .iter()
            .take(MAX_LISTED_UNADDRESSED)
            .map(|(id, signals)| serde_json::json!({"resource_id": id, "signals": signals}))
            .collect();
        Value::Array(listed)
    }

    pub fn snapshot(&self) -> Option<String> {
        self.with(|s| s.snapshot.clone())
    }

    fn set_snapshot(&self, text: &str) {
        self.with(|s| s.snapshot = Some(text.to_owned()));
    }

    /// Sets the signals the run must address.
    pub fn set_signals(&self, book: SignalBook) {
        self.with(|s| s.signals = book);
    }

    pub fn signals(&self) -> SignalBook {
        self.with(|s| s.signals.clone())
    }

    /// The signals cleared by the model, with its reason and evidence.
    pub fn cleared(&self) -> BTreeMap<(String, String), String> {
        self.with(|s| s.cleared.clone())
    }

    fn accept_clear(&self, signature: String, resource_id: String, signal: String, why: String) {
        self.with(|s| {
            s.accepted_calls.insert(signature);
            s.batch.accepted += 1;
            s.cleared.insert((resource_id, signal), why);
        });
    }

    pub fn presented(&self) -> BTreeMap<FindingId, String> {
        self.with(|s| s.presented.clone())
    }

    pub fn reports(&self) -> Vec<AcceptedReport> {
        self.with(|s| s.reports.clone())
    }

    pub fn verdicts(&self) -> Vec<AcceptedVerdict> {
        self.with(|s| s.verdicts.clone())
    }

    /// Notes a read answered without an error, and the resource it named (canonical), if any.
    pub fn note_read(&self, resource_id: Option<&str>) {
        self.with(|s| {
            s.reads += 1;
            if let Some(id) = resource_id {
                s.looked_at.insert(id.to_owned());
            }
        });
    }

    /// Whether an identical read was already answered in this run; if so, notes the repeat.
    /// (Repeats within one answer never get here: the loop runs each call of an answer once.)
    fn repeats_read(&self, signature: &str) -> bool {
        self.with(|s| {
            let repeat = s.served_reads.contains(signature);
            s.repeated_read |= repeat;
            repeat
        })
    }

    fn serve_read(&self, signature: String) {
        self.with(|s| s.served_reads.insert(signature));
    }

    /// Whether a read repeated an earlier turn's since the last call, reset.
    pub fn take_repeated_read(&self) -> bool {
        self.with(|s| std::mem::take(&mut s.repeated_read))
    }

    /// Whether any read of this run was answered.
    pub fn has_read(&self) -> bool {
        self.with(|s| s.reads > 0)
    }

    /// Tells the handlers whether the turn about to run offers reads.
    pub fn set_reads_open(&self, open: bool) {
        self.with(|s| s.reads_closed = !open);
    }

    /// Whether the current turn offers no read.
    pub fn reads_closed(&self) -> bool {
        self.with(|s| s.reads_closed)
    }

    /// Whether a read of this run named `resource_id` and was answered.
    pub fn looked_at(&self, resource_id: &str) -> bool {
        self.with(|s| s.looked_at.contains(resource_id))
    }

    pub fn rejected(&self) -> u32 {
        self.with(|s| s.rejected)
    }

    pub fn errors(&self) -> Vec<String> {
        self.with(|s| s.errors.clone())
    }

    pub fn unavailable(&self) -> Vec<&'static str> {
        self.with(|s| s.unavailable.iter().copied().collect())
    }

    /// Records a failure that leaves a question of the run open.
    pub fn error(&self, what: impl Into<String>) {
        let what = what.into();
        self.with(|s| s.errors.push(what));
    }

    fn is_unavailable(&self, capability: &'static str) -> bool {
        self.with(|s| s.unavailable.contains(capability))
    }

    fn mark_unavailable(&self, capability: &'static str) {
        self.with(|s| s.unavailable.insert(capability));
    }

    fn was_accepted(&self, signature: &str) -> bool {
        self.with(|s| s.accepted_calls.contains(signature))
    }

    fn accept_report(&self, signature: String, report: AcceptedReport) {
        self.with(|s| {
            s.accepted_calls.insert(signature);
            s.batch.accepted += 1;
            s.reports.push(report);
        });
    }

    fn accept_verdict(&self, signature: String, verdict: AcceptedVerdict) {
        self.with(|s| {
            s.accepted_calls.insert(signature);
            s.batch.accepted += 1;
            s.verdicts.push(verdict);
        });
    }

    fn reject(&self) {
        self.with(|s| {
            s.rejected += 1;
            s.batch.rejected += 1;
        });
    }

    /// The lifecycle tally since the last call, reset.
    pub fn take_batch(&self) -> BatchTally {
        self.with(|s| std::mem::take(&mut s.batch))
    }

    /// Records a repeated read directly (tests of what consumes it).
    #[cfg(test)]
    pub(crate) fn note_repeated_read(&self) {
        self.with(|s| s.repeated_read = true);
    }

    /// Records a batch outcome directly (tests of what consumes batches).
    #[cfg(test)]
    pub(crate) fn tally(&self, accepted: u32, rejected: u32) {
        self.with(|s| {
            s.batch.accepted += accepted;
            s.batch.rejected += rejected;
        });
    }
}

/// Resources an accepted lifecycle call's result lists as still unaddressed.
const MAX_LISTED_UNADDRESSED: usize = 5;

/// What a read identical to one already answered in the run gets instead of running again.
pub const REPEATED_READ_NOTE: &str = "You already made this exact call in this run; its result is \
    above and has not changed, so Pulse did not run it again. Stop reading and decide from what \
    you read: report each problem you found, clear each signal that is expected and say why.";

/// The canonical signature of a call, for "accepted calls are not repeated".
fn signature(call: &ToolCall) -> String {
    let canonical = pulse_domain::canonical_json::canonicalize(&call.arguments)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|_| call.arguments.to_string());
    format!("{}:{canonical}", call.name)
}

/// A string argument, trimmed; `None` when absent or empty.
pub(crate) fn text_arg<'a>(arguments: &'a Value, name: &str) -> Option<&'a str> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The first text field the canonical schema of `tool` gives a `minLength` that says nothing in
/// `arguments`: blank, punctuation only ("..."), or a placeholder left unfilled (`<title>`, as
/// the review turn's template writes them). The Watch offer drops the annotation
/// ([`crate::watch::offer`]); the rule stays here.
fn blank_field(tool: ToolName, arguments: &Value) -> Option<String> {
    let schema = tool.schema();
    let props = schema.get("properties").and_then(Value::as_object)?;
    props
        .iter()
        .filter(|(_, p)| p.get("minLength").and_then(Value::as_u64).unwrap_or(0) > 0)
        .map(|(name, _)| name)
        .find(|name| {
            arguments
                .get(name.as_str())
                .and_then(Value::as_str)
                .is_some_and(says_nothing)
        })
        .cloned()
}

/// Whether a text field's value says nothing: blank, punctuation only, or `<placeholder>`.
fn says_nothing(value: &str) -> bool {
    let value = value.trim();
    value.chars().all(|c| !c.is_alphanumeric())
        || (value.starts_with('<') && value.ends_with('>') && !value[1..].contains('<'))
}

/// A count argument within `1..=max`, or `default`.
pub(crate) fn count_arg(arguments: &Value, name: &str, default: usize, max: usize) -> usize {
    arguments
        .get(name)
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
        .map_or(default, |n| n.min(max))
}

/// A successful result carrying `value` as JSON.
pub(crate) fn json_result(call: &ToolCall, value: &Value) -> ToolResult {
    ToolResult::ok(&call.id, value.to_string())
}

/// The handler of a Watch run's admitted calls.
#[derive(Debug, Clone)]
pub struct WatchTools {
    pub ctx: ToolContext,
    pub ledger: Arc<RunLedger>,
}

impl WatchTools {
    pub fn new(ctx: ToolContext, ledger: Arc<RunLedger>) -> Self {
        Self { ctx, ledger }
    }
}

impl ToolHandler for WatchTools {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let is_read = is_canonical_read(admitted.tool);
            let read_signature = is_read.then(|| signature(call));
            if let Some(signature) = &read_signature {
                if self.ledger.repeats_read(signature) {
                    // Nothing changes within a run: the same read again is a loop, not evidence
                    // (a real 1.5B model spent whole runs repeating one list). The runtime moves
                    // on to the decision turn after this turn.
                    return ToolResult::ok(&call.id, REPEATED_READ_NOTE);
                }
            }
            let read = match admitted.tool {
                ToolName::PulseQuery => Some(query::call(&self.ctx, call).await),
                ToolName::PulseMetrics => Some(metrics::call(&self.ctx, call).await),
                ToolName::PulseStorage => Some(storage::call(&self.ctx, call).await),
                ToolName::PulseRead => Some(read::call(&self.ctx, &self.ledger, call).await),
                _ => None,
            };
            if let Some(result) = read {
                // What a report needs first (findings::report).
                if !result.is_error {
                    let named = text_arg(&call.arguments, "resource_id")
                        .and_then(|id| self.ctx.in_scope(id));
                    self.ledger
                        .note_read(named.map(|resource| resource.id.as_str()));
                    if let Some(signature) = read_signature {
                        self.ledger.serve_read(signature);
                    }
                }
                return result;
            }
            match admitted.tool {
                ToolName::PatrolGetFindings => {
                    findings::get_findings(&self.ctx, &self.ledger, call).await
                }
                ToolName::PatrolReportFinding => {
                    findings::report(&self.ctx, &self.ledger, call).await
                }
                ToolName::PatrolAssessFinding => {
                    findings::assess(&self.ctx, &self.ledger, call).await
                }
                ToolName::PatrolClearSignal => clear::clear(&self.ctx, &self.ledger, call),
                other => {
                    ToolResult::error(&call.id, format!("{other} is not available in a Watch run"))
                }
            }
        })
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::BTreeMap;

    use chrono::{TimeZone, Utc};
    use pulse_domain::resource::{Health, ResourceId, ResourceStatus, ResourceType};
    use serde_json::Value;

    use super::*;

    pub fn resource(host: &str, name: &str, health: Health) -> Resource {
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
        Resource {
            id: ResourceId::service(host, name),
            resource_type: ResourceType::Service,
            source_id: name.to_owned(),
            name: name.to_owned(),
            aliases: Vec::new(),
            parent: None,
            agent_id: host.to_owned(),
            status: ResourceStatus::Running,
            health,
            restart_count: Some(0),
            labels: BTreeMap::new(),
            details: Value::Null,
            observed_at: at,
            received_at: at,
        }
    }

    pub fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: "call-1".to_owned(),
            name: name.to_owned(),
            arguments,
            thought_signature: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pulse_domain::resource::Health;
    use pulse_test_support::db::TestDb;
    use serde_json::json;

    use super::test_support::{call, resource};
    use super::*;

    async fn tools(db: &TestDb) -> WatchTools {
        let tenant = TenantId::new("acme").expect("tenant id");
        pulse_store::tenants::create(db.store(), &tenant, "Acme")
            .await
            .expect("tenant");
        let scope = vec![
            resource("h1", "web", Health::Unhealthy),
            resource("h1", "db", Health::Healthy),
        ];
        // As a run sets them at its start: web's failing check is a signal, db has none.
        let ledger = RunLedger::new();
        ledger.set_signals(SignalBook::new(&scope, &BTreeMap::new()));
        WatchTools::new(
            ToolContext {
                store: db.store().clone(),
                bus: None,
                tenant,
                run_id: RunId::from_uuid(uuid::Uuid::now_v7()),
                scope: Arc::new(scope),
                backend_timeout: Duration::from_millis(200),
            },
            Arc::new(ledger),
        )
    }

    /// Hands `arguments` to the handler of `tool` as if admitted: handlers must cope with any
    /// input, whatever the gate would have said.
    async fn answer(tools: &WatchTools, tool: &str, arguments: Value) -> ToolResult {
        let name = ToolName::from_wire(tool).expect("a canonical tool");
        let admitted = AdmittedCall {
            tool: name,
            class: name.descriptor().classify(&arguments),
            discriminator: None,
        };
        tools.call(&call(tool, arguments), &admitted).await
    }

    /// The run's first read, which any report rests on.
    async fn read_first(tools: &WatchTools) {
        let listed = answer(tools, "pulse_query", json!({"action": "list"})).await;
        assert!(!listed.is_error, "{}", listed.content);
    }

    fn report_args(resource_id: &str, name: &str, kind: &str) -> Value {
        json!({
            "key": "service-unhealthy", "severity": "warning", "category": "reliability",
            "resource_id": resource_id, "resource_name": name, "resource_type": kind,
            "title": "web health check failing", "description": "fails",
            "recommendation": "look", "evidence": "health=unhealthy"
        })
    }

    #[tokio::test]
    async fn a_report_on_a_quiet_resource_needs_a_read_of_it_first() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let mut slow = report_args("service:h1:db", "db", "service");
        slow["key"] = json!("latency-high");
        slow["title"] = json!("db answers slowly");

        let guessed = answer(&tools, "patrol_report_finding", slow.clone()).await;
        assert!(guessed.is_error, "{}", guessed.content);
        assert!(
            guessed
                .content
                .contains("no read of this run has looked at it")
                && guessed.content.contains("resource_id service:h1:db"),
            "{}",
            guessed.content
        );
        // A read that failed, or named another resource, is not a look at db.
        let failed = answer(
            &tools,
            "pulse_query",
            json!({"action": "get", "resource_id": "service:h1:dbx"}),
        )
        .await;
        assert!(failed.is_error);
        let other = answer(
            &tools,
            "pulse_query",
            json!({"action": "get", "resource_id": "service:h1:web"}),
        )
        .await;
        assert!(!other.is_error, "{}", other.content);
        assert!(
            answer(&tools, "patrol_report_finding", slow.clone())
                .await
                .is_error
        );

        let looked = answer(
            &tools,
            "pulse_query",
            json!({"action": "get", "resource_id": "service:h1:db"}),
        )
        .await;
        assert!(!looked.is_error, "{}", looked.content);
        // Looking does not make a claim its state contradicts true.
        let mut unhealthy = report_args("service:h1:db", "db", "service");
        unhealthy["title"] = json!("db health check failing");
        let contradicted = answer(&tools, "patrol_report_finding", unhealthy).await;
        assert!(
            contradicted.is_error && contradicted.content.contains("contradicts"),
            "{}",
            contradicted.content
        );
        let accepted = answer(&tools, "patrol_report_finding", slow).await;
        assert!(!accepted.is_error, "{}", accepted.content);
        // A flagged resource needs no read of its own: the seed showed it, and this run read.
        let web = answer(
            &tools,
            "patrol_report_finding",
            report_args("service:h1:web", "web", "service"),
        )
        .await;
        assert!(!web.is_error, "{}", web.content);
        assert_eq!(tools.ledger.rejected(), 3);
        Ok(())
    }

    /// A weak model's loop: the same read again is answered with a note, not run, and the
    /// runtime is told; a read with other arguments runs; a failed read may be retried.
    #[tokio::test]
    async fn a_read_already_answered_in_the_run_is_not_run_again() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let list = json!({"action": "list", "resource_type": "service"});
        let first = answer(&tools, "pulse_query", list.clone()).await;
        assert!(
            !first.is_error && first.content.contains("service:h1:web"),
            "{}",
            first.content
        );
        assert!(!tools.ledger.take_repeated_read());

        // Key order does not make it another call.
        let again = answer(
            &tools,
            "pulse_query",
            json!({"resource_type": "service", "action": "list"}),
        )
        .await;
        assert!(!again.is_error);
        assert_eq!(again.content, REPEATED_READ_NOTE);
        assert!(
            tools.ledger.take_repeated_read(),
            "the runtime is told once"
        );
        assert!(!tools.ledger.take_repeated_read());

        let other = answer(
            &tools,
            "pulse_query",
            json!({"action": "get", "resource_id": "service:h1:db"}),
        )
        .await;
        assert!(
            !other.is_error && other.content.contains("service:h1:db"),
            "{}",
            other.content
        );
        assert!(!tools.ledger.take_repeated_read());

        let missing = json!({"action": "get", "resource_id": "service:h1:nope"});
        let failed = answer(&tools, "pulse_query", missing.clone()).await;
        assert!(failed.is_error, "{}", failed.content);
        let retried = answer(&tools, "pulse_query", missing).await;
        assert!(
            retried.is_error && retried.content != REPEATED_READ_NOTE,
            "{}",
            retried.content
        );
        assert!(!tools.ledger.take_repeated_read());
        Ok(())
    }

    #[tokio::test]
    async fn a_report_rests_on_a_read_while_the_turn_can_read() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let web = report_args("service:h1:web", "web", "service");

        // Straight from the seed, on the flagged resource: refused with the read to make.
        let unread = answer(&tools, "patrol_report_finding", web.clone()).await;
        assert!(unread.is_error, "{}", unread.content);
        assert!(
            unread.content.contains("nothing has been read in this run")
                && unread.content.contains("resource_id service:h1:web")
                && unread.content.contains("nothing was recorded"),
            "{}",
            unread.content
        );
        // A turn that offers no read keeps what the seed shows rather than lose the finding.
        tools.ledger.set_reads_open(false);
        let decided = answer(&tools, "patrol_report_finding", web.clone()).await;
        assert!(!decided.is_error, "{}", decided.content);
        assert_eq!(tools.ledger.rejected(), 1);
        assert_eq!(tools.ledger.reports().len(), 1);
        Ok(())
    }

    #[tokio::test]
    async fn any_answered_read_is_the_evidence_a_flagged_report_needs() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let failed = answer(
            &tools,
            "pulse_query",
            json!({"action": "get", "resource_id": "service:h1:nope"}),
        )
        .await;
        assert!(failed.is_error);
        assert!(!tools.ledger.has_read(), "a failed read is no evidence");
        let listed = answer(&tools, "pulse_query", json!({"action": "list"})).await;
        assert!(!listed.is_error, "{}", listed.content);
        assert!(tools.ledger.has_read());
        let web = answer(
            &tools,
            "patrol_report_finding",
            report_args("service:h1:web", "web", "service"),
        )
        .await;
        assert!(!web.is_error, "{}", web.content);
        Ok(())
    }

    #[tokio::test]
    async fn a_key_that_names_the_resource_takes_its_short_title_or_is_refused_with_what_a_key_is()
    -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        read_first(&tools).await;
        // As a real 1.5B model wrote it: the resource id as the key, a short title.
        let mut args = report_args("service:h1:web", "web", "service");
        args["key"] = json!("service:h1:web");
        args["title"] = json!("Service Unhealthy");
        let repaired = answer(&tools, "patrol_report_finding", args).await;
        assert!(!repaired.is_error, "{}", repaired.content);
        let repaired: Value = serde_json::from_str(&repaired.content)?;
        assert_eq!(repaired["key"], "service-unhealthy", "{repaired}");
        assert!(
            repaired["note"]
                .as_str()
                .is_some_and(|n| n.contains("from your title"))
        );
        assert_eq!(tools.ledger.reports().len(), 1);

        // A longer title that names the resource: its name and filler words are left out
        // (as a real 1.5B model wrote it on a restart loop).
        let mut args = report_args("service:h1:web", "web", "service");
        args["key"] = json!("service:h1:web");
        args["title"] = json!("Service web is in an unknown state");
        let repaired = answer(&tools, "patrol_report_finding", args).await;
        assert!(!repaired.is_error, "{}", repaired.content);
        let repaired: Value = serde_json::from_str(&repaired.content)?;
        assert_eq!(repaired["key"], "service-unknown-state", "{repaired}");

        // A title too long to be a key: refused, saying what a key is.
        let mut args = report_args("service:h1:web", "web", "service");
        args["key"] = json!("service:h1:web");
        args["title"] =
            json!("the web service keeps failing every health check the agent runs after noon");
        let refused = answer(&tools, "patrol_report_finding", args).await;
        assert!(
            refused.is_error
                && refused.content.contains("key names the kind of problem")
                && refused.content.contains("service-unhealthy"),
            "{}",
            refused.content
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_clear_that_only_restates_its_signal_is_refused_and_nothing_is_cleared()
    -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let clear = |evidence: &str, reason: &str| {
            json!({"resource_id": "service:h1:web", "signal": "health_check_failing",
                   "evidence": evidence, "reason": reason})
        };
        // As a real 1.5B model wrote it, naming the resource by its name.
        let parroted = answer(
            &tools,
            "patrol_clear_signal",
            clear("the signal on web was not reported", "web is not assessed"),
        )
        .await;
        assert!(
            parroted.is_error && parroted.content.contains("only restate"),
            "{}",
            parroted.content
        );
        assert!(tools.ledger.cleared().is_empty());
        let why = answer(
            &tools,
            "patrol_clear_signal",
            clear("web is being migrated", "planned maintenance"),
        )
        .await;
        assert!(!why.is_error, "{}", why.content);
        assert_eq!(tools.ledger.cleared().len(), 1);
        Ok(())
    }

    /// A clear that describes a problem, or clears a signal of a resource the run reported, is
    /// refused; an accepted report says what is still unaddressed (here: nothing).
    #[tokio::test]
    async fn a_clear_may_not_contradict_a_problem_and_accepted_calls_say_what_is_left()
    -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let clear = |evidence: &str, reason: &str| {
            json!({"resource_id": "service:h1:web", "signal": "health_check_failing",
                   "evidence": evidence, "reason": reason})
        };
        let described = answer(
            &tools,
            "patrol_clear_signal",
            clear(
                "The health check failed, indicating an issue with the service.",
                "The service is in an unhealthy state due to a health check failure.",
            ),
        )
        .await;
        assert!(
            described.is_error && described.content.contains("has a problem"),
            "{}",
            described.content
        );
        let read = answer(&tools, "pulse_query", json!({"action": "list"})).await;
        assert!(!read.is_error, "{}", read.content);
        let reported = answer(
            &tools,
            "patrol_report_finding",
            report_args("service:h1:web", "web", "service"),
        )
        .await;
        assert!(!reported.is_error, "{}", reported.content);
        let answer_json: Value = serde_json::from_str(&reported.content)?;
        assert_eq!(answer_json["still_unaddressed"], json!([]), "{answer_json}");
        let after = answer(
            &tools,
            "patrol_clear_signal",
            clear("web is being migrated", "planned maintenance"),
        )
        .await;
        assert!(
            after.is_error
                && after
                    .content
                    .contains("reported service:h1:web as a problem"),
            "{}",
            after.content
        );
        assert!(tools.ledger.cleared().is_empty());
        Ok(())
    }

    #[test]
    fn a_placeholder_or_punctuation_says_nothing() {
        for nothing in [
            "",
            "  ",
            "...",
            "-",
            "<title>",
            " <what you read that shows it> ",
        ] {
            assert!(says_nothing(nothing), "{nothing:?}");
        }
        for something in [
            "web fails its check",
            "<b>bold</b> text",
            "x",
            "health=unhealthy",
        ] {
            assert!(!says_nothing(something), "{something:?}");
        }
        let mut templated = serde_json::json!({
            "key": "k", "severity": "warning", "category": "reliability",
            "resource_id": "service:h1:web", "resource_name": "web", "resource_type": "service",
            "title": "<title>", "description": "d", "recommendation": "r", "evidence": "e"
        });
        assert_eq!(
            blank_field(ToolName::PatrolReportFinding, &templated),
            Some("title".to_owned())
        );
        templated["title"] = serde_json::json!("web health check failing");
        assert_eq!(blank_field(ToolName::PatrolReportFinding, &templated), None);
    }

    #[test]
    fn what_is_still_unaddressed_is_one_entry_per_resource() {
        let scope = vec![
            test_support::resource("h1", "web", Health::Unhealthy),
            test_support::resource("h1", "api", Health::Unhealthy),
        ];
        let ledger = RunLedger::new();
        ledger.set_signals(SignalBook::new(&scope, &BTreeMap::new()));
        assert_eq!(
            ledger.still_unaddressed(),
            json!([
                {"resource_id": "service:h1:api", "signals": ["health_check_failing"]},
                {"resource_id": "service:h1:web", "signals": ["health_check_failing"]},
            ])
        );
        ledger.accept_report(
            "r".to_owned(),
            AcceptedReport {
                finding_id: "00000000000000aa".parse().expect("id"),
                kind: ReportKind::New,
                severity: Severity::Warning,
                resource_id: "service:h1:web".to_owned(),
                title: "web failing".to_owned(),
            },
        );
        assert_eq!(
            ledger.still_unaddressed(),
            json!([{"resource_id": "service:h1:api", "signals": ["health_check_failing"]}])
        );
    }

    #[tokio::test]
    async fn reads_answer_bad_input_with_error_results() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let cases = [
            ("pulse_query", json!({"action": "get"})),
            (
                "pulse_query",
                json!({"action": "get", "resource_id": "nope"}),
            ),
            ("pulse_query", json!({"action": "topology"})),
            ("pulse_metrics", json!({"type": "performance"})),
            (
                "pulse_metrics",
                json!({"type": "performance", "resource_id": "service:h9:x"}),
            ),
            (
                "pulse_metrics",
                json!({"type": "temperatures", "resource_id": "service:h1:web"}),
            ),
            ("pulse_read", json!({"action": "logs"})),
            (
                "pulse_read",
                json!({"action": "exec", "command": "rm -rf /"}),
            ),
        ];
        for (tool, arguments) in cases {
            let result = answer(&tools, tool, arguments.clone()).await;
            assert!(result.is_error, "{tool} {arguments}: {}", result.content);
        }
        // Good input answers.
        let health = answer(&tools, "pulse_query", json!({"action": "health"})).await;
        assert!(!health.is_error, "{}", health.content);
        let health: Value = serde_json::from_str(&health.content)?;
        assert_eq!(health["unhealthy"], 1);
        assert_eq!(health["not_healthy"][0]["resource_id"], "service:h1:web");
        let metrics = answer(
            &tools,
            "pulse_metrics",
            json!({"type": "performance", "resource_id": "service:h1:db"}),
        )
        .await;
        assert!(!metrics.is_error, "{}", metrics.content);
        Ok(())
    }

    #[tokio::test]
    async fn an_unknown_resource_id_is_answered_with_the_nearest_real_ids() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        for (tool, arguments) in [
            (
                "pulse_query",
                json!({"action": "get", "resource_id": "service:h1:wbe"}),
            ),
            (
                "pulse_metrics",
                json!({"type": "performance", "resource_id": "service:h1:wbe"}),
            ),
            (
                "pulse_read",
                json!({"action": "logs", "resource_id": "service:h1:wbe"}),
            ),
            (
                "patrol_report_finding",
                report_args("service:h1:wbe", "web", "service"),
            ),
        ] {
            let result = answer(&tools, tool, arguments).await;
            assert!(
                result.is_error
                    && result.content.contains(
                        "no resource service:h1:wbe in this run's scope; nearest ids: service:h1:web, service:h1:db"
                    ),
                "{tool}: {}",
                result.content
            );
        }
        Ok(())
    }

    #[tokio::test]
    async fn an_unavailable_relay_is_terminal_for_reads_in_the_run() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        let args = json!({"action": "logs", "resource_id": "service:h1:web"});
        let first = answer(&tools, "pulse_read", args.clone()).await;
        assert!(first.is_error && first.content.contains("unavailable"));
        assert_eq!(tools.ledger.unavailable(), ["relay_read"]);
        let second = answer(&tools, "pulse_read", args).await;
        assert!(
            second.content.contains("rest of this run"),
            "{}",
            second.content
        );
        Ok(())
    }

    #[tokio::test]
    async fn lifecycle_tools_refuse_what_does_not_resolve_and_never_repeat() -> anyhow::Result<()> {
        let db = TestDb::create().await?;
        let tools = tools(&db).await;
        read_first(&tools).await;
        // Assess before the snapshot, then on an unknown finding.
        let verdict = json!({"finding_id": "0123456789abcdef", "verdict": "present",
                             "evidence": "e", "reason": "r"});
        let early = answer(&tools, "patrol_assess_finding", verdict.clone()).await;
        assert!(early.is_error && early.content.contains("patrol_get_findings first"));
        let snapshot = answer(&tools, "patrol_get_findings", json!({})).await;
        assert!(!snapshot.is_error);
        let again = answer(
            &tools,
            "patrol_get_findings",
            json!({"severity": "critical"}),
        )
        .await;
        assert_eq!(again.content, snapshot.content, "the same snapshot");
        let unknown = answer(&tools, "patrol_assess_finding", verdict).await;
        assert!(unknown.is_error, "{}", unknown.content);
        // The Watch offer drops `minLength`; the handlers still refuse blank text.
        let blank = json!({"finding_id": "0123456789abcdef", "verdict": "present",
                           "evidence": "e", "reason": " "});
        let blank = answer(&tools, "patrol_assess_finding", blank).await;
        assert!(
            blank.is_error && blank.content.contains("reason says nothing"),
            "{}",
            blank.content
        );
        let mut undescribed = report_args("service:h1:web", "web", "service");
        undescribed["description"] = json!("");
        let undescribed = answer(&tools, "patrol_report_finding", undescribed).await;
        assert!(
            undescribed.is_error && undescribed.content.contains("description says nothing"),
            "{}",
            undescribed.content
        );

        // Reports must name an in-scope resource exactly.
        for args in [
            report_args("service:h9:web", "web", "service"),
            report_args("service:h1:web", "web", "host"),
            report_args("service:h1:web", "not-web", "service"),
        ] {
            let refused = answer(&tools, "patrol_report_finding", args).await;
            assert!(refused.is_error, "{}", refused.content);
        }
        let good = report_args("service:h1:web", "web", "service");
        let accepted = answer(&tools, "patrol_report_finding", good.clone()).await;
        assert!(!accepted.is_error, "{}", accepted.content);
        let repeated = answer(&tools, "patrol_report_finding", good).await;
        assert!(
            repeated.content.contains("not repeated"),
            "{}",
            repeated.content
        );

        let ledger = &tools.ledger;
        assert_eq!(ledger.reports().len(), 1);
        assert_eq!(ledger.rejected(), 8);
        assert!(ledger.errors().is_empty());
        let batch = ledger.take_batch();
        assert!(batch.is_mixed(), "{batch:?}");
        assert_eq!(ledger.take_batch(), BatchTally::default());
        Ok(())
    }
}
