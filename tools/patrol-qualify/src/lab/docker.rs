//! The Docker lab over the Engine API, through the agent's [`DockerClient`] (one owner of the
//! transport, timeouts and version negotiation).
//!
//! Flow: [`DockerLab::prepare`] builds the lab image locally when it is absent (a tar context of
//! the scenario's build directory plus this machine's static busybox; nothing is ever pulled),
//! so the image belongs to the inventory baseline. [`DockerLab::provision`] creates and starts
//! one container per resource, host networking only, each carrying [`RUN_LABEL`] with the run
//! token; fault volumes carry it too. Faults are reviewed driver code keyed by the injector
//! kind: marker files written by a short-lived labelled helper container, lifecycle calls,
//! and a bounded fill of the driver-owned 8 MiB tmpfs. Probes inspect the engine directly.
//! [`DockerLab::cleanup`] force-removes exactly what carries the run label, and only that.
//!
//! Invariants: every request has a timeout; no command, size or path comes from a manifest
//! except the resources' own command and health check, which run inside their container.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use pulse_agent::docker::scope;
use pulse_agent::docker::{
    DockerClient, DockerClientConfig, DockerEndpoint, DockerError, LabelScope, Method, RequestBody,
};
use serde_json::{Value, json};

use super::{AgentWiring, Inventory, LabError, Provisioned, RUN_LABEL};
use crate::manifest::{
    Fault, InjectorKind, LabDriver, Manifest, Predicate, Resource, ResourceKind, RestartPolicy,
    SCRATCH_CAPACITY_BYTES,
};
use crate::placeholder;

const DRIVER: &str = "docker";
/// Where a `fault_volume` is mounted: the home of the health and crash markers.
pub const FAULT_MOUNT: &str = "/pulse-qual-fault";
/// Where a `scratch_storage` tmpfs is mounted.
pub const SCRATCH_MOUNT: &str = "/var/lib/service-cache";
/// The one file the scratch fill writes and its revert removes.
pub const SCRATCH_FILL_FILE: &str = "/var/lib/service-cache/.fill";
/// The tmpfs option matching [`SCRATCH_CAPACITY_BYTES`].
const SCRATCH_TMPFS_OPTIONS: &str = "size=8m";
/// `statfs` magic of tmpfs, as busybox `stat -f -c %t` prints it.
const TMPFS_MAGIC_HEX: &str = "1021994";
/// The static busybox every lab image gets in its build context.
const HOST_BUSYBOX: &str = "/bin/busybox";
const FILL_BLOCK: u64 = 65536;
const DEFAULT_HEALTH_EVERY: Duration = Duration::from_secs(2);

const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);
/// Stop waits up to this for the container to exit before the engine kills it.
const STOP_GRACE_SECS: u64 = 5;
const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
const HELPER_TIMEOUT: Duration = Duration::from_secs(60);

/// A container this run created.
#[derive(Debug, Clone)]
struct Container {
    name: String,
    id: String,
    image: String,
    volume: Option<String>,
    scratch: bool,
}

/// What one exec inside a container printed and how it ended.
#[derive(Debug, Clone, Default)]
struct ExecOutput {
    exit_code: i64,
    stdout: String,
    stderr: String,
}

/// Filesystem figures of the scratch area, in bytes.
#[derive(Debug, Clone, Copy)]
struct ScratchStats {
    total: u64,
    available: u64,
}

pub struct DockerLab {
    /// Manifest and client are boxed: the lab travels by value inside [`super::Lab`].
    manifest: Box<Manifest>,
    catalogue_root: PathBuf,
    run_token: String,
    docker_host: String,
    client: Box<DockerClient>,
    containers: BTreeMap<String, Container>,
}

impl DockerLab {
    /// A lab on `docker_host` (`unix:///...` or `tcp://...`). A `tcp://` engine that is not
    /// on this machine needs both `allow_shared_host` and the manifest's `lab.shared_host_ok`;
    /// a manifest this lab cannot run ([`unrunnable`]: pulling, for one) is refused.
    pub fn new(
        manifest: Manifest,
        catalogue_root: PathBuf,
        run_token: String,
        docker_host: String,
        allow_shared_host: bool,
    ) -> Result<Self, LabError> {
        if manifest.lab.driver != LabDriver::Docker {
            return Err(unsupported(format!(
                "scenario {} is for the {} lab",
                manifest.id,
                manifest.lab.driver.as_str()
            )));
        }
        if let Some(reason) = unrunnable(&manifest).into_iter().next() {
            return Err(unsupported(reason));
        }
        if !valid_token(&run_token) {
            return Err(LabError::failed(
                "configure",
                format!("run token {run_token:?} must be 1-64 letters, digits, '_', '.' or '-'"),
            ));
        }
        if let Some(host) = remote_tcp_host(&docker_host) {
            if !(allow_shared_host && manifest.lab.shared_host_ok) {
                return Err(LabError::Unavailable(format!(
                    "docker host {host} is not on this machine; a shared lab needs --allow-shared-host and lab.shared_host_ok: true in the scenario, otherwise use a local engine (unix:///var/run/docker.sock or tcp://127.0.0.1)"
                )));
            }
        }
        let endpoint = DockerEndpoint::from_docker_host(Some(&docker_host)).map_err(|e| {
            LabError::Unavailable(format!(
                "{e}; pass --docker-host unix:///var/run/docker.sock or tcp://127.0.0.1:<port>"
            ))
        })?;
        let config = DockerClientConfig {
            request_timeout: REQUEST_TIMEOUT,
            ..DockerClientConfig::default()
        };
        Ok(Self {
            manifest: Box::new(manifest),
            catalogue_root,
            run_token,
            docker_host,
            client: Box::new(DockerClient::new(endpoint, config)),
            containers: BTreeMap::new(),
        })
    }

