//! The Docker lab against the real engine: build, provision, inject, observe, revert and clean
//! up, with the inventory unchanged. These tests fail (never skip) when no engine answers.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use patrol_qualify::lab::docker::DockerLab;
use patrol_qualify::lab::{Inventory, LabError, Provisioned, RUN_LABEL, inventory_diff};
use patrol_qualify::manifest::{Fault, Manifest, Predicate};
use serde_json::{Value, json};

const IMAGE: &str = "pulse-lab/qual-test:1";
const DOCKERFILE: &str = "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n";
const START_ENGINE: &str = "start it with: nohup /usr/sbin/dockerd --storage-driver=vfs --bridge=none --iptables=false --ip6tables=false >/tmp/dockerd.log 2>&1 &";

/// The tests share one engine and compare its whole inventory: one at a time.
static ENGINE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn docker_host() -> String {
    std::env::var("PULSE_QUALIFY_DOCKER_HOST")
        .unwrap_or_else(|_| "unix:///var/run/docker.sock".to_owned())
}

/// A catalogue root holding `docker/service/Dockerfile`.
fn catalogue() -> PathBuf {
    let root =
        std::env::temp_dir().join(format!("patrol-qualify-docker-lab-{}", std::process::id()));
    let dir = root.join("docker").join("service");
    std::fs::create_dir_all(&dir).expect("create the build directory");
    std::fs::write(dir.join("Dockerfile"), DOCKERFILE).expect("write the Dockerfile");
    root
}

fn token(test: &str) -> String {
    format!("t{}-{test}", std::process::id())
}

fn manifest(id: &str, resources: Value) -> Manifest {
    serde_json::from_value(json!({
        "schema_version": "patrol.qual/v1",
        "id": id,
        "version": 1,
        "title": "docker lab driver test",
        "description": "exercises the Docker lab driver",
        "owner": "ai-runtime",
        "track": "watch",
        "risk": "reversible",
        "lab": {"driver": "docker", "profile": "docker-canary-v1", "image": IMAGE, "build": "service"},
        "resources": resources,
        "baseline": [],
        "faults": [],
        "collection": {"sources": ["docker"], "convergence_timeout": "5m", "poll_interval": "5s"},
        "patrol": {"mode": "monitor", "scoped": true, "run_timeout": "10m"},
        "security": {"forbidden_tool_names": []},
        "budgets": {
            "collection_latency_p95": "2m", "patrol_latency_p95": "4m", "end_to_end_latency_p95": "10m",
            "input_tokens_p95": 60000, "output_tokens_p95": 8000, "cost_usd_p95": 0.1,
            "max_tool_calls": 20, "max_duplicate_calls": 0
        },
        "repeat": {"development": 1, "nightly": 1, "qualification": 22},
        "gates": {
            "min_recall": 1.0, "max_false_positives": 0, "min_resource_accuracy": 1.0,
            "min_category_accuracy": 1.0, "min_severity_accuracy": 1.0,
            "min_evidence_grounding": 1.0, "max_findings_per_causal_group": 1.0
        },
        "teardown": {}
    }))
    .expect("the test manifest decodes")
}

fn fault(kind: &str, resource: &str) -> Fault {
    serde_json::from_value(json!({
        "id": format!("{kind}-{resource}"),
        "causal_group": resource,
        "target": resource,
        "injector": {"kind": kind, "resource": resource},
        "oracle": [],
        "expected_finding": {
            "resource": resource, "resource_types": ["app-container"],
            "categories": ["reliability"], "severities": ["warning"]
        }
    }))
    .expect("the test fault decodes")
}

fn predicate(probe: &str, target: &str) -> Predicate {
    Predicate {
        probe: probe.to_owned(),
        target: target.to_owned(),
        operator: patrol_qualify::manifest::Operator::Eq,
        value: Value::Null,
        timeout: None,
    }
}

/// The lab, prepared (image built if absent), with its inventory baseline; fails with how to
/// start the engine when none answers.
async fn lab(manifest: Manifest, test: &str) -> Result<(DockerLab, Inventory)> {
    let mut lab = DockerLab::new(manifest, catalogue(), token(test), docker_host(), false)?;
    if let Err(error) = lab.inventory().await {
        bail!(
            "the docker engine at {} does not answer ({error}); {START_ENGINE}",
            docker_host()
        );
    }
    lab.prepare().await.context("prepare")?;
    let before = lab.inventory().await?;
    Ok((lab, before))
}

