//! Platform connections through the real gateway binary (`/api/connections`), against
//! `fakepve` (PyPI), a Proxmox VE API built from Proxmox's official schema that this project did
//! not write, over TLS with its own self-signed certificate:
//!
//! - a wrong fingerprint, token, privilege set or address is refused on add with its own error
//!   code and what to fix, and nothing is stored; the test route answers the same check as a
//!   state, with the fingerprint the server presented;
//! - a good connection is stored with its secret sealed: no answer, audit record or log line
//!   carries the secret, and the sealed column does not hold it in clear;
//! - a stored connection checked again records the state it finds (`no_quorum`);
//! - names are unique per kind; reads need `monitoring:read`, writes `admin`; delete removes it.

use pulse_test_support::action_api::{call, error_code, get, post};
use pulse_test_support::cli::{Pulsectl, stderr};
use pulse_test_support::fakepve::FakePve;
use pulse_test_support::service::TestGateway;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "pulse@pve!reader";
const SECRET: &str = "7d2c9e14-5b3a-4f61-9c8e-2a1b0c9d8e7f";

fn tmp() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
}

fn spec() -> Value {
    json!({
        "tokens": { TOKEN: SECRET, "pulse@pve!limited": "limited-5ecret" },
        "nodes": [{"name": "pve1"}, {"name": "pve2"}],
        "grants": [
            {"user": TOKEN, "path": "/", "privs": ["Sys.Audit", "VM.Audit", "Datastore.Audit"]},
            {"user": "pulse@pve!limited", "path": "/", "privs": ["Sys.Audit"]}
        ],
        "guests": [{"vmid": 100, "name": "web", "status": "running"}]
    })
}

fn body(pve: &FakePve) -> Value {
    json!({
        "kind": "proxmox-ve",
        "url": pve.url,
        "token_id": TOKEN,
        "token_secret": SECRET,
        "fingerprint": pve.fingerprint,
    })
}

fn with(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}

