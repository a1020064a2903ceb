//! The process lab: disposable supervised services that the lab's own `pulse-agent` runs from
//! definition files, so Pulse sees them only through normal collection.
//!
//! Everything lives under one fresh root directory named with the run's opaque token:
//! `services.d/` (the agent's definitions), `agent/` (the agent's state and service logs) and
//! `srv/<name>/` per service (its state files, and for a writer its scratch area, an 8 MiB
//! tmpfs the driver mounts). The service programs are fixed shell programs written here, never
//! text from a manifest; a manifest only picks one ([`Program`]) and names its neighbours.
//!
//! The oracle reads the lab directly: marker files, start logs and `/proc` for processes, TCP
//! connects for listeners, `statvfs` and a real write for scratch areas.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::{AgentWiring, Inventory, LabError, Provisioned, RUN_LABEL};
use crate::manifest::{
    Fault, InjectorKind, Manifest, Predicate, Program, Resource, SCRATCH_CAPACITY_BYTES,
};

/// How long a TCP probe waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The largest write a fill makes before it must have hit ENOSPC.
const FILL_BOUND_BYTES: u64 = SCRATCH_CAPACITY_BYTES + 1024 * 1024;
const FILL_FILE: &str = ".fill";

/// A service of the lab, as provisioned.
#[derive(Debug, Clone)]
struct Service {
    alias: String,
    name: String,
    program: Program,
    dir: PathBuf,
    /// Listener: its port; client: its dependency's port.
    port: Option<u16>,
    scratch: bool,
    labels: Vec<(String, String)>,
    /// Bumped to make the agent restart a stopped listener.
    revision: u32,
}

impl Service {
    fn marker(&self) -> PathBuf {
        self.dir.join("state").join("maintenance")
    }
    fn crash_flag(&self) -> PathBuf {
        self.dir.join("conf").join("invalid")
    }
    fn stop_flag(&self) -> PathBuf {
        self.dir.join("state").join("drain")
    }
    fn starts(&self) -> PathBuf {
        self.dir.join("state").join("starts")
    }
    fn scratch_dir(&self) -> PathBuf {
        self.dir.join("cache")
    }
    fn www(&self) -> PathBuf {
        self.dir.join("www")
    }
}

pub struct ProcessLab {
    manifest: Manifest,
    root: PathBuf,
    token: String,
    services: Vec<Service>,
}

