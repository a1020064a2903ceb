//! The connector (`pulse-connector`, ADR 0013) with the real gateway, relay and connector
//! binaries, against `fakepve` (PyPI), a Proxmox VE API this project did not write:
//!
//! - a connection added through the API is read by a connector into the inventory, through the
//!   relay, as agent `pve.<name>`: the cluster, its nodes, guests (with their node as parent),
//!   storage, ZFS pools and disks, and the connection's state is recorded by the poll;
//! - of two connector replicas exactly one holds the connection's lease and reads it; when that
//!   one stops, it gives the lease up and the other takes over, reporting as the same agent;
//! - a token revoked on the Proxmox side turns the connection `auth_failed` at the next poll,
//!   with what to check;
//! - removing the connection stops its poller and revokes the connector's token for it;
//! - no token other than the connection's own may report under the `pve.` prefix.

use std::time::Duration;

use pulse_domain::resource::{ResourceStatus, ResourceType};
use pulse_test_support::agent::AgentStack;
use pulse_test_support::fakepve::FakePve;
use pulse_test_support::service::{ServiceProcess, metric, scratch_dir, start_backend};
use pulse_test_support::wait;
use reqwest::Method;
use serde_json::{Value, json};

const TOKEN: &str = "pulse@pve!reader";
const SECRET: &str = "3f6a0c2e-91d4-4b7e-8a15-c0ffee5eed01";
const WITHIN: Duration = Duration::from_secs(30);

fn tmp() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
}

fn spec() -> Value {
    json!({
        "tokens": { TOKEN: SECRET },
        "nodes": [{"name": "pve1"}, {"name": "pve2"}],
        "grants": [
            {"user": TOKEN, "path": "/", "privs": ["Sys.Audit", "VM.Audit", "Datastore.Audit"]}
        ],
        "guests": [
            {"vmid": 100, "name": "web", "status": "running"},
            {"vmid": 101, "name": "db", "node": "pve2", "status": "stopped"},
            {"vmid": 200, "name": "dns", "type": "lxc", "status": "running"}
        ],
        "answers": {
            "/nodes/pve1/disks/zfs": [
                {"name": "tank", "health": "DEGRADED", "size": 1000, "alloc": 900, "free": 100,
                 "frag": 31, "dedup": 1.0}
            ]
        }
    })
}

/// A connector replica on the stack's database, prefix and master key, claiming every 200 ms.
async fn connector(stack: &AgentStack, label: &str) -> anyhow::Result<(ServiceProcess, String)> {
    connector_with(stack, &scratch_dir(label)?, &[]).await
}

/// [`connector`] in `dir`, with `extra` settings.
async fn connector_with(
    stack: &AgentStack,
    dir: &std::path::Path,
    extra: &[(&str, &str)],
) -> anyhow::Result<(ServiceProcess, String)> {
    let mut env = vec![
        (
            "PULSE_CONNECTOR__RELAY_URL".to_owned(),
            stack.relay_url.clone(),
        ),
        (
            "PULSE_CONNECTOR__CLAIM_EVERY_MS".to_owned(),
            "200".to_owned(),
        ),
    ];
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    start_backend(&stack.gateway, "pulse-connector", dir, env).await
}

/// Adds connection `lab` on `pve`, read every 10 s; its id.
async fn add_lab(stack: &AgentStack, pve: &FakePve) -> anyhow::Result<String> {
    let (status, added) = stack
        .gateway
        .admin_json(
            Method::POST,
            "/api/connections",
            Some(json!({
                "kind": "proxmox-ve", "name": "lab", "url": pve.url, "token_id": TOKEN,
                "token_secret": SECRET, "fingerprint": pve.fingerprint, "cadence_seconds": 10,
            })),
        )
        .await?;
    anyhow::ensure!(status == 201, "add: {status} {added}");
    assert_eq!(added["cadence_seconds"], 10, "{added}");
    Ok(added["id"].as_str().unwrap_or_default().to_owned())
}

async fn connection(stack: &AgentStack, id: &str) -> anyhow::Result<Value> {
    let (status, body) = stack
        .gateway
        .admin_json(Method::GET, &format!("/api/connections/{id}"), None)
        .await?;
    anyhow::ensure!(status == 200, "GET connection: {status} {body}");
    Ok(body)
}

