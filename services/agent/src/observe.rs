//! Fresh observations: re-collect one resource now and return it with the source timestamp.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use pulse_domain::agent_protocol::ResourceTarget;
use pulse_domain::resource::ObservedResource;

use crate::containers::container_resource;
use crate::docker::{DockerClient, DockerError};
use crate::filesystems;
use crate::host::HostCollector;
use crate::report::{host_resource, storage_resource};
use crate::supervisor::SupervisorView;

/// Gap between the two CPU samples of a fresh host observation.
const CPU_WINDOW: Duration = Duration::from_millis(200);

pub struct Observer {
    pub agent_id: String,
    pub hostname: String,
    pub proc_root: PathBuf,
    pub mounts_path: PathBuf,
    pub services: SupervisorView,
    pub docker: Option<DockerClient>,
}

impl Observer {
    /// The resource as read now, with the time it was read; `Err` says why it cannot be.
    pub async fn observe(
        &self,
        target: &ResourceTarget,
    ) -> Result<(ObservedResource, DateTime<Utc>), String> {
        match target {
            ResourceTarget::Host => {
                let mut collector = HostCollector::new(self.proc_root.clone());
                collector.sample().await;
                tokio::time::sleep(CPU_WINDOW).await;
                let sample = collector.sample().await;
                let at = Utc::now();
                Ok((host_resource(&self.agent_id, &self.hostname, &sample), at))
            }
            ResourceTarget::Service { name } => {
                let state = self
                    .services
                    .get(name)
                    .ok_or_else(|| format!("no supervised service named {name:?}"))?;
                let at = Utc::now();
                Ok((state.observed(), at))
            }
            ResourceTarget::Container { id } => {
                let docker = self
                    .docker
                    .as_ref()
                    .ok_or("no Docker engine is configured on this agent")?;
                let details = docker
                    .inspect_container(id)
                    .await
                    .map_err(|e: DockerError| e.to_string())?;
                let at = Utc::now();
                Ok((container_resource(&details), at))
            }
            ResourceTarget::Filesystem { mount_point } => {
                let all = filesystems::collect(&self.mounts_path, Duration::from_secs(2)).await;
                let at = Utc::now();
                all.iter()
                    .find(|fs| &fs.mount.mount_point == mount_point)
                    .map(|fs| (storage_resource(fs), at))
                    .ok_or_else(|| format!("no filesystem mounted at {mount_point:?}"))
            }
            ResourceTarget::Guest { .. } => Err(
                "a Proxmox VE guest is observed by the connector of its cluster, not by a host agent"
                    .to_owned(),
            ),
        }
    }
}
