//! The client against `fakepve` (PyPI): a Proxmox VE API built from Proxmox's official schema
//! that this project did not write, over TLS with its own self-signed certificate, API tokens,
//! permissions and injected cluster trouble. Disks, ZFS pools and node status, which the fake
//! synthesises from the schema with placeholder values, are given payloads shaped as the
//! Proxmox VE API documents them.

use std::path::Path;

use anyhow::Context as _;
use pulse_capabilities::ErrorCode;
use pulse_domain::connection::{ConnectionKind, ConnectionState, Fingerprint, TokenId};
use pulse_proxmox::{Client, Error, Secret, Timeouts, TlsMode};
use pulse_test_support::fakepve::FakePve;
use serde_json::{Value, json};

const TOKEN: &str = "pulse@pve!reader";
const SECRET: &str = "5f0c2a7e-93d1-4b8e-a1c4-0d6e2f9b7c31";

fn cluster_spec() -> Value {
    json!({
        "tokens": { TOKEN: SECRET, "pulse@pve!limited": "limited-secret" },
        "nodes": [{"name": "pve1"}, {"name": "pve2"}],
        "grants": [
            {"user": TOKEN, "path": "/", "privs": ["Sys.Audit", "VM.Audit", "Datastore.Audit"]},
            {"user": "pulse@pve!limited", "path": "/", "privs": ["Sys.Audit"]}
        ],
        "guests": [
            {"vmid": 100, "name": "web", "status": "running",
             "config": {"memory": 2048, "cores": 2, "tags": "prod;dmz",
                        "scsi0": "local-lvm:vm-100-disk-0,size=32G"}},
            {"vmid": 101, "name": "db", "node": "pve2", "status": "stopped"},
            {"vmid": 9000, "name": "debian-template", "status": "stopped", "template": true},
            {"vmid": 200, "name": "dns", "type": "lxc", "status": "running"}
        ],
        "answers": {
            "/nodes/pve1/disks/list": [
                {"devpath": "/dev/nvme0n1", "type": "nvme", "health": "PASSED", "wearout": 97,
                 "model": "Samsung SSD 980 PRO 1TB", "serial": "S5GXNF0N123456", "size": 1000204886016u64,
                 "used": "ZFS", "gpt": 1, "rpm": 0, "vendor": "unknown", "wwn": "eui.0025385b11b2a1c2"},
                {"devpath": "/dev/sda", "type": "hdd", "health": "FAILED", "wearout": "N/A",
                 "model": "ST4000VN008-2DR166", "serial": "ZGY0ABCD", "size": "4000787030016",
                 "used": "ZFS", "gpt": 1, "rpm": 5980, "vendor": "ATA", "wwn": "0x5000c500c1a2b3c4"}
            ],
            "/nodes/pve1/disks/zfs": [
                {"name": "rpool", "health": "ONLINE", "size": 996432412672u64, "alloc": 212338425856u64,
                 "free": 784093986816u64, "frag": 7, "dedup": 1.0},
                {"name": "tank", "health": "DEGRADED", "size": "3985729650688", "alloc": 3587156685619u64,
                 "free": 398572965069u64, "frag": 31, "dedup": "1.00"}
            ],
            "/nodes/pve1/status": {
                "uptime": 1209600, "cpu": 0.0731, "loadavg": ["0.42", "0.51", "0.60"],
                "memory": {"total": 67352829952u64, "used": 21474836480u64, "free": 45877993472u64},
                "pveversion": "pve-manager/9.0.10/0123456789abcdef",
                "kversion": "Linux 6.14.8-2-pve #1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2",
                "current-kernel": {"sysname": "Linux", "release": "6.14.8-2-pve",
                                   "version": "#1 SMP PREEMPT_DYNAMIC PMX 6.14.8-2", "machine": "x86_64"}
            }
        }
    })
}

fn tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

fn client(url: &str, token: &str, secret: &str, tls: TlsMode) -> Client {
    Client::new(
        ConnectionKind::ProxmoxVe,
        url,
        &TokenId::parse(token).unwrap(),
        &Secret::new(secret).unwrap(),
        &tls,
        Timeouts::default(),
    )
    .unwrap()
}

