//! The scenario catalogue: `scenarios/<lab>/*.json`, loaded and validated, with each
//! manifest's digest.
//!
//! A manifest is decoded strictly (an unknown field is an error naming it), then checked by
//! [`crate::validate::problems`]; only a manifest with no problem becomes an [`Entry`]. Inside
//! a lab folder each file is named `<id>.json`, declares that folder's lab driver, and no id
//! appears twice. The digest is taken over the RFC 8785 canonical JSON of the decoded
//! manifest, so whitespace and key order in the file do not change it, while any change to a
//! value does.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::cli::{ListArgs, Outcome, Refusal, ValidateArgs};
use crate::manifest::{LabDriver, Manifest, Track};

/// The lab folders of a catalogue, in listing order.
pub const LABS: [LabDriver; 3] = [LabDriver::Process, LabDriver::Docker, LabDriver::Proxmox];

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

impl CatalogueError {
    fn invalid(path: &Path, message: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.display().to_string(),
            message: message.into(),
        }
    }
}

/// Every manifest of `root/<lab>/`, validated, in id order.
pub fn load_lab(root: &Path, lab: LabDriver) -> Result<Vec<Entry>, CatalogueError> {
    let mut entries = Vec::new();
    for result in scan_lab(root, lab)? {
        entries.push(result?);
    }
    Ok(entries)
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

/// One manifest file, decoded strictly and validated.
pub fn load_file(path: &Path) -> Result<Entry, CatalogueError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| CatalogueError::invalid(path, format!("cannot read: {error}")))?;
    let manifest = decode(&text).map_err(|message| CatalogueError::invalid(path, message))?;
    let problems = crate::validate::problems(&manifest);
    if !problems.is_empty() {
        return Err(CatalogueError::invalid(path, problems.join("; ")));
    }
    let digest = try_digest(&manifest).map_err(|message| CatalogueError::invalid(path, message))?;
    Ok(Entry {
        path: path.to_owned(),
        manifest,
        digest,
    })
}

/// Decodes a manifest strictly: an unknown field, a missing one or a wrong type is an error
/// naming the field and where it is.
pub fn decode(text: &str) -> Result<Manifest, String> {
    serde_json::from_str(text).map_err(|error| format!("not a patrol.qual/v1 manifest: {error}"))
}

/// `sha256:<hex>` of `manifest` as RFC 8785 canonical JSON. A manifest validation accepted
/// always has one; one that does not (an integer beyond 2^53 - 1) digests as
/// `sha256:unrepresentable`, which matches no catalogue entry.
pub fn digest(manifest: &Manifest) -> String {
    try_digest(manifest).unwrap_or_else(|_| "sha256:unrepresentable".to_owned())
}

/// [`digest`], or why the manifest has no canonical JSON.
pub fn try_digest(manifest: &Manifest) -> Result<String, String> {
    let bytes = pulse_domain::canonical_json::to_canonical_vec(manifest)
        .map_err(|error| format!("manifest has no canonical JSON form: {error}"))?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))))
}

/// Each manifest file of `root/<lab>/` in id order (files that did not decode last, by
/// path), with its own result, so `validate` can report every file. `Err` only when the
/// folder cannot be read.
fn scan_lab(
    root: &Path,
    lab: LabDriver,
) -> Result<Vec<Result<Entry, CatalogueError>>, CatalogueError> {
    let dir = root.join(lab.as_str());
    let listing = std::fs::read_dir(&dir).map_err(|error| {
        CatalogueError::invalid(
            &dir,
            format!("cannot read the {} lab's scenarios: {error}", lab.as_str()),
        )
    })?;
    let mut paths = Vec::new();
    for item in listing {
        let item = item.map_err(|error| {
            CatalogueError::invalid(&dir, format!("cannot list the folder: {error}"))
        })?;
        let path = item.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "json") {
            paths.push(path);
        }
    }
    paths.sort();

    let mut results = Vec::new();
    let mut first_path_of: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in paths {
        let result = load_file(&path).and_then(|entry| {
            let mut problems = layout_problems(&entry, lab);
            match first_path_of.get(&entry.manifest.id) {
                Some(first) => problems.push(format!(
                    "id: '{}' is already the id of {}, and ids are unique within a lab",
                    entry.manifest.id,
                    first.display()
                )),
                None => {
                    first_path_of.insert(entry.manifest.id.clone(), path.clone());
                }
            }
            if problems.is_empty() {
                Ok(entry)
            } else {
                Err(CatalogueError::invalid(&path, problems.join("; ")))
            }
        });
        results.push(result);
    }
    results.sort_by(|a, b| match (a, b) {
        (Ok(a), Ok(b)) => a.manifest.id.cmp(&b.manifest.id),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(a), Err(b)) => a.to_string().cmp(&b.to_string()),
    });
    Ok(results)
}

