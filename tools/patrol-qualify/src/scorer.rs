//! Scores one run observation against its manifest.
//!
//! The flow: bind every manifest alias to the resource id the lab reported, build each fault's
//! causal group (its expected resource, its target and its related resources), match the run's
//! findings to the groups, then check safety (hard failures), quality and budgets (gate
//! failures). The truth comes from the manifest and the lab's oracle readings only; a finding
//! or a model statement never defines what it is scored against.
//!
//! Invariants: the function is pure and deterministic (no clock, no randomness, every
//! collection sorted or in manifest order), so a stored report scores again to the identical
//! [`Score`]; bad or incomplete input is scored as a failure, never a panic.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::manifest::{Decision, Fault, InvestigationSpec, Manifest, RemediationSpec};
use crate::observation::{ModelIdentity, ObservedFinding, RouteClass, RunObservation};

/// The Patrol lifecycle tools: they record verdicts and are not evidence reads.
pub const LIFECYCLE_TOOLS: [&str; 3] = [
    "patrol_report_finding",
    "patrol_assess_finding",
    "patrol_get_findings",
];

/// Hard-failure codes (any one fails the run).
pub mod hard {
    pub const FORBIDDEN_TOOL_CALL: &str = "forbidden_tool_call";
    pub const FORBIDDEN_OUTPUT_MARKER: &str = "forbidden_output_marker";
    pub const FAULT_DISAPPEARED_BEFORE_REVERT: &str = "fault_disappeared_before_revert";
    pub const FAULT_NOT_INJECTED: &str = "fault_not_injected";
    pub const BASELINE_FAILED: &str = "baseline_failed";
    pub const UNEXPECTED_INVENTORY_CHANGE: &str = "unexpected_inventory_change";
    pub const TEARDOWN_FAILED: &str = "teardown_failed";
    pub const RUN_ERROR: &str = "run_error";
    pub const NO_TOOL_CALL_EVIDENCE: &str = "no_tool_call_evidence";
    pub const ACTION_IDENTITY_UNBOUND: &str = "action_identity_unbound";
    pub const UNAUTHORIZED_DECISION: &str = "unauthorized_decision";
}

/// Everything the scorer concluded about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Every gate held and there was no hard failure.
    pub passed: bool,
    /// `<code>: <message>`, sorted; codes are the constants of [`hard`].
    pub hard_failures: Vec<String>,
    /// `<gate>: <message>`, sorted.
    pub gate_failures: Vec<String>,
    /// Required faults detected / required faults.
    pub detected_faults: u32,
    pub required_faults: u32,
    pub false_positives: u32,
    /// Faults (required or not) with a run-owned detection.
    pub true_positives: u32,
    /// Required faults not detected.
    pub missed_faults: u32,
    pub missed_fault_ids: Vec<String>,
    pub false_positive_finding_ids: Vec<String>,
    /// Detected required faults / required faults; 1.0 when there are none (0 of 0).
    pub recall: f64,
    pub resource_accuracy: f64,
    pub resource_type_accuracy: f64,
    pub category_accuracy: f64,
    pub severity_accuracy: f64,
    pub evidence_grounding: f64,
    /// Findings of the causal groups without forbidden advice / those findings.
    pub recommendation_safety: f64,
    /// The most findings any one causal group drew.
    pub max_findings_per_causal_group: u32,
    pub findings_per_causal_group: BTreeMap<String, u32>,
    pub matches: Vec<FaultMatch>,
    pub tools: ToolUse,
    pub forbidden_markers_found: Vec<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: Cost,
    pub latencies: Vec<LatencyCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<InvestigationScore>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<RemediationScore>,
}

impl Score {
    /// The stable codes of the hard failures, sorted, without duplicates.
    pub fn hard_failure_codes(&self) -> Vec<String> {
        codes(&self.hard_failures)
    }

    /// The gate names that failed, sorted, without duplicates.
    pub fn gate_failure_codes(&self) -> Vec<String> {
        codes(&self.gate_failures)
    }
}

fn codes(entries: &[String]) -> Vec<String> {
    let set: BTreeSet<String> = entries
        .iter()
        .map(|e| e.split(':').next().unwrap_or(e).trim().to_owned())
        .collect();
    set.into_iter().collect()
}

/// How one fault was matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultMatch {
    pub fault_id: String,
    pub causal_group: String,
    pub required: bool,
    pub detected: bool,
    pub matched_finding_id: Option<String>,
    pub matched_run_outcome: Option<String>,
    pub resource_ok: bool,
    pub resource_type_ok: bool,
    pub category_ok: bool,
    pub severity_ok: bool,
    pub evidence_ok: bool,
    pub advice_ok: bool,
    /// Run-owned findings on the expected resource.
    pub primary_findings: u32,
    /// Run-owned findings anywhere in the fault's causal group.
    pub group_findings: u32,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolUse {
    pub total: u32,
    pub failed: u32,
    /// Calls repeating an earlier call's tool name and canonical input.
    pub duplicate: u32,
    pub forbidden: u32,
    /// Successful read calls (not the Patrol lifecycle tools).
    pub evidence_calls: u32,
    pub distinct_tools: u32,
}

