//! The scenario catalogue: `scenarios/<lab>/*.json`, loaded and validated, with each
//! manifest's digest. (Owned by the catalogue work; this is its interface.)

use std::path::{Path, PathBuf};

use crate::manifest::{LabDriver, Manifest, Track};

/// A loaded scenario.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: PathBuf,
    pub manifest: Manifest,
    /// `sha256:<hex>` of the manifest's RFC 8785 canonical JSON.
    pub digest: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("no scenario '{id}' for the {lab} lab in {root}")]
    UnknownScenario {
        id: String,
        lab: String,
        root: String,
    },
}

/// Every manifest of `root/<lab>/`, validated, in id order.
pub fn load_lab(_root: &Path, _lab: LabDriver) -> Result<Vec<Entry>, CatalogueError> {
    todo!("catalogue loader")
}

/// The scenarios of `track` for `lab`.
pub fn select_track(
    root: &Path,
    lab: LabDriver,
    track: Track,
) -> Result<Vec<Entry>, CatalogueError> {
    Ok(load_lab(root, lab)?
        .into_iter()
        .filter(|e| e.manifest.track == track)
        .collect())
}

/// One scenario by id.
pub fn find(root: &Path, lab: LabDriver, id: &str) -> Result<Entry, CatalogueError> {
    load_lab(root, lab)?
        .into_iter()
        .find(|e| e.manifest.id == id)
        .ok_or_else(|| CatalogueError::UnknownScenario {
            id: id.to_owned(),
            lab: lab.as_str().to_owned(),
            root: root.display().to_string(),
        })
}

/// `sha256:<hex>` of `manifest` as RFC 8785 canonical JSON.
pub fn digest(_manifest: &Manifest) -> String {
    todo!("manifest digest")
}

/// `patrol-qualify validate`.
pub fn cli_validate(
    _args: &crate::cli::ValidateArgs,
) -> Result<crate::cli::Outcome, crate::cli::Refusal> {
    todo!("validate mode")
}

/// `patrol-qualify list`.
pub fn cli_list(_args: &crate::cli::ListArgs) -> Result<crate::cli::Outcome, crate::cli::Refusal> {
    todo!("list mode")
}