impl ProcessLab {
    /// A lab under `root` (which must not exist yet: it is created and removed whole).
    pub fn new(manifest: Manifest, root: PathBuf, token: String) -> Result<Self, LabError> {
        if root.exists() {
            return Err(LabError::Unavailable(format!(
                "the lab root {} already exists; give a fresh --lab-root",
                root.display()
            )));
        }
        Ok(Self {
            manifest,
            root,
            token,
            services: Vec::new(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn services_dir(&self) -> PathBuf {
        self.root.join("services.d")
    }

    pub fn agent_wiring(&self) -> AgentWiring {
        AgentWiring {
            services_dir: Some(self.services_dir()),
            docker_host: None,
            docker_label: None,
        }
    }

    /// The agent's state directory (its logs live there).
    pub fn agent_state_dir(&self) -> PathBuf {
        self.root.join("agent")
    }

    pub async fn prepare(&mut self) -> Result<(), LabError> {
        Ok(())
    }

    /// Processes whose command line names the lab root, the lab's definition files and
    /// mounts, and the root itself.
    pub async fn inventory(&self) -> Result<Inventory, LabError> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || inventory_of(&root))
            .await
            .map_err(|e| LabError::failed("inventory", e))?
    }

    pub async fn provision(&mut self) -> Result<Vec<Provisioned>, LabError> {
        let mut services = Vec::new();
        for resource in &self.manifest.resources {
            services.push(self.plan_service(resource)?);
        }
        // Clients learn their dependency's port.
        for i in 0..services.len() {
            if services[i].program == Program::Client {
                let dep = self
                    .manifest
                    .resource(&services[i].alias)
                    .and_then(|r| r.depends_on.clone())
                    .ok_or_else(|| LabError::Unsupported {
                        driver: "process",
                        what: format!("client '{}' without depends_on", services[i].alias),
                    })?;
                let port = services
                    .iter()
                    .find(|s| s.alias == dep)
                    .and_then(|s| s.port)
                    .ok_or_else(|| LabError::Unsupported {
                        driver: "process",
                        what: format!("'{dep}' is not a listener"),
                    })?;
                services[i].port = Some(port);
            }
        }
        fs::create_dir_all(self.services_dir()).map_err(|e| LabError::failed("provision", e))?;
        fs::create_dir_all(self.agent_state_dir()).map_err(|e| LabError::failed("provision", e))?;
        for service in &services {
            for sub in ["state", "conf", "www"] {
                fs::create_dir_all(service.dir.join(sub))
                    .map_err(|e| LabError::failed("provision", e))?;
            }
            if service.scratch {
                let dir = service.scratch_dir();
                fs::create_dir_all(&dir).map_err(|e| LabError::failed("provision", e))?;
                mount_scratch(&dir)?;
            }
            self.write_definition(service)?;
        }
        let provisioned = services
            .iter()
            .map(|s| Provisioned {
                alias: s.alias.clone(),
                name: s.name.clone(),
                source_id: s.name.clone(),
                resource_type: "service",
            })
            .collect();
        self.services = services;
        Ok(provisioned)
    }

    fn plan_service(&self, resource: &Resource) -> Result<Service, LabError> {
        let program = resource.program.ok_or_else(|| LabError::Unsupported {
            driver: "process",
            what: format!("resource '{}' names no program", resource.alias),
        })?;
        let name = resource
            .name_in_run(&self.token)
            .map_err(|e| LabError::failed("provision", e))?;
        let port = match program {
            Program::Listener => Some(free_port()?),
            _ => None,
        };
        let mut labels: Vec<(String, String)> = resource
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.push((RUN_LABEL.to_owned(), self.token.clone()));
        Ok(Service {
            alias: resource.alias.clone(),
            dir: self.root.join("srv").join(&name),
            name,
            program,
            port,
            scratch: resource.scratch_storage,
            labels,
            revision: 1,
        })
    }

    fn write_definition(&self, service: &Service) -> Result<(), LabError> {
        let text = definition(service);
        let path = self.services_dir().join(format!("{}.toml", service.name));
        let tmp = self.services_dir().join(format!(".{}.tmp", service.name));
        fs::write(&tmp, text).map_err(|e| LabError::failed("write definition", e))?;
        fs::rename(&tmp, &path).map_err(|e| LabError::failed("write definition", e))
    }

    fn service(&self, alias: &str) -> Result<&Service, LabError> {
        self.services
            .iter()
            .find(|s| s.alias == alias)
            .ok_or_else(|| LabError::failed("lookup", format!("no provisioned resource '{alias}'")))
    }

    pub async fn probe(&self, predicate: &Predicate) -> Result<Value, LabError> {
        let service = self.service(&predicate.target)?.clone();
        let probe = predicate.probe.clone();
        tokio::task::spawn_blocking(move || probe_service(&service, &probe))
            .await
            .map_err(|e| LabError::failed("probe", e))?
    }

    pub async fn inject(&mut self, fault: &Fault) -> Result<(), LabError> {
        let service = self.service(&fault.injector.resource)?.clone();
        match (fault.injector.kind, service.program) {
            (InjectorKind::MarkerEnable, Program::Worker) => {
                write_new(&service.marker(), b"1\n", "inject marker")
            }
            (InjectorKind::CrashLoop, Program::Worker) => {
                fs::write(service.starts(), b"").map_err(|e| LabError::failed("inject", e))?;
                write_new(&service.crash_flag(), b"1\n", "inject crash loop")
            }
            (InjectorKind::Stop, Program::Listener) => {
                write_new(&service.stop_flag(), b"1\n", "inject stop")
            }
            (InjectorKind::Kill, _) => {
                let pid = current_pid(&service).ok_or_else(|| {
                    LabError::failed("inject kill", format!("{} is not running", service.name))
                })?;
                nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                )
                .map_err(|e| LabError::failed("inject kill", e))
            }
            (InjectorKind::FillScratchStorage, Program::Writer) if service.scratch => {
                let dir = service.scratch_dir();
                tokio::task::spawn_blocking(move || fill_scratch(&dir))
                    .await
                    .map_err(|e| LabError::failed("fill", e))?
            }
            (kind, program) => Err(LabError::Unsupported {
                driver: "process",
                what: format!("injector {} on a {program:?}", kind.as_str()),
            }),
        }
    }

    pub async fn revert(&mut self, fault: &Fault) -> Result<(), LabError> {
        let service = self.service(&fault.injector.resource)?.clone();
        match fault.injector.kind {
            InjectorKind::MarkerEnable => remove_if_present(&service.marker()),
            InjectorKind::CrashLoop => remove_if_present(&service.crash_flag()),
            InjectorKind::Stop => {
                remove_if_present(&service.stop_flag())?;
                // A listener that exited 0 stays down under `on-failure`: a changed definition
                // makes the agent start it again.
                if let Some(s) = self.services.iter_mut().find(|s| s.alias == service.alias) {
                    s.revision += 1;
                }
                let updated = self.service(&service.alias)?.clone();
                self.write_definition(&updated)
            }
            InjectorKind::Kill => Ok(()),
            InjectorKind::FillScratchStorage => {
                remove_if_present(&service.scratch_dir().join(FILL_FILE))
            }
            other => Err(LabError::Unsupported {
                driver: "process",
                what: format!("injector {}", other.as_str()),
            }),
        }
    }

    /// Stops every lab process, unmounts scratch areas and removes the root. Returns what it
    /// had to do; nothing when the lab is already gone.
    pub async fn cleanup(&mut self) -> Result<Vec<String>, LabError> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || cleanup_root(&root))
            .await
            .map_err(|e| LabError::failed("cleanup", e))?
    }
}