/// The catalogue's layout rules: the folder names the lab, the file names the id.
fn layout_problems(entry: &Entry, lab: LabDriver) -> Vec<String> {
    let manifest = &entry.manifest;
    let mut problems = Vec::new();
    if manifest.lab.driver != lab {
        problems.push(format!(
            "lab.driver: '{}' does not match its folder '{}'",
            manifest.lab.driver.as_str(),
            lab.as_str()
        ));
    }
    let expected = format!("{}.json", manifest.id);
    let file_name = entry
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if file_name != expected {
        problems.push(format!("id: the file must be named {expected}"));
    }
    problems
}

/// What `validate` found for one manifest.
struct Checked {
    label: String,
    result: Result<Entry, CatalogueError>,
}

/// `patrol-qualify validate`.
pub fn cli_validate(args: &ValidateArgs) -> Result<Outcome, Refusal> {
    let mut checked = Vec::new();
    if args.files.is_empty() {
        let root = &args.catalogue.scenarios;
        for lab in LABS {
            let results = scan_lab(root, lab).map_err(|error| {
                Refusal::new(
                    "catalogue_unreadable",
                    format!(
                        "{error}; pass --scenarios with the folder holding process/ and docker/"
                    ),
                )
            })?;
            for result in results {
                let label = match &result {
                    Ok(entry) => format!("{}/{}", lab.as_str(), entry.manifest.id),
                    Err(_) => lab.as_str().to_owned(),
                };
                checked.push(Checked { label, result });
            }
        }
    } else {
        for path in &args.files {
            let result = load_file(path);
            let label = match &result {
                Ok(entry) => format!(
                    "{}/{}",
                    entry.manifest.lab.driver.as_str(),
                    entry.manifest.id
                ),
                Err(_) => path.display().to_string(),
            };
            checked.push(Checked { label, result });
        }
    }
    if checked.is_empty() {
        return Err(Refusal::new(
            "invalid_manifest",
            "no manifest found; add scenarios/<lab>/<id>.json files or name the files to check",
        ));
    }

    print!("{}", validation_report(&checked));
    let invalid: Vec<String> = checked
        .iter()
        .filter_map(|c| match &c.result {
            Ok(_) => None,
            Err(error) => Some(error.to_string()),
        })
        .collect();
    if invalid.is_empty() {
        Ok(Outcome::Passed)
    } else {
        Err(Refusal::new(
            "invalid_manifest",
            format!(
                "{} of {} manifests are invalid; fix every problem listed and validate again: {}",
                invalid.len(),
                checked.len(),
                invalid.join(" | ")
            ),
        ))
    }
}

fn validation_report(checked: &[Checked]) -> String {
    let mut out = String::new();
    for c in checked {
        match &c.result {
            Ok(entry) => {
                let _ = writeln!(out, "ok  {}  {}", c.label, entry.digest);
            }
            Err(CatalogueError::Invalid { path, message }) => {
                let _ = writeln!(out, "invalid  {path}");
                for problem in message.split("; ") {
                    let _ = writeln!(out, "    - {problem}");
                }
            }
            Err(error) => {
                let _ = writeln!(out, "invalid  {}: {error}", c.label);
            }
        }
    }
    out
}

/// `patrol-qualify list`.
pub fn cli_list(args: &ListArgs) -> Result<Outcome, Refusal> {
    let root = &args.catalogue.scenarios;
    let labs: Vec<LabDriver> = match args.lab {
        Some(lab) => vec![lab.into()],
        None => LABS.to_vec(),
    };
    let track: Option<Track> = args.track.map(Into::into);
    let mut entries = Vec::new();
    for lab in labs {
        let loaded = load_lab(root, lab).map_err(|error| {
            Refusal::new(
                "invalid_manifest",
                format!("{error}; run `patrol-qualify validate` and fix what it lists"),
            )
        })?;
        entries.extend(
            loaded
                .into_iter()
                .filter(|e| track.is_none_or(|t| e.manifest.track == t)),
        );
    }
    print!("{}", list_table(&entries));
    Ok(Outcome::Passed)
}

/// The `list` table: one row per scenario.
pub fn list_table(entries: &[Entry]) -> String {
    let header = [
        "ID",
        "LAB",
        "TRACK",
        "RESOURCES",
        "FAULTS",
        "REPEAT dev/nightly/qual",
    ]
    .map(str::to_owned);
    let rows: Vec<[String; 6]> = entries
        .iter()
        .map(|e| {
            let m = &e.manifest;
            [
                m.id.clone(),
                m.lab.driver.as_str().to_owned(),
                m.track.as_str().to_owned(),
                m.resources.len().to_string(),
                m.faults.len().to_string(),
                format!(
                    "{}/{}/{}",
                    m.repeat.development, m.repeat.nightly, m.repeat.qualification
                ),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows.iter()) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}