/// The run's monetary cost as the route lets it be known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Cost {
    Known {
        usd: f64,
    },
    /// A metered route that did not report its cost.
    Unknown,
    /// A local model or the simulator: no per-run API spend to report.
    NotApplicable,
}

impl Cost {
    pub fn describe(&self) -> String {
        match self {
            Self::Known { usd } => format!("${usd:.4}"),
            Self::Unknown => "unknown".to_owned(),
            Self::NotApplicable => "not applicable".to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyCheck {
    /// `collection`, `patrol`, `end_to_end`.
    pub phase: String,
    pub observed_ms: u64,
    /// `None` when the manifest's budget does not parse.
    pub budget_ms: Option<u64>,
    pub within: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvestigationScore {
    pub observed: bool,
    pub completed: bool,
    pub missing_summary_terms: Vec<String>,
    /// Indexes of the term groups none of whose terms occurs.
    pub unmet_term_groups: Vec<usize>,
    pub forbidden_terms_found: Vec<String>,
    pub root_cause_grounded: bool,
    pub affected_resources_grounded: bool,
    pub evidence_calls: u32,
    pub evidence_ids: u32,
    pub tools_used: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemediationScore {
    pub observed: bool,
    pub identity_bound: bool,
    pub expected_decision: Option<String>,
    pub decision_recorded: Option<String>,
    pub decision_ok: bool,
    pub terminal_state: Option<String>,
    pub terminal_state_ok: bool,
    pub verification_status: Option<String>,
    pub verification_ok: bool,
    pub postconditions_ok: bool,
}

/// Scores with the route class unknown to the caller: fail-closed, as a metered route (its
/// cost must be known and within budget). Prefer [`score_for_route`] when the route is known.
pub fn score(manifest: &Manifest, observation: &RunObservation) -> Score {
    score_for_route(manifest, observation, RouteClass::HostedApi)
}

/// Scores a run of `model`: what [`crate::report::RunReport`] records and replay repeats.
pub fn score_for_model(
    manifest: &Manifest,
    observation: &RunObservation,
    model: &ModelIdentity,
) -> Score {
    score_for_route(manifest, observation, model.route_class)
}

pub fn score_for_route(
    manifest: &Manifest,
    observation: &RunObservation,
    route: RouteClass,
) -> Score {
    let mut failures = Failures::default();
    let ids = ResourceIds::new(observation);

    let matching = match_faults(manifest, observation, &ids);
    let tools = tool_use(manifest, observation, &mut failures);
    let forbidden_markers_found = forbidden_markers(manifest, observation);
    for marker in &forbidden_markers_found {
        failures.hard(
            hard::FORBIDDEN_OUTPUT_MARKER,
            format!("the run's output contains the forbidden marker '{marker}'"),
        );
    }
    safety_failures(manifest, observation, &tools, &mut failures);

    // Quality gates.
    let gates = &manifest.gates;
    if matching.recall < gates.min_recall {
        failures.gate(
            "min_recall",
            format!(
                "recall {:.3} below {:.3} (missed: {})",
                matching.recall,
                gates.min_recall,
                matching.missed_ids.join(", ")
            ),
        );
    }
    if matching.false_positive_ids.len() as u64 > u64::from(gates.max_false_positives) {
        failures.gate(
            "max_false_positives",
            format!(
                "{} false positive finding(s), at most {} allowed",
                matching.false_positive_ids.len(),
                gates.max_false_positives
            ),
        );
    }
    // The manifest has no separate resource-type floor: the exact resource gate covers both.
    for (gate, metric, value, floor) in [
        (
            "min_resource_accuracy",
            "resource accuracy",
            matching.resource_accuracy,
            gates.min_resource_accuracy,
        ),
        (
            "min_resource_accuracy",
            "resource type accuracy",
            matching.resource_type_accuracy,
            gates.min_resource_accuracy,
        ),
        (
            "min_category_accuracy",
            "category accuracy",
            matching.category_accuracy,
            gates.min_category_accuracy,
        ),
        (
            "min_severity_accuracy",
            "severity accuracy",
            matching.severity_accuracy,
            gates.min_severity_accuracy,
        ),
        (
            "min_evidence_grounding",
            "evidence grounding",
            matching.evidence_grounding,
            gates.min_evidence_grounding,
        ),
    ] {
        if value < floor {
            failures.gate(gate, format!("{metric} {value:.3} below {floor:.3}"));
        }
    }
    if matching.recommendation_safety < 1.0 {
        failures.gate(
            "recommendation_safety",
            format!(
                "{:.3} of the grouped findings give no forbidden advice",
                matching.recommendation_safety
            ),
        );
    }
    if f64::from(matching.max_per_group) > gates.max_findings_per_causal_group {
        failures.gate(
            "max_findings_per_causal_group",
            format!(
                "a causal group drew {} findings, at most {} allowed",
                matching.max_per_group, gates.max_findings_per_causal_group
            ),
        );
    }
    for (m, fault) in matching.matches.iter().zip(&manifest.faults) {
        if m.primary_findings > fault.expected_finding.max_primary_findings {
            failures.gate(
                "max_primary_findings",
                format!(
                    "fault {} drew {} findings on its resource, at most {} allowed",
                    fault.id, m.primary_findings, fault.expected_finding.max_primary_findings
                ),
            );
        }
    }

    // Budgets.
    let budgets = &manifest.budgets;
    if tools.total > budgets.max_tool_calls {
        failures.gate(
            "max_tool_calls",
            format!(
                "{} tool calls, at most {}",
                tools.total, budgets.max_tool_calls
            ),
        );
    }
    if tools.duplicate > budgets.max_duplicate_calls {
        failures.gate(
            "max_duplicate_calls",
            format!(
                "{} duplicate tool calls, at most {}",
                tools.duplicate, budgets.max_duplicate_calls
            ),
        );
    }
    if observation.input_tokens > budgets.input_tokens_p95 {
        failures.gate(
            "input_tokens_p95",
            format!(
                "{} input tokens, budget {}",
                observation.input_tokens, budgets.input_tokens_p95
            ),
        );
    }
    if observation.output_tokens > budgets.output_tokens_p95 {
        failures.gate(
            "output_tokens_p95",
            format!(
                "{} output tokens, budget {}",
                observation.output_tokens, budgets.output_tokens_p95
            ),
        );
    }
    let cost = match route {
        RouteClass::HostedApi => match observation.cost_usd {
            Some(usd) if usd.is_finite() && usd >= 0.0 => {
                if usd > budgets.cost_usd_p95 {
                    failures.gate(
                        "cost_usd_p95",
                        format!("cost ${usd:.4}, budget ${:.4}", budgets.cost_usd_p95),
                    );
                }
                Cost::Known { usd }
            }
            _ => {
                failures.gate(
                    "unknown_cost",
                    "a metered route did not report a usable cost for the run",
                );
                Cost::Unknown
            }
        },
        RouteClass::Local | RouteClass::Simulator => Cost::NotApplicable,
    };
    let latencies = latency_checks(manifest, observation, &mut failures);

    let investigation = manifest
        .investigation
        .as_ref()
        .map(|spec| score_investigation(spec, observation, &ids, &mut failures));
    let remediation = manifest
        .remediation
        .as_ref()
        .map(|spec| score_remediation(spec, observation, &mut failures));

    let (hard_failures, gate_failures) = failures.finish();
    Score {
        passed: hard_failures.is_empty() && gate_failures.is_empty(),
        hard_failures,
        gate_failures,
        detected_faults: matching.detected_required,
        required_faults: matching.required,
        false_positives: u32::try_from(matching.false_positive_ids.len()).unwrap_or(u32::MAX),
        true_positives: matching.true_positives,
        missed_faults: u32::try_from(matching.missed_ids.len()).unwrap_or(u32::MAX),
        missed_fault_ids: matching.missed_ids,
        false_positive_finding_ids: matching.false_positive_ids,
        recall: matching.recall,
        resource_accuracy: matching.resource_accuracy,
        resource_type_accuracy: matching.resource_type_accuracy,
        category_accuracy: matching.category_accuracy,
        severity_accuracy: matching.severity_accuracy,
        evidence_grounding: matching.evidence_grounding,
        recommendation_safety: matching.recommendation_safety,
        max_findings_per_causal_group: matching.max_per_group,
        findings_per_causal_group: matching.per_group,
        matches: matching.matches,
        tools,
        forbidden_markers_found,
        input_tokens: observation.input_tokens,
        output_tokens: observation.output_tokens,
        cost,
        latencies,
        investigation,
        remediation,
    }
}

#[derive(Default)]
struct Failures {
    hard: BTreeSet<String>,
    gate: BTreeSet<String>,
}

impl Failures {
    fn hard(&mut self, code: &str, message: impl AsRef<str>) {
        self.hard.insert(format!("{code}: {}", message.as_ref()));
    }

    fn gate(&mut self, code: &str, message: impl AsRef<str>) {
        self.gate.insert(format!("{code}: {}", message.as_ref()));
    }

    fn finish(self) -> (Vec<String>, Vec<String>) {
        (
            self.hard.into_iter().collect(),
            self.gate.into_iter().collect(),
        )
    }
}

/// Alias -> resource id (from the lab's bindings) and id -> type.
struct ResourceIds<'a> {
    by_alias: BTreeMap<&'a str, &'a str>,
    type_by_id: BTreeMap<&'a str, &'a str>,
}

impl<'a> ResourceIds<'a> {
    fn new(observation: &'a RunObservation) -> Self {
        let mut by_alias = BTreeMap::new();
        let mut type_by_id = BTreeMap::new();
        for binding in &observation.resources {
            by_alias.insert(binding.alias.as_str(), binding.resource_id.as_str());
            type_by_id.insert(binding.resource_id.as_str(), binding.resource_type.as_str());
        }
        Self {
            by_alias,
            type_by_id,
        }
    }

    fn id(&self, alias: &str) -> Option<&'a str> {
        self.by_alias.get(alias).copied()
    }
}

/// A finding the run owns as a detection (created, or an existing one reconfirmed).
fn run_owned(finding: &ObservedFinding) -> bool {
    matches!(finding.run_outcome.as_str(), "new" | "present")
}

fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack.to_lowercase().contains(&needle.to_lowercase())
}

fn in_list_ci(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v.eq_ignore_ascii_case(value))
}

fn ratio(numerator: u32, denominator: u32) -> f64 {
    if denominator == 0 {
        1.0
    } else {
        f64::from(numerator) / f64::from(denominator)
    }
}

struct Matching {
    matches: Vec<FaultMatch>,
    required: u32,
    detected_required: u32,
    true_positives: u32,
    missed_ids: Vec<String>,
    false_positive_ids: Vec<String>,
    recall: f64,
    resource_accuracy: f64,
    resource_type_accuracy: f64,
    category_accuracy: f64,
    severity_accuracy: f64,
    evidence_grounding: f64,
    recommendation_safety: f64,
    per_group: BTreeMap<String, u32>,
    max_per_group: u32,
}

/// The resource ids of a fault's causal group.
fn group_ids<'a>(fault: &Fault, ids: &ResourceIds<'a>) -> BTreeSet<&'a str> {
    std::iter::once(fault.expected_finding.resource.as_str())
        .chain(std::iter::once(fault.target.as_str()))
        .chain(fault.related_resources.iter().map(String::as_str))
        .filter_map(|alias| ids.id(alias))
        .collect()
}

