//! `<state-dir>/pulsectl.pid`: one stack per state directory, and how `down` finds it.

use std::io::Write;
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "pulsectl.pid";

#[derive(Debug, thiserror::Error)]
pub enum PidFileError {
    #[error(
        "a stack is already running on state dir {} (pulsectl pid {pid})\n  stop it with \
         `pulsectl down --state-dir {}`, or use another --state-dir",
        .state_dir.display(), .state_dir.display()
    )]
    AlreadyRunning { pid: u32, state_dir: PathBuf },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Held while this pulsectl runs a stack; removes the file when dropped.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    pid: u32,
}

pub fn path_in(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// The pid written in the file, if any.
pub fn read(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` is a live (not zombie) pulsectl process.
pub fn is_live_pulsectl(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some((head, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let state = rest.split_whitespace().next().unwrap_or("Z");
    if matches!(state, "Z" | "X" | "x") {
        return false;
    }
    let comm = head.split_once('(').map_or("", |(_, comm)| comm);
    if comm == "pulsectl" {
        return true;
    }
    // comm is truncated to 15 bytes and changes with a renamed executable: also look at argv[0].
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|cmdline| {
            let argv0 = cmdline.split(|b| *b == 0).next()?.to_vec();
            let argv0 = String::from_utf8(argv0).ok()?;
            Some(argv0.rsplit('/').next()?.starts_with("pulsectl"))
        })
        .unwrap_or(false)
}

/// The pid of the pulsectl running a stack on this state directory, if one is.
pub fn running(state_dir: &Path) -> Option<u32> {
    read(&path_in(state_dir)).filter(|pid| is_live_pulsectl(*pid))
}

impl PidFile {
    /// Claims the state directory for this process; a stale file (dead or foreign pid) is
    /// replaced.
    pub fn acquire(state_dir: &Path) -> Result<Self, PidFileError> {
        let path = path_in(state_dir);
        let pid = std::process::id();
        let io = |source| PidFileError::Io {
            path: path.clone(),
            source,
        };
        for _ in 0..3 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    writeln!(file, "{pid}").map_err(io)?;
                    return Ok(Self { path, pid });
                }
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = read(&path).filter(|other| *other != pid);
                    if let Some(other) = holder.filter(|other| is_live_pulsectl(*other)) {
                        return Err(PidFileError::AlreadyRunning {
                            pid: other,
                            state_dir: state_dir.to_path_buf(),
                        });
                    }
                    match std::fs::remove_file(&path) {
                        Ok(()) => {}
                        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                        Err(err) => return Err(io(err)),
                    }
                }
                Err(err) => return Err(io(err)),
            }
        }
        Err(io(std::io::Error::other(
            "pid file keeps reappearing; is another pulsectl starting?",
        )))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if read(&self.path) == Some(self.pid) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pulsectl-pid-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn acquire_writes_our_pid_replaces_stale_files_and_cleans_up() {
        let dir = scratch("acquire");
        // A stale file naming a pid that is not a pulsectl (pid 1 is init).
        std::fs::write(path_in(&dir), "1\n").unwrap();
        let held = PidFile::acquire(&dir).unwrap();
        assert_eq!(read(&path_in(&dir)), Some(std::process::id()));
        // Re-acquiring from the same process is allowed (it is our own pid).
        drop(held);
        assert!(!path_in(&dir).exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn garbage_in_the_file_is_stale() {
        let dir = scratch("garbage");
        std::fs::write(path_in(&dir), "not a pid").unwrap();
        assert_eq!(running(&dir), None);
        let _held = PidFile::acquire(&dir).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn only_pulsectl_processes_count() {
        assert!(!is_live_pulsectl(1));
        assert!(!is_live_pulsectl(u32::MAX));
        // This test binary is `pulsectl-<hash>`.
        assert!(is_live_pulsectl(std::process::id()));
    }
}