    pub fn agent_wiring(&self) -> AgentWiring {
        AgentWiring {
            services_dir: None,
            docker_host: Some(self.docker_host.clone()),
            docker_label: Some(format!("{RUN_LABEL}={}", self.run_token)),
        }
    }

    /// Builds the lab image when it is absent; checks that every other image a resource names
    /// is present (nothing is pulled). Idempotent.
    pub async fn prepare(&mut self) -> Result<(), LabError> {
        let image = self.lab_image()?.to_owned();
        if !self.image_present(&image).await? {
            self.build_image(&image).await?;
            if !self.image_present(&image).await? {
                return Err(LabError::failed(
                    "build",
                    format!("the build finished but image {image} is not there"),
                ));
            }
        }
        for resource in &self.manifest.resources {
            let Some(own) = &resource.image else { continue };
            if own != &image && !self.image_present(own).await? {
                return Err(LabError::Unavailable(format!(
                    "image {own} of resource {} is not on the engine and is never pulled; build or load it first",
                    resource.alias
                )));
            }
        }
        Ok(())
    }

    /// Containers, images, volumes and networks by identity (no state).
    pub async fn inventory(&self) -> Result<Inventory, LabError> {
        let mut inventory = Inventory::new();
        let containers = self.get_json("/containers/json?all=1").await?;
        for c in containers.as_array().into_iter().flatten() {
            let name = c["Names"]
                .as_array()
                .and_then(|n| n.first())
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim_start_matches('/');
            inventory.insert(format!("container {} {name}", str_of(&c["Id"])));
        }
        let images = self.get_json("/images/json").await?;
        for i in images.as_array().into_iter().flatten() {
            let mut tags: Vec<&str> = i["RepoTags"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            tags.sort_unstable();
            inventory.insert(format!("image {} {}", str_of(&i["Id"]), tags.join(",")));
        }
        let volumes = self.get_json("/volumes").await?;
        for v in volumes["Volumes"].as_array().into_iter().flatten() {
            inventory.insert(format!("volume {}", str_of(&v["Name"])));
        }
        let networks = self.get_json("/networks").await?;
        for n in networks.as_array().into_iter().flatten() {
            inventory.insert(format!(
                "network {} {}",
                str_of(&n["Id"]),
                str_of(&n["Name"])
            ));
        }
        Ok(inventory)
    }

    /// Creates and starts every resource in manifest order.
    pub async fn provision(&mut self) -> Result<Vec<Provisioned>, LabError> {
        let ports = self.allocate_ports().await?;
        let mut provisioned = Vec::new();
        let resources = self.manifest.resources.clone();
        for resource in &resources {
            let container = self.create_resource(resource, &ports).await?;
            self.post(
                &format!("/containers/{}/start", container.id),
                None,
                REQUEST_TIMEOUT,
            )
            .await?;
            provisioned.push(Provisioned {
                alias: resource.alias.clone(),
                name: container.name.clone(),
                source_id: container.id.clone(),
                resource_type: "app-container",
            });
            self.containers.insert(resource.alias.clone(), container);
        }
        Ok(provisioned)
    }

    /// Reads `predicate.probe` of `predicate.target` off the engine.
    pub async fn probe(&self, predicate: &Predicate) -> Result<Value, LabError> {
        let probe = predicate.probe.as_str();
        if probe == "inventory.same_as_pre" {
            return Err(unsupported(
                "inventory.same_as_pre is answered by the runner, which holds the baseline",
            ));
        }
        let container = self.container(&predicate.target)?;
        match probe {
            "docker.health" | "docker.running" | "docker.restart_count" => {
                let details = self.inspect(&container.id).await?;
                Ok(match probe {
                    "docker.health" => Value::from(health_status(&details)),
                    "docker.running" => {
                        Value::from(details["State"]["Running"].as_bool() == Some(true))
                    }
                    _ => Value::from(details["RestartCount"].as_u64().unwrap_or(0)),
                })
            }
            "docker.scratch_available_bytes" => {
                if !container.scratch {
                    return Err(unsupported(format!(
                        "{} has no scratch storage to measure",
                        predicate.target
                    )));
                }
                let stats = self.scratch_stats(container).await?;
                Ok(Value::from(stats.available))
            }
            other => Err(unsupported(format!("probe {other}"))),
        }
    }

    pub async fn inject(&mut self, fault: &Fault) -> Result<(), LabError> {
        let alias = fault.injector.resource.as_str();
        let container = self.container(alias)?.clone();
        match fault.injector.kind {
            InjectorKind::MarkerEnable => {
                self.write_marker(alias, &container, "enabled", true).await
            }
            InjectorKind::CrashLoop => self.write_marker(alias, &container, "crash", true).await,
            InjectorKind::Stop => self.stop(&container.id).await,
            InjectorKind::Kill => {
                self.post(
                    &format!("/containers/{}/kill", container.id),
                    None,
                    REQUEST_TIMEOUT,
                )
                .await
            }
            InjectorKind::HealthProcessStop => {
                let Some(process) = fault.injector.value.as_ref().and_then(Value::as_str) else {
                    return Err(unsupported(HEALTH_PROCESS_VALUE_RULE));
                };
                self.stop_child_process(&container, process).await
            }
            InjectorKind::FillScratchStorage => self.fill_scratch(alias, &container).await,
            InjectorKind::DisconnectNetwork => Err(disconnect_unsupported()),
            proxmox => Err(unsupported(format!("injector {}", proxmox.as_str()))),
        }
    }

    pub async fn revert(&mut self, fault: &Fault) -> Result<(), LabError> {
        let alias = fault.injector.resource.as_str();
        let container = self.container(alias)?.clone();
        match fault.injector.kind {
            InjectorKind::MarkerEnable => {
                self.write_marker(alias, &container, "enabled", false).await
            }
            InjectorKind::CrashLoop => {
                self.write_marker(alias, &container, "crash", false).await?;
                // The restart policy may be between two attempts (or have given up): make
                // sure the container comes back without waiting for its back-off.
                if !self.running(&container.id).await? {
                    self.start(&container.id).await?;
                }
                Ok(())
            }
            InjectorKind::Stop => self.start(&container.id).await,
            InjectorKind::Kill => {
                if !self.running(&container.id).await? {
                    self.start(&container.id).await?;
                }
                Ok(())
            }
            InjectorKind::HealthProcessStop => {
                // The stopped process is PID 1's child: a restart brings it back.
                self.post(
                    &format!("/containers/{}/restart?t={STOP_GRACE_SECS}", container.id),
                    None,
                    REQUEST_TIMEOUT + Duration::from_secs(STOP_GRACE_SECS),
                )
                .await
            }
            InjectorKind::FillScratchStorage => {
                let out = self
                    .exec(&container.id, &["rm", "-f", SCRATCH_FILL_FILE])
                    .await?;
                if out.exit_code != 0 {
                    return Err(LabError::failed(
                        "revert fill_scratch_storage",
                        format!(
                            "removing the fill file exited {}: {}",
                            out.exit_code,
                            out.stderr.trim()
                        ),
                    ));
                }
                Ok(())
            }
            InjectorKind::DisconnectNetwork => Err(disconnect_unsupported()),
            proxmox => Err(unsupported(format!("injector {}", proxmox.as_str()))),
        }
    }

    /// Force-removes every container and volume carrying the run label, nothing else; one
    /// line per removal.
    pub async fn cleanup(&mut self) -> Result<Vec<String>, LabError> {
        let filter = label_filter(&self.run_token)?;
        let mut removed = Vec::new();
        let containers = self
            .get_json(&format!("/containers/json?all=1&filters={filter}"))
            .await?;
        for c in containers.as_array().into_iter().flatten() {
            let id = str_of(&c["Id"]);
            if c["Labels"][RUN_LABEL].as_str() != Some(self.run_token.as_str()) {
                continue;
            }
            let name = c["Names"]
                .as_array()
                .and_then(|n| n.first())
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim_start_matches('/')
                .to_owned();
            self.request(
                Method::DELETE,
                &format!("/containers/{}?force=1", checked(id)?),
                None,
                REQUEST_TIMEOUT,
            )
            .await?;
            removed.push(format!("removed container {name} {id}"));
        }
        let volumes = self.get_json(&format!("/volumes?filters={filter}")).await?;
        for v in volumes["Volumes"].as_array().into_iter().flatten() {
            let name = str_of(&v["Name"]);
            if v["Labels"][RUN_LABEL].as_str() != Some(self.run_token.as_str()) {
                continue;
            }
            self.request(
                Method::DELETE,
                &format!("/volumes/{}?force=1", checked(name)?),
                None,
                REQUEST_TIMEOUT,
            )
            .await?;
            removed.push(format!("removed volume {name}"));
        }
        self.containers.clear();
        Ok(removed)
    }

    // ---- image ----

    fn lab_image(&self) -> Result<&str, LabError> {
        let image = self
            .manifest
            .lab
            .image
            .as_deref()
            .ok_or_else(|| unsupported("a scenario without lab.image"))?;
        if valid_image(image) {
            Ok(image)
        } else {
            Err(unsupported(format!("image name {image:?}")))
        }
    }

    async fn image_present(&self, image: &str) -> Result<bool, LabError> {
        if !valid_image(image) {
            return Err(unsupported(format!("image name {image:?}")));
        }
        match self
            .client
            .request(
                Method::GET,
                &format!("/images/{image}/json"),
                None,
                REQUEST_TIMEOUT,
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(DockerError::Api { status: 404, .. }) => Ok(false),
            Err(e) => Err(docker_error("inspect image", e)),
        }
    }

    async fn build_image(&self, image: &str) -> Result<(), LabError> {
        let build = self.manifest.lab.build.as_deref().ok_or_else(|| {
            LabError::Unavailable(format!(
                "image {image} is not on the engine and lab.build names no directory to build it from; nothing is ever pulled"
            ))
        })?;
        let relative = Path::new(build);
        if build.is_empty()
            || !relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(LabError::failed(
                "build",
                format!("lab.build {build:?} must be a plain relative directory"),
            ));
        }
        let dir = self.catalogue_root.join("docker").join(relative);
        let context = build_context(&dir).await?;
        let (_, output) = self
            .client
            .request(
                Method::POST,
                &format!("/build?t={image}&rm=1&forcerm=1&networkmode=host"),
                Some(RequestBody::Tar(context)),
                BUILD_TIMEOUT,
            )
            .await
            .map_err(|e| docker_error("build", e))?;
        if let Some(error) = build_error(&output) {
            return Err(LabError::failed("build", format!("{image}: {error}")));
        }
        tracing::info!(%image, "lab image built");
        Ok(())
    }