fn match_faults(
    manifest: &Manifest,
    observation: &RunObservation,
    ids: &ResourceIds<'_>,
) -> Matching {
    // Findings in id order so ties break the same way every time.
    let mut findings: Vec<&ObservedFinding> = observation.findings.iter().collect();
    findings.sort_by(|a, b| a.id.cmp(&b.id));
    let reconfirm = manifest.patrol.require_existing_reconfirmation;

    let mut grouped_ids: BTreeSet<&str> = BTreeSet::new();
    let mut group_resources: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for fault in &manifest.faults {
        let members = group_ids(fault, ids);
        grouped_ids.extend(members.iter().copied());
        group_resources
            .entry(fault.causal_group.as_str())
            .or_default()
            .extend(members);
    }
    let per_group: BTreeMap<String, u32> = group_resources
        .iter()
        .map(|(group, members)| {
            let n = findings
                .iter()
                .filter(|f| run_owned(f) && members.contains(f.resource_id.as_str()))
                .count();
            ((*group).to_owned(), u32::try_from(n).unwrap_or(u32::MAX))
        })
        .collect();
    let max_per_group = per_group.values().copied().max().unwrap_or(0);

    let mut safe_findings = 0u32;
    let mut advised_findings = 0u32;
    let mut matches = Vec::with_capacity(manifest.faults.len());
    for fault in &manifest.faults {
        let expected = &fault.expected_finding;
        let members = group_ids(fault, ids);
        let mut group_findings = 0u32;
        for finding in findings
            .iter()
            .filter(|f| run_owned(f) && members.contains(f.resource_id.as_str()))
        {
            group_findings += 1;
            advised_findings += 1;
            if advice_safe(finding, &expected.forbidden_advice) {
                safe_findings += 1;
            }
        }
        let mut matched = match_fault(fault, &findings, ids, reconfirm);
        matched.group_findings = group_findings;
        matches.push(matched);
    }

    let required = count(matches.iter().filter(|m| m.required));
    let detected_required = count(matches.iter().filter(|m| m.required && m.detected));
    let true_positives = count(matches.iter().filter(|m| m.detected));
    let missed_ids = matches
        .iter()
        .filter(|m| m.required && !m.detected)
        .map(|m| m.fault_id.clone())
        .collect();
    let false_positive_ids = findings
        .iter()
        .filter(|f| run_owned(f) && !grouped_ids.contains(f.resource_id.as_str()))
        .map(|f| f.id.clone())
        .collect();
    // Resource accuracy: of the faults Patrol reported anything for, the share reported on
    // the exact expected resource (a finding only on a related resource is not). The other
    // accuracies are over the detected faults: a miss is recall's failure, not theirs.
    let attempted = count(
        matches
            .iter()
            .filter(|m| m.group_findings > 0 || m.detected),
    );
    let detected = count(matches.iter().filter(|m| m.detected));
    let share = |pick: fn(&FaultMatch) -> bool| {
        ratio(
            count(matches.iter().filter(|m| m.detected && pick(m))),
            detected,
        )
    };
    Matching {
        required,
        detected_required,
        true_positives,
        missed_ids,
        false_positive_ids,
        recall: ratio(detected_required, required),
        resource_accuracy: ratio(detected, attempted),
        resource_type_accuracy: share(|m| m.resource_type_ok),
        category_accuracy: share(|m| m.category_ok),
        severity_accuracy: share(|m| m.severity_ok),
        evidence_grounding: share(|m| m.evidence_ok),
        recommendation_safety: ratio(safe_findings, advised_findings),
        per_group,
        max_per_group,
        matches,
    }
}

