//! Building a report: the host, its filesystems, the supervised services and, when an engine
//! answers, the Docker containers.

use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use pulse_domain::agent_protocol::Report;
use pulse_domain::resource::{Health, ObservedResource, ResourceStatus, ResourceType};
use serde_json::json;

use crate::containers::ContainerCollector;
use crate::filesystems::{self, Filesystem};
use crate::host::{HostCollector, HostSample};
use crate::supervisor::SupervisorView;

pub struct Reporter {
    agent_id: String,
    hostname: String,
    host: HostCollector,
    mounts_path: PathBuf,
    services: SupervisorView,
    containers: Option<ContainerCollector>,
    seq: u64,
}

impl Reporter {
    pub fn new(
        agent_id: String,
        hostname: String,
        proc_root: PathBuf,
        mounts_path: PathBuf,
        services: SupervisorView,
    ) -> Self {
        Self {
            agent_id,
            hostname,
            host: HostCollector::new(proc_root),
            mounts_path,
            services,
            containers: None,
            seq: 0,
        }
    }

    /// Reports the containers `collector` finds as `app-container` resources.
    pub fn with_containers(mut self, collector: ContainerCollector) -> Self {
        self.containers = Some(collector);
        self
    }

    pub async fn build(&mut self) -> Report {
        let sample = self.host.sample().await;
        let filesystems = filesystems::collect(&self.mounts_path, Duration::from_secs(2)).await;
        let mut host = host_resource(&self.agent_id, &self.hostname, &sample);
        let containers = match &mut self.containers {
            Some(collector) => {
                let found = collector.collect().await;
                // The host says whether containers are collected and, if not, why.
                if let Some(details) = host.details.as_object_mut() {
                    details.insert("docker".to_owned(), collector.engine_status());
                }
                found
            }
            None => Vec::new(),
        };
        let mut resources = vec![host];
        resources.extend(filesystems.iter().map(storage_resource));
        resources.extend(self.services.observed());
        resources.extend(containers);
        self.seq += 1;
        Report {
            seq: self.seq,
            observed_at: Utc::now(),
            resources,
        }
    }
}

pub(crate) fn host_resource(
    agent_id: &str,
    hostname: &str,
    sample: &HostSample,
) -> ObservedResource {
    ObservedResource {
        resource_type: ResourceType::Host,
        source_id: agent_id.to_owned(),
        name: hostname.to_owned(),
        aliases: if hostname == agent_id {
            Vec::new()
        } else {
            vec![hostname.to_owned()]
        },
        status: ResourceStatus::Running,
        health: Health::Healthy,
        restart_count: None,
        labels: Default::default(),
        details: json!({
            "cpus": sample.cpus,
            "uptime_seconds": sample.uptime_secs,
            "agent_version": env!("CARGO_PKG_VERSION"),
        }),
        metrics: sample.metrics(),
        parent: None,
    }
}

pub(crate) fn storage_resource(fs: &Filesystem) -> ObservedResource {
    let mut metrics = std::collections::BTreeMap::new();
    if let Some(usage) = fs.usage {
        metrics.insert("total_bytes".to_owned(), usage.total_bytes as f64);
        metrics.insert("used_bytes".to_owned(), usage.used_bytes as f64);
        metrics.insert("available_bytes".to_owned(), usage.available_bytes as f64);
        metrics.insert("used_percent".to_owned(), usage.used_percent());
        metrics.insert("inodes_total".to_owned(), usage.inodes_total as f64);
        metrics.insert("inodes_used".to_owned(), usage.inodes_used as f64);
        metrics.insert("inodes_percent".to_owned(), usage.inodes_percent());
    }
    ObservedResource {
        resource_type: ResourceType::Storage,
        source_id: fs.mount.mount_point.clone(),
        name: fs.mount.mount_point.clone(),
        aliases: Vec::new(),
        status: ResourceStatus::Running,
        // Usage could not be read (statvfs failed or hung): nobody can tell.
        health: if fs.usage.is_some() {
            Health::Healthy
        } else {
            Health::Unknown
        },
        restart_count: None,
        labels: Default::default(),
        details: json!({
            "device": fs.mount.device,
            "fs_type": fs.mount.fs_type,
        }),
        metrics,
        parent: None,
    }
}