/// The definition file of `service`: a fixed program per kind, paths passed as arguments
/// (`sh -c SCRIPT NAME ARGS...`: the service's name is `$0`, its paths `$1`...).
fn definition(service: &Service) -> String {
    let q = |s: &str| toml_string(s);
    let path = |p: PathBuf| q(&p.display().to_string());
    let (script, args, restart, health): (&str, Vec<String>, &str, String) = match service.program {
        Program::Worker => (
            "echo \"$$\" >> \"$3\"; rm -f -- \"$1\"; while :; do if [ -f \"$2\" ]; then \
             echo \"$0: invalid configuration in $2, exiting\" >&2; exit 1; fi; sleep 1; done",
            vec![
                path(service.marker()),
                path(service.crash_flag()),
                path(service.starts()),
            ],
            "always",
            format!(
                "type = \"file-absent\"\npath = {}\ninterval_ms = 500\ntimeout_ms = 1000\n",
                path(service.marker())
            ),
        ),
        Program::Listener => (
            "echo \"$$\" >> \"$3\"; python3 -m http.server \"$1\" --bind 127.0.0.1 --directory \
             \"$4\" >/dev/null 2>&1 & child=$!; trap 'kill $child 2>/dev/null; exit 0' TERM INT; \
             while [ ! -f \"$2\" ]; do kill -0 $child 2>/dev/null || exit 1; sleep 0.5; done; \
             echo \"$0: draining and shutting down\" >&2; kill $child; wait $child; exit 0",
            vec![
                q(&service.port.unwrap_or_default().to_string()),
                path(service.stop_flag()),
                path(service.starts()),
                path(service.www()),
            ],
            "on-failure",
            format!(
                "type = \"tcp\"\naddress = {}\ninterval_ms = 500\ntimeout_ms = 1000\n",
                q(&format!("127.0.0.1:{}", service.port.unwrap_or_default()))
            ),
        ),
        Program::Client => (
            "echo \"$$\" >> \"$1\"; while :; do sleep 1; done",
            vec![path(service.starts())],
            "always",
            format!(
                "type = \"tcp\"\naddress = {}\ninterval_ms = 500\ntimeout_ms = 1000\n",
                q(&format!("127.0.0.1:{}", service.port.unwrap_or_default()))
            ),
        ),
        Program::Writer => (
            "echo \"$$\" >> \"$2\"; while :; do if date > \"$1/.w.$$\" 2>/dev/null && mv -f \
             \"$1/.w.$$\" \"$1/last-write\"; then :; else rm -f \"$1/.w.$$\"; echo \"$0: \
             write to $1 failed\" >&2; fi; sleep 1; done",
            vec![path(service.scratch_dir()), path(service.starts())],
            "always",
            format!(
                "type = \"exec\"\ncommand = \"/bin/sh\"\nargs = [\"-c\", {}, \"probe\", {}]\n\
                 interval_ms = 1000\ntimeout_ms = 2000\n",
                q("f=\"$1/.probe.$$\"; echo ok > \"$f\" && rm -f \"$f\""),
                path(service.scratch_dir())
            ),
        ),
    };
    let mut all_args = vec![q("-c"), q(script), q(&service.name)];
    all_args.extend(args);
    let labels: Vec<String> = service
        .labels
        .iter()
        .map(|(k, v)| format!("{} = {}", q(k), q(v)))
        .collect();
    format!(
        "name = {name}\ncommand = \"/bin/sh\"\nargs = [{args}]\nlabels = {{ {labels} }}\n\
         env = {{ SERVICE_REVISION = \"{revision}\" }}\n\n[restart]\npolicy = \"{restart}\"\n\
         initial_backoff_ms = 500\nmax_backoff_ms = 2000\n\n[health]\n{health}",
        name = q(&service.name),
        args = all_args.join(", "),
        labels = labels.join(", "),
        revision = service.revision,
    )
}

