//! Keeps the stack's processes running: restarts a process that exits with backoff, and stops
//! them all in reverse start order.

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use pulse_domain::backoff::{Backoff, Jitter};
use tokio::process::Child;
use tokio::time::Instant;

use crate::child::ChildSpec;

/// A process that ran this long before exiting starts a fresh restart budget.
const STABLE_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
#[error("cannot start {name} ({program}): {source}")]
pub struct SpawnError {
    pub name: String,
    pub program: String,
    #[source]
    pub source: std::io::Error,
}

#[derive(Debug)]
pub enum Event {
    /// Exited while it should be running; `restart_in` is `None` when the budget is spent.
    Exited {
        name: String,
        status: ExitStatus,
        restart_in: Option<Duration>,
        restart: u32,
        limit: u32,
    },
    Restarted {
        name: String,
        pid: u32,
    },
    RestartFailed {
        name: String,
        error: SpawnError,
    },
}

#[derive(Debug)]
pub struct Stopped {
    pub name: String,
    /// `None`: it did not exit within the grace period and was killed.
    pub status: Option<ExitStatus>,
}

#[derive(Debug)]
enum State {
    Running { child: Child, since: Instant },
    Backoff { until: Instant },
    GaveUp,
    Stopped,
}

#[derive(Debug)]
struct Supervised {
    spec: ChildSpec,
    state: State,
    restarts: u32,
}

#[derive(Debug)]
pub struct Supervisor {
    children: Vec<Supervised>,
    restart_limit: u32,
}

/// Delay before restart number `restart` (1-based): 1 s, 2 s, 4 s, 8 s, 16 s, ... capped at 60 s.
/// Not jittered: the processes are one local stack, and the delay is printed in whole seconds.
pub const RESTART_BACKOFF: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(60)).jitter(Jitter::None);

fn spawn(spec: &ChildSpec) -> Result<Child, SpawnError> {
    let error = |source| SpawnError {
        name: spec.name.clone(),
        program: spec.program.display().to_string(),
        source,
    };
    spec.command().map_err(error)?.spawn().map_err(error)
}

impl Supervisor {
    pub fn new(restart_limit: u32) -> Self {
        Self {
            children: Vec::new(),
            restart_limit,
        }
    }

    /// Spawns `spec` and keeps it running from now on. Returns its pid.
    pub fn start(&mut self, spec: ChildSpec) -> Result<u32, SpawnError> {
        let child = spawn(&spec)?;
        let pid = child.id().unwrap_or_default();
        self.children.push(Supervised {
            spec,
            state: State::Running {
                child,
                since: Instant::now(),
            },
            restarts: 0,
        });
        Ok(pid)
    }

    /// Notices exits, schedules and performs restarts. Call it often (every few hundred ms).
    pub fn poll(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let now = Instant::now();
        let limit = self.restart_limit;
        for supervised in &mut self.children {
            match &mut supervised.state {
                State::Running { child, since } => {
                    let status = match child.try_wait() {
                        Ok(Some(status)) => status,
                        Ok(None) | Err(_) => continue,
                    };
                    reap_group(child_pid(child));
                    if now.duration_since(*since) >= STABLE_AFTER {
                        supervised.restarts = 0;
                    }
                    let restart = supervised.restarts + 1;
                    let restart_in = (restart <= limit).then(|| RESTART_BACKOFF.delay(restart));
                    events.push(Event::Exited {
                        name: supervised.spec.name.clone(),
                        status,
                        restart_in,
                        restart,
                        limit,
                    });
                    supervised.state = match restart_in {
                        Some(delay) => State::Backoff { until: now + delay },
                        None => State::GaveUp,
                    };
                }
                State::Backoff { until } if *until <= now => {
                    supervised.restarts += 1;
                    match spawn(&supervised.spec) {
                        Ok(child) => {
                            events.push(Event::Restarted {
                                name: supervised.spec.name.clone(),
                                pid: child.id().unwrap_or_default(),
                            });
                            supervised.state = State::Running { child, since: now };
                        }
                        Err(error) => {
                            let restart = supervised.restarts + 1;
                            supervised.state = if restart <= limit {
                                State::Backoff {
                                    until: now + RESTART_BACKOFF.delay(restart),
                                }
                            } else {
                                State::GaveUp
                            };
                            events.push(Event::RestartFailed {
                                name: supervised.spec.name.clone(),
                                error,
                            });
                        }
                    }
                }
                State::Backoff { .. } | State::GaveUp | State::Stopped => {}
            }
        }
        events
    }

    /// Names of the processes whose restart budget is spent.
    pub fn gave_up(&self) -> Vec<&str> {
        self.children
            .iter()
            .filter(|s| matches!(s.state, State::GaveUp))
            .map(|s| s.spec.name.as_str())
            .collect()
    }

    /// Changes how `name` is started from its next restart on (e.g. pins the port it bound).
    pub fn respec(&mut self, name: &str, change: impl FnOnce(&mut ChildSpec)) {
        if let Some(supervised) = self.children.iter_mut().find(|s| s.spec.name == name) {
            change(&mut supervised.spec);
        }
    }