/// The lease columns, read as the schema owner (the API does not show them).
async fn lease(stack: &AgentStack) -> anyhow::Result<(Option<String>, i64)> {
    let row = stack
        .gateway
        .db
        .owner_client()
        .await?
        .query_one(
            "SELECT lease_holder, lease_generation FROM connections",
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

#[tokio::test]
async fn a_connector_reads_a_cluster_into_the_inventory_and_one_replica_holds_its_lease()
-> anyhow::Result<()> {
    // Guest 100 replicates to pve2 and its last three syncs failed; its last migration failed.
    // Both answers are shaped as Proxmox documents `/nodes/{node}/replication` and
    // `/cluster/tasks`.
    let mut cluster = spec();
    cluster["answers"]["/nodes/pve1/replication"] = json!([
        {"id": "100-0", "guest": "100", "target": "pve2", "type": "local", "schedule": "*/15",
         "last_sync": 1765000000, "last_try": 1765002700, "next_sync": 1765003600,
         "fail_count": 3, "duration": 1.2, "jobnum": 0, "vmtype": "qemu",
         "error": "command 'zfs snapshot rpool/data/vm-100-disk-0@__replicate_100-0_1765002700__' failed: exit code 1"}
    ]);
    cluster["answers"]["/cluster/tasks"] = json!([
        {"upid": "UPID:pve1:0000B1B2:0001D3D4:67560000:qmigrate:100:root@pam:", "node": "pve1",
         "type": "qmigrate", "id": "100", "user": "root@pam", "starttime": 1765001000u64,
         "endtime": 1765001030u64, "status": "migration aborted"}
    ]);
    let mut pve = FakePve::start(tmp(), &cluster).await?;
    let stack = AgentStack::start(&[]).await?;
    let admin = stack.gateway.admin_token.clone();
    let id = add_lab(&stack, &pve).await?;

    let (first, first_health) = connector(&stack, "connector-a").await?;
    // The cluster arrives through the relay as agent pve.lab, with its parts and parents.
    let resources = wait::until(WITHIN, "the cluster in the inventory", || async {
        let list = stack.resources(&admin).await.ok()?;
        let guests = list
            .iter()
            .filter(|r| {
                matches!(
                    r.resource_type,
                    ResourceType::Vm | ResourceType::SystemContainer
                )
            })
            .count();
        (guests == 3).then_some(list)
    })
    .await?;
    let find = |kind: ResourceType, source: &str| {
        resources
            .iter()
            .find(|r| r.resource_type == kind && r.source_id == source)
            .ok_or_else(|| anyhow::anyhow!("{kind} {source} missing from {resources:#?}"))
    };
    let cluster = find(ResourceType::Host, "pve.lab")?;
    assert_eq!(cluster.agent_id, "pve.lab");
    let node = find(ResourceType::Node, "pve2")?;
    let db = find(ResourceType::Vm, "101")?;
    assert_eq!(db.name, "db");
    assert_eq!(db.status, ResourceStatus::Stopped);
    assert_eq!(
        db.parent.as_ref(),
        Some(&node.id),
        "a guest's parent is its node"
    );
    assert_eq!(
        find(ResourceType::Vm, "100")?.status,
        ResourceStatus::Running
    );
    assert_eq!(
        find(ResourceType::SystemContainer, "200")?.status,
        ResourceStatus::Running
    );
    let tank = find(ResourceType::Storage, "pve1/zfs/tank")?;
    assert_eq!(tank.health, pulse_domain::resource::Health::Unhealthy);

    // Each guest's replication jobs (read from their source node) and latest migration task.
    let web = find(ResourceType::Vm, "100")?;
    let job = &web.details["replication"][0];
    assert_eq!(job["id"], "100-0", "{:?}", web.details);
    assert_eq!(job["target"], "pve2");
    assert_eq!(job["ok"], false);
    assert_eq!(job["fail_count"], 3);
    assert!(
        job["error"]
            .as_str()
            .unwrap_or_default()
            .contains("zfs snapshot")
    );
    assert_eq!(
        web.details["last_migration"]["ok"], false,
        "{:?}",
        web.details
    );
    assert_eq!(
        web.details["last_migration"]["exit_status"],
        "migration aborted"
    );
    assert!(
        find(ResourceType::Vm, "101")?
            .details
            .get("replication")
            .is_none()
    );

    // The poll recorded the connection's state.
    let seen = connection(&stack, &id).await?;
    assert_eq!(seen["state"], "connected", "{seen}");
    assert!(seen["checked_at"].is_string(), "{seen}");
    // A second replica does not read a connection the first holds.
    let (second, second_health) = connector(&stack, "connector-b").await?;
    let http = stack.gateway.http.clone();
    wait::until(
        WITHIN,
        "the second replica to look for work twice",
        || async {
            let claims = metric(&http, &second_health, "pulse_connector_claims_total").await?;
            (claims >= 2.0).then_some(())
        },
    )
    .await?;
    assert_eq!(
        metric(&http, &second_health, "pulse_connector_leases").await,
        Some(0.0)
    );
    assert_eq!(
        metric(&http, &first_health, "pulse_connector_leases").await,
        Some(1.0)
    );
    let (holder, generation) = lease(&stack).await?;
    assert_eq!(generation, 1, "claimed once, by {holder:?}");

    // The first stops: it gives the lease up and the second takes over at once, as the same
    // agent, well before the lease would have lapsed.
    first.stop(Duration::from_secs(10)).await?;
    wait::until(WITHIN, "the second replica to take the lease", || async {
        let held = metric(&http, &second_health, "pulse_connector_leases").await?;
        (held == 1.0).then_some(())
    })
    .await?;
    let (holder_after, generation) = lease(&stack).await?;
    assert_eq!(generation, 2);
    assert_ne!(holder_after, holder);

    // The token revoked on the Proxmox side: the next poll (cadence 10 s) records auth_failed
    // with what to check.
    pve.command(json!({"op": "revoke_token", "tokenid": TOKEN}))
        .await?;
    let failed = wait::until(WITHIN, "the poll to see the revoked token", || async {
        let seen = connection(&stack, &id).await.ok()?;
        (seen["state"] == "auth_failed").then_some(seen)
    })
    .await?;
    assert_eq!(failed["state_code"], "connection_auth_failed", "{failed}");
    assert!(
        failed["state_cause"]
            .as_str()
            .unwrap_or_default()
            .contains("token"),
        "{failed}"
    );

    // Removing the connection stops its poller and revokes the connector's token.
    let (status, _) = stack
        .gateway
        .admin_json(Method::DELETE, &format!("/api/connections/{id}"), None)
        .await?;
    assert_eq!(status, 204);
    wait::until(WITHIN, "the poller to stop", || async {
        let held = metric(&http, &second_health, "pulse_connector_leases").await?;
        (held == 0.0).then_some(())
    })
    .await?;
    let (status, tokens) = stack
        .gateway
        .admin_json(Method::GET, "/api/tokens", None)
        .await?;
    assert_eq!(status, 200, "{tokens}");
    let connector_tokens: Vec<&Value> = tokens["tokens"]
        .as_array()
        .or_else(|| tokens.as_array())
        .into_iter()
        .flatten()
        .filter(|t| t["name"] == "connector pve.lab")
        .collect();
    assert_eq!(connector_tokens.len(), 1, "{tokens}");
    assert!(connector_tokens[0]["revoked_at"].is_string(), "{tokens}");
    second.stop(Duration::from_secs(10)).await?;
    Ok(())
}

/// The firing alerts' `(type, resource_id)` pairs of `GET /api/alerts?state=firing`.
async fn firing(stack: &AgentStack) -> Option<Vec<(String, String)>> {
    let (status, body) = stack
        .gateway
        .admin_json(Method::GET, "/api/alerts?state=firing&limit=500", None)
        .await
        .ok()?;
    (status == 200).then(|| {
        body["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                (
                    a["type"].as_str().unwrap_or_default().to_owned(),
                    a["resource_id"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    })
}

async fn wait_firing(stack: &AgentStack, rule: &str, resource: &str) -> anyhow::Result<()> {
    let want = (rule.to_owned(), resource.to_owned());
    wait::until(WITHIN, &format!("{rule} on {resource}"), || async {
        firing(stack).await?.contains(&want).then_some(())
    })
    .await
}

/// What a cluster read turns into: the scheduler's alert floor fires the platform rules from
/// the connector's reports, each with its own stable type, and a guest first seen stopped, a
/// stopped template or a guest backed up within its window fires nothing.
#[tokio::test]
async fn a_clusters_trouble_fires_its_own_alert_types() -> anyhow::Result<()> {
    let mut cluster = spec();
    cluster["guests"] = json!([
        {"vmid": 100, "name": "web", "status": "running"},
        {"vmid": 101, "name": "db", "node": "pve2", "status": "stopped"},
        {"vmid": 102, "name": "mail", "status": "running"},
        {"vmid": 103, "name": "dns", "status": "running"},
        {"vmid": 9000, "name": "debian-template", "status": "stopped", "template": true}
    ]);
    cluster["answers"]["/nodes/pve1/disks/list"] = json!([
        {"devpath": "/dev/sda", "type": "hdd", "health": "FAILED", "wearout": "N/A",
         "serial": "ZGY0ABCD", "size": 4000787030016u64},
        {"devpath": "/dev/nvme0n1", "type": "nvme", "health": "PASSED", "wearout": 4,
         "serial": "S5GXNF0N123456", "size": 1000204886016u64}
    ]);
    // The cluster's recent tasks as Proxmox lists them: guest 100's latest backup failed after an
    // earlier one ended well; guest 101's only backup ended with warnings; guest 102's only
    // backup ended well in June 2024, long past the 48-hour window; guest 103's ended well an
    // hour ago.
    let an_hour_ago = chrono::Utc::now().timestamp() - 3600;
    let fresh_upid = format!(
        "UPID:pve1:0000A1B6:0001C3D8:{:08X}:vzdump:103:root@pam:",
        an_hour_ago - 120
    );
    cluster["answers"]["/cluster/tasks"] = json!([
        {"upid": "UPID:pve1:0000A1B2:0001C3D4:67540000:vzdump:100:root@pam:", "node": "pve1",
         "type": "vzdump", "id": "100", "user": "root@pam", "starttime": 1733558400u64,
         "endtime": 1733558460u64, "status": "OK"},
        {"upid": "UPID:pve1:0000A1B3:0001C3D5:67550000:vzdump:100:root@pam:", "node": "pve1",
         "type": "vzdump", "id": "100", "user": "root@pam", "starttime": 1733644800u64,
         "endtime": 1733644830u64, "status": "job errors"},
        {"upid": "UPID:pve2:0000A1B4:0001C3D6:67550010:vzdump:101:root@pam:", "node": "pve2",
         "type": "vzdump", "id": "101", "user": "root@pam", "starttime": 1733644816u64,
         "endtime": 1733644900u64, "status": "WARNINGS: 1"},
        {"upid": "UPID:pve1:0000A1B5:0001C3D7:665A6480:vzdump:102:root@pam:", "node": "pve1",
         "type": "vzdump", "id": "102", "user": "root@pam", "starttime": 1717200000u64,
         "endtime": 1717200240u64, "status": "OK"},
        {"upid": fresh_upid, "node": "pve1", "type": "vzdump", "id": "103", "user": "root@pam",
         "starttime": an_hour_ago - 120, "endtime": an_hour_ago, "status": "OK"}
    ]);
    cluster["ceph"] = json!(true);
    let mut pve = FakePve::start(tmp(), &cluster).await?;
    let stack = AgentStack::start(&[]).await?;
    let _scheduler = pulse_test_support::scheduler::TestScheduler::start(
        &stack.gateway,
        &stack.dir.join("scheduler"),
        &[("PULSE_ALERTS__TICK_MS", "200")],
    )
    .await?;
    add_lab(&stack, &pve).await?;
    let (_connector, _) = connector(&stack, "connector-alerts").await?;

    wait_firing(&stack, "pool_degraded", "storage:pve.lab:pve1/zfs/tank").await?;
    wait_firing(
        &stack,
        "smart_failure",
        "physical-disk:pve.lab:pve1/dev/sda",
    )
    .await?;
    wait_firing(
        &stack,
        "disk_wearout",
        "physical-disk:pve.lab:pve1/dev/nvme0n1",
    )
    .await?;
    wait_firing(&stack, "backup_failed", "vm:pve.lab:100").await?;
    wait_firing(&stack, "backup_stale", "vm:pve.lab:102").await?;
    let now = firing(&stack).await.unwrap_or_default();
    assert!(
        !now.iter().any(|(rule, resource)| rule == "unhealthy"
            || rule == "guest_stopped"
            || (rule == "backup_failed" && resource != "vm:pve.lab:100")),
        "a pool, disk or guest first seen stopped fires nothing else: {now:?}"
    );
    // 103 is in the same read as 102: backed up an hour ago, within its window; the template
    // has no backup to judge.
    for quiet in ["vm:pve.lab:103", "vm:pve.lab:9000"] {
        assert!(
            !now.iter()
                .any(|(rule, resource)| resource == quiet && rule == "backup_stale"),
            "{quiet} is not stale: {now:?}"
        );
    }

    // A guest that was running stops; the cluster loses quorum and a node drops out.
    pve.command(json!({"op": "set_status", "vmid": 100, "status": "stopped"}))
        .await?;
    pve.command(json!({"op": "lose_quorum"})).await?;
    pve.command(json!({"op": "node_offline", "node": "pve2"}))
        .await?;
    wait_firing(&stack, "guest_stopped", "vm:pve.lab:100").await?;
    wait_firing(&stack, "quorum_lost", "host:pve.lab").await?;
    wait_firing(&stack, "node_offline", "node:pve.lab:pve2").await?;
    // The cluster stores on Ceph, which was HEALTH_OK so far; it warns, then recovers.
    let ceph = "storage:pve.lab:ceph";
    let resources = stack.resources(&stack.gateway.admin_token).await?;
    let read = resources
        .iter()
        .find(|r| r.id.as_str() == ceph)
        .ok_or_else(|| anyhow::anyhow!("no Ceph resource in {resources:#?}"))?;
    assert_eq!(
        read.details["ceph_health"], "HEALTH_OK",
        "{:?}",
        read.details
    );
    pve.command(json!({"op": "ceph_health", "health": "HEALTH_WARN"}))
        .await?;
    wait_firing(&stack, "ceph_degraded", ceph).await?;
    let now = firing(&stack).await.unwrap_or_default();
    assert!(
        !now.iter().any(|(rule, r)| rule == "unhealthy" && r == ceph),
        "Ceph has its own alert: {now:?}"
    );
    pve.command(json!({"op": "ceph_recover"})).await?;
    wait::until(WITHIN, "ceph_degraded to clear", || async {
        let now = firing(&stack).await?;
        (!now.contains(&("ceph_degraded".to_owned(), ceph.to_owned()))).then_some(())
    })
    .await?;
    let now = firing(&stack).await.unwrap_or_default();
    for quiet in ["vm:pve.lab:101", "vm:pve.lab:9000"] {
        assert!(
            !now.iter()
                .any(|(rule, resource)| resource == quiet && rule == "guest_stopped"),
            "{quiet} was never seen running: {now:?}"
        );
    }
    assert!(
        !now.iter()
            .any(|(rule, resource)| rule == "unhealthy" && resource == "host:pve.lab"),
        "quorum has its own alert: {now:?}"
    );
    Ok(())
}

/// The loop on a cluster: a guest that was running stops, and a Patrol run (the real scheduler
/// and model-runner, the provider simulator's diligent model) records a finding on that guest,
/// with its `guest_stopped` alert and `not_running` flag as the evidence seeds.
#[tokio::test]
async fn a_guest_that_stopped_becomes_a_finding_in_a_patrol_run() -> anyhow::Result<()> {
    use pulse_test_support::fleet::{AgentFleet, FleetSpec, Route};
    use pulse_test_support::provider_sim::{Script, preflight_reply};

    let mut pve = FakePve::start(tmp(), &spec()).await?;
    let route = Route::OpenAi {
        key: "sk-connector-patrol-5e1d".to_owned(),
    };
    let fleet = AgentFleet::start(
        FleetSpec::web_and_db("pvepatrol", route, "sim:diligent"),
        Script::turns([]).with_tool_offer_reply(preflight_reply()),
    )
    .await?;
    let stack = &fleet.stack;
    add_lab(stack, &pve).await?;
    let (_connector, _) = connector(stack, "connector-patrol").await?;
    let admin = stack.gateway.admin_token.clone();
    wait::until(WITHIN, "vm 100 running in the inventory", || async {
        let list = stack.resources(&admin).await.ok()?;
        list.iter()
            .any(|r| r.id.as_str() == "vm:pve.lab:100" && r.status == ResourceStatus::Running)
            .then_some(())
    })
    .await?;

    pve.command(json!({"op": "set_status", "vmid": 100, "status": "stopped"}))
        .await?;
    wait_firing(stack, "guest_stopped", "vm:pve.lab:100").await?;
    let run = fleet.run().await?;
    let findings = fleet.findings().await?;
    let on_guest: Vec<_> = findings
        .iter()
        .filter(|f| f.finding.resource_id == "vm:pve.lab:100")
        .collect();
    assert_eq!(on_guest.len(), 1, "run {run:?}; findings {findings:#?}");
    assert!(
        run.new_findings >= 1,
        "the run recorded the guest's finding: {run:?}"
    );
    Ok(())
}

/// A plan of `capability` on guest `vmid` of connection `lab`.
fn guest_plan(capability: &str, vmid: u32) -> pulse_api::actions::PlanBody {
    pulse_api::actions::PlanBody {
        resource_id: format!("vm:pve.lab:{vmid}"),
        capability: capability.to_owned(),
        params: json!({"target": vmid.to_string()}),
        reason: format!("guest {vmid} needs {capability}"),
        severity: pulse_domain::action::Severity::Warning,
        approval_floor: None,
        finding_id: None,
    }
}

/// The receipt's classified reason of a failed action.
fn failure(action: &pulse_api::actions::ActionView) -> String {
    let result = action.result.clone().unwrap_or_default();
    result["reason"]
        .as_str()
        .or_else(|| result["error"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The fake's task log: (type, id, exit status) of each task.
async fn tasks(pve: &mut FakePve) -> anyhow::Result<Vec<(String, String, String)>> {
    let data = pve.command(json!({"op": "tasks"})).await?;
    Ok(data
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            (
                t["type"].as_str().unwrap_or_default().to_owned(),
                t["id"].as_str().unwrap_or_default().to_owned(),
                t["exitstatus"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect())
}

#[tokio::test]
async fn guest_power_actions_run_after_approval_wait_for_their_task_and_are_verified()
-> anyhow::Result<()> {
    use pulse_api::actions::DecisionOutcome;
    use pulse_domain::action::{ActionState, Verification};
    use pulse_domain::ai_settings::AutonomyLevel;
    use pulse_domain::{Scope, TenantId};
    use pulse_test_support::action_api::{
        action_in_state, decision, plan_pending, set_autonomy_level, user_token,
    };
    use pulse_test_support::action_broker::TestActionBroker;
    use pulse_test_support::verifier::TestVerifier;

    // One PVE second is one second: tasks run in the background and take their time, as on a
    // real cluster.
    let mut pve = FakePve::start(
        tmp(),
        &json!({
            "tokens": { TOKEN: SECRET },
            "time_scale": 1.0,
            "nodes": [{"name": "pve1"}, {"name": "pve2"}],
            "grants": [{"user": TOKEN, "path": "/",
                        "privs": ["Sys.Audit", "VM.Audit", "Datastore.Audit", "VM.PowerMgmt"]}],
            "guests": [
                {"vmid": 100, "name": "web", "status": "running", "shutdown_secs": 600},
                {"vmid": 102, "name": "app", "node": "pve2", "status": "stopped", "start_secs": 1},
                {"vmid": 103, "name": "files", "status": "running", "lock": "backup"},
                {"vmid": 104, "name": "mail", "status": "stopped"}
            ]
        }),
    )
    .await?;
    let stack = AgentStack::start(&[("PULSE_RELAY__REQUEST_TIMEOUT_MS", "10000")]).await?;
    let id = add_lab(&stack, &pve).await?;
    let dir = scratch_dir("guest-actions")?;
    // A guest's OS gets 3 s to shut down.
    let (_connector, _) = connector_with(
        &stack,
        &dir,
        &[("PULSE_CONNECTOR__SHUTDOWN_TIMEOUT_SECONDS", "3")],
    )
    .await?;
    let _broker = TestActionBroker::start(
        &stack.gateway,
        &dir.join("broker"),
        &[
            ("PULSE_VERIFY__POSTCONDITION_WAIT_MS", "30000"),
            ("PULSE_RELAY__REQUEST_TIMEOUT_MS", "10000"),
        ],
    )
    .await?;
    let _verifier = TestVerifier::start_with_postcondition_timing(
        &stack.gateway,
        &dir.join("verifier"),
        Duration::from_secs(30),
        Duration::from_millis(500),
        &[],
    )
    .await?;
    let _scheduler = pulse_test_support::scheduler::TestScheduler::start(
        &stack.gateway,
        &dir.join("scheduler"),
        &[("PULSE_ALERTS__TICK_MS", "200")],
    )
    .await?;
    set_autonomy_level(&stack.gateway, AutonomyLevel::Approval).await?;
    let tenant = TenantId::default_tenant();
    let store = stack.gateway.db.store();
    let planner = user_token(
        store,
        &tenant,
        Some("planner"),
        &[Scope::ActionsPlan, Scope::MonitoringRead],
    )
    .await?;
    let alice = user_token(
        store,
        &tenant,
        Some("alice"),
        &[
            Scope::ActionsApprove,
            Scope::ActionsExecute,
            Scope::MonitoringRead,
        ],
    )
    .await?;
    let admin = stack.gateway.admin_token.clone();
    wait::until(WITHIN, "the guests in the inventory", || async {
        let list = stack.resources(&admin).await.ok()?;
        (list
            .iter()
            .filter(|r| r.resource_type == ResourceType::Vm)
            .count()
            == 4)
            .then_some(())
    })
    .await?;

    // Off by default: the catalogue offers nothing and a plan is refused with what to do.
    let (status, offered) = stack
        .gateway
        .admin_json(
            Method::GET,
            "/api/agent/resource-capabilities/vm:pve.lab:102",
            None,
        )
        .await?;
    assert_eq!(status, 200, "{offered}");
    assert_eq!(offered["capabilities"], json!([]), "{offered}");
    let refused = stack
        .gateway
        .client_as(&planner)?
        .plan_action(&guest_plan("guest.start", 102))
        .await
        .expect_err("guest actions are off");
    let refused = refused.to_string();
    assert!(
        refused.contains("invalid_action_request") && refused.contains("guest-actions"),
        "{refused}"
    );

    // Turned on: four capabilities, each needing a human, guest.stop the riskiest.
    let (status, switched) = stack
        .gateway
        .admin_json(
            Method::PUT,
            &format!("/api/connections/{id}/guest-actions"),
            Some(json!({"enabled": true})),
        )
        .await?;
    assert_eq!(
        (status, &switched["guest_actions"]),
        (200, &json!(true)),
        "{switched}"
    );
    let (_, offered) = stack
        .gateway
        .admin_json(
            Method::GET,
            "/api/agent/resource-capabilities/vm:pve.lab:102",
            None,
        )
        .await?;
    let entries = offered["capabilities"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = entries.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "guest.start",
            "guest.shutdown",
            "guest.reboot",
            "guest.stop"
        ]
    );
    assert!(
        entries
            .iter()
            .all(|e| e["approval_floor"] == "admin" && e["auto_approval_eligible"] == false)
    );
    assert_eq!(entries[3]["risk_level"], "high", "{offered}");

    let gw = &stack.gateway;
    // Planned by one user, approved by another, then followed until it ends in `state`.
    let approved_until = |capability: &'static str, vmid: u32, state: ActionState| {
        let (planner, alice) = (planner.clone(), alice.clone());
        async move {
            let id = plan_pending(gw, &planner, &guest_plan(capability, vmid)).await?;
            gw.client_as(&alice)?
                .decide_action(
                    &id,
                    &decision(DecisionOutcome::Approved, "checked the guest"),
                )
                .await
                .map_err(|e| anyhow::anyhow!("approve: {e}"))?;
            action_in_state(gw, &id, &alice, state, Duration::from_secs(90)).await
        }
    };

    // An approved start runs, waits for its task and is verified on a fresh read of the guest.
    let started = approved_until("guest.start", 102, ActionState::Completed).await?;
    assert_eq!(
        started.verification,
        Some(Verification::Verified),
        "{started:?}"
    );
    let result = started.result.clone().unwrap_or_default();
    assert!(
        result["output"]
            .as_str()
            .unwrap_or_default()
            .contains("UPID:pve2:"),
        "the receipt names the task: {result}"
    );
    assert_eq!(result["exit_status"], 0, "{result}");
    assert!(
        tasks(&mut pve)
            .await?
            .contains(&("qmstart".into(), "102".into(), "OK".into())),
        "the start ran as one task"
    );

    // A locked guest is refused with its cause, and nothing is asked of Proxmox.
    let refused = approved_until("guest.shutdown", 103, ActionState::Failed).await?;
    let reason = failure(&refused);
    assert!(
        reason.starts_with("guest_locked: guest 103 is locked (backup)"),
        "{reason}"
    );
    assert!(
        !tasks(&mut pve).await?.iter().any(|(_, id, _)| id == "103"),
        "no task was started for the locked guest"
    );

    // A shutdown the guest's OS does not finish within the timeout fails as such; the guest is
    // not forced off.
    let timed_out = approved_until("guest.shutdown", 100, ActionState::Failed).await?;
    let reason = failure(&timed_out);
    assert!(
        reason.starts_with("shutdown_timeout:") && reason.contains("within 3 s"),
        "{reason}"
    );
    let list = stack.resources(&admin).await?;
    let web = list.iter().find(|r| r.id.as_str() == "vm:pve.lab:100");
    assert_eq!(
        web.map(|r| r.status),
        Some(ResourceStatus::Running),
        "not forced off"
    );

    // An approved power-off is verified on a fresh read, and the stop it made is no fault:
    // `guest_stopped` fires for a guest stopped behind Pulse's back, not for this one.
    let stopped = approved_until("guest.stop", 102, ActionState::Completed).await?;
    assert_eq!(
        stopped.verification,
        Some(Verification::Verified),
        "{stopped:?}"
    );
    pve.command(json!({"op": "set_status", "vmid": 100, "status": "stopped"}))
        .await?;
    wait_firing(&stack, "guest_stopped", "vm:pve.lab:100").await?;
    let alerts = firing(&stack).await.unwrap_or_default();
    assert!(
        !alerts.contains(&("guest_stopped".to_owned(), "vm:pve.lab:102".to_owned())),
        "stopped by an approved action: {alerts:?}"
    );

    // Without quorum nothing is started: one refusal with its cause, not a retry.
    pve.command(json!({"op": "lose_quorum"})).await?;
    let refused = approved_until("guest.start", 104, ActionState::Failed).await?;
    let reason = failure(&refused);
    assert!(reason.starts_with("no_quorum:"), "{reason}");
    assert!(
        !tasks(&mut pve).await?.iter().any(|(_, id, _)| id == "104"),
        "no task was started without quorum"
    );
    let (finished, recorded) = stack
        .gateway
        .db
        .owner_client()
        .await?
        .query_one(
            "SELECT count(*) FILTER (WHERE state = 'finished'), count(*) FROM connector_commands",
            &[],
        )
        .await
        .map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1)))?;
    assert_eq!(
        (finished, recorded),
        (5, 5),
        "each action was recorded once in the command log, with its receipt"
    );
    Ok(())
}

const PBS_TOKEN: &str = "pulse@pbs!reader";
const PBS_SECRET: &str = "8c1d4e0a-2b7f-4f3e-9d6a-5eed0ba5e0b1";

/// A Proxmox Backup Server's answers, shaped exactly as the PBS API documents them (its API
/// viewer and `pbs-api-types`): no fake of the PBS API exists, so these payloads are served by
/// `tests/support/python/pbs_payloads.py` over TLS with token authentication. One datastore,
/// 93% full; its verify job's last run failed; in the root namespace vm/100's newest snapshot
/// failed verification and ct/105 has one unverified snapshot; namespace `site-a` holds a
/// verified vm/100.
fn pbs_spec() -> Value {
    let day = 86_400_i64;
    let now = chrono::Utc::now().timestamp();
    let verify_upid = "UPID:pbs:00001235:0000ABCE:00000001:65710000:verify:store1:root@pam:";
    json!({
        "tokens": { PBS_TOKEN: PBS_SECRET, "pulse@pbs!blind": "blind-5ecret" },
        "answers": {
            "/api2/json/version": {"version": "3.2.4", "release": "3.2", "repoid": "4940514b"},
            "/api2/json/access/permissions": {
                "/": {"Sys.Audit": true, "Datastore.Audit": true}
            },
            "/api2/json/admin/datastore": [{"store": "store1", "comment": "main"}],
            "/api2/json/status/datastore-usage": [
                {"store": "store1", "total": 1_000_000_000_000_u64, "used": 930_000_000_000_u64,
                 "avail": 70_000_000_000_u64, "estimated-full-date": now + 20 * day,
                 "history-start": now - 30 * day, "history-delta": day,
                 "history": [0.90, 0.91, 0.93]}
            ],
            "/api2/json/admin/gc": [
                {"store": "store1", "schedule": "daily", "last-run-state": "OK",
                 "last-run-endtime": now - day / 2, "next-run": now + day / 2, "duration": 42,
                 "index-file-count": 12, "removed-bytes": 1024, "pending-bytes": 0}
            ],
            "/api2/json/admin/verify": [
                {"id": "v-3f2a", "store": "store1", "schedule": "daily",
                 "last-run-state": "TASK ERROR: verification failed - 1 snapshot(s) corrupt",
                 "last-run-upid": verify_upid, "last-run-endtime": now - day / 3,
                 "next-run": now + day / 2}
            ],
            "/api2/json/admin/prune": [],
            "/api2/json/admin/sync": [
                {"id": "s-offsite", "store": "store1", "remote": "offsite",
                 "remote-store": "vault", "schedule": "hourly", "last-run-state": "OK",
                 "last-run-endtime": now - 600}
            ],
            "/api2/json/admin/datastore/store1/namespace": [{"ns": ""}, {"ns": "site-a"}],
            "/api2/json/admin/datastore/store1/snapshots": [
                {"backup-type": "vm", "backup-id": "100", "backup-time": now - 2 * day,
                 "files": [], "size": 1_000, "owner": "root@pam",
                 "verification": {"state": "ok", "upid": verify_upid}},
                {"backup-type": "vm", "backup-id": "100", "backup-time": now - day,
                 "files": [], "size": 1_100, "owner": "root@pam",
                 "verification": {"state": "failed", "upid": verify_upid}},
                {"backup-type": "ct", "backup-id": "105", "backup-time": now - 3 * day,
                 "files": [], "owner": "root@pam"}
            ],
            "/api2/json/admin/datastore/store1/snapshots?ns=site-a": [
                {"backup-type": "vm", "backup-id": "100", "backup-time": now - day / 2,
                 "files": [], "owner": "sync@pbs",
                 "verification": {"state": "ok", "upid": verify_upid}}
            ]
        }
    })
}

/// A Proxmox Backup Server connection, end to end with the real gateway, relay, connector and
/// scheduler: adding it checks the token and its privileges; the connector reports the server
/// and its datastore (usage, jobs, backup groups of every namespace) as agent `pbs.<name>`; the
/// datastore fills under `filesystem_usage`, and its failed verify job and its group whose
/// newest snapshot failed verification fire `pbs_job_failed` and `backup_verify_failed`; a
/// verify job that then runs well clears its alert.
#[tokio::test]
async fn a_backup_server_is_read_into_its_datastores_jobs_and_backup_groups() -> anyhow::Result<()>
{
    let mut pbs = FakePve::pbs_payloads(tmp(), &pbs_spec()).await?;
    let stack = AgentStack::start(&[]).await?;
    let admin = stack.gateway.admin_token.clone();
    let _scheduler = pulse_test_support::scheduler::TestScheduler::start(
        &stack.gateway,
        &stack.dir.join("scheduler"),
        &[("PULSE_ALERTS__TICK_MS", "200")],
    )
    .await?;
    let (url, fingerprint) = (pbs.url.clone(), pbs.fingerprint.clone());
    let add = |token: &str, secret: &str| {
        json!({
            "kind": "proxmox-backup", "name": "backup", "url": url, "token_id": token,
            "token_secret": secret, "fingerprint": fingerprint, "cadence_seconds": 10,
        })
    };
    for (token, secret, code, says) in [
        (
            PBS_TOKEN,
            "not-the-secret",
            "connection_auth_failed",
            "token",
        ),
        (
            "pulse@pbs!blind",
            "blind-5ecret",
            "connection_privileges_missing",
            "Audit role",
        ),
    ] {
        if token == "pulse@pbs!blind" {
            pbs.command(
                json!({"op": "answer", "path": "/api2/json/access/permissions",
                               "data": {"/": {"Sys.Audit": true}}}),
            )
            .await?;
        }
        let (status, refused) = stack
            .gateway
            .admin_json(Method::POST, "/api/connections", Some(add(token, secret)))
            .await?;
        assert!((400..500).contains(&status), "{status} {refused}");
        assert_eq!(refused["error"], code, "{refused}");
        assert!(refused.to_string().contains(says), "{refused}");
    }
    pbs.command(
        json!({"op": "answer", "path": "/api2/json/access/permissions",
                       "data": {"/": {"Sys.Audit": true, "Datastore.Audit": true}}}),
    )
    .await?;
    let (status, added) = stack
        .gateway
        .admin_json(
            Method::POST,
            "/api/connections",
            Some(add(PBS_TOKEN, PBS_SECRET)),
        )
        .await?;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["kind"], "proxmox-backup");
    assert_eq!(added["version"], "3.2.4", "{added}");
    let id = added["id"].as_str().unwrap_or_default().to_owned();
    let (_connector, _) = connector(&stack, "connector-pbs").await?;

    let store =
        wait::until(WITHIN, "the datastore in the inventory", || async {
            stack.resources(&admin).await.ok()?.into_iter().find(|r| {
                r.resource_type == ResourceType::Storage && r.source_id == "datastore/store1"
            })
        })
        .await?;
    let resources = stack.resources(&admin).await?;
    let server = resources
        .iter()
        .find(|r| r.resource_type == ResourceType::Host && r.source_id == "pbs.backup")
        .expect("the server is a host");
    assert_eq!(server.agent_id, "pbs.backup");
    assert_eq!(server.details["version"], "3.2.4");
    assert_eq!(store.parent.as_ref(), Some(&server.id));
    assert_eq!(store.status, ResourceStatus::Running);
    let d = &store.details;
    assert_eq!(d["platform"], "proxmox-backup", "{d}");
    assert_eq!(d["kind"], "pbs-datastore");
    assert!(d["estimated_full_at"].is_string(), "{d}");
    assert_eq!(
        d["failed_jobs"],
        json!(["verify job v-3f2a: TASK ERROR: verification failed - 1 snapshot(s) corrupt"])
    );
    let jobs: Vec<(&str, bool)> = d["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|j| (j["type"].as_str().unwrap_or(""), j["last_run_ok"] == true))
        .collect();
    assert_eq!(
        jobs,
        [("garbage", true), ("verify", false), ("sync", true)],
        "{d}"
    );
    assert_eq!(d["backup_group_count"], 3);
    assert_eq!(d["verify_failed_groups"], json!(["vm/100"]));
    let groups: Vec<&str> = d["backup_groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["group"].as_str())
        .collect();
    assert_eq!(
        groups,
        ["ct/105", "vm/100", "site-a:vm/100"],
        "oldest first"
    );
    let state = connection(&stack, &id).await?;
    assert_eq!(state["state"], "connected", "{state}");

    let resource = "storage:pbs.backup:datastore/store1";
    wait_firing(&stack, "filesystem_usage", resource).await?;
    wait_firing(&stack, "pbs_job_failed", resource).await?;
    wait_firing(&stack, "backup_verify_failed", resource).await?;
    let now = firing(&stack).await.unwrap_or_default();
    assert!(
        !now.iter()
            .any(|(rule, r)| rule == "unhealthy" && r.contains("pbs.backup")),
        "failed jobs have their own alert, not a second unhealthy: {now:?}"
    );

    // The verify job runs again and ends well: its alert clears at the next read.
    let mut verify = pbs_spec()["answers"]["/api2/json/admin/verify"].clone();
    verify[0]["last-run-state"] = json!("OK");
    pbs.command(json!({"op": "answer", "path": "/api2/json/admin/verify", "data": verify}))
        .await?;
    wait::until(WITHIN, "pbs_job_failed to clear", || async {
        let now = firing(&stack).await?;
        (!now.contains(&("pbs_job_failed".to_owned(), resource.to_owned()))).then_some(())
    })
    .await?;
    Ok(())
}
