//! Replay at two levels, deliberately distinct:
//!
//! - `replay` scores a captured `report.json` again (`report.manifest` + `report.observation`
//!   through [`crate::scorer`]) and requires the identical score: the scorer is deterministic,
//!   so a difference means the scoring rules changed or the report was edited.
//! - `verify-replay` checks a `replay.json` bundle: its tool exchanges are numbered 1..n in
//!   order and their transcript digest (RFC 8785 canonical JSON of the ordered exchanges, the
//!   analysis and the findings, SHA-256) is the one recorded in the bundle, in the `report.json`
//!   beside it and in its `SHA256SUMS`.
//!
//! Neither is evidence that the current collector, provider or model works: only a live run is.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::{Outcome, Refusal, ReplayArgs, VerifyReplayArgs};
use crate::observation::{ModelIdentity, ObservedFinding, ToolExchange};
use crate::report::{self, RunReport};

/// The one replay bundle schema this tool writes and reads.
pub const REPLAY_SCHEMA_VERSION: &str = "patrol.qualification.replay/v1";

const NOT_EVIDENCE: &str = "note: a replay is not evidence that the current collector, provider or model works; only a live run is";

/// `replay.json`: the exact ordered tool transcript of one run, with its ground truth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayBundle {
    pub schema_version: String,
    pub captured_at: chrono::DateTime<chrono::Utc>,
    pub run_id: String,
    pub manifest_id: String,
    pub manifest_digest: String,
    pub model: ModelIdentity,
    pub ground_truth: Value,
    pub tool_exchanges: Vec<ToolExchange>,
    pub ai_analysis: Option<String>,
    pub findings: Vec<ObservedFinding>,
    /// Whether the transcript is complete enough to be replayed.
    pub replayable: bool,
    pub replay_issues: Vec<String>,
    pub transcript_digest: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error("the transcript is not canonical JSON: {0}")]
    Canonical(#[from] pulse_domain::canonical_json::CanonicalJsonError),
}

/// `sha256:<hex>` of the canonical JSON of the ordered exchanges, the analysis and the
/// findings: what `report.json` and `replay.json` both record.
pub fn transcript_digest(
    exchanges: &[ToolExchange],
    ai_analysis: Option<&str>,
    findings: &[ObservedFinding],
) -> Result<String, TranscriptError> {
    let transcript = json!({
        "tool_exchanges": exchanges,
        "ai_analysis": ai_analysis,
        "findings": findings,
    });
    let bytes = pulse_domain::canonical_json::to_canonical_vec(&transcript)?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))))
}

/// Problems that make a transcript unfit for replay (empty when it is fit).
pub fn transcript_issues(exchanges: &[ToolExchange]) -> Vec<String> {
    let mut issues = Vec::new();
    for (index, exchange) in exchanges.iter().enumerate() {
        let expected = u32::try_from(index + 1).unwrap_or(u32::MAX);
        if exchange.sequence != expected {
            issues.push(format!(
                "exchange {} has sequence {}, expected {expected}",
                index + 1,
                exchange.sequence
            ));
        }
        if exchange.tool_call_id.is_empty() {
            issues.push(format!("exchange {} has no tool call id", index + 1));
        }
    }
    issues
}

/// The bundle of `report` (its ground truth as [`report::ground_truth`] writes it).
pub fn bundle(report: &RunReport) -> Result<ReplayBundle, TranscriptError> {
    let observation = &report.observation;
    let transcript_digest = transcript_digest(
        &observation.tool_exchanges,
        observation.ai_analysis.as_deref(),
        &observation.findings,
    )?;
    let replay_issues = transcript_issues(&observation.tool_exchanges);
    Ok(ReplayBundle {
        schema_version: REPLAY_SCHEMA_VERSION.to_owned(),
        captured_at: report.started_at,
        run_id: report.run_id.clone(),
        manifest_id: report.manifest.id.clone(),
        manifest_digest: report.manifest_digest.clone(),
        model: report.model.clone(),
        ground_truth: report::ground_truth(report),
        tool_exchanges: observation.tool_exchanges.clone(),
        ai_analysis: observation.ai_analysis.clone(),
        findings: observation.findings.clone(),
        replayable: replay_issues.is_empty(),
        replay_issues,
        transcript_digest,
    })
}

/// The first top-level fields in which two scores differ (empty when identical).
pub fn score_differences(
    recorded: &crate::scorer::Score,
    again: &crate::scorer::Score,
) -> Vec<String> {
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
        (serde_json::to_value(recorded), serde_json::to_value(again))
    else {
        return vec!["the scores cannot be compared as JSON".to_owned()];
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| k.to_string())
        .collect()
}

