//! The agent's side of the secret-path rule ([`pulse_capabilities::secret_paths`], its one
//! owner): a path is refused when it, as asked, or its canonical form (symlinks and `..`
//! resolved) is a secret.

use std::path::{Path, PathBuf};

pub use pulse_capabilities::secret_paths::{PRIVATE_KEY_MARKER, secret_reason};

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathRefusal {
    /// The path is a secret (as written or once resolved).
    Secret(String),
    /// Not absolute, or it does not resolve.
    Invalid(String),
}

/// The canonical form of absolute `path`, refused when it or its canonical form is a secret.
pub async fn check(path: &str, own_secrets: &[PathBuf]) -> Result<PathBuf, PathRefusal> {
    let asked = Path::new(path);
    if !asked.is_absolute() {
        return Err(PathRefusal::Invalid(format!(
            "{path:?} is not an absolute path"
        )));
    }
    if let Some(reason) = secret_reason(asked, own_secrets) {
        return Err(PathRefusal::Secret(format!("{path} is refused: {reason}")));
    }
    let canonical = tokio::fs::canonicalize(asked)
        .await
        .map_err(|e| PathRefusal::Invalid(format!("cannot resolve {path}: {e}")))?;
    if let Some(reason) = secret_reason(&canonical, own_secrets) {
        return Err(PathRefusal::Secret(format!(
            "{path} resolves to {} and is refused: {reason}",
            canonical.display()
        )));
    }
    Ok(canonical)
}
