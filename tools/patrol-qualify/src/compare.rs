//! Model comparison and publication.
//!
//! Reports of one lab and track are grouped by model route. The comparison refuses (and says
//! so in the publication) anything that cannot be compared fairly: dirty harness runs, mixed
//! harness revisions, mixed or missing Pulse versions, and reports whose manifest digest is not
//! the checked-in catalogue's. Otherwise every model is held to the launch gate: every scenario
//! of the track, each run at least the qualification repeat count, every run passed, zero false
//! positives, zero hard-failure runs, and 95% Wilson lower bounds of pass rate and recall of at
//! least [`LAUNCH_FLOOR`]. A recommendation is named only for a model passing every gate;
//! simulator routes are harness self-tests and never recommended.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::catalogue::Entry;
use crate::cli::{CompareArgs, Outcome, Refusal};
use crate::manifest::{LabDriver, Track};
use crate::observation::RouteClass;
use crate::report::{self, Proportion, RunReport};

pub const COMPARISON_SCHEMA_VERSION: &str = "patrol.qualification.comparison/v1";

/// The 95% Wilson lower bound pass rate and recall must reach.
pub const LAUNCH_FLOOR: f64 = 0.85;

/// A reason the reports cannot be compared at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComparisonRefusal {
    /// `dirty_harness`, `missing_harness_revision`, `mixed_harness_revisions`,
    /// `missing_pulse_version`,
    /// `mixed_pulse_versions`, `stale_manifest_digest`, `unknown_scenario`.
    pub code: String,
    /// The scenario concerned, when there is one.
    pub scenario_id: Option<String>,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    pub gate: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResult {
    pub route: String,
    pub route_class: RouteClass,
    pub runs: u32,
    pub pass_rate: Proportion,
    pub recall: Proportion,
    pub false_positives: u32,
    pub hard_failure_runs: u32,
    pub end_to_end_p95_ms: u64,
    pub patrol_p95_ms: u64,
    pub input_tokens_p95: u64,
    pub output_tokens_p95: u64,
    /// `$<p95>`, `unknown` or `not applicable`.
    pub cost: String,
    pub cost_usd_p95: Option<f64>,
    pub scenarios: Vec<report::ScenarioSummary>,
    pub gates: Vec<GateResult>,
    /// Every gate passed.
    pub eligible: bool,
}

/// `comparison.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: String,
    pub lab: LabDriver,
    pub track: Track,
    pub scenario_ids: Vec<String>,
    pub harness_revisions: Vec<String>,
    pub pulse_versions: Vec<String>,
    pub refusals: Vec<ComparisonRefusal>,
    /// Ranked: eligible first, then pass-rate and recall lower bounds, then latency.
    pub models: Vec<ModelResult>,
    pub recommended: Option<String>,
    /// Why no model is recommended, when none is.
    pub no_recommendation_reason: Option<String>,
}

fn refusal(code: &str, scenario_id: Option<&str>, message: String) -> ComparisonRefusal {
    ComparisonRefusal {
        code: code.to_owned(),
        scenario_id: scenario_id.map(str::to_owned),
        message,
    }
}

