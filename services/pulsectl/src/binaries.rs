//! Finding the service binaries, and building them first when pulsectl runs under `cargo run`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum BinariesError {
    #[error("cannot locate pulsectl's own executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    #[error(
        "missing service binaries in {dir}: {missing}\n  build them with `cargo build --bins{release}` \
         from the workspace root, or point --bin-dir (PULSE_BIN_DIR) at a directory holding them",
        missing = .missing.join(", "),
        release = if *.release { " --release" } else { "" },
    )]
    Missing {
        dir: PathBuf,
        missing: Vec<&'static str>,
        release: bool,
    },
    #[error("cannot run {cargo}: {source}")]
    CargoSpawn {
        cargo: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`cargo build --bins` failed ({0}); see cargo's output above")]
    BuildFailed(std::process::ExitStatus),
}

/// Absolute paths of the binaries, by binary name.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: PathBuf,
    paths: BTreeMap<&'static str, PathBuf>,
}

impl Binaries {
    /// Looks every name up in `dir`; reports all missing ones at once.
    pub fn find_in(
        dir: &Path,
        names: impl IntoIterator<Item = &'static str>,
    ) -> Result<Self, BinariesError> {
        let mut paths = BTreeMap::new();
        let mut missing = Vec::new();
        for name in names {
            let path = dir.join(name);
            if is_executable(&path) {
                paths.insert(name, path);
            } else {
                missing.push(name);
            }
        }
        if missing.is_empty() {
            Ok(Self {
                dir: dir.to_path_buf(),
                paths,
            })
        } else {
            Err(BinariesError::Missing {
                dir: dir.to_path_buf(),
                missing,
                release: !cfg!(debug_assertions),
            })
        }
    }

    pub fn path(&self, name: &str) -> Option<&Path> {
        self.paths.get(name).map(PathBuf::as_path)
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The directory pulsectl's own executable sits in (`target/<profile>/` in a workspace build).
pub fn own_dir() -> Result<PathBuf, BinariesError> {
    let exe = std::env::current_exe().map_err(BinariesError::CurrentExe)?;
    exe.parent().map(Path::to_path_buf).ok_or_else(|| {
        BinariesError::CurrentExe(std::io::Error::other("executable has no parent directory"))
    })
}

/// pulsectl started by `cargo run -p pulsectl`: how to build its sibling binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoRun {
    pub cargo: PathBuf,
    pub workspace_root: PathBuf,
    pub release: bool,
}

impl CargoRun {
    /// Detects `cargo run` of this very package: cargo sets `CARGO` and `CARGO_MANIFEST_DIR` for
    /// the program it runs. A pulsectl merely spawned by some other cargo-run process (a test of
    /// another crate, say) sees that crate's manifest dir and builds nothing.
    pub fn detect(env: impl Fn(&str) -> Option<OsString>, own_manifest_dir: &Path) -> Option<Self> {
        let cargo = PathBuf::from(env("CARGO")?);
        let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
        if manifest_dir != own_manifest_dir {
            return None;
        }
        Some(Self {
            cargo,
            workspace_root: workspace_root(&manifest_dir)?,
            release: !cfg!(debug_assertions),
        })
    }

    pub fn args(&self) -> Vec<&'static str> {
        let mut args = vec!["build", "--bins"];
        if self.release {
            args.push("--release");
        }
        args
    }

    /// Runs `cargo build --bins` in the workspace root, output straight to the terminal.
    pub async fn build(&self) -> Result<(), BinariesError> {
        let status = tokio::process::Command::new(&self.cargo)
            .args(self.args())
            .current_dir(&self.workspace_root)
            // pulsectl stopped while building: stop cargo too.
            .kill_on_drop(true)
            .status()
            .await
            .map_err(|source| BinariesError::CargoSpawn {
                cargo: self.cargo.clone(),
                source,
            })?;
        if status.success() {
            Ok(())
        } else {
            Err(BinariesError::BuildFailed(status))
        }
    }
}

/// The nearest ancestor of `manifest_dir` whose Cargo.toml declares `[workspace]`.
pub fn workspace_root(manifest_dir: &Path) -> Option<PathBuf> {
    manifest_dir
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .map(|text| text.lines().any(|line| line.trim() == "[workspace]"))
                .unwrap_or(false)
        })
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pulsectl-bin-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn touch(path: &Path, mode: u32) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn finds_executables_and_names_every_missing_one() {
        let dir = scratch("lookup");
        touch(&dir.join("pulse-gateway"), 0o755);
        touch(&dir.join("pulse-verifier"), 0o644); // not executable
        std::fs::create_dir_all(dir.join("pulse-agent")).unwrap(); // a directory

        let found = Binaries::find_in(&dir, ["pulse-gateway"]).unwrap();
        assert_eq!(
            found.path("pulse-gateway"),
            Some(dir.join("pulse-gateway").as_path())
        );

        let err = Binaries::find_in(&dir, ["pulse-gateway", "pulse-verifier", "pulse-agent"])
            .unwrap_err();
        let BinariesError::Missing { missing, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(missing, &["pulse-verifier", "pulse-agent"]);
        let message = err.to_string();
        assert!(message.contains("pulse-verifier, pulse-agent"), "{message}");
        assert!(message.contains("cargo build --bins"), "{message}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn cargo_run_is_detected_only_for_this_package() {
        let own = Path::new(env!("CARGO_MANIFEST_DIR"));
        let env_for = |manifest: &'static str| {
            move |key: &str| match key {
                "CARGO" => Some(OsString::from("/usr/bin/cargo")),
                "CARGO_MANIFEST_DIR" => Some(OsString::from(manifest)),
                _ => None,
            }
        };
        let detected = CargoRun::detect(env_for(env!("CARGO_MANIFEST_DIR")), own).unwrap();
        assert_eq!(detected.cargo, PathBuf::from("/usr/bin/cargo"));
        assert!(detected.workspace_root.join("services/pulsectl").is_dir());
        assert_eq!(detected.args()[..2], ["build", "--bins"]);

        assert_eq!(CargoRun::detect(env_for("/elsewhere/tests/e2e"), own), None);
        assert_eq!(CargoRun::detect(|_| None, own), None);
    }

    #[test]
    fn workspace_root_skips_member_manifests() {
        let dir = scratch("root");
        std::fs::create_dir_all(dir.join("services/x")).unwrap();
        std::fs::write(dir.join("Cargo.toml"), "[workspace]\nmembers = []\n").unwrap();
        std::fs::write(
            dir.join("services/x/Cargo.toml"),
            "[package]\nname = \"x\"\n",
        )
        .unwrap();
        assert_eq!(workspace_root(&dir.join("services/x")), Some(dir.clone()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