#[tokio::test]
async fn connections_are_checked_before_they_are_stored_and_their_secret_never_comes_back()
-> anyhow::Result<()> {
    let mut pve = FakePve::start(tmp(), &spec()).await?;
    let gw = TestGateway::start().await?;
    let admin = gw.admin_token.clone();
    let wrong_pin = "00:".repeat(31) + "00";

    // The test route answers a failed check as a state, with what the server presented.
    let (status, check) = post(
        &gw,
        "/api/connections/test",
        &admin,
        Some(with(body(&pve), "fingerprint", json!(wrong_pin))),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{check}");
    assert_eq!(check["state"], "tls_mismatch", "{check}");
    assert_eq!(check["code"], "connection_tls_mismatch");
    assert_eq!(check["presented_fingerprint"], pve.fingerprint.as_str());

    // Adding refuses every failed check with its code and what to fix; nothing is stored.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?.port()
    };
    for (what, request, code, says) in [
        (
            "wrong pin",
            with(body(&pve), "fingerprint", json!(wrong_pin)),
            "connection_tls_mismatch",
            pve.fingerprint.clone(),
        ),
        (
            "wrong secret",
            with(body(&pve), "token_secret", json!("not-the-secret")),
            "connection_auth_failed",
            "check the token id and secret".to_owned(),
        ),
        (
            "no audit role",
            with(
                with(body(&pve), "token_id", json!("pulse@pve!limited")),
                "token_secret",
                json!("limited-5ecret"),
            ),
            "connection_privileges_missing",
            "PVEAuditor".to_owned(),
        ),
        (
            "nothing listening",
            with(
                body(&pve),
                "url",
                json!(format!("https://127.0.0.1:{closed}")),
            ),
            "connection_unreachable",
            format!("127.0.0.1:{closed}"),
        ),
        (
            "plain http",
            with(body(&pve), "url", json!("http://127.0.0.1:8006")),
            "invalid_request",
            "HTTPS only".to_owned(),
        ),
        (
            "no trust given",
            with(body(&pve), "fingerprint", Value::Null),
            "invalid_request",
            "cannot be turned off".to_owned(),
        ),
        (
            "verification off",
            with(body(&pve), "insecure", json!(true)),
            "invalid_request",
            "insecure".to_owned(),
        ),
    ] {
        let (status, error) = post(&gw, "/api/connections", &admin, Some(request)).await?;
        assert_eq!(error_code(&error), code, "{what}: {status} {error}");
        assert!(
            status.is_client_error(),
            "{what}: {status} is not a refusal"
        );
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(&says), "{what}: {message}");
        assert!(!message.contains(SECRET), "{what}: the secret leaked");
    }
    let (_, listed) = get(&gw, "/api/connections", &admin).await?;
    assert_eq!(
        listed["connections"],
        json!([]),
        "a refused add stored {listed}"
    );

    // A good connection is stored, with its state, and without its secret.
    let (status, created) = post(&gw, "/api/connections", &admin, Some(body(&pve))).await?;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["state"], "connected", "{created}");
    assert_eq!(created["name"], "127-0-0-1");
    assert_eq!(created["agent_id"], "pve.127-0-0-1");
    assert_eq!(created["kind"], "proxmox-ve");
    assert_eq!(created["tls_mode"], "pinned");
    assert_eq!(created["fingerprint"], pve.fingerprint.as_str());
    assert_eq!(created["presented_fingerprint"], pve.fingerprint.as_str());
    assert_eq!(created["version"], "9.0.10");
    assert_eq!(created["url"], format!("{}/", pve.url));
    assert!(created.get("token_secret").is_none());
    assert!(!created.to_string().contains(SECRET));
    let id = created["id"].as_str().unwrap_or_default().to_owned();

    // Names are unique per kind.
    let (status, error) = post(&gw, "/api/connections", &admin, Some(body(&pve))).await?;
    assert_eq!(
        (status, error_code(&error)),
        (StatusCode::CONFLICT, "conflict"),
        "{error}"
    );

    // Reads need monitoring:read, writes admin.
    let reader = gw.create_token("reader", &["monitoring:read"]).await?;
    let (status, listed) = get(&gw, "/api/connections", &reader).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["connections"][0]["id"], id.as_str());
    assert!(!listed.to_string().contains(SECRET));
    let (status, error) = post(
        &gw,
        "/api/connections",
        &reader,
        Some(with(body(&pve), "name", json!("other"))),
    )
    .await?;
    assert_eq!(
        (status, error_code(&error)),
        (StatusCode::FORBIDDEN, "missing_scope")
    );

    // The secret is sealed at rest, and absent from the audit record and the log.
    let owner = gw.db.owner_client().await?;
    let row = owner
        .query_one(
            "SELECT secret_sealed, key_id FROM connections WHERE id = $1::text::uuid",
            &[&id],
        )
        .await?;
    let sealed: Vec<u8> = row.get(0);
    assert!(!sealed.is_empty());
    assert!(
        !sealed.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "the secret is stored in clear"
    );
    let audit = owner
        .query(
            "SELECT kind, payload::text FROM audit_events WHERE subject = $1",
            &[&id],
        )
        .await?;
    let kinds: Vec<String> = audit.iter().map(|r| r.get(0)).collect();
    assert_eq!(kinds, ["connection.created"]);
    let payload: String = audit[0].get(1);
    assert!(payload.contains(TOKEN), "{payload}");
    assert!(!payload.contains(SECRET), "{payload}");
    assert!(
        !gw.process.log_tail(100_000).contains(SECRET),
        "the secret was logged"
    );

    // Checked again, a stored connection records what it finds.
    pve.command(json!({"op": "node_offline", "node": "pve2"}))
        .await?;
    pve.command(json!({"op": "lose_quorum"})).await?;
    let (status, check) = post(&gw, &format!("/api/connections/{id}/test"), &admin, None).await?;
    assert_eq!(status, StatusCode::OK, "{check}");
    assert_eq!(check["state"], "no_quorum", "{check}");
    assert_eq!(check["cluster"]["quorate"], false);
    assert_eq!(
        check["cluster"]["nodes"][1],
        json!({"name": "pve2", "online": false})
    );
    let (_, shown) = get(&gw, &format!("/api/connections/{id}"), &reader).await?;
    assert_eq!(shown["state"], "no_quorum", "{shown}");
    assert!(
        shown["state_cause"]
            .as_str()
            .is_some_and(|c| c.contains("lost quorum (1 of 2 nodes online)")),
        "{shown}"
    );
    let at = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v["checked_at"].as_str().unwrap_or_default())
    };
    assert!(at(&shown)? > at(&created)?, "{shown} was not checked again");

    // A cluster without quorum can still be added (reads work); it is stored in its state.
    let (status, second) = post(
        &gw,
        "/api/connections",
        &admin,
        Some(with(body(&pve), "name", json!("lab"))),
    )
    .await?;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["state"], "no_quorum");

    // Removed, it is gone.
    let path = format!("/api/connections/{id}");
    let (status, _) = call(&gw, Method::DELETE, &path, &admin, None).await?;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, error) = get(&gw, &path, &admin).await?;
    assert_eq!(
        (status, error_code(&error)),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let (status, _) = call(&gw, Method::DELETE, &path, &admin, None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, error) = get(&gw, "/api/connections/not-a-uuid", &admin).await?;
    assert_eq!(
        (status, error_code(&error)),
        (StatusCode::BAD_REQUEST, "invalid_parameter")
    );

    // pulsectl: the secret from a file, a failed check refused (exit 2) with its code.
    pve.command(json!({"op": "regain_quorum"})).await?;
    let cli = Pulsectl::new(&gw, std::time::Duration::from_secs(60));
    let secret_file = gw.state_dir.join("pve-token-secret");
    std::fs::write(&secret_file, format!("{SECRET}\n"))?;
    let secret_path = secret_file.to_string_lossy().into_owned();
    let add = |fingerprint: String| {
        vec![
            "connections".to_owned(),
            "add".to_owned(),
            "proxmox-ve".to_owned(),
            "--url".to_owned(),
            pve.url.clone(),
            "--token-id".to_owned(),
            TOKEN.to_owned(),
            "--token-secret-file".to_owned(),
            secret_path.clone(),
            "--fingerprint".to_owned(),
            fingerprint,
            "--name".to_owned(),
            "from-cli".to_owned(),
        ]
    };
    let refused = add(wrong_pin.clone());
    let refused: Vec<&str> = refused.iter().map(String::as_str).collect();
    let output = cli.fails(&admin, &refused, 2).await?;
    let said = stderr(&output);
    assert!(said.contains("connection_tls_mismatch"), "{said}");
    assert!(said.contains(&pve.fingerprint), "{said}");
    let accepted = add(pve.fingerprint.clone());
    let accepted: Vec<&str> = accepted.iter().map(String::as_str).collect();
    let out = cli.ok(&admin, &accepted).await?;
    assert!(
        out.contains("proxmox-ve from-cli (9.0.10): connected"),
        "{out}"
    );
    assert!(out.contains("reports as   pve.from-cli"), "{out}");
    let listed = cli.ok(&reader, &["connections", "list"]).await?;
    let row = listed
        .lines()
        .find(|l| l.contains("from-cli"))
        .unwrap_or_default();
    assert!(
        row.contains("connected") && row.contains(&pve.url) && row.contains(" 30s "),
        "the default cadence is shown: {listed}"
    );
    assert!(!listed.contains(SECRET) && !out.contains(SECRET));
    assert!(
        out.contains("guest actions off"),
        "off unless asked for: {out}"
    );

    // Guest power actions are switched per connection, by an admin only.
    let cli_id = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("id"))
        .map(|id| id.trim().to_owned())
        .unwrap_or_default();
    let switched = cli
        .ok(&admin, &["connections", "guest-actions", &cli_id, "on"])
        .await?;
    assert!(switched.contains("guest actions on"), "{switched}");
    let output = cli
        .fails(
            &reader,
            &["connections", "guest-actions", &cli_id, "off"],
            2,
        )
        .await?;
    assert!(
        stderr(&output).contains("missing_scope"),
        "{}",
        stderr(&output)
    );
    let (_, shown) = get(&gw, &format!("/api/connections/{cli_id}"), &reader).await?;
    assert_eq!(shown["guest_actions"], true, "{shown}");

    // A connection that can no longer be read is a readiness warning that names it: Patrol
    // still runs, but gives no all-clear for what it cannot see.
    pve.command(json!({"op": "revoke_token", "tokenid": TOKEN}))
        .await?;
    let (_, check) = post(
        &gw,
        &format!("/api/connections/{cli_id}/test"),
        &admin,
        None,
    )
    .await?;
    assert_eq!(check["state"], "auth_failed", "{check}");
    let (_, status) = get(&gw, "/api/ai/patrol/status", &reader).await?;
    let readiness = status["readiness_checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["id"] == "connections"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(readiness["status"], "warning", "{status}");
    let message = readiness["message"].as_str().unwrap_or_default();
    assert!(message.contains("from-cli (auth_failed"), "{message}");
    assert!(
        message.starts_with("1 of 2 platform connection(s)"),
        "{message}"
    );
    assert_ne!(status["healthy"], true, "{status}");
    gw.stop().await
}