fn pinned(pve: &FakePve) -> TlsMode {
    TlsMode::Pinned(Fingerprint::parse(&pve.fingerprint).unwrap())
}

#[tokio::test]
async fn a_pinned_connection_reads_the_cluster_as_proxmox_serves_it() -> anyhow::Result<()> {
    let pve = FakePve::start(tmp(), &cluster_spec()).await?;
    let client = client(&pve.url, TOKEN, SECRET, pinned(&pve));

    let probe = client.probe().await;
    assert_eq!(probe.state, ConnectionState::Connected, "{probe:?}");
    assert_eq!(probe.cause, None);
    assert_eq!(probe.version.as_deref(), Some("9.0.10"));
    assert_eq!(
        probe.presented.map(|f| f.to_string()).as_deref(),
        Some(pve.fingerprint.as_str())
    );
    let cluster = probe.cluster.context("a cluster's status")?;
    assert_eq!(cluster.quorate, Some(true));
    assert_eq!(
        cluster
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.online))
            .collect::<Vec<_>>(),
        [("pve1", true), ("pve2", true)]
    );

    let resources = client.cluster_resources().await?;
    let find = |id: &str| {
        resources
            .iter()
            .find(|r| r.id == id)
            .with_context(|| format!("{id} in /cluster/resources"))
    };
    let web = find("qemu/100")?;
    assert_eq!(
        (web.kind.as_str(), web.status.as_deref()),
        ("qemu", Some("running"))
    );
    assert_eq!(web.node.as_deref(), Some("pve1"));
    assert_eq!(web.maxmem, Some(2048 * 1024 * 1024));
    assert_eq!(web.maxcpu, Some(2.0));
    assert_eq!(web.maxdisk, Some(32 * 1024 * 1024 * 1024));
    assert_eq!(web.tags, ["prod", "dmz"]);
    assert!(!web.template);
    let db = find("qemu/101")?;
    assert_eq!(
        (db.node.as_deref(), db.status.as_deref()),
        (Some("pve2"), Some("stopped"))
    );
    assert!(find("qemu/9000")?.template);
    let dns = find("lxc/200")?;
    assert_eq!(
        (dns.kind.as_str(), dns.status.as_deref()),
        ("lxc", Some("running"))
    );
    assert!(dns.is_guest());
    assert_eq!(find("node/pve2")?.status.as_deref(), Some("online"));
    assert!(
        resources.iter().any(|r| r.kind == "storage"),
        "storage entries in {resources:?}"
    );

    let storage = client.node_storage("pve1").await?;
    let local = storage
        .iter()
        .find(|s| s.storage == "local")
        .context("local storage")?;
    assert_eq!(local.kind.as_deref(), Some("dir"));
    assert_eq!(local.content, ["iso", "vztmpl", "backup"]);
    assert_eq!(local.active, Some(true));
    assert!(local.total.is_some_and(|t| t > 0));
    assert_eq!(local.used_fraction(), Some(0.0));

    let disks = client.node_disks("pve1").await?;
    assert_eq!(disks.len(), 2);
    assert_eq!(
        (disks[0].health.as_deref(), disks[0].wearout),
        (Some("PASSED"), Some(97))
    );
    assert_eq!(
        (disks[1].health.as_deref(), disks[1].wearout, disks[1].size),
        (Some("FAILED"), None, Some(4_000_787_030_016))
    );

    let pools = client.node_zfs_pools("pve1").await?;
    let tank = pools.iter().find(|p| p.name == "tank").context("tank")?;
    assert_eq!(tank.health.as_deref(), Some("DEGRADED"));
    assert_eq!(tank.size, Some(3_985_729_650_688));
    assert_eq!(tank.dedup, Some(1.0));

    let status = client.node_status("pve1").await?;
    assert_eq!(status.kernel().as_deref(), Some("6.14.8-2-pve"));
    assert_eq!(status.loadavg, [0.42, 0.51, 0.60]);
    assert_eq!(status.memory.and_then(|m| m.total), Some(67_352_829_952));
    assert_eq!(status.uptime, Some(1_209_600));

    // A node that is not in the cluster is the API's own error, not a connection state.
    let err = client.node_storage("nope").await.unwrap_err();
    assert!(matches!(err, Error::Api { status: 500, .. }), "{err:?}");
    assert_eq!(err.state(), None);
    Ok(())
}