    // ---- provisioning ----

    /// One free loopback port per resource, taken by binding port 0 and released at once.
    async fn allocate_ports(&self) -> Result<BTreeMap<String, u16>, LabError> {
        let mut ports = BTreeMap::new();
        let mut taken = BTreeSet::new();
        for resource in &self.manifest.resources {
            let mut attempts = 0;
            let port = loop {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
                    .await
                    .map_err(|e| LabError::failed("allocate port", e))?;
                let port = listener
                    .local_addr()
                    .map_err(|e| LabError::failed("allocate port", e))?
                    .port();
                drop(listener);
                attempts += 1;
                if taken.insert(port) {
                    break port;
                }
                if attempts >= 16 {
                    return Err(LabError::failed(
                        "allocate port",
                        "no distinct free loopback port after 16 attempts",
                    ));
                }
            };
            ports.insert(resource.alias.clone(), port);
        }
        Ok(ports)
    }

    async fn create_resource(
        &self,
        resource: &Resource,
        ports: &BTreeMap<String, u16>,
    ) -> Result<Container, LabError> {
        if resource.kind != ResourceKind::Container {
            return Err(unsupported(format!(
                "resource {} is not a container",
                resource.alias
            )));
        }
        let RunTexts {
            name,
            command,
            healthcheck,
        } = run_texts(resource, &self.run_token, ports)?;
        let image = match &resource.image {
            Some(image) => image.clone(),
            None => self.lab_image()?.to_owned(),
        };
        let restart_text = resource.restart.as_deref().unwrap_or("no");
        let restart = RestartPolicy::parse(restart_text).ok_or_else(|| {
            unsupported(format!(
                "restart policy {restart_text:?} of {}",
                resource.alias
            ))
        })?;
        let every = match &resource.health_every {
            Some(text) => crate::duration::parse(text).ok_or_else(|| {
                LabError::failed(
                    "provision",
                    format!(
                        "health_every {text:?} of {} is not a duration",
                        resource.alias
                    ),
                )
            })?,
            None => DEFAULT_HEALTH_EVERY,
        };

        let mut labels: BTreeMap<String, String> = resource.labels.clone();
        labels.insert(RUN_LABEL.to_owned(), self.run_token.clone());

        let volume = if resource.fault_volume {
            let volume = format!("{name}-state");
            self.post(
                "/volumes/create",
                Some(json!({
                    "Name": volume,
                    "Labels": { RUN_LABEL: self.run_token },
                })),
                REQUEST_TIMEOUT,
            )
            .await?;
            Some(volume)
        } else {
            None
        };

        let mut host_config = json!({
            "NetworkMode": "host",
            "RestartPolicy": restart_policy_body(restart),
        });
        if let Some(volume) = &volume {
            host_config["Mounts"] = json!([{
                "Type": "volume",
                "Source": volume,
                "Target": FAULT_MOUNT,
            }]);
        }
        if resource.scratch_storage {
            host_config["Tmpfs"] = json!({ SCRATCH_MOUNT: SCRATCH_TMPFS_OPTIONS });
        }
        let mut body = json!({
            "Image": image,
            "Labels": labels,
            "HostConfig": host_config,
        });
        if !command.is_empty() {
            body["Cmd"] = json!(command);
        }
        if !healthcheck.is_empty() {
            let interval = nanos(every);
            body["Healthcheck"] = json!({
                "Test": health_test(&healthcheck),
                "Interval": interval,
                "Timeout": interval,
                "StartPeriod": 0,
                "Retries": 1,
            });
        }
        let created = self
            .post_json(&format!("/containers/create?name={name}"), body)
            .await?;
        let id = str_of(&created["Id"]).to_owned();
        checked(&id)?;
        Ok(Container {
            name,
            id,
            image,
            volume,
            scratch: resource.scratch_storage,
        })
    }