/// `patrol-qualify replay`.
pub fn cli_replay(args: &ReplayArgs) -> Result<Outcome, Refusal> {
    let report = report::load_report(&args.report).map_err(|e| {
        Refusal::new(
            "unreadable_report",
            format!("{e}; pass a report.json a run wrote"),
        )
    })?;
    let again =
        crate::scorer::score_for_model(&report.manifest, &report.observation, &report.model);
    println!("{NOT_EVIDENCE}");
    // The observation's transcript must still be the one the run recorded.
    let transcript = transcript_digest(
        &report.observation.tool_exchanges,
        report.observation.ai_analysis.as_deref(),
        &report.observation.findings,
    );
    match transcript {
        Ok(digest) if digest == report.transcript_digest => {}
        Ok(digest) => {
            return Ok(Outcome::Failed(format!(
                "the report's observation was edited: its transcript digest is {digest}, the report records {}",
                report.transcript_digest
            )));
        }
        Err(e) => return Ok(Outcome::Failed(e.to_string())),
    }
    if again == report.score {
        println!(
            "replay reproduces the recorded score (run {}, scenario {}, passed: {})",
            report.run_id, report.manifest.id, again.passed
        );
        Ok(Outcome::Passed)
    } else {
        let fields = score_differences(&report.score, &again);
        let shown: Vec<&str> = fields.iter().take(5).map(String::as_str).collect();
        Ok(Outcome::Failed(format!(
            "replay does not reproduce the recorded score: differing fields: {}",
            shown.join(", ")
        )))
    }
}

fn read_bundle(path: &Path) -> Result<ReplayBundle, Refusal> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Refusal::new(
            "unreadable_bundle",
            format!(
                "cannot read {}: {e}; pass a replay.json a run wrote",
                path.display()
            ),
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        Refusal::new(
            "unreadable_bundle",
            format!("{} is not a replay bundle: {e}", path.display()),
        )
    })
}

/// What `verify-replay` found wrong (empty when the bundle verifies).
pub fn verify_bundle(path: &Path) -> Result<Vec<String>, Refusal> {
    let bundle = read_bundle(path)?;
    let mut problems = Vec::new();
    if bundle.schema_version != REPLAY_SCHEMA_VERSION {
        problems.push(format!(
            "schema version '{}' is not {REPLAY_SCHEMA_VERSION}",
            bundle.schema_version
        ));
    }
    problems.extend(transcript_issues(&bundle.tool_exchanges));
    match transcript_digest(
        &bundle.tool_exchanges,
        bundle.ai_analysis.as_deref(),
        &bundle.findings,
    ) {
        Ok(digest) if digest == bundle.transcript_digest => {}
        Ok(digest) => problems.push(format!(
            "the transcript was edited: its digest is {digest}, the bundle records {}",
            bundle.transcript_digest
        )),
        Err(e) => problems.push(e.to_string()),
    }
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let report_path = dir.join("report.json");
    if report_path.is_file() {
        match report::load_report(&report_path) {
            Ok(report) => {
                if report.transcript_digest != bundle.transcript_digest {
                    problems.push(format!(
                        "report.json records transcript digest {}, the bundle {}",
                        report.transcript_digest, bundle.transcript_digest
                    ));
                }
                if report.run_id != bundle.run_id {
                    problems.push("report.json belongs to another run".to_owned());
                }
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    let sums_path = dir.join("SHA256SUMS");
    if sums_path.is_file() {
        let bundle_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut checked = vec![(bundle_name, path.to_path_buf())];
        if report_path.is_file() {
            checked.push(("report.json".to_owned(), report_path.clone()));
        }
        match std::fs::read_to_string(&sums_path) {
            Ok(sums) => {
                for (name, file) in checked {
                    let actual =
                        std::fs::read(&file).map(|bytes| hex::encode(Sha256::digest(&bytes)));
                    match (report::checksum_entry(&sums, &name), actual) {
                        (Some(recorded), Ok(actual)) if recorded == actual => {}
                        (Some(_), Ok(_)) => problems.push(format!(
                            "{name} does not match its SHA256SUMS entry: the file was changed after the run"
                        )),
                        (None, _) => problems.push(format!("SHA256SUMS has no entry for {name}")),
                        (_, Err(e)) => problems.push(format!("cannot read {name}: {e}")),
                    }
                }
            }
            Err(e) => problems.push(format!("cannot read SHA256SUMS: {e}")),
        }
    }
    Ok(problems)
}

/// `patrol-qualify verify-replay`.
pub fn cli_verify(args: &VerifyReplayArgs) -> Result<Outcome, Refusal> {
    let problems = verify_bundle(&args.bundle)?;
    println!("{NOT_EVIDENCE}");
    if problems.is_empty() {
        println!("the replay bundle's ordered transcript matches its recorded digests");
        Ok(Outcome::Passed)
    } else {
        Ok(Outcome::Failed(format!(
            "the replay bundle does not verify: {}",
            problems.join("; ")
        )))
    }
}
