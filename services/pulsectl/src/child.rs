//! How pulsectl starts a process: environment, log file, process group, and the link that makes
//! the process die with pulsectl.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use nix::sys::signal::Signal;

/// Everything needed to (re)start one process.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// Short name used in messages and for the log file (`logs/<name>.log`).
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Set on top of pulsectl's environment.
    pub env: Vec<(String, OsString)>,
    /// Removed from pulsectl's environment.
    pub env_remove: Vec<String>,
    pub log_path: PathBuf,
    /// First signal on shutdown (Postgres shuts down fastest on SIGINT).
    pub stop_signal: Signal,
    /// Run as this user and group (Postgres refuses to run as root).
    pub run_as: Option<(u32, u32)>,
}

/// Pre-exec behaviour of a spawned process.
#[derive(Debug, Clone, Copy)]
pub struct ExecHooks {
    /// SIGTERM the process when pulsectl dies, however it dies.
    pub die_with_parent: bool,
    /// Start a new session (detached pulsectl: no controlling terminal, no SIGHUP).
    pub new_session: bool,
}

impl ChildSpec {
    /// Sets `key` to `value` in the environment of the next start.
    pub fn set_env(&mut self, key: &str, value: impl Into<OsString>) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.into()));
    }

    /// A command ready to spawn: stdin from /dev/null, stdout and stderr appended to the log
    /// file, its own process group (a terminal Ctrl-C reaches pulsectl only, which then stops
    /// the children in order), and SIGTERM on pulsectl's death.
    pub fn command(&self) -> std::io::Result<tokio::process::Command> {
        let mut log = open_log(&self.log_path)?;
        writeln!(
            log,
            "--- pulsectl: starting {} at {} ---",
            self.program.display(),
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )?;

        let mut std_cmd = std::process::Command::new(&self.program);
        std_cmd
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        for key in &self.env_remove {
            std_cmd.env_remove(key);
        }
        for (key, value) in &self.env {
            std_cmd.env(key, value);
        }
        if let Some((uid, gid)) = self.run_as {
            std_cmd.uid(uid).gid(gid);
        }
        set_exec_hooks(
            &mut std_cmd,
            ExecHooks {
                die_with_parent: true,
                new_session: false,
            },
        );
        Ok(tokio::process::Command::from(std_cmd))
    }
}

/// Installs `hooks` to run in the forked child just before exec.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process:
/// pulsectl spawns children from its main thread (a current-thread runtime), which lives as long
/// as pulsectl does.
#[allow(unsafe_code)]
pub fn set_exec_hooks(cmd: &mut std::process::Command, hooks: ExecHooks) {
    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX);
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed. It calls prctl, getppid and setsid (all async-signal-safe system calls),
    // reads two copied integers and builds io::Errors from raw OS codes; it allocates nothing and
    // touches no lock.
    unsafe {
        cmd.pre_exec(move || {
            if hooks.die_with_parent {
                #[cfg(target_os = "linux")]
                {
                    let signal = libc::c_ulong::try_from(libc::SIGTERM).unwrap_or(15);
                    if libc::prctl(libc::PR_SET_PDEATHSIG, signal, 0, 0, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                // pulsectl died between fork and prctl: the signal will never come.
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
            if hooks.new_session && libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Opens a log file for appending. Owner-only: services may log secrets (the gateway prints
/// the admin token it bootstraps).
pub fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The last `lines` lines of a log file (reads at most its last 64 KiB).
pub fn tail(path: &Path, lines: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    const WINDOW: u64 = 64 * 1024;
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(WINDOW);
    if file.seek(SeekFrom::Start(start)).is_err() {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    last_lines(&String::from_utf8_lossy(&bytes), lines, start > 0)
}

fn last_lines(text: &str, lines: usize, skip_partial_first: bool) -> Vec<String> {
    let mut all: Vec<&str> = text.lines().collect();
    if skip_partial_first && !all.is_empty() {
        all.remove(0);
    }
    let from = all.len().saturating_sub(lines);
    all[from..].iter().map(|line| (*line).to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2, false), ["b", "c"]);
        assert_eq!(last_lines("a\nb\n", 5, false), ["a", "b"]);
        assert_eq!(last_lines("tial\nb\nc", 5, true), ["b", "c"]);
        assert!(last_lines("", 3, false).is_empty());
    }

    #[test]
    fn logs_are_private_to_their_owner() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("pulsectl-log-{}", std::process::id()));
        let path = dir.join("logs/gateway.log");
        open_log(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn tail_of_a_missing_file_is_empty() {
        assert!(tail(Path::new("/nonexistent/pulsectl/log"), 5).is_empty());
    }
}