#[tokio::test]
async fn a_certificate_that_is_not_the_pinned_one_is_refused_and_named() -> anyhow::Result<()> {
    let pve = FakePve::start(tmp(), &cluster_spec()).await?;
    let wrong = Fingerprint::of_der(b"another certificate");
    for tls in [TlsMode::Pinned(wrong), TlsMode::Public] {
        let what = format!("{tls:?}");
        let client = client(&pve.url, TOKEN, SECRET, tls);
        let probe = client.probe().await;
        assert_eq!(
            probe.state,
            ConnectionState::TlsMismatch,
            "{what}: {probe:?}"
        );
        assert_eq!(probe.code, Some(ErrorCode::ConnectionTlsMismatch));
        // What to pin, if this is the server the operator meant.
        assert_eq!(
            probe.presented.map(|f| f.to_string()).as_deref(),
            Some(pve.fingerprint.as_str()),
            "{what}"
        );
        let cause = probe.cause.unwrap_or_default();
        assert!(cause.contains(&pve.fingerprint), "{what}: {cause}");
        assert!(
            cause.contains("pin the presented fingerprint"),
            "{what}: {cause}"
        );
        // Nothing was read without a trusted certificate.
        let err = client.cluster_resources().await.unwrap_err();
        assert_eq!(
            err.state(),
            Some(ConnectionState::TlsMismatch),
            "{what}: {err}"
        );
    }

    // A CA that did not sign the server's certificate (another server's) is refused the same way.
    let other = FakePve::start(tmp(), &cluster_spec()).await?;
    let other_ca = TlsMode::ca_pem(&std::fs::read(&other.cert_file)?)?;
    let probe = client(&pve.url, TOKEN, SECRET, other_ca).probe().await;
    assert_eq!(probe.state, ConnectionState::TlsMismatch, "{probe:?}");
    assert_eq!(
        probe.presented.map(|f| f.to_string()).as_deref(),
        Some(pve.fingerprint.as_str())
    );
    // A CA file that holds no usable certificate is refused when it is given.
    let cut = b"-----BEGIN CERTIFICATE-----\nMIIBgTCCASegAwIBAgIUXYdr3H5V6E0R9d7m6lqX1m1h9CAwCgYIKoZIzj0EAwIw\n-----END CERTIFICATE-----\n";
    for bad in [&cut[..], b"not pem"] {
        let err = TlsMode::ca_pem(bad).map(|_| ()).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidRequest, "{err}");
        assert_eq!(err.state(), Some(ConnectionState::TlsMismatch));
    }
    Ok(())
}

#[tokio::test]
async fn a_ca_file_is_trusted_for_the_names_it_covers() -> anyhow::Result<()> {
    let pve = FakePve::start(tmp(), &cluster_spec()).await?;
    let pem = std::fs::read(&pve.cert_file)?;
    // The fake's self-signed certificate names 127.0.0.1 and localhost.
    let by_name = pve.url.replace("127.0.0.1", "localhost");
    let probe = client(&by_name, TOKEN, SECRET, TlsMode::ca_pem(&pem)?)
        .probe()
        .await;
    assert_eq!(probe.state, ConnectionState::Connected, "{probe:?}");
    Ok(())
}

#[tokio::test]
async fn a_refused_token_is_auth_failed_with_what_to_check() -> anyhow::Result<()> {
    let pve = FakePve::start(tmp(), &cluster_spec()).await?;
    for (token, secret) in [(TOKEN, "wrong-secret"), ("someone@pve!reader", SECRET)] {
        let probe = client(&pve.url, token, secret, pinned(&pve)).probe().await;
        assert_eq!(
            probe.state,
            ConnectionState::AuthFailed,
            "{token}: {probe:?}"
        );
        assert_eq!(probe.code, Some(ErrorCode::ConnectionAuthFailed));
        let cause = probe.cause.unwrap_or_default();
        assert!(cause.contains("401"), "{cause}");
        assert!(cause.contains("check the token id and secret"), "{cause}");
        assert!(!cause.contains(secret), "the secret leaked into {cause}");
    }
    Ok(())
}

