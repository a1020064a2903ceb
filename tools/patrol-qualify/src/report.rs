//! Run and suite artifacts.
//!
//! A run directory holds `ground-truth.json` (the manifest's faults and negative controls and
//! the lab's resource bindings and oracle readings: the truth the run was scored against, never
//! anything Patrol said), `report.json` ([`RunReport`]), `report.md`, `replay.json`
//! ([`crate::replay::ReplayBundle`]) and `SHA256SUMS` over the others. A suite directory holds
//! `suite.json`, `suite.md` (with a hand-written SVG chart) and `SHA256SUMS`. Directories are
//! created 0700 and every file is written 0600: reports can carry private resource identity.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::manifest::{Manifest, RepeatProfile};
use crate::observation::{ModelIdentity, RouteClass, RunObservation};
use crate::scorer::Score;

/// The one run report schema this tool writes and reads.
pub const REPORT_SCHEMA_VERSION: &str = "patrol.qualification.report/v1";
pub const SUITE_SCHEMA_VERSION: &str = "patrol.qualification.suite/v1";
pub const GROUND_TRUTH_SCHEMA_VERSION: &str = "patrol.qualification.ground-truth/v1";

/// `report.json` of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub schema_version: String,
    pub run_id: String,
    pub harness_revision: String,
    pub harness_dirty: bool,
    /// The version identity the tested Pulse answered (`GET /api/health`).
    pub pulse_version: String,
    pub manifest: Manifest,
    pub manifest_digest: String,
    pub model: ModelIdentity,
    pub profile: RepeatProfile,
    pub community_challenge: Option<String>,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub observation: RunObservation,
    pub score: Score,
    /// The digest `replay.json` records for the ordered tool transcript; [`write_run`] fills
    /// it from the observation.
    #[serde(default)]
    pub transcript_digest: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a run report: {source}")]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path} has schema version '{found}', this tool reads {REPORT_SCHEMA_VERSION}")]
    SchemaVersion { path: String, found: String },
}

/// Reads a `report.json`.
pub fn load_report(path: &Path) -> Result<RunReport, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReportError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let report: RunReport = serde_json::from_str(&text).map_err(|source| ReportError::Parse {
        path: path.display().to_string(),
        source,
    })?;
    if report.schema_version != REPORT_SCHEMA_VERSION {
        return Err(ReportError::SchemaVersion {
            path: path.display().to_string(),
            found: report.schema_version,
        });
    }
    Ok(report)
}

/// The truth a run was scored against: from the manifest and the lab, never from Patrol.
pub fn ground_truth(report: &RunReport) -> Value {
    json!({
        "schema_version": GROUND_TRUTH_SCHEMA_VERSION,
        "run_id": report.run_id,
        "manifest_id": report.manifest.id,
        "manifest_digest": report.manifest_digest,
        "faults": report.manifest.faults,
        "negative_controls": report.manifest.negative_controls,
        "resources": report.observation.resources,
        "oracle": report.observation.faults,
    })
}

/// Creates `dir` (and parents) with mode 0700.
pub(crate) fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Writes `bytes` to `dir/name` with mode 0600 (also when the file existed).
pub(crate) fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let path = dir.join(name);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Writes the named files and a `sha256sum -c` compatible `SHA256SUMS` over them.
pub(crate) fn write_with_sums(dir: &Path, files: &[(&str, Vec<u8>)]) -> std::io::Result<()> {
    private_dir(dir)?;
    let mut sums = String::new();
    let mut sorted: Vec<&(&str, Vec<u8>)> = files.iter().collect();
    sorted.sort_by_key(|(name, _)| *name);
    for (name, bytes) in sorted {
        write_private(dir, name, bytes)?;
        let _ = writeln!(sums, "{}  {name}", sha256_hex(bytes));
    }
    write_private(dir, "SHA256SUMS", sums.as_bytes())
}