/// Compares `reports` (already of `lab` and `track`) against the track's checked-in
/// `catalogue` entries (whose `digest` is the catalogue's manifest digest).
pub fn compare(
    reports: &[RunReport],
    catalogue: &[Entry],
    lab: LabDriver,
    track: Track,
) -> Comparison {
    let mut refusals = Vec::new();
    let harness_revisions: BTreeSet<String> =
        reports.iter().map(|r| r.harness_revision.clone()).collect();
    let pulse_versions: BTreeSet<String> = reports
        .iter()
        .map(|r| r.pulse_version.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    let dirty = reports.iter().filter(|r| r.harness_dirty).count();
    if dirty > 0 {
        refusals.push(refusal(
            "dirty_harness",
            None,
            format!("{dirty} report(s) come from a harness with uncommitted changes; rerun from a clean checkout"),
        ));
    }
    let unrevised = reports
        .iter()
        .filter(|r| r.harness_revision.trim().is_empty())
        .count();
    if unrevised > 0 {
        refusals.push(refusal(
            "missing_harness_revision",
            None,
            format!("{unrevised} report(s) do not record the harness revision they ran"),
        ));
    }
    if harness_revisions.len() > 1 {
        refusals.push(refusal(
            "mixed_harness_revisions",
            None,
            format!(
                "the reports come from {} harness revisions; compare runs of one revision",
                harness_revisions.len()
            ),
        ));
    }
    let missing_version = reports
        .iter()
        .filter(|r| r.pulse_version.trim().is_empty())
        .count();
    if missing_version > 0 {
        refusals.push(refusal(
            "missing_pulse_version",
            None,
            format!("{missing_version} report(s) do not record the tested Pulse version"),
        ));
    }
    if pulse_versions.len() > 1 {
        refusals.push(refusal(
            "mixed_pulse_versions",
            None,
            format!(
                "the reports tested {} Pulse versions; compare runs of one version",
                pulse_versions.len()
            ),
        ));
    }
    let catalogue_digests: BTreeMap<&str, &Entry> = catalogue
        .iter()
        .map(|e| (e.manifest.id.as_str(), e))
        .collect();
    let mut stale: BTreeSet<&str> = BTreeSet::new();
    let mut unknown: BTreeSet<&str> = BTreeSet::new();
    for r in reports {
        match catalogue_digests.get(r.manifest.id.as_str()) {
            Some(entry) if entry.digest == r.manifest_digest => {}
            Some(_) => {
                stale.insert(r.manifest.id.as_str());
            }
            None => {
                unknown.insert(r.manifest.id.as_str());
            }
        }
    }
    for id in stale {
        refusals.push(refusal(
            "stale_manifest_digest",
            Some(id),
            format!("reports of {id} were scored against a manifest that is not the checked-in one; rerun them"),
        ));
    }
    for id in unknown {
        refusals.push(refusal(
            "unknown_scenario",
            Some(id),
            format!("{id} is not a scenario of this track in the checked-in catalogue"),
        ));
    }

    let mut by_route: BTreeMap<&str, Vec<&RunReport>> = BTreeMap::new();
    for r in reports {
        by_route.entry(r.model.route.as_str()).or_default().push(r);
    }
    let mut models: Vec<ModelResult> = by_route
        .into_iter()
        .map(|(route, runs)| model_result(route, &runs, catalogue))
        .collect();
    models.sort_by(|a, b| {
        b.eligible
            .cmp(&a.eligible)
            .then(b.pass_rate.lower.total_cmp(&a.pass_rate.lower))
            .then(b.recall.lower.total_cmp(&a.recall.lower))
            .then(a.end_to_end_p95_ms.cmp(&b.end_to_end_p95_ms))
            .then(a.route.cmp(&b.route))
    });

    let (recommended, no_recommendation_reason) = if !refusals.is_empty() {
        (
            None,
            Some(format!(
                "the reports cannot be compared: {}",
                refusals
                    .iter()
                    .map(|r| r.code.as_str())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        )
    } else if models.is_empty() {
        (None, Some("there are no reports to compare".to_owned()))
    } else if let Some(best) = models.iter().find(|m| m.eligible) {
        (Some(best.route.clone()), None)
    } else {
        let why: Vec<String> = models
            .iter()
            .map(|m| {
                let failed: Vec<&str> = m
                    .gates
                    .iter()
                    .filter(|g| !g.passed)
                    .map(|g| g.gate.as_str())
                    .collect();
                format!("{} fails {}", m.route, failed.join(", "))
            })
            .collect();
        (
            None,
            Some(format!("no model passes every gate: {}", why.join("; "))),
        )
    };

    Comparison {
        schema_version: COMPARISON_SCHEMA_VERSION.to_owned(),
        lab,
        track,
        scenario_ids: catalogue.iter().map(|e| e.manifest.id.clone()).collect(),
        harness_revisions: harness_revisions.into_iter().collect(),
        pulse_versions: pulse_versions.into_iter().collect(),
        refusals,
        models,
        recommended,
        no_recommendation_reason,
    }
}

fn gate(gates: &mut Vec<GateResult>, name: &str, passed: bool, detail: String) {
    gates.push(GateResult {
        gate: name.to_owned(),
        passed,
        detail,
    });
}

fn model_result(route: &str, runs: &[&RunReport], catalogue: &[Entry]) -> ModelResult {
    let route_class = runs
        .first()
        .map_or(RouteClass::HostedApi, |r| r.model.route_class);
    let mut by_scenario: BTreeMap<&str, Vec<&RunReport>> = BTreeMap::new();
    for r in runs {
        by_scenario
            .entry(r.manifest.id.as_str())
            .or_default()
            .push(r);
    }
    let scenarios: Vec<report::ScenarioSummary> = by_scenario
        .iter()
        .map(|(id, rs)| report::summarize(id, rs))
        .collect();
    let all = report::summarize(route, runs);

    let mut gates = Vec::new();
    let missing: Vec<&str> = catalogue
        .iter()
        .map(|e| e.manifest.id.as_str())
        .filter(|id| !by_scenario.contains_key(id))
        .collect();
    gate(
        &mut gates,
        "every_scenario_present",
        missing.is_empty(),
        if missing.is_empty() {
            format!("all {} scenarios of the track", catalogue.len())
        } else {
            format!("missing: {}", missing.join(", "))
        },
    );
    let short: Vec<String> = catalogue
        .iter()
        .filter_map(|e| {
            let n = by_scenario.get(e.manifest.id.as_str()).map_or(0, Vec::len);
            let want = e.manifest.repeat.qualification as usize;
            (n < want).then(|| format!("{} {n}/{want}", e.manifest.id))
        })
        .collect();
    gate(
        &mut gates,
        "qualification_repeat_count",
        short.is_empty(),
        if short.is_empty() {
            "every scenario ran its qualification repeat count".to_owned()
        } else {
            format!("too few runs: {}", short.join(", "))
        },
    );
    gate(
        &mut gates,
        "every_run_passed",
        all.passes == all.runs,
        format!("{} of {} runs passed", all.passes, all.runs),
    );
    gate(
        &mut gates,
        "zero_false_positives",
        all.false_positives == 0,
        format!("{} false positive(s)", all.false_positives),
    );
    gate(
        &mut gates,
        "zero_hard_failure_runs",
        all.hard_failure_runs == 0,
        format!("{} run(s) with a hard failure", all.hard_failure_runs),
    );
    gate(
        &mut gates,
        "pass_rate_lower_bound",
        all.pass_rate.trials > 0 && all.pass_rate.lower >= LAUNCH_FLOOR,
        format!("{:.4} (floor {LAUNCH_FLOOR})", all.pass_rate.lower),
    );
    // A track whose scenarios hold no required fault has no recall to bound.
    let recall_ok = all.recall.trials == 0 || all.recall.lower >= LAUNCH_FLOOR;
    gate(
        &mut gates,
        "recall_lower_bound",
        recall_ok,
        format!(
            "{:.4} over {} required faults (floor {LAUNCH_FLOOR})",
            all.recall.lower, all.recall.trials
        ),
    );
    let costs: Vec<Option<f64>> = runs.iter().map(|r| r.observation.cost_usd).collect();
    let (cost, cost_usd_p95, cost_ok) = match route_class {
        RouteClass::HostedApi if costs.iter().all(Option::is_some) && !costs.is_empty() => {
            let mut known: Vec<f64> = costs.into_iter().flatten().collect();
            known.sort_by(f64::total_cmp);
            let rank = (known.len() * 95).div_ceil(100).saturating_sub(1);
            let p = known[rank.min(known.len() - 1)];
            (format!("${p:.4}"), Some(p), true)
        }
        RouteClass::HostedApi => ("unknown".to_owned(), None, false),
        RouteClass::Local | RouteClass::Simulator => ("not applicable".to_owned(), None, true),
    };
    gate(
        &mut gates,
        "known_cost",
        cost_ok,
        match route_class {
            RouteClass::HostedApi if cost_ok => "every run reported its cost".to_owned(),
            RouteClass::HostedApi => "a metered route left a run's cost unknown".to_owned(),
            _ => "not applicable to this route class".to_owned(),
        },
    );
    gate(
        &mut gates,
        "not_a_simulator",
        route_class != RouteClass::Simulator,
        if route_class == RouteClass::Simulator {
            "a simulator route is a harness self-test, never a model qualification".to_owned()
        } else {
            "a real model route".to_owned()
        },
    );
    let eligible = gates.iter().all(|g| g.passed);
    ModelResult {
        route: route.to_owned(),
        route_class,
        runs: all.runs,
        pass_rate: all.pass_rate,
        recall: all.recall,
        false_positives: all.false_positives,
        hard_failure_runs: all.hard_failure_runs,
        end_to_end_p95_ms: all.latency_p95.end_to_end_ms,
        patrol_p95_ms: all.latency_p95.patrol_ms,
        input_tokens_p95: all.input_tokens_p95,
        output_tokens_p95: all.output_tokens_p95,
        cost,
        cost_usd_p95,
        scenarios,
        gates,
        eligible,
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// `comparison.md`.
pub fn comparison_markdown(c: &Comparison) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Patrol model comparison: {} track, {} lab\n",
        c.track.as_str(),
        c.lab.as_str()
    );
    match (&c.recommended, &c.no_recommendation_reason) {
        (Some(route), _) => {
            let _ = writeln!(md, "**Recommended: {}**\n", cell(route));
        }
        (None, reason) => {
            let _ = writeln!(
                md,
                "**No model is recommended.** {}\n",
                cell(reason.as_deref().unwrap_or(""))
            );
        }
    }
    if !c.refusals.is_empty() {
        md.push_str(
            "## Qualification failures\n\nThese reports are not blended into a leaderboard:\n\n",
        );
        for r in &c.refusals {
            let _ = writeln!(md, "- `{}`: {}", r.code, cell(&r.message));
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "Harness revision(s): {}. Pulse version(s): {}. Scenarios: {}.\n",
        cell(&c.harness_revisions.join(", ")),
        cell(&c.pulse_versions.join(", ")),
        cell(&c.scenario_ids.join(", "))
    );
    md.push_str("## Ranking\n\n| Rank | Model route | Class | Runs | Pass rate | Pass rate lower bound | Recall | Recall lower bound | p95 end-to-end ms | p95 input tokens | p95 output tokens | Cost (p95) | Gates |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (i, m) in c.models.iter().enumerate() {
        let failed: Vec<&str> = m
            .gates
            .iter()
            .filter(|g| !g.passed)
            .map(|g| g.gate.as_str())
            .collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.3} | {:.4} | {:.3} | {:.4} | {} | {} | {} | {} | {} |",
            i + 1,
            cell(&m.route),
            report::route_class_name(m.route_class),
            m.runs,
            m.pass_rate.rate,
            m.pass_rate.lower,
            m.recall.rate,
            m.recall.lower,
            m.end_to_end_p95_ms,
            m.input_tokens_p95,
            m.output_tokens_p95,
            m.cost,
            if failed.is_empty() {
                "all passed".to_owned()
            } else {
                format!("failed: {}", failed.join(", "))
            }
        );
    }
    md.push_str("\n## Gate results\n\n");
    for m in &c.models {
        let _ = writeln!(md, "### {}\n", cell(&m.route));
        for g in &m.gates {
            let _ = writeln!(
                md,
                "- {} `{}`: {}",
                if g.passed { "pass" } else { "FAIL" },
                g.gate,
                cell(&g.detail)
            );
        }
        md.push('\n');
    }
    md.push_str("A model alias that a provider can retarget is weaker provenance than an immutable model revision; prefer pinned model identifiers.\n\nSimulator routes are harness self-tests and are never recommended. Subscription and local routes keep monetary cost unknown and the per-run spend budget not applicable.\n");
    md
}

/// A report and the path it was read from.
pub type LocatedReport = (PathBuf, RunReport);

/// Every `report.json` under `dir`, recursively, in path order.
pub fn find_reports(dir: &Path) -> Result<Vec<LocatedReport>, Refusal> {
    let mut paths = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let entries = std::fs::read_dir(&current).map_err(|e| {
            Refusal::new(
                "unreadable_reports",
                format!(
                    "cannot read {}: {e}; pass the folder the runs wrote",
                    current.display()
                ),
            )
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && entry.file_name() == "report.json" {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            report::load_report(&path)
                .map(|r| (path, r))
                .map_err(|e| Refusal::new("unreadable_report", format!("{e}; remove or fix it")))
        })
        .collect()
}

/// The reports under `dir` of `lab` and `track`, and the track's checked-in catalogue entries
/// with their digests computed by the catalogue's owner.
pub(crate) fn load_inputs(
    scenarios: &Path,
    reports_dir: &Path,
    lab: LabDriver,
    track: Track,
) -> Result<(Vec<LocatedReport>, Vec<Entry>), Refusal> {
    let reports: Vec<LocatedReport> = find_reports(reports_dir)?
        .into_iter()
        .filter(|(_, r)| r.observation.lab == lab && r.manifest.track == track)
        .collect();
    if reports.is_empty() {
        return Err(Refusal::new(
            "no_reports",
            format!(
                "no report.json of the {} track and {} lab under {}",
                track.as_str(),
                lab.as_str(),
                reports_dir.display()
            ),
        ));
    }
    let mut entries = crate::catalogue::select_track(scenarios, lab, track)
        .map_err(|e| Refusal::new("invalid_catalogue", format!("{e}; fix the catalogue first")))?;
    for entry in &mut entries {
        entry.digest = crate::catalogue::digest(&entry.manifest);
    }
    Ok((reports, entries))
}

/// `patrol-qualify compare`.
pub fn cli_compare(args: &CompareArgs) -> Result<Outcome, Refusal> {
    let lab = LabDriver::from(args.lab);
    let track = Track::from(args.track);
    let (reports, entries) = load_inputs(&args.catalogue.scenarios, &args.reports, lab, track)?;
    let reports: Vec<RunReport> = reports.into_iter().map(|(_, r)| r).collect();
    let comparison = compare(&reports, &entries, lab, track);
    write_publication(&args.publication_dir, &comparison).map_err(|e| {
        Refusal::new(
            "unwritable_publication",
            format!("cannot write {}: {e}", args.publication_dir.display()),
        )
    })?;
    println!(
        "wrote comparison.json, comparison.md and SHA256SUMS to {}",
        args.publication_dir.display()
    );
    match (
        &comparison.recommended,
        &comparison.no_recommendation_reason,
    ) {
        (Some(route), _) => {
            println!("Recommended: {route}");
            Ok(Outcome::Passed)
        }
        (None, reason) => Ok(Outcome::Failed(format!(
            "no model is recommended: {}",
            reason.as_deref().unwrap_or("no model passes every gate")
        ))),
    }
}

/// Writes `comparison.json`, `comparison.md` and `SHA256SUMS` (mode 0600) into `dir`.
pub fn write_publication(dir: &Path, comparison: &Comparison) -> std::io::Result<()> {
    let mut json = serde_json::to_vec_pretty(comparison).map_err(std::io::Error::other)?;
    json.push(b'\n');
    report::write_with_sums(
        dir,
        &[
            ("comparison.json", json),
            (
                "comparison.md",
                comparison_markdown(comparison).into_bytes(),
            ),
        ],
    )
}