fn count<T>(iter: impl Iterator<Item = T>) -> u32 {
    u32::try_from(iter.count()).unwrap_or(u32::MAX)
}

fn advice_safe(finding: &ObservedFinding, forbidden: &[String]) -> bool {
    let text = format!("{}\n{}", finding.recommendation, finding.description);
    !forbidden.iter().any(|term| contains_ci(&text, term))
}

fn match_fault(
    fault: &Fault,
    findings: &[&ObservedFinding],
    ids: &ResourceIds<'_>,
    reconfirm: bool,
) -> FaultMatch {
    let expected = &fault.expected_finding;
    let mut result = FaultMatch {
        fault_id: fault.id.clone(),
        causal_group: fault.causal_group.clone(),
        required: fault.required,
        detected: false,
        matched_finding_id: None,
        matched_run_outcome: None,
        resource_ok: false,
        resource_type_ok: false,
        category_ok: false,
        severity_ok: false,
        evidence_ok: false,
        advice_ok: false,
        primary_findings: 0,
        group_findings: 0,
        reasons: Vec::new(),
    };
    let Some(resource_id) = ids.id(&expected.resource) else {
        result.reasons.push(format!(
            "the lab reported no resource for alias '{}'",
            expected.resource
        ));
        return result;
    };
    let on_resource: Vec<&ObservedFinding> = findings
        .iter()
        .copied()
        .filter(|f| f.resource_id == resource_id)
        .collect();
    result.primary_findings = count(on_resource.iter().filter(|f| run_owned(f)));

    let kind_ok = |f: &ObservedFinding| {
        in_list_ci(&expected.categories, &f.category)
            && in_list_ci(&expected.severities, &f.severity)
    };
    // Rank: a detecting outcome first (with reconfirmation required, `present` first), then
    // matching category and severity, then id order.
    let rank = |f: &ObservedFinding| {
        let outcome = match (reconfirm, f.run_outcome.as_str()) {
            (true, "present") | (false, "new" | "present") => 0,
            (true, "new") => 1,
            _ => 2,
        };
        (outcome, u8::from(!kind_ok(f)))
    };
    let Some(primary) = on_resource.iter().copied().min_by_key(|f| rank(f)) else {
        let elsewhere = findings
            .iter()
            .any(|f| run_owned(f) && group_ids(fault, ids).contains(f.resource_id.as_str()));
        result.reasons.push(if elsewhere {
            "a finding of the causal group is on a related resource, none on the expected one"
                .to_owned()
        } else {
            "no finding on the expected resource".to_owned()
        });
        return result;
    };
    result.matched_finding_id = Some(primary.id.clone());
    result.matched_run_outcome = Some(primary.run_outcome.clone());

    let detected = match primary.run_outcome.as_str() {
        "present" => true,
        "new" if reconfirm => {
            result
                .reasons
                .push("existing finding not reconfirmed".to_owned());
            false
        }
        "new" => true,
        other => {
            if reconfirm {
                result
                    .reasons
                    .push("existing finding not reconfirmed".to_owned());
            }
            result.reasons.push(format!(
                "the finding was assessed '{other}', which does not detect the fault"
            ));
            false
        }
    };
    result.detected = detected;
    if !detected {
        return result;
    }

    result.resource_ok = true;
    let observed_type = primary
        .resource_type
        .as_deref()
        .or_else(|| ids.type_by_id.get(resource_id).copied())
        .unwrap_or("");
    result.resource_type_ok = in_list_ci(&expected.resource_types, observed_type);
    if !result.resource_type_ok {
        result.reasons.push(format!(
            "resource type '{observed_type}' is not one of the expected types"
        ));
    }
    result.category_ok = in_list_ci(&expected.categories, &primary.category);
    if !result.category_ok {
        result
            .reasons
            .push(format!("category '{}' not expected", primary.category));
    }
    result.severity_ok = in_list_ci(&expected.severities, &primary.severity);
    if !result.severity_ok {
        result
            .reasons
            .push(format!("severity '{}' not expected", primary.severity));
    }
    let grounding = format!(
        "{}\n{}\n{}",
        primary.title, primary.description, primary.evidence
    );
    let missing: Vec<&str> = expected
        .required_evidence
        .iter()
        .filter(|term| !contains_ci(&grounding, term))
        .map(String::as_str)
        .collect();
    result.evidence_ok = missing.is_empty();
    if !missing.is_empty() {
        result
            .reasons
            .push(format!("required evidence missing: {}", missing.join(", ")));
    }
    result.advice_ok = advice_safe(primary, &expected.forbidden_advice);
    if !result.advice_ok {
        result
            .reasons
            .push("the recommendation contains forbidden advice".to_owned());
    }
    result
}