#[tokio::test]
async fn a_token_that_would_see_an_empty_cluster_is_refused_with_the_role_to_grant()
-> anyhow::Result<()> {
    let pve = FakePve::start(tmp(), &cluster_spec()).await?;
    let limited = client(
        &pve.url,
        "pulse@pve!limited",
        "limited-secret",
        pinned(&pve),
    );
    // What it would read: a cluster with no guests.
    assert!(
        limited
            .cluster_resources()
            .await?
            .iter()
            .all(|r| !r.is_guest()),
        "a token without VM.Audit sees no guest"
    );
    let probe = limited.probe().await;
    assert_eq!(probe.state, ConnectionState::AuthFailed, "{probe:?}");
    assert_eq!(probe.code, Some(ErrorCode::ConnectionPrivilegesMissing));
    let cause = probe.cause.unwrap_or_default();
    assert!(cause.contains("VM.Audit on /vms"), "{cause}");
    assert!(cause.contains("Datastore.Audit on /storage"), "{cause}");
    assert!(!cause.contains("Sys.Audit"), "{cause}");
    assert!(cause.contains("PVEAuditor"), "{cause}");
    Ok(())
}

#[tokio::test]
async fn a_cluster_without_quorum_reads_as_no_quorum() -> anyhow::Result<()> {
    let mut pve = FakePve::start(tmp(), &cluster_spec()).await?;
    let client = client(&pve.url, TOKEN, SECRET, pinned(&pve));
    pve.command(json!({"op": "node_offline", "node": "pve2"}))
        .await?;
    pve.command(json!({"op": "lose_quorum"})).await?;
    let probe = client.probe().await;
    assert_eq!(probe.state, ConnectionState::NoQuorum, "{probe:?}");
    let cause = probe.cause.unwrap_or_default();
    assert!(
        cause.contains("fakecluster has lost quorum (1 of 2 nodes online)"),
        "{cause}"
    );
    // Reads still work, and show the offline node as Proxmox does.
    let resources = client.cluster_resources().await?;
    let pve2 = resources
        .iter()
        .find(|r| r.id == "node/pve2")
        .context("pve2")?;
    assert_eq!(pve2.status.as_deref(), Some("offline"));
    let db = resources
        .iter()
        .find(|r| r.id == "qemu/101")
        .context("db")?;
    assert_eq!(db.status.as_deref(), Some("unknown"));

    pve.command(json!({"op": "regain_quorum"})).await?;
    assert_eq!(client.probe().await.state, ConnectionState::Connected);
    Ok(())
}

#[tokio::test]
async fn nothing_listening_is_unreachable() -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    drop(listener);
    let probe = client(
        &format!("https://127.0.0.1:{port}"),
        TOKEN,
        SECRET,
        TlsMode::Pinned(Fingerprint::of_der(b"x")),
    )
    .probe()
    .await;
    assert_eq!(probe.state, ConnectionState::Unreachable, "{probe:?}");
    assert_eq!(probe.code, Some(ErrorCode::ConnectionUnreachable));
    assert!(probe.presented.is_none());
    let cause = probe.cause.unwrap_or_default();
    assert!(cause.contains(&format!("127.0.0.1:{port}")), "{cause}");
    Ok(())
}