    // ---- faults ----

    /// Creates (`present`) or removes the marker `file` in the target's fault volume with a
    /// short-lived labelled helper container, removed afterwards.
    async fn write_marker(
        &self,
        alias: &str,
        container: &Container,
        file: &str,
        present: bool,
    ) -> Result<(), LabError> {
        let Some(volume) = &container.volume else {
            return Err(unsupported(format!(
                "{alias} has no fault_volume to hold a marker"
            )));
        };
        let path = format!("{FAULT_MOUNT}/{file}");
        let argv: Vec<&str> = if present {
            vec!["touch", &path]
        } else {
            vec!["rm", "-f", &path]
        };
        let created = self
            .post_json(
                "/containers/create",
                json!({
                    "Image": container.image,
                    "Entrypoint": argv,
                    "Labels": { RUN_LABEL: self.run_token },
                    "HostConfig": {
                        "NetworkMode": "none",
                        "Mounts": [{ "Type": "volume", "Source": volume, "Target": FAULT_MOUNT }],
                    },
                }),
            )
            .await?;
        let helper = str_of(&created["Id"]).to_owned();
        checked(&helper)?;
        let outcome = self.run_helper(&helper).await;
        let removal = self
            .request(
                Method::DELETE,
                &format!("/containers/{helper}?force=1"),
                None,
                REQUEST_TIMEOUT,
            )
            .await;
        let status = outcome?;
        removal?;
        if status != 0 {
            return Err(LabError::failed(
                "marker",
                format!("the helper writing {path} for {alias} exited {status}"),
            ));
        }
        Ok(())
    }

    async fn run_helper(&self, helper: &str) -> Result<i64, LabError> {
        self.post(
            &format!("/containers/{helper}/start"),
            None,
            REQUEST_TIMEOUT,
        )
        .await?;
        let (_, body) = self
            .request(
                Method::POST,
                &format!("/containers/{helper}/wait"),
                None,
                HELPER_TIMEOUT,
            )
            .await?;
        let waited: Value = decode("wait", &body)?;
        waited["StatusCode"]
            .as_i64()
            .ok_or_else(|| LabError::failed("wait", "the engine gave no exit status"))
    }

    async fn stop_child_process(
        &self,
        container: &Container,
        process: &str,
    ) -> Result<(), LabError> {
        if !valid_process_name(process) {
            return Err(unsupported(format!(
                "health_process_stop of process {process:?}: {PROCESS_NAME_RULE}"
            )));
        }
        // The name is an argument of the fixed script, never part of it.
        const SCRIPT: &str = r#"found=0
for stat in /proc/[0-9]*/stat; do
  read -r pid comm state ppid rest < "$stat" 2>/dev/null || continue
  if [ "$ppid" = 1 ] && [ "$comm" = "($1)" ]; then kill "$pid" && found=1; fi
done
[ "$found" = 1 ]"#;
        let out = self
            .exec(&container.id, &["sh", "-c", SCRIPT, "sh", process])
            .await?;
        if out.exit_code != 0 {
            return Err(LabError::failed(
                "health_process_stop",
                format!(
                    "no child of PID 1 named {process} was stopped in {}",
                    container.name
                ),
            ));
        }
        Ok(())
    }

