//! The Proxmox VE lab: a disposable cluster served by `fakepve` (PyPI, a fake of the Proxmox VE
//! API built from Proxmox's official API schema, over TLS with API tokens), which Pulse reads
//! through a connection and its own connector, as it reads a real cluster.
//!
//! The lab starts the fake with the scenario's guests, storages and cluster name (each named
//! with the run's opaque token), a fresh API token and a certificate of its own; the runner adds
//! the connection ([`ProxmoxLab::connection`]) and removes it at teardown. Faults are the fake's
//! own scenario hooks, driven by reviewed code here: a guest stopped behind Pulse's back, a
//! storage filled to 96%, a guest's last successful backup aged past any window, a lost quorum.
//!
//! The oracle reads the fake directly (its `inspect` command), never through Pulse.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::{AgentWiring, Inventory, LabError, Provisioned};
use crate::manifest::{Fault, InjectorKind, Manifest, Predicate, ResourceKind};

/// The node every lab guest and storage lives on.
const NODE: &str = "pve1";
/// A lab storage's size, and how much of it is in use at baseline and when filled.
const STORAGE_BYTES: u64 = 100 * 1024 * 1024 * 1024;
const BASELINE_USED_PCT: u64 = 40;
const FILLED_USED_PCT: u64 = 96;
/// How old a stale backup is: past any backup window a scenario sets.
const STALE_BACKUP_AGE: Duration = Duration::from_secs(10 * 24 * 3600);
/// How long the fake may take to start and to answer one command.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The API token the lab's cluster grants read access to.
const TOKEN_USER: &str = "pulse@pve";

/// A resource of the lab, as provisioned.
#[derive(Debug, Clone)]
struct Part {
    alias: String,
    kind: ResourceKind,
    name: String,
    /// Guests: the VMID.
    vmid: Option<u64>,
}

/// The running fake.
struct Fake {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

/// What the runner adds to Pulse so its connector reads the lab's cluster.
#[derive(Debug, Clone)]
pub struct ConnectionWiring {
    /// The connection's name (Pulse reports the cluster as agent `pve.<name>`).
    pub name: String,
    pub url: String,
    pub fingerprint: String,
    pub token_id: String,
    pub token_secret: String,
}

impl ConnectionWiring {
    /// The agent id the connector reports the lab's cluster under.
    pub fn agent_id(&self) -> String {
        format!("pve.{}", self.name)
    }
}

pub struct ProxmoxLab {
    manifest: Manifest,
    token: String,
    python: PathBuf,
    serve: PathBuf,
    root: PathBuf,
    parts: Vec<Part>,
    fake: Option<Fake>,
    wiring: Option<ConnectionWiring>,
    /// The `/cluster/tasks` answer: each guest's latest backup task.
    backups: Vec<Value>,
}

fn failed(operation: &str, reason: impl ToString) -> LabError {
    LabError::failed(operation, reason)
}

impl ProxmoxLab {
    /// A lab whose fake is `python serve` (`serve` is the launcher, `python` one with fakepve
    /// installed), working under `base/pve-<token>`.
    pub fn new(
        manifest: Manifest,
        token: String,
        python: PathBuf,
        serve: PathBuf,
        base: &Path,
    ) -> Result<Self, LabError> {
        if !serve.is_file() {
            return Err(LabError::Unavailable(format!(
                "the fakepve launcher {} does not exist; give --fakepve-serve",
                serve.display()
            )));
        }
        let root = base.join(format!("pve-{token}"));
        Ok(Self {
            manifest,
            token,
            python,
            serve,
            root,
            parts: Vec::new(),
            fake: None,
            wiring: None,
            backups: Vec::new(),
        })
    }

    /// The Proxmox lab collects through Pulse's connector, not an agent of its own.
    pub fn agent_wiring(&self) -> AgentWiring {
        AgentWiring::default()
    }

    /// The connection to add, once provisioned.
    pub fn connection(&self) -> Option<&ConnectionWiring> {
        self.wiring.as_ref()
    }

    pub async fn prepare(&mut self) -> Result<(), LabError> {
        Ok(())
    }

