//! Run and suite artifacts. (Interface; the report work owns it.)

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::manifest::{Manifest, RepeatProfile};
use crate::observation::{ModelIdentity, RunObservation};
use crate::scorer::Score;

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
}

/// Writes `ground-truth.json`, `report.json`, `report.md`, `replay.json` and `SHA256SUMS`
/// (mode 0600) into `dir`.
pub fn write_run(_dir: &Path, _report: &RunReport) -> std::io::Result<()> {
    todo!("run artifacts")
}

/// Writes the suite summary (`suite.json`, `suite.md` with its SVG chart, `SHA256SUMS`).
pub fn write_suite(_dir: &Path, _reports: &[RunReport]) -> std::io::Result<()> {
    todo!("suite artifacts")
}