fn toml_string(s: &str) -> String {
    // A TOML basic string is a JSON string for every character we write.
    Value::String(s.to_owned()).to_string()
}

fn free_port() -> Result<u16, LabError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| LabError::failed("port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| LabError::failed("port", e))
}

fn mount_scratch(dir: &Path) -> Result<(), LabError> {
    use nix::mount::{MsFlags, mount};
    let options = format!("size={SCRATCH_CAPACITY_BYTES},mode=0755");
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(options.as_str()),
    )
    .map_err(|e| {
        LabError::Unavailable(format!(
            "cannot mount the fixed 8 MiB scratch area at {} ({e}); the storage scenarios need \
             permission to mount a tmpfs: run as root or with CAP_SYS_ADMIN",
            dir.display()
        ))
    })
}

fn write_new(path: &Path, content: &[u8], operation: &str) -> Result<(), LabError> {
    fs::write(path, content).map_err(|e| LabError::failed(operation, e))
}

fn remove_if_present(path: &Path) -> Result<(), LabError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LabError::failed("revert", e)),
    }
}

/// The newest start's pid, when that process is alive (not a zombie).
fn current_pid(service: &Service) -> Option<i32> {
    let starts = fs::read_to_string(service.starts()).ok()?;
    let pid: i32 = starts.lines().last()?.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

fn alive(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

fn tcp_open(port: Option<u16>) -> bool {
    let Some(port) = port else { return false };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).is_ok()
}

/// A real write of a new file into the scratch area: what the service's health depends on.
fn scratch_writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".oracle.{}", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|mut f| f.write_all(b"ok\n").and_then(|()| f.sync_all()));
    let _ = fs::remove_file(&probe);
    written.is_ok()
}

fn scratch_available(dir: &Path) -> Result<u64, LabError> {
    let stat = nix::sys::statvfs::statvfs(dir).map_err(|e| LabError::failed("statvfs", e))?;
    let fragment = stat.fragment_size();
    let capacity = stat.blocks() * fragment;
    if capacity != SCRATCH_CAPACITY_BYTES {
        return Err(LabError::failed(
            "scratch probe",
            format!(
                "{} is not the lab's fixed {SCRATCH_CAPACITY_BYTES}-byte area ({capacity} bytes)",
                dir.display()
            ),
        ));
    }
    Ok(stat.blocks_available() * fragment)
}

fn probe_service(service: &Service, probe: &str) -> Result<Value, LabError> {
    match probe {
        "service.health" => {
            let healthy = match service.program {
                Program::Worker => !service.marker().exists() && current_pid(service).is_some(),
                Program::Listener | Program::Client => tcp_open(service.port),
                Program::Writer => scratch_writable(&service.scratch_dir()),
            };
            Ok(json!(if healthy { "healthy" } else { "unhealthy" }))
        }
        "service.running" => Ok(json!(current_pid(service).is_some())),
        "service.start_count" => {
            let starts = fs::read_to_string(service.starts()).unwrap_or_default();
            Ok(json!(
                starts.lines().filter(|l| !l.trim().is_empty()).count()
            ))
        }
        "scratch.available_bytes" if service.scratch => {
            Ok(json!(scratch_available(&service.scratch_dir())?))
        }
        other => Err(LabError::Unsupported {
            driver: "process",
            what: format!("probe {other} on {}", service.alias),
        }),
    }
}