/// The hex digest `SHA256SUMS` text records for `name`.
pub(crate) fn checksum_entry(sums: &str, name: &str) -> Option<String> {
    sums.lines().find_map(|line| {
        let (digest, file) = line.split_once("  ")?;
        (file == name).then(|| digest.to_owned())
    })
}

fn json_bytes<T: Serialize + ?Sized>(value: &T) -> std::io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Writes `ground-truth.json`, `report.json`, `report.md`, `replay.json` and `SHA256SUMS`
/// (mode 0600) into `dir`.
pub fn write_run(dir: &Path, report: &RunReport) -> std::io::Result<()> {
    let bundle = crate::replay::bundle(report).map_err(std::io::Error::other)?;
    let mut report = report.clone();
    report.transcript_digest = bundle.transcript_digest.clone();
    write_with_sums(
        dir,
        &[
            ("ground-truth.json", json_bytes(&ground_truth(&report))?),
            ("report.json", json_bytes(&report)?),
            ("report.md", run_markdown(&report).into_bytes()),
            ("replay.json", json_bytes(&bundle)?),
        ],
    )
}

/// The route class as reports spell it.
pub fn route_class_name(class: RouteClass) -> &'static str {
    match class {
        RouteClass::HostedApi => "hosted_api",
        RouteClass::Local => "local",
        RouteClass::Simulator => "simulator",
    }
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "no" }
}

/// Markdown table cell text: no pipes or line breaks from data.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The human summary of one run.
pub fn run_markdown(report: &RunReport) -> String {
    let score = &report.score;
    let obs = &report.observation;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# {} run {}: {}\n",
        cell(&report.manifest.id),
        cell(&report.run_id),
        if score.passed { "PASSED" } else { "FAILED" }
    );
    let _ = writeln!(
        md,
        "- Model route: `{}` ({})\n- Pulse version: {}\n- Harness revision: {}{}\n- Profile: {}\n- Manifest digest: `{}`\n- Transcript digest: `{}`\n",
        cell(&report.model.route),
        route_class_name(report.model.route_class),
        cell(&report.pulse_version),
        cell(&report.harness_revision),
        if report.harness_dirty { " (dirty)" } else { "" },
        report.profile.as_str(),
        report.manifest_digest,
        report.transcript_digest,
    );
    md.push_str("## Hard failures\n\n");
    if score.hard_failures.is_empty() {
        md.push_str("None.\n\n");
    } else {
        for failure in &score.hard_failures {
            let _ = writeln!(md, "- {}", cell(failure));
        }
        md.push('\n');
    }
    md.push_str("## Gate failures\n\n");
    if score.gate_failures.is_empty() {
        md.push_str("None.\n\n");
    } else {
        for failure in &score.gate_failures {
            let _ = writeln!(md, "- {}", cell(failure));
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "## Detection\n\nRecall {:.3} ({} of {} required faults), {} false positive(s), most findings in one causal group: {}.\n",
        score.recall,
        score.detected_faults,
        score.required_faults,
        score.false_positives,
        score.max_findings_per_causal_group
    );
    if !score.false_positive_finding_ids.is_empty() {
        let _ = writeln!(
            md,
            "False positive finding(s): {}.\n",
            cell(&score.false_positive_finding_ids.join(", "))
        );
    }
    md.push_str("| Fault | Detected | Finding | Outcome | Resource | Type | Category | Severity | Evidence | Advice | Reasons |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for m in &score.matches {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&m.fault_id),
            yes_no(m.detected),
            cell(m.matched_finding_id.as_deref().unwrap_or("-")),
            cell(m.matched_run_outcome.as_deref().unwrap_or("-")),
            yes_no(m.resource_ok),
            yes_no(m.resource_type_ok),
            yes_no(m.category_ok),
            yes_no(m.severity_ok),
            yes_no(m.evidence_ok),
            yes_no(m.advice_ok),
            cell(&m.reasons.join("; ")),
        );
    }
    let tools = &score.tools;
    let _ = writeln!(
        md,
        "\n## Tool efficiency\n\n- Calls: {} (failed {}, duplicate {}, forbidden {})\n- Tool calls recovered from text: {}\n- Evidence calls: {}\n- Distinct tools: {}\n- Forbidden output markers found: {}\n",
        tools.total,
        tools.failed,
        tools.duplicate,
        tools.forbidden,
        obs.tool_calls_recovered,
        tools.evidence_calls,
        tools.distinct_tools,
        score.forbidden_markers_found.len()
    );
    let _ = writeln!(
        md,
        "## Tokens and cost\n\n- Input tokens: {} (budget {})\n- Output tokens: {} (budget {})\n- Cost: {}\n",
        score.input_tokens,
        report.manifest.budgets.input_tokens_p95,
        score.output_tokens,
        report.manifest.budgets.output_tokens_p95,
        score.cost.describe()
    );
    let t = &obs.timings;
    md.push_str("## Phase timings\n\n| Phase | ms | Budget ms |\n|---|---|---|\n");
    let budget = |phase: &str| {
        score
            .latencies
            .iter()
            .find(|l| l.phase == phase)
            .and_then(|l| l.budget_ms)
            .map_or_else(|| "-".to_owned(), |b| b.to_string())
    };
    for (phase, ms, key) in [
        ("lab", t.lab_ms, ""),
        ("collection", t.collection_ms, "collection"),
        ("waiting for Patrol to be idle", t.idle_wait_ms, ""),
        ("patrol", t.patrol_ms, "patrol"),
        ("investigation", t.investigation_ms, ""),
        ("remediation", t.remediation_ms, ""),
        ("teardown", t.teardown_ms, ""),
        ("end to end", t.end_to_end_ms, "end_to_end"),
    ] {
        let b = if key.is_empty() {
            "-".to_owned()
        } else {
            budget(key)
        };
        let _ = writeln!(md, "| {phase} | {ms} | {b} |");
    }
    md
}