    pub fn log_path(&self, name: &str) -> Option<&std::path::Path> {
        self.children
            .iter()
            .find(|s| s.spec.name == name)
            .map(|s| s.spec.log_path.as_path())
    }

    /// Pids of the processes running now.
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.children
            .iter()
            .filter_map(|s| match &s.state {
                State::Running { child, .. } => child.id().map(|pid| (s.spec.name.clone(), pid)),
                _ => None,
            })
            .collect()
    }

    /// Stops every process, last started first: `stop_signal` to its process group, SIGKILL
    /// after `grace`, then SIGKILL to whatever is left in the group. Every process is reaped.
    pub async fn stop_all(&mut self, grace: Duration) -> Vec<Stopped> {
        let mut report = Vec::new();
        for supervised in self.children.iter_mut().rev() {
            let state = std::mem::replace(&mut supervised.state, State::Stopped);
            let State::Running { mut child, .. } = state else {
                continue;
            };
            let pid = child_pid(&child);
            if let Ok(Some(status)) = child.try_wait() {
                reap_group(pid);
                report.push(Stopped {
                    name: supervised.spec.name.clone(),
                    status: Some(status),
                });
                continue;
            }
            if let Some(pid) = pid {
                let _ = killpg(pid, supervised.spec.stop_signal);
            }
            let status = match tokio::time::timeout(grace, child.wait()).await {
                Ok(Ok(status)) => Some(status),
                Ok(Err(_)) | Err(_) => {
                    if let Some(pid) = pid {
                        let _ = killpg(pid, Signal::SIGKILL);
                    }
                    let _ = child.kill().await;
                    None
                }
            };
            reap_group(pid);
            report.push(Stopped {
                name: supervised.spec.name.clone(),
                status,
            });
        }
        report
    }
}

fn child_pid(child: &Child) -> Option<Pid> {
    child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw)
}

/// Kills whatever the process left behind in its process group once it has exited.
fn reap_group(pgid: Option<Pid>) {
    if let Some(pgid) = pgid {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn spec(name: &str, script: &str, dir: &std::path::Path) -> ChildSpec {
        ChildSpec {
            name: name.to_owned(),
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            env: vec![],
            env_remove: vec![],
            log_path: dir.join(format!("{name}.log")),
            stop_signal: Signal::SIGTERM,
            run_as: None,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pulsectl-sup-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Pids in process group `pgid` that are not zombies (a zombie waits for its reaper).
    fn live_group_members(pgid: u32) -> Vec<u32> {
        let mut members = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            // After the command: state, ppid, pgrp.
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
                members.push(pid);
            }
        }
        members
    }

    /// Whether `pid` ignores SIGTERM: bit 15 of the `SigIgn` mask in its `/proc` status.
    fn ignores_sigterm(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix("SigIgn:"))
                    .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            })
            .is_some_and(|mask| mask & (1 << (15 - 1)) != 0)
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let delays: Vec<u64> = (1..=8)
            .map(|n| RESTART_BACKOFF.delay(n).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn restarts_an_exiting_process_then_gives_up() {
        let dir = scratch("restart");
        let mut supervisor = Supervisor::new(1);
        supervisor
            .start(spec("flaky", "echo ran; exit 3", &dir))
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut events = Vec::new();
        while supervisor.gave_up().is_empty() {
            assert!(Instant::now() < deadline, "events so far: {events:?}");
            events.extend(supervisor.poll());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let exits: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::Exited {
                    status, restart_in, ..
                } => Some((status.code(), restart_in.is_some())),
                _ => None,
            })
            .collect();
        assert_eq!(exits, [(Some(3), true), (Some(3), false)]);
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::Restarted { name, .. } if name == "flaky"))
        );
        let log = std::fs::read_to_string(dir.join("flaky.log")).unwrap();
        assert_eq!(log.matches("ran").count(), 2, "{log}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn stop_all_escalates_to_sigkill_and_reaps_the_group() {
        let dir = scratch("stop");
        let mut supervisor = Supervisor::new(0);
        // Ignores SIGTERM and leaves a grandchild in its process group.
        let stubborn = "trap '' TERM; sleep 300 & while true; do sleep 1; done";
        let pid = supervisor.start(spec("stubborn", stubborn, &dir)).unwrap();
        let polite = supervisor
            .start(spec("polite", "exec sleep 300", &dir))
            .unwrap();
        // Signal only once the shell has installed its trap (polled, not a fixed sleep).
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ignores_sigterm(pid) {
            assert!(Instant::now() < deadline, "pid {pid} never trapped SIGTERM");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let report = supervisor.stop_all(Duration::from_millis(500)).await;
        let summary: Vec<(&str, bool)> = report
            .iter()
            .map(|s| (s.name.as_str(), s.status.is_some()))
            .collect();
        assert_eq!(summary, [("polite", true), ("stubborn", false)]);
        for pid in [pid, polite] {
            let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
            assert!(gone, "pid {pid} still exists");
        }
        // The grandchild (`sleep 300` in the stubborn group) got SIGKILL too.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !live_group_members(pid).is_empty() {
            assert!(
                Instant::now() < deadline,
                "process group {pid} still has members {:?}",
                live_group_members(pid)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