/// Fills the scratch area with one new file until a write fails with ENOSPC (bounded), then
/// checks the area has nothing left. Refuses an existing fill file or a symlink in its place.
fn fill_scratch(dir: &Path) -> Result<(), LabError> {
    scratch_available(dir)?;
    let path = dir.join(FILL_FILE);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| LabError::failed("fill", format!("{}: {e}", path.display())))?;
    let chunk = vec![0u8; 64 * 1024];
    let mut written: u64 = 0;
    let mut hit_enospc = false;
    while written < FILL_BOUND_BYTES {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                hit_enospc = true;
                break;
            }
            Err(e) => return Err(LabError::failed("fill", e)),
        }
    }
    // Whatever partial page is left: one byte at a time until the area refuses.
    if hit_enospc {
        loop {
            match file.write(b"x") {
                Ok(_) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(LabError::failed("fill", e)),
            }
        }
    }
    if !hit_enospc {
        return Err(LabError::failed(
            "fill",
            format!("{written} bytes written without ENOSPC: not the bounded scratch area"),
        ));
    }
    let left = scratch_available(dir)?;
    if left != 0 {
        return Err(LabError::failed(
            "fill",
            format!("{left} bytes still available after ENOSPC"),
        ));
    }
    Ok(())
}

fn mounts_under(root: &Path) -> Vec<PathBuf> {
    let prefix = root.display().to_string();
    fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|p| p.replace("\\040", " "))
        .filter(|p| p.starts_with(&prefix))
        .map(PathBuf::from)
        .collect()
}

/// Pids (other than ours) whose command line names `root`, with the command line.
fn processes_naming(root: &Path) -> Vec<(i32, String)> {
    let needle = root.display().to_string();
    let me = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me || !alive(pid) {
            continue;
        }
        let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(&needle) {
            out.push((pid, cmdline.trim().to_owned()));
        }
    }
    out.sort();
    out
}

fn inventory_of(root: &Path) -> Result<Inventory, LabError> {
    let mut inventory = Inventory::new();
    if root.exists() {
        inventory.insert(format!("dir {}", root.display()));
    }
    for (pid, cmdline) in processes_naming(root) {
        inventory.insert(format!("process {pid} {cmdline}"));
    }
    for mount in mounts_under(root) {
        inventory.insert(format!("mount {}", mount.display()));
    }
    if let Ok(entries) = fs::read_dir(root.join("services.d")) {
        for entry in entries.flatten() {
            inventory.insert(format!("definition {}", entry.path().display()));
        }
    }
    Ok(inventory)
}