#[tokio::test]
async fn a_cluster_reads_as_canonical_resources_with_their_parents() -> anyhow::Result<()> {
    use pulse_domain::resource::{Health, ResourceStatus, ResourceType};
    use pulse_proxmox::inventory;

    let mut pve = FakePve::start(tmp(), &cluster_spec()).await?;
    let client = client(&pve.url, TOKEN, SECRET, pinned(&pve));
    let read = inventory::read(&client, "pve.home").await?;
    let find = |kind: ResourceType, source: &str| {
        read.resources
            .iter()
            .find(|r| r.resource_type == kind && r.source_id == source)
            .with_context(|| format!("{kind} {source} in {:?}", read.resources))
    };
    let parent = |r: &pulse_domain::resource::ObservedResource| {
        r.parent
            .as_ref()
            .map(|p| (p.resource_type, p.source_id.clone()))
    };

    let cluster = find(ResourceType::Host, "pve.home")?;
    assert_eq!(cluster.name, "fakecluster");
    assert_eq!(cluster.health, Health::Healthy);
    assert_eq!(cluster.details["quorate"], true);
    assert_eq!(cluster.details["nodes_total"], 2);

    let pve1 = find(ResourceType::Node, "pve1")?;
    assert_eq!(
        (pve1.status, pve1.health),
        (ResourceStatus::Running, Health::Healthy)
    );
    assert_eq!(pve1.details["kernel"], "6.14.8-2-pve");
    assert_eq!(pve1.metrics["load1"], 0.42);

    let web = find(ResourceType::Vm, "100")?;
    assert_eq!(web.name, "web");
    assert_eq!(web.status, ResourceStatus::Running);
    assert_eq!(parent(web), Some((ResourceType::Node, "pve1".to_owned())));
    assert_eq!(web.details["tags"], json!(["prod", "dmz"]));
    let db = find(ResourceType::Vm, "101")?;
    assert_eq!(db.status, ResourceStatus::Stopped);
    assert_eq!(parent(db), Some((ResourceType::Node, "pve2".to_owned())));
    assert_eq!(find(ResourceType::Vm, "9000")?.details["template"], true);
    let dns = find(ResourceType::SystemContainer, "200")?;
    assert_eq!(dns.status, ResourceStatus::Running);

    let local = find(ResourceType::Storage, "pve1/local")?;
    assert_eq!(local.health, Health::Healthy);
    assert_eq!(local.metrics["used_percent"], 0.0);
    assert_eq!(parent(local), Some((ResourceType::Node, "pve1".to_owned())));
    let tank = find(ResourceType::Storage, "pve1/zfs/tank")?;
    assert_eq!(tank.health, Health::Unhealthy);
    assert_eq!(tank.details["kind"], "zfs-pool");
    assert!(
        (tank.metrics["used_percent"] - 90.0).abs() < 0.01,
        "{:?}",
        tank.metrics
    );
    let sda = find(ResourceType::PhysicalDisk, "pve1/dev/sda")?;
    assert_eq!(sda.health, Health::Unhealthy);
    assert_eq!(sda.aliases, ["ZGY0ABCD", "0x5000c500c1a2b3c4"]);
    let nvme = find(ResourceType::PhysicalDisk, "pve1/dev/nvme0n1")?;
    assert_eq!(nvme.metrics["wearout_remaining_percent"], 97.0);
    assert!(
        read.unreadable_nodes.is_empty(),
        "{:?}",
        read.unreadable_nodes
    );

    // An offline node and a lost quorum: the node stays, unknown, with its guests unknown; the
    // cluster is unhealthy.
    pve.command(json!({"op": "node_offline", "node": "pve2"}))
        .await?;
    pve.command(json!({"op": "lose_quorum"})).await?;
    let read = inventory::read(&client, "pve.home").await?;
    let find = |kind: ResourceType, source: &str| {
        read.resources
            .iter()
            .find(|r| r.resource_type == kind && r.source_id == source)
            .with_context(|| format!("{kind} {source}"))
    };
    assert_eq!(
        find(ResourceType::Host, "pve.home")?.health,
        Health::Unhealthy
    );
    let pve2 = find(ResourceType::Node, "pve2")?;
    assert_eq!(pve2.status, ResourceStatus::Unknown);
    assert_eq!(
        find(ResourceType::Vm, "101")?.status,
        ResourceStatus::Unknown
    );
    assert!(read.unreadable_nodes.contains_key("pve2"));
    Ok(())
}