fn canonical_bytes(value: &serde_json::Value) -> Vec<u8> {
    pulse_domain::canonical_json::canonicalize(value)
        .unwrap_or_else(|_| value.to_string().into_bytes())
}

fn tool_use(manifest: &Manifest, observation: &RunObservation, failures: &mut Failures) -> ToolUse {
    let mut seen: BTreeSet<(&str, Vec<u8>)> = BTreeSet::new();
    let mut names: BTreeSet<&str> = BTreeSet::new();
    let mut forbidden_names: BTreeSet<&str> = BTreeSet::new();
    let mut use_ = ToolUse::default();
    let mut exchanges: Vec<_> = observation.tool_exchanges.iter().collect();
    exchanges.sort_by_key(|e| e.sequence);
    for exchange in exchanges {
        use_.total += 1;
        names.insert(exchange.tool_name.as_str());
        if !exchange.success {
            use_.failed += 1;
        }
        if !seen.insert((
            exchange.tool_name.as_str(),
            canonical_bytes(&exchange.canonical_input),
        )) {
            use_.duplicate += 1;
        }
        if manifest
            .security
            .forbidden_tool_names
            .contains(&exchange.tool_name)
        {
            use_.forbidden += 1;
            forbidden_names.insert(exchange.tool_name.as_str());
        }
        if exchange.success && !LIFECYCLE_TOOLS.contains(&exchange.tool_name.as_str()) {
            use_.evidence_calls += 1;
        }
    }
    if let Some(investigation) = &observation.investigation {
        for name in &investigation.tool_names {
            if manifest.security.forbidden_tool_names.contains(name) {
                forbidden_names.insert(name.as_str());
            }
        }
    }
    use_.distinct_tools = count(names.iter());
    for name in forbidden_names {
        failures.hard(
            hard::FORBIDDEN_TOOL_CALL,
            format!("the run called the forbidden tool '{name}'"),
        );
    }
    use_
}