    async fn fill_scratch(&self, alias: &str, container: &Container) -> Result<(), LabError> {
        const OP: &str = "fill_scratch_storage";
        if !container.scratch {
            return Err(unsupported(format!(
                "{alias} has no scratch_storage to fill"
            )));
        }
        let details = self.inspect(&container.id).await?;
        if str_of(&details["Id"]) != container.id {
            return Err(LabError::failed(
                OP,
                format!("{alias} is no longer container {}", container.id),
            ));
        }
        if details["Config"]["Labels"][RUN_LABEL].as_str() != Some(self.run_token.as_str()) {
            return Err(LabError::failed(
                OP,
                format!("{alias} does not carry this run's label"),
            ));
        }
        let stats = self.scratch_stats(container).await?;
        let check = self
            .exec(
                &container.id,
                &[
                    "sh",
                    "-c",
                    "[ ! -e \"$1\" ] && [ ! -L \"$1\" ]",
                    "sh",
                    SCRATCH_FILL_FILE,
                ],
            )
            .await?;
        if check.exit_code != 0 {
            return Err(LabError::failed(
                OP,
                format!("{SCRATCH_FILL_FILE} already exists in {alias}; refusing to touch it"),
            ));
        }
        let count = stats.total / FILL_BLOCK + 16;
        let of = format!("of={SCRATCH_FILL_FILE}");
        let bs = format!("bs={FILL_BLOCK}");
        let count = format!("count={count}");
        let fill = self
            .exec(&container.id, &["dd", "if=/dev/zero", &of, &bs, &count])
            .await?;
        if fill.exit_code == 0 || !fill.stderr.contains("No space left on device") {
            return Err(LabError::failed(
                OP,
                format!(
                    "the bounded write did not end with ENOSPC (exit {}): {}",
                    fill.exit_code,
                    fill.stderr.trim()
                ),
            ));
        }
        let after = self.scratch_stats(container).await?;
        if after.available != 0 {
            return Err(LabError::failed(
                OP,
                format!("{} bytes still available after the fill", after.available),
            ));
        }
        Ok(())
    }

    /// Measures the scratch area inside the container and checks it is the driver's tmpfs of
    /// exactly [`SCRATCH_CAPACITY_BYTES`].
    async fn scratch_stats(&self, container: &Container) -> Result<ScratchStats, LabError> {
        const OP: &str = "measure scratch storage";
        let out = self
            .exec(
                &container.id,
                &["stat", "-f", "-c", "%t %S %b %a", SCRATCH_MOUNT],
            )
            .await?;
        if out.exit_code != 0 {
            return Err(LabError::failed(
                OP,
                format!("stat exited {}: {}", out.exit_code, out.stderr.trim()),
            ));
        }
        let stats = parse_statfs(&out.stdout).map_err(|reason| LabError::failed(OP, reason))?;
        if stats.total != SCRATCH_CAPACITY_BYTES {
            return Err(LabError::failed(
                OP,
                format!(
                    "{SCRATCH_MOUNT} holds {} bytes, not the fixed {SCRATCH_CAPACITY_BYTES}",
                    stats.total
                ),
            ));
        }
        Ok(stats)
    }

    // ---- engine calls ----

    fn container(&self, alias: &str) -> Result<&Container, LabError> {
        self.containers.get(alias).ok_or_else(|| {
            LabError::failed(
                "lookup",
                format!("{alias} is not a resource this run provisioned"),
            )
        })
    }

    async fn inspect(&self, id: &str) -> Result<Value, LabError> {
        self.get_json(&format!("/containers/{}/json", checked(id)?))
            .await
    }

    async fn running(&self, id: &str) -> Result<bool, LabError> {
        Ok(self.inspect(id).await?["State"]["Running"].as_bool() == Some(true))
    }

    async fn start(&self, id: &str) -> Result<(), LabError> {
        self.post(
            &format!("/containers/{}/start", checked(id)?),
            None,
            REQUEST_TIMEOUT,
        )
        .await
    }

    async fn stop(&self, id: &str) -> Result<(), LabError> {
        self.post(
            &format!("/containers/{}/stop?t={STOP_GRACE_SECS}", checked(id)?),
            None,
            REQUEST_TIMEOUT + Duration::from_secs(STOP_GRACE_SECS),
        )
        .await
    }