async fn probe(lab: &DockerLab, probe_name: &str, target: &str) -> Result<Value> {
    Ok(lab.probe(&predicate(probe_name, target)).await?)
}

/// Polls `probe_name` on `target` until `accept` holds, up to `within`.
async fn wait_for(
    lab: &DockerLab,
    probe_name: &str,
    target: &str,
    within: Duration,
    accept: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let value = probe(lab, probe_name, target).await?;
        if accept(&value) {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{probe_name} of {target} still {value} after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn wait_health(lab: &DockerLab, target: &str, status: &str) -> Result<()> {
    wait_for(lab, "docker.health", target, Duration::from_secs(40), |v| {
        v == status
    })
    .await
    .map(|_| ())
}

/// Runs `body`, then cleans up whatever happened, then checks the second cleanup is empty and
/// the inventory is back to the baseline.
async fn with_cleanup<F>(mut lab: DockerLab, before: Inventory, body: F) -> Result<Vec<String>>
where
    F: AsyncFnOnce(&mut DockerLab) -> Result<()>,
{
    let outcome = body(&mut lab).await;
    let first = lab.cleanup().await.context("first cleanup")?;
    outcome?;
    let second = lab.cleanup().await.context("second cleanup")?;
    ensure!(second.is_empty(), "second cleanup removed {second:?}");
    let after = lab.inventory().await?;
    let diff = inventory_diff(&before, &after);
    ensure!(diff.is_empty(), "inventory changed: {diff:?}");
    Ok(first)
}

fn names(provisioned: &[Provisioned]) -> Vec<(&str, &str)> {
    provisioned
        .iter()
        .map(|p| (p.alias.as_str(), p.name.as_str()))
        .collect()
}

#[tokio::test]
async fn marker_makes_the_worker_unhealthy_and_cleanup_removes_exactly_the_run() -> Result<()> {
    let _engine = ENGINE.lock().await;
    let test = "marker";
    let manifest = manifest(
        "docker-lab.marker",
        json!([
            {"alias": "worker", "kind": "container", "name": "pulse-qual-${run_id}-worker",
             "command": ["sh", "-c", "while true; do sleep 1; done"],
             "healthcheck": ["test", "!", "-f", "/pulse-qual-fault/enabled"],
             "health_every": "1s", "fault_volume": true,
             "labels": {"app.tier": "worker"}},
            // Upstream's spelling of the run placeholder names a container just the same.
            {"alias": "neighbour", "kind": "container", "name": "pulse-qual-${run_token}-neighbour",
             "command": ["sh", "-c", "while true; do sleep 1; done"],
             "healthcheck": ["true"], "health_every": "1s"}
        ]),
    );
    let run = token(test);
    let (lab, before) = lab(manifest, test).await?;
    ensure!(
        before
            .iter()
            .any(|e| e.starts_with("image ") && e.contains(IMAGE)),
        "the lab image is part of the baseline: {before:?}"
    );
    let mut provisioned = Vec::new();
    let removed = with_cleanup(lab, before.clone(), async |lab: &mut DockerLab| {
        provisioned = lab.provision().await?;
        let worker_name = format!("pulse-qual-{run}-worker");
        let neighbour_name = format!("pulse-qual-{run}-neighbour");
        ensure!(
            names(&provisioned)
                == [
                    ("worker", worker_name.as_str()),
                    ("neighbour", neighbour_name.as_str())
                ],
            "provisioned {provisioned:?}"
        );
        ensure!(
            provisioned
                .iter()
                .all(|p| p.resource_type == "app-container" && p.source_id.len() == 64)
        );
        ensure!(lab.agent_wiring().docker_host == Some(docker_host()));
        ensure!(lab.agent_wiring().services_dir.is_none());

        wait_health(lab, "worker", "healthy").await?;
        wait_health(lab, "neighbour", "healthy").await?;
        ensure!(probe(lab, "docker.running", "worker").await? == json!(true));

        let marker = fault("marker_enable", "worker");
        lab.inject(&marker).await?;
        wait_health(lab, "worker", "unhealthy").await?;
        ensure!(probe(lab, "docker.health", "neighbour").await? == json!("healthy"));
        lab.revert(&marker).await?;
        wait_health(lab, "worker", "healthy").await?;

        let during = lab.inventory().await?;
        ensure!(
            inventory_diff(&before, &during).len() == 3,
            "two containers and one volume appear: {:?}",
            inventory_diff(&before, &during)
        );
        match lab
            .probe(&predicate("inventory.same_as_pre", "worker"))
            .await
        {
            Err(LabError::Unsupported { .. }) => {}
            other => bail!("inventory.same_as_pre must be the runner's: {other:?}"),
        }
        match lab.inject(&fault("disconnect_network", "worker")).await {
            Err(LabError::Unsupported { what, .. }) => ensure!(what.contains("host networking")),
            other => bail!("disconnect_network must be unsupported: {other:?}"),
        }
        Ok(())
    })
    .await?;
    let mut expected: Vec<String> = provisioned
        .iter()
        .map(|p| format!("removed container {} {}", p.name, p.source_id))
        .collect();
    expected.push(format!("removed volume pulse-qual-{run}-worker-state"));
    let mut removed_sorted = removed.clone();
    removed_sorted.sort();
    expected.sort();
    assert_eq!(removed_sorted, expected);
    Ok(())
}

#[tokio::test]
async fn crash_loop_restarts_the_worker_until_reverted() -> Result<()> {
    let _engine = ENGINE.lock().await;
    let test = "crash";
    let manifest = manifest(
        "docker-lab.crash",
        json!([
            {"alias": "worker", "kind": "container", "name": "pulse-qual-${run_id}-worker",
             "command": ["sh", "-c", "while true; do if [ -f /pulse-qual-fault/crash ]; then exit 3; fi; sleep 1; done"],
             "restart": "always", "healthcheck": ["true"], "health_every": "1s", "fault_volume": true}
        ]),
    );
    let (lab, before) = lab(manifest, test).await?;
    with_cleanup(lab, before, async |lab: &mut DockerLab| {
        lab.provision().await?;
        wait_health(lab, "worker", "healthy").await?;
        ensure!(probe(lab, "docker.restart_count", "worker").await? == json!(0));
        let crash = fault("crash_loop", "worker");
        lab.inject(&crash).await?;
        wait_for(
            lab,
            "docker.restart_count",
            "worker",
            Duration::from_secs(60),
            |v| v.as_u64().is_some_and(|n| n >= 3),
        )
        .await?;
        lab.revert(&crash).await?;
        wait_for(
            lab,
            "docker.running",
            "worker",
            Duration::from_secs(60),
            |v| v == true,
        )
        .await?;
        wait_health(lab, "worker", "healthy").await?;
        // Running for good: the count stops rising.
        let settled = probe(lab, "docker.restart_count", "worker").await?;
        wait_health(lab, "worker", "healthy").await?;
        ensure!(probe(lab, "docker.running", "worker").await? == json!(true));
        ensure!(probe(lab, "docker.restart_count", "worker").await? == settled);
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn an_on_failure_retry_limit_reaches_the_engine() -> Result<()> {
    let _engine = ENGINE.lock().await;
    let test = "retries";
    let manifest = manifest(
        "docker-lab.retries",
        json!([
            {"alias": "job", "kind": "container", "name": "pulse-qual-${run_token}-job",
             "command": ["sh", "-c", "exit 3"], "restart": "on-failure:2"}
        ]),
    );
    let run = token(test);
    let (lab, before) = lab(manifest, test).await?;
    with_cleanup(lab, before, async |lab: &mut DockerLab| {
        let provisioned = lab.provision().await?;
        let job = format!("pulse-qual-{run}-job");
        ensure!(
            names(&provisioned) == [("job", job.as_str())],
            "{provisioned:?}"
        );
        wait_for(
            lab,
            "docker.restart_count",
            "job",
            Duration::from_secs(60),
            |v| v == 2,
        )
        .await?;
        // The engine gives up after two restarts: once the second restart's run has exited
        // it is stopped with the count at 2 (a third restart would have counted 3 first).
        wait_for(lab, "docker.running", "job", Duration::from_secs(30), |v| {
            v == false
        })
        .await?;
        ensure!(probe(lab, "docker.restart_count", "job").await? == json!(2));
        ensure!(probe(lab, "docker.running", "job").await? == json!(false));
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn filling_the_scratch_storage_exhausts_it_and_health_follows() -> Result<()> {
    let _engine = ENGINE.lock().await;
    let test = "fill";
    let write_check = "echo ok > /var/lib/service-cache/check.$$; r=$?; rm -f /var/lib/service-cache/check.$$; exit $r";
    let manifest = manifest(
        "docker-lab.fill",
        json!([
            {"alias": "writer", "kind": "container", "name": "pulse-qual-${run_id}-writer",
             "command": ["sh", "-c", "while true; do echo $(date) > /var/lib/service-cache/last-write; sleep 1; done"],
             "healthcheck": ["CMD-SHELL", write_check], "health_every": "1s", "scratch_storage": true},
            {"alias": "plain", "kind": "container", "name": "pulse-qual-${run_id}-plain",
             "command": ["sh", "-c", "while true; do sleep 1; done"]}
        ]),
    );
    let (lab, before) = lab(manifest, test).await?;
    with_cleanup(lab, before, async |lab: &mut DockerLab| {
        lab.provision().await?;
        wait_health(lab, "writer", "healthy").await?;
        ensure!(probe(lab, "docker.health", "plain").await? == json!("none"));
        let free = probe(lab, "docker.scratch_available_bytes", "writer").await?;
        ensure!(
            free.as_u64()
                .is_some_and(|n| n > 7 * 1024 * 1024 && n <= 8 * 1024 * 1024),
            "an almost empty 8 MiB tmpfs: {free}"
        );
        ensure!(
            matches!(
                lab.probe(&predicate("docker.scratch_available_bytes", "plain"))
                    .await,
                Err(LabError::Unsupported { .. })
            ),
            "no scratch storage to measure on plain"
        );
        let fill = fault("fill_scratch_storage", "writer");
        lab.inject(&fill).await?;
        ensure!(probe(lab, "docker.scratch_available_bytes", "writer").await? == json!(0));
        wait_health(lab, "writer", "unhealthy").await?;
        // The fill file exists now: a second fill refuses.
        match lab.inject(&fill).await {
            Err(LabError::Failed { reason, .. }) => {
                ensure!(reason.contains("already exists"), "{reason}")
            }
            other => bail!("a second fill must refuse: {other:?}"),
        }
        lab.revert(&fill).await?;
        let free = probe(lab, "docker.scratch_available_bytes", "writer").await?;
        ensure!(
            free.as_u64().is_some_and(|n| n > 0),
            "space is back: {free}"
        );
        wait_health(lab, "writer", "healthy").await?;
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn stopping_or_killing_the_listener_makes_its_client_unhealthy() -> Result<()> {
    let _engine = ENGINE.lock().await;
    let test = "stop";
    let manifest = manifest(
        "docker-lab.stop",
        json!([
            {"alias": "listener", "kind": "container", "name": "pulse-qual-${run_id}-listener",
             "command": ["sh", "-c", "mkdir -p /www; echo ok > /www/index.html; httpd -f -p 127.0.0.1:${port} -h /www & while true; do sleep 1; done"]},
            {"alias": "client", "kind": "container", "name": "pulse-qual-${run_id}-client",
             "command": ["sh", "-c", "while true; do sleep 1; done"],
             "healthcheck": ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:${port:listener}/"],
             "health_every": "1s"}
        ]),
    );
    let (lab, before) = lab(manifest, test).await?;
    with_cleanup(lab, before, async |lab: &mut DockerLab| {
        lab.provision().await?;
        wait_health(lab, "client", "healthy").await?;
        let stop = fault("stop", "listener");
        lab.inject(&stop).await?;
        ensure!(probe(lab, "docker.running", "listener").await? == json!(false));
        wait_health(lab, "client", "unhealthy").await?;
        lab.revert(&stop).await?;
        ensure!(probe(lab, "docker.running", "listener").await? == json!(true));
        wait_health(lab, "client", "healthy").await?;

        // The listener keeps running without its server process.
        let mut server_stop = fault("health_process_stop", "listener");
        match lab.inject(&server_stop).await {
            Err(LabError::Unsupported { what, .. }) => ensure!(what.contains("injector.value")),
            other => bail!("health_process_stop without a process name must refuse: {other:?}"),
        }
        server_stop.injector.value = Some(json!("httpd"));
        lab.inject(&server_stop).await?;
        wait_health(lab, "client", "unhealthy").await?;
        ensure!(probe(lab, "docker.running", "listener").await? == json!(true));
        lab.revert(&server_stop).await?;
        wait_health(lab, "client", "healthy").await?;

        let kill = fault("kill", "listener");
        lab.inject(&kill).await?;
        ensure!(probe(lab, "docker.running", "listener").await? == json!(false));
        wait_health(lab, "client", "unhealthy").await?;
        lab.revert(&kill).await?;
        ensure!(probe(lab, "docker.running", "listener").await? == json!(true));
        wait_health(lab, "client", "healthy").await?;
        Ok(())
    })
    .await?;
    Ok(())
}

#[test]
fn a_remote_engine_or_pulling_is_refused() {
    let local = manifest("docker-lab.refusals", json!([]));
    let remote = DockerLab::new(
        local.clone(),
        catalogue(),
        token("r"),
        "tcp://10.9.8.7:2375".into(),
        true,
    );
    assert!(matches!(remote, Err(LabError::Unavailable(m)) if m.contains("--allow-shared-host")));

    let mut shared = local.clone();
    shared.lab.shared_host_ok = true;
    assert!(
        DockerLab::new(
            shared.clone(),
            catalogue(),
            token("r"),
            "tcp://10.9.8.7:2375".into(),
            false
        )
        .is_err()
    );
    assert!(
        DockerLab::new(
            shared,
            catalogue(),
            token("r"),
            "tcp://10.9.8.7:2375".into(),
            true
        )
        .is_ok()
    );
    assert!(
        DockerLab::new(
            local.clone(),
            catalogue(),
            token("r"),
            "tcp://127.0.0.1:2375".into(),
            false
        )
        .is_ok()
    );

    let mut pulling = local;
    pulling.lab.allow_pull = true;
    assert!(matches!(
        DockerLab::new(pulling, catalogue(), token("r"), docker_host(), false),
        Err(LabError::Unsupported { what, .. }) if what.starts_with("lab.allow_pull: true")
    ));
    assert_eq!(RUN_LABEL, "deploy.instance");
}

#[tokio::test]
async fn a_failing_build_reports_the_engines_error_and_an_unbuildable_image_is_unavailable()
-> Result<()> {
    let _engine = ENGINE.lock().await;
    let root = catalogue();
    let broken = root.join("docker").join("broken");
    std::fs::create_dir_all(&broken)?;
    std::fs::write(
        broken.join("Dockerfile"),
        "FROM scratch\nCOPY not-in-the-context /x\n",
    )?;
    let mut manifest = manifest("docker-lab.broken", json!([]));
    manifest.lab.image = Some("pulse-lab/qual-broken:1".to_owned());
    manifest.lab.build = Some("broken".to_owned());
    let mut lab = DockerLab::new(
        manifest.clone(),
        root.clone(),
        token("broken"),
        docker_host(),
        false,
    )?;
    let before = match lab.inventory().await {
        Ok(inventory) => inventory,
        Err(error) => bail!(
            "the docker engine at {} does not answer ({error}); {START_ENGINE}",
            docker_host()
        ),
    };
    match lab.prepare().await {
        Err(LabError::Failed { operation, reason }) => {
            ensure!(operation == "build", "{operation}: {reason}");
            ensure!(
                reason.contains("not-in-the-context"),
                "the engine's message: {reason}"
            );
        }
        other => bail!("a broken Dockerfile must fail the build: {other:?}"),
    }
    let after = lab.inventory().await?;
    ensure!(
        !after.iter().any(|e| e.contains("pulse-lab/qual-broken")),
        "no image from a failed build: {after:?}"
    );
    ensure!(
        !inventory_diff(&before, &after)
            .iter()
            .any(|e| e.starts_with("+ container")),
        "no build container left: {:?}",
        inventory_diff(&before, &after)
    );

    manifest.lab.build = None;
    let mut lab = DockerLab::new(
        manifest.clone(),
        root.clone(),
        token("broken"),
        docker_host(),
        false,
    )?;
    match lab.prepare().await {
        Err(LabError::Unavailable(message)) => {
            ensure!(message.contains("ever pulled"), "{message}")
        }
        other => bail!("an absent image without a build must be unavailable: {other:?}"),
    }
    manifest.lab.build = Some("../escape".to_owned());
    let mut lab = DockerLab::new(manifest, root, token("broken"), docker_host(), false)?;
    ensure!(matches!(lab.prepare().await, Err(LabError::Failed { .. })));
    Ok(())
}
