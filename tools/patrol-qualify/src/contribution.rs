//! A shareable community contribution: an aggregate of local reports built from an explicit
//! allowlist of fields.
//!
//! Allowed: aggregate pass and recall counts with their Wilson bounds, false-positive and
//! hard-failure counts (per stable hard-failure code), p95 tokens and latencies, the cost class (and p95 cost when a metered
//! route knows it), model route and route class, scenario ids and manifest digests, harness
//! revision, Pulse version, the challenge, and the SHA-256 of each source `report.json` and
//! `replay.json`. Never copied: findings, resource ids or names, hostnames, addresses, URLs,
//! tool names, arguments or results, prompts, model output, action identity, error prose.
//! Every type below is that allowlist; nothing is serialised from a report directly.
//!
//! The qualification gates are applied against the checked-in catalogue (a stale manifest
//! digest is an explicit failure). There is no network code here: sharing is the operator's
//! decision after review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cli::{ExportArgs, Outcome, Refusal};
use crate::compare::{self, Comparison};
use crate::manifest::{LabDriver, Track};
use crate::observation::RouteClass;
use crate::report::{self, Proportion, RunReport};

pub const CONTRIBUTION_SCHEMA_VERSION: &str = "patrol.qualification.contribution/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contribution {
    pub schema_version: String,
    pub track: Track,
    pub lab: LabDriver,
    pub harness_revisions: Vec<String>,
    pub harness_dirty: bool,
    pub pulse_versions: Vec<String>,
    pub challenges: Vec<String>,
    pub qualification: QualificationResult,
    pub models: Vec<ModelAggregate>,
    pub sources: Vec<SourceDigest>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualificationResult {
    pub passed: bool,
    /// Stable codes: the comparison's refusal codes (with the scenario id when there is one,
    /// e.g. `stale_manifest_digest:watch.docker-unhealthy`) and `<route>:<gate>` for gates.
    pub failures: Vec<String>,
    pub recommended: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelAggregate {
    pub route: String,
    pub route_class: RouteClass,
    pub runs: u32,
    pub passes: u32,
    pub pass_rate: Proportion,
    pub recall: Proportion,
    pub false_positives: u32,
    pub hard_failure_runs: u32,
    /// Runs per hard-failure code (the scorer's stable codes, never their messages).
    pub hard_failure_codes: BTreeMap<String, u32>,
    /// `known`, `unknown` or `not_applicable`.
    pub cost_class: String,
    pub cost_usd_p95: Option<f64>,
    pub input_tokens_p95: u64,
    pub output_tokens_p95: u64,
    pub gates_passed: Vec<String>,
    pub gates_failed: Vec<String>,
    pub scenarios: Vec<ScenarioAggregate>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioAggregate {
    pub scenario_id: String,
    /// The digests the reports embed (one when consistent).
    pub manifest_digests: Vec<String>,
    /// The checked-in catalogue's digest, `None` when the catalogue lacks the scenario.
    pub catalogue_digest: Option<String>,
    pub digest_current: bool,
    pub runs: u32,
    pub passes: u32,
    pub pass_rate: Proportion,
    pub recall: Proportion,
    pub false_positives: u32,
    pub hard_failure_runs: u32,
    pub input_tokens_p95: u64,
    pub output_tokens_p95: u64,
    pub collection_p95_ms: u64,
    pub patrol_p95_ms: u64,
    pub end_to_end_p95_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceDigest {
    pub report_sha256: String,
    /// `None` when the run directory has no `replay.json`.
    pub replay_sha256: Option<String>,
}

/// Builds the contribution from `reports` (of `lab` and `track`), the track's catalogue
/// entries and the digests of the source files.
pub fn build(
    reports: &[RunReport],
    catalogue: &[crate::catalogue::Entry],
    lab: LabDriver,
    track: Track,
    sources: Vec<SourceDigest>,
) -> Contribution {
    let comparison: Comparison = compare::compare(reports, catalogue, lab, track);
    let mut failures: BTreeSet<String> = comparison
        .refusals
        .iter()
        .map(|r| match &r.scenario_id {
            Some(id) => format!("{}:{id}", r.code),
            None => r.code.clone(),
        })
        .collect();
    let models: Vec<ModelAggregate> = comparison
        .models
        .iter()
        .map(|m| {
            for g in m.gates.iter().filter(|g| !g.passed) {
                failures.insert(format!("{}:{}", m.route, g.gate));
            }
            let runs_of: Vec<&RunReport> = reports
                .iter()
                .filter(|r| r.model.route == m.route)
                .collect();
            ModelAggregate {
                route: m.route.clone(),
                route_class: m.route_class,
                runs: m.runs,
                passes: m.pass_rate.successes,
                pass_rate: m.pass_rate.clone(),
                recall: m.recall.clone(),
                false_positives: m.false_positives,
                hard_failure_runs: m.hard_failure_runs,
                hard_failure_codes: runs_of.iter().fold(BTreeMap::new(), |mut acc, r| {
                    for code in r.score.hard_failure_codes() {
                        *acc.entry(code).or_insert(0) += 1;
                    }
                    acc
                }),
                cost_class: match (m.route_class, m.cost_usd_p95) {
                    (RouteClass::HostedApi, Some(_)) => "known",
                    (RouteClass::HostedApi, None) => "unknown",
                    _ => "not_applicable",
                }
                .to_owned(),
                cost_usd_p95: m.cost_usd_p95,
                input_tokens_p95: m.input_tokens_p95,
                output_tokens_p95: m.output_tokens_p95,
                gates_passed: m
                    .gates
                    .iter()
                    .filter(|g| g.passed)
                    .map(|g| g.gate.clone())
                    .collect(),
                gates_failed: m
                    .gates
                    .iter()
                    .filter(|g| !g.passed)
                    .map(|g| g.gate.clone())
                    .collect(),
                scenarios: m
                    .scenarios
                    .iter()
                    .map(|s| {
                        let digests: BTreeSet<String> = runs_of
                            .iter()
                            .filter(|r| r.manifest.id == s.scenario_id)
                            .map(|r| r.manifest_digest.clone())
                            .collect();
                        let catalogue_digest = catalogue
                            .iter()
                            .find(|e| e.manifest.id == s.scenario_id)
                            .map(|e| e.digest.clone());
                        let digest_current = catalogue_digest
                            .as_ref()
                            .is_some_and(|c| digests.len() == 1 && digests.contains(c));
                        ScenarioAggregate {
                            scenario_id: s.scenario_id.clone(),
                            manifest_digests: digests.into_iter().collect(),
                            catalogue_digest,
                            digest_current,
                            runs: s.runs,
                            passes: s.passes,
                            pass_rate: s.pass_rate.clone(),
                            recall: s.recall.clone(),
                            false_positives: s.false_positives,
                            hard_failure_runs: s.hard_failure_runs,
                            input_tokens_p95: s.input_tokens_p95,
                            output_tokens_p95: s.output_tokens_p95,
                            collection_p95_ms: s.latency_p95.collection_ms,
                            patrol_p95_ms: s.latency_p95.patrol_ms,
                            end_to_end_p95_ms: s.latency_p95.end_to_end_ms,
                        }
                    })
                    .collect(),
            }
        })
        .collect();
    let challenges: BTreeSet<String> = reports
        .iter()
        .filter_map(|r| r.community_challenge.clone())
        .collect();
    let mut sources = sources;
    sources.sort_by(|a, b| a.report_sha256.cmp(&b.report_sha256));
    Contribution {
        schema_version: CONTRIBUTION_SCHEMA_VERSION.to_owned(),
        track,
        lab,
        harness_revisions: comparison.harness_revisions.clone(),
        harness_dirty: reports.iter().any(|r| r.harness_dirty),
        pulse_versions: comparison.pulse_versions.clone(),
        challenges: challenges.into_iter().collect(),
        qualification: QualificationResult {
            passed: failures.is_empty() && comparison.recommended.is_some(),
            failures: failures.into_iter().collect(),
            recommended: comparison.recommended.clone(),
        },
        models,
        sources,
    }
}

const README: &str = "# Patrol qualification contribution (candidate)

This folder was written by `patrol-qualify export-contribution`. Review every file before
sharing it: nothing has been sent anywhere, and nothing will be unless you send it.

- `contribution.json` holds only aggregate counts, Wilson bounds, p95 tokens and latencies,
  the cost class, the model route, scenario ids and manifest digests, the harness revision,
  the Pulse version, the challenge (if any) and SHA-256 digests of the local `report.json` and
  `replay.json` files it was built from.
- It holds no findings, resource identity, hostnames, addresses, URLs, tool names, tool
  arguments or results, prompts, model output, action identity or error text.
- The source digests bind this candidate to the full local evidence for a selective audit;
  keep those reports. They do not prove that a self-reported run was honest, and a challenge
  only proves the runs came after it was issued when it was supplied before every run.
- `qualification.failures` lists every gate this evidence does not meet, including reports
  whose manifest digest is stale relative to the checked-in catalogue.
- `SHA256SUMS` covers both files (`sha256sum -c SHA256SUMS`).
";

/// `patrol-qualify export-contribution`.
pub fn cli_export(args: &ExportArgs) -> Result<Outcome, Refusal> {
    let lab = LabDriver::from(args.lab);
    let track = Track::from(args.track);
    let (found, entries) =
        compare::load_inputs(&args.catalogue.scenarios, &args.reports, lab, track)?;
    let mut sources = Vec::with_capacity(found.len());
    for (path, _) in &found {
        let report_bytes = std::fs::read(path).map_err(|e| {
            Refusal::new(
                "unreadable_report",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        let replay_path = path.with_file_name("replay.json");
        let replay_sha256 = std::fs::read(&replay_path)
            .ok()
            .map(|bytes| report::sha256_hex(&bytes));
        sources.push(SourceDigest {
            report_sha256: report::sha256_hex(&report_bytes),
            replay_sha256,
        });
    }
    let reports: Vec<RunReport> = found.into_iter().map(|(_, r)| r).collect();
    let contribution = build(&reports, &entries, lab, track, sources);
    write_contribution(&args.contribution_dir, &contribution).map_err(|e| {
        Refusal::new(
            "unwritable_contribution",
            format!("cannot write {}: {e}", args.contribution_dir.display()),
        )
    })?;
    println!(
        "wrote contribution.json, README.md and SHA256SUMS to {}; review them before sharing (nothing was sent)",
        args.contribution_dir.display()
    );
    if contribution.qualification.passed {
        Ok(Outcome::Passed)
    } else {
        Ok(Outcome::Failed(format!(
            "the exported evidence does not qualify: {}",
            contribution.qualification.failures.join(", ")
        )))
    }
}

/// Writes `contribution.json`, `README.md` and `SHA256SUMS` (mode 0600) into `dir`.
pub fn write_contribution(dir: &Path, contribution: &Contribution) -> std::io::Result<()> {
    let mut json = serde_json::to_vec_pretty(contribution).map_err(std::io::Error::other)?;
    json.push(b'\n');
    report::write_with_sums(
        dir,
        &[
            ("contribution.json", json),
            ("README.md", README.as_bytes().to_vec()),
        ],
    )
}