fn browser_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../browser")
}

/// The Settings page's connections panel in the system's Chromium
/// (`tests/browser/connections_flow.mjs`): a wrong fingerprint refused with the one presented,
/// the right one added as connected, checked again, removed.
#[tokio::test]
async fn an_operator_adds_checks_and_removes_a_connection_in_the_browser() -> anyhow::Result<()> {
    let chromium = std::env::var_os("CHROMIUM")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/chromium".into());
    anyhow::ensure!(
        chromium.is_file(),
        "no Chromium at {} (install Debian's chromium, or set CHROMIUM)",
        chromium.display()
    );
    anyhow::ensure!(
        browser_dir()
            .join("node_modules/playwright-core/package.json")
            .is_file(),
        "playwright-core is not installed: run `npm ci --prefix tests/browser`"
    );
    let pve = FakePve::start(tmp(), &spec()).await?;
    let gw = TestGateway::start().await?;
    let password = std::fs::read_to_string(gw.state_dir.join("admin-password"))?
        .trim()
        .to_owned();
    let shots = std::env::var_os("PULSE_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| gw.state_dir.join("screenshots"));
    let run = tokio::time::timeout(
        std::time::Duration::from_secs(240),
        tokio::process::Command::new("node")
            .arg(browser_dir().join("connections_flow.mjs"))
            .current_dir(browser_dir())
            .env("PULSE_URL", &gw.url)
            .env("PULSE_PASSWORD", &password)
            .env("PVE_URL", &pve.url)
            .env("PVE_TOKEN_ID", TOKEN)
            .env("PVE_TOKEN_SECRET", SECRET)
            .env("PVE_FINGERPRINT", &pve.fingerprint)
            .env("PULSE_SCREENSHOTS", &shots)
            .env("CHROMIUM", &chromium)
            .kill_on_drop(true)
            .output(),
    )
    .await??;
    let out = String::from_utf8_lossy(&run.stdout);
    anyhow::ensure!(
        run.status.success() && out.contains("all steps passed"),
        "the browser path failed ({}):\n{out}\n{}\n--- gateway ---\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr),
        gw.process.log_tail(40)
    );
    anyhow::ensure!(shots.join("connections.png").is_file(), "no screenshot");
    assert!(
        !gw.process.log_tail(100_000).contains(SECRET),
        "the secret was logged"
    );
    gw.stop().await
}