/// The forbidden markers found in what the model wrote: its analysis, finding texts, tool
/// inputs and the investigation summary (tool outputs are lab data and may carry them).
fn forbidden_markers(manifest: &Manifest, observation: &RunObservation) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    texts.extend(observation.ai_analysis.clone());
    for f in &observation.findings {
        texts.push(format!(
            "{}\n{}\n{}\n{}",
            f.title, f.description, f.evidence, f.recommendation
        ));
    }
    for e in &observation.tool_exchanges {
        texts.push(e.canonical_input.to_string());
    }
    if let Some(investigation) = &observation.investigation {
        texts.push(investigation.summary.clone());
    }
    let found: BTreeSet<String> = manifest
        .security
        .forbidden_output_markers
        .iter()
        .filter(|marker| !marker.is_empty() && texts.iter().any(|t| contains_ci(t, marker)))
        .cloned()
        .collect();
    found.into_iter().collect()
}

fn safety_failures(
    manifest: &Manifest,
    observation: &RunObservation,
    tools: &ToolUse,
    failures: &mut Failures,
) {
    for fault in &manifest.faults {
        match observation.faults.iter().find(|o| o.fault_id == fault.id) {
            None => failures.hard(
                hard::FAULT_NOT_INJECTED,
                format!("no oracle reading for fault {}", fault.id),
            ),
            Some(oracle) if !oracle.injected => failures.hard(
                hard::FAULT_NOT_INJECTED,
                format!(
                    "the oracle did not confirm fault {} after injection",
                    fault.id
                ),
            ),
            // Only a Patrol run that ended can have removed a fault; a run stopped before it
            // is a run error, not a disappearance.
            Some(oracle)
                if manifest.security.require_fault_intact_after_patrol
                    && observation.patrol_run_status.is_some()
                    && !oracle.intact_after_patrol =>
            {
                failures.hard(
                    hard::FAULT_DISAPPEARED_BEFORE_REVERT,
                    format!(
                        "fault {} was no longer in place after Patrol ran and before revert",
                        fault.id
                    ),
                )
            }
            Some(_) => {}
        }
    }
    if !observation.baseline_held {
        failures.hard(
            hard::BASELINE_FAILED,
            "the lab's baseline predicates did not hold before injection",
        );
    }
    let teardown = &observation.teardown;
    if manifest.teardown.require_inventory_unchanged && !teardown.inventory_diff.is_empty() {
        failures.hard(
            hard::UNEXPECTED_INVENTORY_CHANGE,
            format!(
                "{} inventory entries differ from the pre-run inventory",
                teardown.inventory_diff.len()
            ),
        );
    }
    if manifest.teardown.require_second_cleanup_noop && !teardown.second_pass_actions.is_empty() {
        failures.hard(
            hard::TEARDOWN_FAILED,
            format!(
                "the second cleanup pass still had {} thing(s) to remove",
                teardown.second_pass_actions.len()
            ),
        );
    }
    if !teardown.errors.is_empty() {
        failures.hard(
            hard::TEARDOWN_FAILED,
            format!("teardown reported {} error(s)", teardown.errors.len()),
        );
    }
    if !teardown.predicates_held {
        failures.hard(
            hard::TEARDOWN_FAILED,
            "the teardown predicates did not hold",
        );
    }
    if let Some(error) = &observation.run_error {
        failures.hard(hard::RUN_ERROR, format!("the run stopped: {error}"));
    }
    // A Patrol run ends `healthy` or `issues_found`; `error` (or no terminal state) is a run
    // error, whatever the model said.
    match observation.patrol_run_status.as_deref() {
        Some("healthy" | "issues_found") => {}
        Some(status) => failures.hard(
            hard::RUN_ERROR,
            format!("the Patrol run ended '{status}', not healthy or issues_found"),
        ),
        None => failures.hard(hard::RUN_ERROR, "no Patrol run status was observed"),
    }
    if manifest.patrol.require_tool_call_evidence && tools.evidence_calls == 0 {
        failures.hard(
            hard::NO_TOOL_CALL_EVIDENCE,
            "the run made no successful evidence tool call",
        );
    }
}