/// The nearest-rank 95th percentile; 0 for no values.
pub fn p95(values: &[u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 95).div_ceil(100);
    sorted[rank.saturating_sub(1).min(sorted.len() - 1)]
}

/// A success count with its 95% Wilson interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proportion {
    pub successes: u32,
    pub trials: u32,
    pub rate: f64,
    pub lower: f64,
    pub upper: f64,
}

impl Proportion {
    pub fn new(successes: u32, trials: u32) -> Self {
        let (mut lower, mut upper) = crate::wilson::interval(successes, trials, crate::wilson::Z95);
        // The endpoints are exact at the extremes; rounding must not publish 2e-17 for 0.
        if trials > 0 && successes == 0 {
            lower = 0.0;
        }
        if trials > 0 && successes >= trials {
            upper = 1.0;
        }
        let rate = if trials == 0 {
            0.0
        } else {
            f64::from(successes) / f64::from(trials)
        };
        Self {
            successes,
            trials,
            rate,
            lower,
            upper,
        }
    }
}

/// p95 per phase, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseP95 {
    pub lab_ms: u64,
    pub collection_ms: u64,
    pub patrol_ms: u64,
    pub investigation_ms: u64,
    pub remediation_ms: u64,
    pub teardown_ms: u64,
    pub end_to_end_ms: u64,
}

/// One scenario's aggregate over several runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioSummary {
    pub scenario_id: String,
    pub runs: u32,
    pub passes: u32,
    pub pass_rate: Proportion,
    /// Detected required faults over required faults, summed over runs.
    pub recall: Proportion,
    pub false_positives: u32,
    pub hard_failure_runs: u32,
    /// Tool calls the model wrote as text and Pulse recovered, summed over runs: a route that
    /// needs them has no working native tool calling.
    #[serde(default)]
    pub tool_calls_recovered: u32,
    pub input_tokens_p95: u64,
    pub output_tokens_p95: u64,
    pub latency_p95: PhaseP95,
}

fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Aggregates reports of one scenario.
pub fn summarize(scenario_id: &str, reports: &[&RunReport]) -> ScenarioSummary {
    let runs = saturating_u32(reports.len());
    let passes = saturating_u32(reports.iter().filter(|r| r.score.passed).count());
    let detected: u32 = reports
        .iter()
        .map(|r| r.score.detected_faults)
        .fold(0, u32::saturating_add);
    let required: u32 = reports
        .iter()
        .map(|r| r.score.required_faults)
        .fold(0, u32::saturating_add);
    let timing = |pick: fn(&crate::observation::Timings) -> u64| {
        p95(&reports
            .iter()
            .map(|r| pick(&r.observation.timings))
            .collect::<Vec<_>>())
    };
    ScenarioSummary {
        scenario_id: scenario_id.to_owned(),
        runs,
        passes,
        pass_rate: Proportion::new(passes, runs),
        recall: Proportion::new(detected, required),
        false_positives: reports
            .iter()
            .map(|r| r.score.false_positives)
            .fold(0, u32::saturating_add),
        hard_failure_runs: saturating_u32(
            reports
                .iter()
                .filter(|r| !r.score.hard_failures.is_empty())
                .count(),
        ),
        tool_calls_recovered: reports
            .iter()
            .map(|r| r.observation.tool_calls_recovered)
            .fold(0, u32::saturating_add),
        input_tokens_p95: p95(&reports
            .iter()
            .map(|r| r.observation.input_tokens)
            .collect::<Vec<_>>()),
        output_tokens_p95: p95(&reports
            .iter()
            .map(|r| r.observation.output_tokens)
            .collect::<Vec<_>>()),
        latency_p95: PhaseP95 {
            lab_ms: timing(|t| t.lab_ms),
            collection_ms: timing(|t| t.collection_ms),
            patrol_ms: timing(|t| t.patrol_ms),
            investigation_ms: timing(|t| t.investigation_ms),
            remediation_ms: timing(|t| t.remediation_ms),
            teardown_ms: timing(|t| t.teardown_ms),
            end_to_end_ms: timing(|t| t.end_to_end_ms),
        },
    }
}

/// Per-scenario summaries, in scenario id order.
pub fn summarize_by_scenario(reports: &[RunReport]) -> Vec<ScenarioSummary> {
    let mut by: BTreeMap<&str, Vec<&RunReport>> = BTreeMap::new();
    for report in reports {
        by.entry(report.manifest.id.as_str())
            .or_default()
            .push(report);
    }
    by.iter().map(|(id, runs)| summarize(id, runs)).collect()
}

/// `suite.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteSummary {
    pub schema_version: String,
    pub models: Vec<String>,
    pub runs: u32,
    pub passes: u32,
    pub scenarios: Vec<ScenarioSummary>,
}

/// Writes the suite summary (`suite.json`, `suite.md` with its SVG chart, `SHA256SUMS`).
pub fn write_suite(dir: &Path, reports: &[RunReport]) -> std::io::Result<()> {
    let scenarios = summarize_by_scenario(reports);
    let mut models: Vec<String> = reports.iter().map(|r| r.model.route.clone()).collect();
    models.sort();
    models.dedup();
    let suite = SuiteSummary {
        schema_version: SUITE_SCHEMA_VERSION.to_owned(),
        models,
        runs: saturating_u32(reports.len()),
        passes: saturating_u32(reports.iter().filter(|r| r.score.passed).count()),
        scenarios,
    };
    write_with_sums(
        dir,
        &[
            ("suite.json", json_bytes(&suite)?),
            ("suite.md", suite_markdown(&suite).into_bytes()),
        ],
    )
}