fn cleanup_root(root: &Path) -> Result<Vec<String>, LabError> {
    let mut actions = Vec::new();
    // Definitions first, so a still-running agent stops rather than restarts the services.
    if let Ok(entries) = fs::read_dir(root.join("services.d")) {
        for entry in entries.flatten() {
            if fs::remove_file(entry.path()).is_ok() {
                actions.push(format!("removed definition {}", entry.path().display()));
            }
        }
    }
    for _ in 0..50 {
        let left = processes_naming(root);
        if left.is_empty() {
            break;
        }
        for (pid, cmdline) in left {
            if nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
            {
                actions.push(format!("killed {pid} {cmdline}"));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut mounts = mounts_under(root);
    // Deepest first.
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for mount in mounts {
        nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH)
            .map_err(|e| LabError::failed("unmount", format!("{}: {e}", mount.display())))?;
        actions.push(format!("unmounted {}", mount.display()));
    }
    if root.exists() {
        fs::remove_dir_all(root)
            .map_err(|e| LabError::failed("remove", format!("{}: {e}", root.display())))?;
        actions.push(format!("removed {}", root.display()));
    }
    let left = processes_naming(root);
    if !left.is_empty() {
        return Err(LabError::failed(
            "cleanup",
            format!("processes survived SIGKILL: {left:?}"),
        ));
    }
    Ok(actions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(program: Program) -> Service {
        Service {
            alias: "a".into(),
            name: "orders-api-k3x9".into(),
            program,
            dir: PathBuf::from("/lab root/srv/orders-api-k3x9"),
            port: Some(4100),
            scratch: program == Program::Writer,
            labels: vec![(RUN_LABEL.into(), "k3x9".into())],
            revision: 1,
        }
    }

    /// A watch manifest of the process lab with `resources`.
    fn manifest(resources: Value) -> Manifest {
        serde_json::from_value(json!({
            "schema_version": "patrol.qual/v1", "id": "watch.names", "version": 1,
            "title": "names", "description": "names", "owner": "ai-runtime",
            "track": "watch", "risk": "reversible",
            "lab": {"driver": "process", "profile": "process-v1"},
            "resources": resources, "baseline": [], "faults": [],
            "collection": {"sources": ["pulse-agent"], "convergence_timeout": "1m", "poll_interval": "1s"},
            "patrol": {"mode": "monitor", "scoped": true, "run_timeout": "1m"},
            "security": {},
            "budgets": {
                "collection_latency_p95": "1m", "patrol_latency_p95": "1m", "end_to_end_latency_p95": "1m",
                "input_tokens_p95": 1, "output_tokens_p95": 1, "cost_usd_p95": 0.1,
                "max_tool_calls": 1, "max_duplicate_calls": 0
            },
            "repeat": {"development": 1, "nightly": 1, "qualification": 22},
            "gates": {
                "min_recall": 1.0, "max_false_positives": 0, "min_resource_accuracy": 1.0,
                "min_category_accuracy": 1.0, "min_severity_accuracy": 1.0,
                "min_evidence_grounding": 1.0, "max_findings_per_causal_group": 1.0
            },
            "teardown": {}
        }))
        .expect("a manifest")
    }

    #[tokio::test]
    async fn either_run_placeholder_names_the_provisioned_services() {
        let token = format!("k{}", std::process::id());
        let root = std::env::temp_dir().join(format!("srv-names-{token}"));
        let mut lab = ProcessLab::new(
            manifest(json!([
                {"alias": "a", "kind": "service", "name": "orders-api-${run_id}", "program": "worker"},
                {"alias": "b", "kind": "service", "name": "billing-${run_token}-api", "program": "worker"},
            ])),
            root.clone(),
            token.clone(),
        )
        .expect("a fresh root");
        let provisioned = lab.provision().await;
        let definitions: Vec<String> = fs::read_dir(lab.services_dir())
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let removed = lab.cleanup().await;
        let provisioned = provisioned.expect("provisioned");
        let names: Vec<(&str, &str)> = provisioned
            .iter()
            .map(|p| (p.alias.as_str(), p.name.as_str()))
            .collect();
        let a = format!("orders-api-{token}");
        let b = format!("billing-{token}-api");
        assert_eq!(names, [("a", a.as_str()), ("b", b.as_str())]);
        let mut definitions = definitions;
        definitions.sort();
        assert_eq!(definitions, [format!("{b}.toml"), format!("{a}.toml")]);
        assert!(removed.is_ok() && !root.exists(), "{removed:?}");

        // A name that slipped past validation is refused, never provisioned literally.
        let root = std::env::temp_dir().join(format!("srv-names-bad-{token}"));
        let mut lab = ProcessLab::new(
            manifest(json!([
                {"alias": "a", "kind": "service", "name": "orders-${run_token}-${port}", "program": "worker"},
            ])),
            root.clone(),
            token,
        )
        .expect("a fresh root");
        assert!(matches!(
            lab.provision().await,
            Err(LabError::Failed { reason, .. }) if reason.contains("${port}")
        ));
        assert!(!root.exists());
    }

    #[test]
    fn definitions_parse_as_toml_and_pass_paths_as_arguments() {
        for program in [
            Program::Worker,
            Program::Listener,
            Program::Client,
            Program::Writer,
        ] {
            let text = definition(&service(program));
            let parsed: toml::Value =
                toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(parsed["name"].as_str(), Some("orders-api-k3x9"));
            assert_eq!(parsed["labels"][RUN_LABEL].as_str(), Some("k3x9"));
            let args = parsed["args"].as_array().expect("args");
            // The script never contains a path: paths are positional arguments.
            assert!(
                !args[1].as_str().unwrap_or_default().contains("/lab root"),
                "{text}"
            );
            assert!(parsed["health"]["type"].is_str(), "{text}");
        }
    }
}