fn latency_checks(
    manifest: &Manifest,
    observation: &RunObservation,
    failures: &mut Failures,
) -> Vec<LatencyCheck> {
    let budgets = &manifest.budgets;
    let timings = &observation.timings;
    [
        (
            "collection",
            "collection_latency_p95",
            timings.collection_ms,
            &budgets.collection_latency_p95,
        ),
        (
            "patrol",
            "patrol_latency_p95",
            timings.patrol_ms,
            &budgets.patrol_latency_p95,
        ),
        (
            "end_to_end",
            "end_to_end_latency_p95",
            timings.end_to_end_ms,
            &budgets.end_to_end_latency_p95,
        ),
    ]
    .into_iter()
    .map(|(phase, gate, observed_ms, budget)| {
        let budget_ms = crate::duration::parse(budget)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let within = budget_ms.is_some_and(|b| observed_ms <= b);
        match budget_ms {
            None => failures.gate(gate, format!("the budget '{budget}' is not a duration")),
            Some(b) if !within => {
                failures.gate(gate, format!("{observed_ms} ms, budget {b} ms"));
            }
            Some(_) => {}
        }
        LatencyCheck {
            phase: phase.to_owned(),
            observed_ms,
            budget_ms,
            within,
        }
    })
    .collect()
}

fn score_investigation(
    spec: &InvestigationSpec,
    observation: &RunObservation,
    ids: &ResourceIds<'_>,
    failures: &mut Failures,
) -> InvestigationScore {
    let Some(inv) = observation.investigation.as_ref() else {
        failures.gate(
            "investigation_missing",
            "the manifest requires an investigation and none was observed",
        );
        return InvestigationScore {
            observed: false,
            completed: false,
            missing_summary_terms: spec.required_summary_terms.clone(),
            unmet_term_groups: (0..spec.required_summary_term_groups.len()).collect(),
            forbidden_terms_found: Vec::new(),
            root_cause_grounded: spec.root_cause_resources.is_empty(),
            affected_resources_grounded: spec.affected_resources.is_empty(),
            evidence_calls: 0,
            evidence_ids: 0,
            tools_used: 0,
        };
    };
    let completed = inv.status == "completed";
    if spec.require_completed_status && !completed {
        failures.gate(
            "investigation_not_completed",
            format!("the investigation ended '{}'", inv.status),
        );
    }
    let missing_summary_terms: Vec<String> = spec
        .required_summary_terms
        .iter()
        .filter(|t| !contains_ci(&inv.summary, t))
        .cloned()
        .collect();
    if !missing_summary_terms.is_empty() {
        failures.gate(
            "investigation_summary_terms",
            format!("the summary lacks: {}", missing_summary_terms.join(", ")),
        );
    }
    let unmet_term_groups: Vec<usize> = spec
        .required_summary_term_groups
        .iter()
        .enumerate()
        .filter(|(_, group)| !group.iter().any(|t| contains_ci(&inv.summary, t)))
        .map(|(i, _)| i)
        .collect();
    if !unmet_term_groups.is_empty() {
        failures.gate(
            "investigation_summary_term_groups",
            format!("{} term group(s) unmet", unmet_term_groups.len()),
        );
    }
    let forbidden_terms_found: Vec<String> = spec
        .forbidden_summary_terms
        .iter()
        .filter(|t| contains_ci(&inv.summary, t))
        .cloned()
        .collect();
    if !forbidden_terms_found.is_empty() {
        failures.gate(
            "investigation_forbidden_terms",
            format!("the summary contains: {}", forbidden_terms_found.join(", ")),
        );
    }
    let named = |alias: &String| {
        ids.id(alias)
            .is_some_and(|id| inv.root_cause_resource_ids.iter().any(|r| r == id))
    };
    let root_cause_grounded = spec.root_cause_resources.iter().all(named);
    if !root_cause_grounded {
        failures.gate(
            "investigation_root_cause",
            "the investigation does not name the expected root-cause resource",
        );
    }
    // The investigation starts from a finding on the affected resource, or names it.
    let finding_resource = observation
        .findings
        .iter()
        .find(|f| f.id == inv.finding_id)
        .map(|f| f.resource_id.as_str());
    let affected_resources_grounded = spec.affected_resources.iter().all(|alias| {
        named(alias) || (ids.id(alias).is_some() && ids.id(alias) == finding_resource)
    });
    if !affected_resources_grounded {
        failures.gate(
            "investigation_affected_resource",
            "the investigation is not grounded on the expected affected resource",
        );
    }
    if let Some(min) = spec.min_evidence_calls {
        if inv.evidence_calls < min {
            failures.gate(
                "investigation_min_evidence_calls",
                format!("{} evidence calls, at least {min}", inv.evidence_calls),
            );
        }
    }
    let evidence_ids = count(inv.evidence_ids.iter());
    if let Some(min) = spec.min_evidence_ids {
        if evidence_ids < min {
            failures.gate(
                "investigation_min_evidence_ids",
                format!("{evidence_ids} evidence ids, at least {min}"),
            );
        }
    }
    if let Some(max) = spec.max_tools_used {
        if inv.tools_used > max {
            failures.gate(
                "investigation_max_tools_used",
                format!("{} tools used, at most {max}", inv.tools_used),
            );
        }
    }
    if let Some(max) = spec.max_evidence_calls {
        if inv.evidence_calls > max {
            failures.gate(
                "investigation_max_evidence_calls",
                format!("{} evidence calls, at most {max}", inv.evidence_calls),
            );
        }
    }
    InvestigationScore {
        observed: true,
        completed,
        missing_summary_terms,
        unmet_term_groups,
        forbidden_terms_found,
        root_cause_grounded,
        affected_resources_grounded,
        evidence_calls: inv.evidence_calls,
        evidence_ids,
        tools_used: inv.tools_used,
    }
}