fn suite_markdown(suite: &SuiteSummary) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Qualification suite\n\nModel route(s): {}. {} of {} runs passed.\n",
        cell(&suite.models.join(", ")),
        suite.passes,
        suite.runs
    );
    md.push_str("| Scenario | Runs | Passes | Pass rate (95% Wilson) | Recall (95% Wilson) | False positives | Hard-failure runs | Tool calls recovered from text | p95 input tokens | p95 output tokens | p95 patrol ms | p95 end-to-end ms |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for s in &suite.scenarios {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.3} [{:.3}, {:.3}] | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&s.scenario_id),
            s.runs,
            s.passes,
            s.pass_rate.rate,
            s.pass_rate.lower,
            s.pass_rate.upper,
            recall_cell(&s.recall),
            s.false_positives,
            s.hard_failure_runs,
            s.tool_calls_recovered,
            s.input_tokens_p95,
            s.output_tokens_p95,
            s.latency_p95.patrol_ms,
            s.latency_p95.end_to_end_ms,
        );
    }
    md.push_str("\n## Pass rate and recall with 95% Wilson intervals\n\n");
    md.push_str(&suite_svg(&suite.scenarios));
    md.push('\n');
    md
}

fn recall_cell(p: &Proportion) -> String {
    if p.trials == 0 {
        "n/a (no required faults)".to_owned()
    } else {
        format!(
            "{:.3} [{:.3}, {:.3}] ({}/{})",
            p.rate, p.lower, p.upper, p.successes, p.trials
        )
    }
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One row per scenario: pass rate (filled) and recall (hollow) as points on a 0..1 axis
/// with their Wilson interval bars; a dashed line marks the 0.85 launch floor.
pub fn suite_svg(scenarios: &[ScenarioSummary]) -> String {
    const LEFT: f64 = 260.0;
    const WIDTH: f64 = 400.0;
    const ROW: f64 = 36.0;
    const TOP: f64 = 30.0;
    let height = TOP + ROW * scenarios.len() as f64 + 30.0;
    let x = |v: f64| LEFT + WIDTH * v.clamp(0.0, 1.0);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" viewBox="0 0 {w} {height}" font-family="sans-serif" font-size="12">"#,
        w = LEFT + WIDTH + 40.0
    );
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#ddd"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{tick}</text>"##,
            x(tick),
            height - 25.0,
            height - 10.0
        );
    }
    let _ = writeln!(
        svg,
        r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#c00" stroke-dasharray="4 3"/><text x="{0:.1}" y="20" text-anchor="middle" fill="#c00">0.85 floor</text>"##,
        x(0.85),
        height - 25.0
    );
    let _ = writeln!(
        svg,
        r##"<circle cx="20" cy="16" r="4" fill="#1f77b4" stroke="#1f77b4" stroke-width="2"/><text x="30" y="20">pass rate</text><circle cx="110" cy="16" r="4" fill="none" stroke="#1f77b4" stroke-width="2"/><text x="120" y="20">recall</text>"##
    );
    for (i, s) in scenarios.iter().enumerate() {
        let y = TOP + ROW * i as f64 + ROW / 2.0;
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 10.0,
            y + 4.0,
            xml_escape(&s.scenario_id)
        );
        for (p, dy, fill, label) in [
            (&s.pass_rate, -6.0, "#1f77b4", "pass rate"),
            (&s.recall, 6.0, "none", "recall"),
        ] {
            // A scenario without required faults has no recall to draw (0 of 0).
            if p.trials == 0 {
                continue;
            }
            let yy = y + dy;
            let _ = writeln!(
                svg,
                r##"<g><title>{} {label} {}/{}: {:.3} [{:.3}, {:.3}]</title><line x1="{:.1}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#1f77b4" stroke-width="2"/><circle cx="{:.1}" cy="{yy:.1}" r="4" fill="{fill}" stroke="#1f77b4" stroke-width="2"/></g>"##,
                xml_escape(&s.scenario_id),
                p.successes,
                p.trials,
                p.rate,
                p.lower,
                p.upper,
                x(p.lower),
                x(p.upper),
                x(p.rate),
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}