    /// Runs `argv` in the container (no TTY) and returns its demultiplexed output and exit code.
    async fn exec(&self, id: &str, argv: &[&str]) -> Result<ExecOutput, LabError> {
        let created = self
            .post_json(
                &format!("/containers/{}/exec", checked(id)?),
                json!({
                    "AttachStdin": false,
                    "AttachStdout": true,
                    "AttachStderr": true,
                    "Tty": false,
                    "Cmd": argv,
                }),
            )
            .await?;
        let exec_id = str_of(&created["Id"]).to_owned();
        checked(&exec_id)?;
        let (_, raw) = self
            .request(
                Method::POST,
                &format!("/exec/{exec_id}/start"),
                Some(json!({ "Detach": false, "Tty": false })),
                EXEC_TIMEOUT,
            )
            .await?;
        let (stdout, stderr) = demux(&raw);
        // The stream ends when the process does; the engine may record the exit a moment
        // later.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let state = self.get_json(&format!("/exec/{exec_id}/json")).await?;
            let code = state["ExitCode"].as_i64();
            if let (false, Some(code)) = (state["Running"].as_bool() == Some(true), code) {
                return Ok(ExecOutput {
                    exit_code: code,
                    stdout,
                    stderr,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LabError::failed(
                    "exec",
                    format!("{argv:?} in {id} did not report an exit code"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn get_json(&self, path: &str) -> Result<Value, LabError> {
        let (_, body) = self
            .request(Method::GET, path, None, REQUEST_TIMEOUT)
            .await?;
        decode(path, &body)
    }

    async fn post_json(&self, path: &str, body: Value) -> Result<Value, LabError> {
        let (_, answer) = self
            .request(Method::POST, path, Some(body), REQUEST_TIMEOUT)
            .await?;
        decode(path, &answer)
    }

    /// A POST whose answer does not matter (a 304 "already so" is fine).
    async fn post(
        &self,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<(), LabError> {
        self.request(Method::POST, path, body, timeout)
            .await
            .map(|_| ())
    }

    async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), LabError> {
        let operation = format!("{method} {}", path.split('?').next().unwrap_or_default());
        let (status, bytes) = self
            .client
            .request(method, path, body.map(RequestBody::Json), timeout)
            .await
            .map_err(|e| docker_error(&operation, e))?;
        Ok((status.as_u16(), bytes.to_vec()))
    }
}

fn unsupported(what: impl Into<String>) -> LabError {
    LabError::Unsupported {
        driver: DRIVER,
        what: what.into(),
    }
}

fn disconnect_unsupported() -> LabError {
    unsupported(disconnect_unsupported_reason())
}

fn disconnect_unsupported_reason() -> &'static str {
    "disconnect_network: lab containers use host networking, so there is no network to detach them from"
}

fn docker_error(operation: &str, error: DockerError) -> LabError {
    match error {
        DockerError::EngineUnavailable { .. } => LabError::Unavailable(format!(
            "{error}; start the engine (dockerd) or point --docker-host at a running one"
        )),
        other => LabError::failed(operation, other),
    }
}

fn decode(operation: &str, body: &[u8]) -> Result<Value, LabError> {
    serde_json::from_slice(body).map_err(|e| {
        LabError::failed(
            operation.split('?').next().unwrap_or_default(),
            format!("the engine's answer is not JSON: {e}"),
        )
    })
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// Ids and names placed in a request path: nothing that could change the path.
fn checked(id: &str) -> Result<&str, LabError> {
    if !id.is_empty()
        && id.len() <= 256
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        Ok(id)
    } else {
        Err(LabError::failed(
            "request",
            format!("{id:?} is not an engine object id"),
        ))
    }
}

/// What `health_process_stop` needs in `injector.value`.
const HEALTH_PROCESS_VALUE_RULE: &str =
    "health_process_stop needs injector.value naming the process to stop";
const PROCESS_NAME_RULE: &str = "a process name is 1-15 letters, digits, '_', '.' or '-'";

/// A process name as the kernel keeps it (`comm`, at most 15 bytes), in safe characters.
fn valid_process_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// What in a Docker manifest this lab cannot run (see [`super::unrunnable`]): pulling, a
/// network to detach (containers use host networking), `health_process_stop` without a
/// process name, and a command or health check whose `${...}` is not a known placeholder.
pub fn unrunnable(manifest: &Manifest) -> Vec<String> {
    let mut reasons = Vec::new();
    if manifest.lab.allow_pull {
        reasons.push(
            "lab.allow_pull: true, but lab images are built locally and never pulled; set it to false and name a build directory in lab.build"
                .to_owned(),
        );
    }
    for (i, resource) in manifest.resources.iter().enumerate() {
        for (field, words) in [
            ("command", &resource.command),
            ("healthcheck", &resource.healthcheck),
        ] {
            for (j, word) in words.iter().enumerate() {
                if let Err(error) = placeholder::scan(word) {
                    reasons.push(format!("resources[{i}].{field}[{j}]: {error}"));
                }
            }
        }
    }
    for (i, fault) in manifest.faults.iter().enumerate() {
        let injector = &fault.injector;
        match injector.kind {
            InjectorKind::DisconnectNetwork => reasons.push(format!(
                "faults[{i}].injector.kind: {}",
                disconnect_unsupported_reason()
            )),
            InjectorKind::HealthProcessStop => {
                match injector.value.as_ref().and_then(Value::as_str) {
                    None => reasons.push(format!(
                        "faults[{i}].injector.value: {HEALTH_PROCESS_VALUE_RULE}"
                    )),
                    Some(name) if !valid_process_name(name) => reasons.push(format!(
                        "faults[{i}].injector.value: {name:?}: {PROCESS_NAME_RULE}"
                    )),
                    Some(_) => {}
                }
            }
            _ => {}
        }
    }
    reasons
}

/// The token goes into container and volume names: Docker's name characters only.
fn valid_token(token: &str) -> bool {
    !token.is_empty()
        && token.len() <= 64
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn valid_image(image: &str) -> bool {
    !image.is_empty()
        && image.len() <= 255
        && !image.contains("..")
        && image.bytes().all(|b| {
            b.is_ascii_lowercase()
                || b.is_ascii_digit()
                || matches!(b, b'/' | b':' | b'.' | b'_' | b'-')
        })
}

fn valid_container_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && name.len() >= 2
        && name.len() <= 128
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The host of a `tcp://` endpoint that is not a loopback address; `None` for a unix socket
/// or a loopback engine.
fn remote_tcp_host(docker_host: &str) -> Option<String> {
    let rest = docker_host.strip_prefix("tcp://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = if let Some(bracketed) = authority.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| host.to_owned())
}

/// A container's texts in one run, every placeholder replaced.
#[derive(Debug, PartialEq, Eq)]
struct RunTexts {
    name: String,
    command: Vec<String>,
    healthcheck: Vec<String>,
}

/// The name (run placeholders only, a valid Docker name), command and health check (run and
/// port placeholders) of `resource` in the run with `token`.
fn run_texts(
    resource: &Resource,
    token: &str,
    ports: &BTreeMap<String, u16>,
) -> Result<RunTexts, LabError> {
    let provision = |e: placeholder::PlaceholderError| LabError::failed("provision", e);
    let name = resource.name_in_run(token).map_err(provision)?;
    if !valid_container_name(&name) {
        return Err(LabError::failed(
            "provision",
            format!(
                "container name {name:?} of {} is not a valid Docker name",
                resource.alias
            ),
        ));
    }
    let ports = Some(placeholder::Ports {
        own: &resource.alias,
        by_alias: ports,
    });
    let words = |list: &[String]| {
        list.iter()
            .map(|word| placeholder::substitute(word, token, ports).map_err(provision))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(RunTexts {
        name,
        command: words(&resource.command)?,
        healthcheck: words(&resource.healthcheck)?,
    })
}

/// The engine's `HostConfig.RestartPolicy` for `policy`.
fn restart_policy_body(policy: RestartPolicy) -> Value {
    match policy.max_retries {
        Some(n) => json!({ "Name": policy.name, "MaximumRetryCount": n }),
        None => json!({ "Name": policy.name }),
    }
}

/// A manifest health check as the engine's `Test`: `["test", ...]` runs as `CMD`; an explicit
/// `CMD`, `CMD-SHELL` or `NONE` is kept.
fn health_test(check: &[String]) -> Vec<String> {
    match check.first().map(String::as_str) {
        Some("CMD" | "CMD-SHELL" | "NONE") => check.to_vec(),
        _ => std::iter::once("CMD".to_owned())
            .chain(check.iter().cloned())
            .collect(),
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn health_status(details: &Value) -> String {
    details["State"]["Health"]["Status"]
        .as_str()
        .unwrap_or("none")
        .to_owned()
}

/// `filters={"label":["<RUN_LABEL>=<token>"]}`, percent-encoded: the agent's own label scope
/// builds it, so the lab selects its containers exactly as its scoped agent does.
fn label_filter(token: &str) -> Result<String, LabError> {
    let scope = LabelScope::parse(&format!("{RUN_LABEL}={token}"))
        .map_err(|e| LabError::failed("cleanup", e.to_string()))?;
    Ok(scope::filters(Some(&scope), false).unwrap_or_default())
}

/// The first `error` of a build's JSON-lines output.
fn build_error(output: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(output);
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .find_map(|item| match item {
            Ok(line) => line
                .get("error")
                .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned)),
            Err(e) => Some(format!("unreadable build output: {e}")),
        })
}

/// Splits the engine's multiplexed stream (8-byte headers: stream, 3 zero bytes, big-endian
/// length) into stdout and stderr.
fn demux(raw: &[u8]) -> (String, String) {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut rest = raw;
    while rest.len() >= 8 {
        let len = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let end = (8 + len).min(rest.len());
        let payload = &rest[8..end];
        match rest[0] {
            2 => stderr.extend_from_slice(payload),
            _ => stdout.extend_from_slice(payload),
        }
        rest = &rest[end..];
    }
    (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// `stat -f -c '%t %S %b %a'`: a tmpfs's type, block size, blocks and available blocks.
fn parse_statfs(output: &str) -> Result<ScratchStats, String> {
    let fields: Vec<&str> = output.split_whitespace().collect();
    let [kind, block, blocks, available] = fields.as_slice() else {
        return Err(format!("unexpected statfs output {:?}", output.trim()));
    };
    if !kind.eq_ignore_ascii_case(TMPFS_MAGIC_HEX) {
        return Err(format!("{SCRATCH_MOUNT} is not a tmpfs (type 0x{kind})"));
    }
    let number = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("unexpected statfs number {s:?}"))
    };
    let block = number(block)?;
    Ok(ScratchStats {
        total: block.saturating_mul(number(blocks)?),
        available: block.saturating_mul(number(available)?),
    })
}

/// The build context: every file under `dir` plus this machine's static busybox as
/// `busybox`, as an uncompressed ustar archive.
async fn build_context(dir: &Path) -> Result<Vec<u8>, LabError> {
    const OP: &str = "build context";
    if !tokio::fs::try_exists(dir.join("Dockerfile"))
        .await
        .unwrap_or(false)
    {
        return Err(LabError::failed(
            OP,
            format!("{} has no Dockerfile", dir.display()),
        ));
    }
    let mut files = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let mut entries = tokio::fs::read_dir(dir.join(&relative))
            .await
            .map_err(|e| LabError::failed(OP, format!("{}: {e}", dir.display())))?;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| LabError::failed(OP, e))?
        {
            let kind = entry
                .file_type()
                .await
                .map_err(|e| LabError::failed(OP, e))?;
            let path = relative.join(entry.file_name());
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut tar = Tar::default();
    for relative in &files {
        let name = relative.to_str().ok_or_else(|| {
            LabError::failed(OP, format!("{} is not a UTF-8 path", relative.display()))
        })?;
        let data = tokio::fs::read(dir.join(relative))
            .await
            .map_err(|e| LabError::failed(OP, format!("{name}: {e}")))?;
        tar.add(name, 0o644, &data)
            .map_err(|reason| LabError::failed(OP, reason))?;
    }
    let busybox = tokio::fs::read(HOST_BUSYBOX).await.map_err(|e| {
        LabError::Unavailable(format!(
            "{HOST_BUSYBOX}: {e}; install a static busybox (busybox-static) for the lab image"
        ))
    })?;
    tar.add("busybox", 0o755, &busybox)
        .map_err(|reason| LabError::failed(OP, reason))?;
    Ok(tar.finish())
}

/// A minimal ustar writer: regular files only, names up to 100 bytes.
#[derive(Default)]
struct Tar {
    out: Vec<u8>,
}

impl Tar {
    fn add(&mut self, name: &str, mode: u32, data: &[u8]) -> Result<(), String> {
        if name.is_empty() || name.len() > 100 {
            return Err(format!("{name:?}: tar names are 1-100 bytes"));
        }
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        write_octal(&mut header[100..108], u64::from(mode));
        write_octal(&mut header[108..116], 0);
        write_octal(&mut header[116..124], 0);
        write_octal(&mut header[124..136], data.len() as u64);
        write_octal(&mut header[136..148], 0);
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[148..156].copy_from_slice(b"        ");
        let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
        let checksum = format!("{sum:06o}\0 ");
        header[148..156].copy_from_slice(checksum.as_bytes());
        self.out.extend_from_slice(&header);
        self.out.extend_from_slice(data);
        let padding = (512 - data.len() % 512) % 512;
        self.out.extend(std::iter::repeat_n(0u8, padding));
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        self.out.extend(std::iter::repeat_n(0u8, 1024));
        self.out
    }
}

/// Zero-padded octal filling the field but its last byte (NUL).
fn write_octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    let text = &text.as_bytes()[text.len().saturating_sub(digits)..];
    field[..digits].copy_from_slice(text);
    field[digits] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str, command: &[&str], healthcheck: &[&str]) -> Resource {
        serde_json::from_value(json!({
            "alias": "a", "kind": "container", "name": name,
            "command": command, "healthcheck": healthcheck,
        }))
        .expect("a resource")
    }

    #[test]
    fn either_run_placeholder_names_the_container_and_ports_fill_its_texts() {
        let ports: BTreeMap<String, u16> = [("a".to_owned(), 4000), ("b".to_owned(), 4001)].into();
        for spelling in ["${run_id}", "${run_token}"] {
            let texts = run_texts(
                &resource(
                    &format!("pulse-qual-{spelling}-faulty"),
                    &["sh", "-c", &format!("echo {spelling} ${{port}}")],
                    &["wget", "http://127.0.0.1:${port:b}/"],
                ),
                "tok",
                &ports,
            )
            .unwrap();
            assert_eq!(
                texts,
                RunTexts {
                    name: "pulse-qual-tok-faulty".into(),
                    command: vec!["sh".into(), "-c".into(), "echo tok 4000".into()],
                    healthcheck: vec!["wget".into(), "http://127.0.0.1:4001/".into()],
                }
            );
        }
        for (name, command) in [
            ("svc-${run_token}-${port}", "true"),
            ("svc-${run_token}", "${home}"),
            ("svc-${run_token}", "${port:zz}"),
            ("svc-${run_token}", "${run_id"),
            ("svc ${run_token}", "true"),
        ] {
            assert!(
                matches!(
                    run_texts(&resource(name, &[command], &[]), "tok", &ports),
                    Err(LabError::Failed { .. })
                ),
                "{name} {command}"
            );
        }
    }

    #[test]
    fn restart_policies_become_the_engines_body() {
        let body = |text: &str| restart_policy_body(RestartPolicy::parse(text).unwrap());
        assert_eq!(body("always"), json!({"Name": "always"}));
        assert_eq!(
            body("on-failure:3"),
            json!({"Name": "on-failure", "MaximumRetryCount": 3})
        );
    }

    #[test]
    fn health_checks_become_engine_tests() {
        let test = |v: &[&str]| health_test(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            test(&["test", "!", "-f", "/x"]),
            ["CMD", "test", "!", "-f", "/x"]
        );
        assert_eq!(test(&["CMD-SHELL", "true"]), ["CMD-SHELL", "true"]);
        assert_eq!(test(&["NONE"]), ["NONE"]);
    }

    #[test]
    fn only_loopback_tcp_hosts_count_as_local() {
        assert_eq!(remote_tcp_host("unix:///var/run/docker.sock"), None);
        assert_eq!(remote_tcp_host("tcp://127.0.0.1:2375"), None);
        assert_eq!(remote_tcp_host("tcp://localhost:2375"), None);
        assert_eq!(remote_tcp_host("tcp://[::1]:2375"), None);
        assert_eq!(
            remote_tcp_host("tcp://10.0.0.5:2375").as_deref(),
            Some("10.0.0.5")
        );
        assert_eq!(
            remote_tcp_host("tcp://lab.example:2375").as_deref(),
            Some("lab.example")
        );
    }

    #[test]
    fn statfs_output_must_be_a_tmpfs() {
        let stats = parse_statfs("1021994 4096 2048 100\n").unwrap();
        assert_eq!(stats.total, SCRATCH_CAPACITY_BYTES);
        assert_eq!(stats.available, 409_600);
        assert!(parse_statfs("ef53 4096 2048 100").is_err());
        assert!(parse_statfs("garbage").is_err());
    }

    #[test]
    fn the_multiplexed_stream_splits_into_stdout_and_stderr() {
        let mut raw = vec![1, 0, 0, 0, 0, 0, 0, 3];
        raw.extend_from_slice(b"out");
        raw.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 4]);
        raw.extend_from_slice(b"err!");
        assert_eq!(demux(&raw), ("out".to_owned(), "err!".to_owned()));
    }

    #[test]
    fn build_errors_are_found_in_the_output_stream() {
        let ok = b"{\"stream\":\"Step 1/2\"}\r\n{\"stream\":\"done\"}\r\n";
        assert_eq!(build_error(ok), None);
        let bad = b"{\"stream\":\"Step 1/2\"}\r\n{\"errorDetail\":{\"message\":\"x\"},\"error\":\"COPY failed\"}\r\n";
        assert_eq!(build_error(bad).as_deref(), Some("COPY failed"));
    }

    #[test]
    fn tar_headers_carry_a_valid_checksum_and_padding() {
        let mut tar = Tar::default();
        tar.add("Dockerfile", 0o644, b"FROM scratch\n").unwrap();
        let out = tar.finish();
        assert_eq!(out.len(), 512 + 512 + 1024);
        let header = &out[..512];
        let stored = std::str::from_utf8(&header[148..154]).unwrap();
        let mut copy = header.to_vec();
        copy[148..156].copy_from_slice(b"        ");
        let sum: u64 = copy.iter().map(|&b| u64::from(b)).sum();
        assert_eq!(u64::from_str_radix(stored, 8).unwrap(), sum);
        assert_eq!(&header[124..135], b"00000000015");
        assert_eq!(&out[512..525], b"FROM scratch\n");
        assert!(Tar::default().add(&"x".repeat(101), 0o644, b"").is_err());
    }
}