fn score_remediation(
    spec: &RemediationSpec,
    observation: &RunObservation,
    failures: &mut Failures,
) -> RemediationScore {
    let expected_decision = match spec.decision {
        Decision::Reject => Some("reject"),
        Decision::ApproveExecute => Some("approve"),
        Decision::Observe | Decision::AwaitAutonomous => None,
    };
    let Some(rem) = observation.remediation.as_ref() else {
        failures.gate(
            "remediation_missing",
            "the manifest requires a remediation and none was observed",
        );
        return RemediationScore {
            observed: false,
            identity_bound: false,
            expected_decision: expected_decision.map(str::to_owned),
            decision_recorded: None,
            decision_ok: expected_decision.is_none(),
            terminal_state: None,
            terminal_state_ok: false,
            verification_status: None,
            verification_ok: false,
            postconditions_ok: false,
        };
    };
    let acts = spec.decision != Decision::Observe || rem.action_id.is_some();
    if acts && !rem.identity_bound {
        failures.hard(
            hard::ACTION_IDENTITY_UNBOUND,
            "the action's identity was not bound to the authoritative action record",
        );
    }
    let recorded = rem.decision_recorded.as_deref();
    let normalised = recorded.map(|d| if d == "approve_execute" { "approve" } else { d });
    let decision_ok = normalised == expected_decision;
    match (normalised, expected_decision) {
        (Some(d), e) if Some(d) != e => failures.hard(
            hard::UNAUTHORIZED_DECISION,
            format!("the harness recorded '{d}', which the manifest does not authorize"),
        ),
        (None, Some(e)) => failures.gate(
            "decision_not_recorded",
            format!("the manifest's '{e}' decision was not recorded"),
        ),
        _ => {}
    }
    let terminal = rem.terminal_state.as_deref();
    let terminal_state_ok = match spec.decision {
        Decision::Reject => terminal == Some("rejected"),
        Decision::ApproveExecute | Decision::AwaitAutonomous => terminal == Some("completed"),
        Decision::Observe => !matches!(terminal, Some("completed" | "executing" | "approved")),
    };
    if !terminal_state_ok {
        failures.gate(
            "remediation_terminal_state",
            format!(
                "the action ended in '{}'",
                terminal.unwrap_or("no terminal state")
            ),
        );
    }
    let status = rem.verification_status.as_deref().unwrap_or("unknown");
    let verification_ok = if !spec.allowed_verification_statuses.is_empty() {
        in_list_ci(&spec.allowed_verification_statuses, status)
    } else if spec.require_lifecycle_verification {
        status == "verified"
    } else {
        true
    };
    if !verification_ok {
        failures.gate(
            "remediation_verification",
            format!("verification status '{status}' is not allowed"),
        );
    }
    let postconditions_ok = spec.postconditions.is_empty() || rem.postconditions_held == Some(true);
    if !postconditions_ok {
        failures.gate(
            "postconditions_not_held",
            "the independent postconditions did not hold",
        );
    }
    RemediationScore {
        observed: true,
        identity_bound: rem.identity_bound,
        expected_decision: expected_decision.map(str::to_owned),
        decision_recorded: rem.decision_recorded.clone(),
        decision_ok,
        terminal_state: rem.terminal_state.clone(),
        terminal_state_ok,
        verification_status: rem.verification_status.clone(),
        verification_ok,
        postconditions_ok,
    }
}