    /// The lab's directory and a running fake of this run.
    pub async fn inventory(&self) -> Result<Inventory, LabError> {
        let mut inventory = Inventory::new();
        if self.root.exists() {
            inventory.insert(format!("dir {}", self.root.display()));
        }
        let marker = self.root.display().to_string();
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                    continue;
                };
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                if cmdline.contains(&marker) {
                    inventory.insert(format!("process {}", cmdline.trim()));
                }
            }
        }
        Ok(inventory)
    }

    fn name(&self, template: &str) -> Result<String, LabError> {
        crate::placeholder::resource_name(template, &self.token)
            .map_err(|e| failed("naming a resource", e))
    }

    pub async fn provision(&mut self) -> Result<Vec<Provisioned>, LabError> {
        std::fs::create_dir_all(&self.root).map_err(|e| failed("creating the lab directory", e))?;
        let mut parts = Vec::new();
        let mut next_vmid = 100;
        for resource in &self.manifest.resources {
            let vmid = (resource.kind == ResourceKind::Guest).then(|| {
                next_vmid += 1;
                next_vmid - 1
            });
            parts.push(Part {
                alias: resource.alias.clone(),
                kind: resource.kind,
                name: self.name(&resource.name)?,
                vmid,
            });
        }
        let secret = uuid::Uuid::new_v4().to_string();
        let token_id = format!("{TOKEN_USER}!lab{}", self.token);
        let cluster_name = parts
            .iter()
            .find(|p| p.kind == ResourceKind::Cluster)
            .map(|p| p.name.clone())
            .unwrap_or_else(|| format!("cluster-{}", self.token));
        let now = chrono::Utc::now().timestamp();
        self.backups = parts
            .iter()
            .filter_map(|p| p.vmid)
            .map(|vmid| backup_task(vmid, now - 3600))
            .collect();
        let spec = json!({
            "tokens": { &token_id: &secret },
            "cluster_name": cluster_name,
            "nodes": [{"name": NODE}],
            "grants": [{"user": &token_id, "path": "/",
                        "privs": ["Sys.Audit", "VM.Audit", "Datastore.Audit"]}],
            "guests": parts.iter().filter_map(|p| p.vmid.map(|vmid| json!({
                "vmid": vmid, "name": p.name, "node": NODE, "status": "running",
            }))).collect::<Vec<_>>(),
            "storages": parts.iter().filter(|p| p.kind == ResourceKind::Storage).map(|p| json!({
                "storage": p.name, "type": "dir", "content": "images,rootdir",
                "total": STORAGE_BYTES, "used": STORAGE_BYTES * BASELINE_USED_PCT / 100,
            })).collect::<Vec<_>>(),
            "answers": {
                "/cluster/tasks": &self.backups,
                // A healthy node's disks and pools: nothing for Patrol to find at baseline.
                format!("/nodes/{NODE}/disks/list"): [],
                format!("/nodes/{NODE}/disks/zfs"): [],
            },
        });
        let spec_file = self.root.join("spec.json");
        std::fs::write(&spec_file, spec.to_string())
            .map_err(|e| failed("writing the cluster's description", e))?;
        let mut child = tokio::process::Command::new(&self.python)
            .arg(&self.serve)
            .arg(&spec_file)
            .arg(&self.root)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                LabError::Unavailable(format!(
                    "{} cannot start the fake ({e}); give --fakepve-python, a Python with \
                     fakepve installed (pip install 'fakepve[crypto]')",
                    self.python.display()
                ))
            })?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| failed("starting the fake", "no stdin"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| failed("starting the fake", "no stdout"))?;
        let mut stdout = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_TIMEOUT, stdout.next_line())
            .await
            .map_err(|_| failed("starting the fake", "it did not listen within 60 s"))?
            .map_err(|e| failed("starting the fake", e))?
            .ok_or_else(|| {
                LabError::Unavailable(format!(
                    "the fake exited before listening; is fakepve installed for {}?",
                    self.python.display()
                ))
            })?;
        let ready: Value =
            serde_json::from_str(&line).map_err(|e| failed("starting the fake", e))?;
        let field = |name: &str| {
            ready[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| failed("starting the fake", format!("no {name} in {line}")))
        };
        self.wiring = Some(ConnectionWiring {
            name: format!("cluster-{}", self.token),
            url: field("url")?,
            fingerprint: field("fingerprint")?,
            token_id,
            token_secret: secret,
        });
        self.fake = Some(Fake {
            child,
            stdin,
            stdout,
        });
        let agent = self
            .wiring
            .as_ref()
            .map(|w| w.agent_id())
            .unwrap_or_default();
        let provisioned = parts
            .iter()
            .map(|p| Provisioned {
                alias: p.alias.clone(),
                name: p.name.clone(),
                source_id: match p.kind {
                    ResourceKind::Guest => p.vmid.unwrap_or_default().to_string(),
                    ResourceKind::Storage => format!("{NODE}/{}", p.name),
                    _ => agent.clone(),
                },
                resource_type: match p.kind {
                    ResourceKind::Guest => "vm",
                    ResourceKind::Storage => "storage",
                    _ => "host",
                },
            })
            .collect();
        self.parts = parts;
        self.refresh().await?;
        Ok(provisioned)
    }

    async fn command(&mut self, command: Value) -> Result<Value, LabError> {
        let fake = self
            .fake
            .as_mut()
            .ok_or_else(|| failed("talking to the fake", "it is not running"))?;
        let mut line = command.to_string();
        line.push('\n');
        fake.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| failed("talking to the fake", e))?;
        let answer = tokio::time::timeout(COMMAND_TIMEOUT, fake.stdout.next_line())
            .await
            .map_err(|_| failed("talking to the fake", "no answer within 10 s"))?
            .map_err(|e| failed("talking to the fake", e))?
            .ok_or_else(|| failed("talking to the fake", "it exited"))?;
        let answer: Value =
            serde_json::from_str(&answer).map_err(|e| failed("talking to the fake", e))?;
        if answer["ok"] != json!(true) {
            return Err(failed(
                &format!("fake command {}", command["op"]),
                answer["error"].as_str().unwrap_or("refused"),
            ));
        }
        Ok(answer["data"].clone())
    }

    fn part(&self, alias: &str) -> Result<&Part, LabError> {
        self.parts
            .iter()
            .find(|p| p.alias == alias)
            .ok_or_else(|| failed("finding a resource", format!("no resource '{alias}'")))
    }

    /// The value `predicate.probe` reads on its target now, from the fake itself.
    pub async fn probe(&self, predicate: &Predicate) -> Result<Value, LabError> {
        if predicate.probe == crate::validate::PROBE_INVENTORY_SAME_AS_PRE {
            return Err(LabError::Unsupported {
                driver: "proxmox",
                what: "inventory.same_as_pre is judged at teardown".to_owned(),
            });
        }
        let state = self.inspect().await?;
        let part = self.part(&predicate.target)?;
        match predicate.probe.as_str() {
            "pve.guest_status" => {
                let vmid = part.vmid.ok_or_else(|| failed("probing", "not a guest"))?;
                Ok(state["guests"][vmid.to_string()].clone())
            }
            "pve.quorate" => Ok(state["quorate"].clone()),
            "pve.storage_used_percent" => {
                let s = &state["storages"][&part.name];
                let (total, used) = (s["total"].as_f64(), s["used"].as_f64());
                match (total, used) {
                    (Some(total), Some(used)) if total > 0.0 => {
                        Ok(json!((used / total * 1000.0).round() / 10.0))
                    }
                    _ => Err(failed("probing", format!("no storage {}", part.name))),
                }
            }
            "pve.backup_age_hours" => {
                let vmid = part.vmid.ok_or_else(|| failed("probing", "not a guest"))?;
                let ended = self
                    .backups
                    .iter()
                    .filter(|t| t["id"] == json!(vmid.to_string()))
                    .filter_map(|t| t["endtime"].as_i64())
                    .max()
                    .ok_or_else(|| failed("probing", format!("guest {vmid} has no backup")))?;
                let age = (chrono::Utc::now().timestamp() - ended).max(0) as f64 / 3600.0;
                Ok(json!((age * 10.0).round() / 10.0))
            }
            other => Err(LabError::Unsupported {
                driver: "proxmox",
                what: format!("probe '{other}'"),
            }),
        }
    }

    /// The fake's state as it answered `inspect` after the last change the lab made (the fake
    /// changes only when told to, so that answer is its state now).
    async fn inspect(&self) -> Result<Value, LabError> {
        let text = std::fs::read_to_string(self.root.join("state.json"))
            .map_err(|e| failed("reading the fake's state", e))?;
        serde_json::from_str(&text).map_err(|e| failed("reading the fake's state", e))
    }

    /// Asks the fake for its state and keeps it where [`ProxmoxLab::probe`] reads it.
    pub async fn refresh(&mut self) -> Result<(), LabError> {
        let state = self.command(json!({"op": "inspect"})).await?;
        std::fs::write(self.root.join("state.json"), state.to_string())
            .map_err(|e| failed("keeping the fake's state", e))
    }

    pub async fn inject(&mut self, fault: &Fault) -> Result<(), LabError> {
        self.apply(fault, true).await
    }

    pub async fn revert(&mut self, fault: &Fault) -> Result<(), LabError> {
        self.apply(fault, false).await
    }

    async fn apply(&mut self, fault: &Fault, inject: bool) -> Result<(), LabError> {
        let part = self.part(&fault.injector.resource)?.clone();
        match fault.injector.kind {
            InjectorKind::GuestStop => {
                let vmid = part
                    .vmid
                    .ok_or_else(|| failed("guest_stop", "not a guest"))?;
                let status = if inject { "stopped" } else { "running" };
                self.command(json!({"op": "set_status", "vmid": vmid, "status": status}))
                    .await?;
            }
            InjectorKind::LoseQuorum => {
                let op = if inject {
                    "lose_quorum"
                } else {
                    "regain_quorum"
                };
                self.command(json!({"op": op})).await?;
            }
            InjectorKind::FillStorage => {
                let pct = if inject {
                    FILLED_USED_PCT
                } else {
                    BASELINE_USED_PCT
                };
                self.command(json!({
                    "op": "storage_used", "storage": part.name,
                    "used": STORAGE_BYTES * pct / 100,
                }))
                .await?;
            }
            InjectorKind::StaleBackup => {
                let vmid = part
                    .vmid
                    .ok_or_else(|| failed("stale_backup", "not a guest"))?;
                let now = chrono::Utc::now().timestamp();
                let ended = if inject {
                    now - STALE_BACKUP_AGE.as_secs() as i64
                } else {
                    now - 60
                };
                for task in &mut self.backups {
                    if task["id"] == json!(vmid.to_string()) {
                        *task = backup_task(vmid, ended);
                    }
                }
                let tasks = json!(self.backups);
                self.command(json!({"op": "answer", "path": "/cluster/tasks", "data": tasks}))
                    .await?;
            }
            other => {
                return Err(LabError::Unsupported {
                    driver: "proxmox",
                    what: format!("injector '{}'", other.as_str()),
                });
            }
        }
        self.refresh().await
    }

    /// Stops the fake and removes the lab's directory; what it had to do.
    pub async fn cleanup(&mut self) -> Result<Vec<String>, LabError> {
        let mut actions = Vec::new();
        if let Some(mut fake) = self.fake.take() {
            drop(fake.stdin);
            if tokio::time::timeout(Duration::from_secs(5), fake.child.wait())
                .await
                .is_err()
            {
                let _ = fake.child.kill().await;
            }
            actions.push("stopped the fake cluster".to_owned());
        }
        if self.root.exists() {
            std::fs::remove_dir_all(&self.root)
                .map_err(|e| failed("removing the lab directory", e))?;
            actions.push(format!("removed {}", self.root.display()));
        }
        Ok(actions)
    }
}

/// A `vzdump` task of guest `vmid` that ended well at `ended`, as `/cluster/tasks` lists it.
fn backup_task(vmid: u64, ended: i64) -> Value {
    let start = ended - 120;
    json!({
        "upid": format!("UPID:{NODE}:0000{vmid:04X}:00000001:{start:08X}:vzdump:{vmid}:root@pam:"),
        "node": NODE, "type": "vzdump", "id": vmid.to_string(), "user": "root@pam",
        "starttime": start, "endtime": ended, "status": "OK",
    })
}
