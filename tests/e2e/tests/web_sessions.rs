//! The web UI's doors, through the real gateway binary: sign-in with the bootstrap admin's
//! password, the session cookie's flags, the bounds on password guessing, sign-out, users made
//! with `pulsectl user create` and their roles, the Autopilot acknowledgement bound to the
//! signed-in user, and CSRF: every form the UI serves is refused without the session's token.

use std::collections::BTreeSet;

use anyhow::Context as _;
use pulse_test_support::service::{TestGateway, binary};
use pulse_test_support::web::{WebClient, post_forms};
use reqwest::StatusCode;
use serde_json::json;

fn admin_password(gw: &TestGateway) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(gw.state_dir.join("admin-password"))
        .context("the bootstrap admin's password file")?
        .trim()
        .to_owned())
}

async fn signed_in_admin(gw: &TestGateway) -> anyhow::Result<WebClient> {
    let mut web = WebClient::new(&gw.url)?;
    web.sign_in("default", "admin", &admin_password(gw)?)
        .await?;
    Ok(web)
}

/// `pulsectl user create` against the gateway's database: the printed password.
async fn create_user(gw: &TestGateway, name: &str, role: &str) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(binary("pulsectl")?)
        .args(["--state-dir"])
        .arg(&gw.state_dir)
        .args(["user", "create", name, "--role", role])
        .env("PULSE_DATABASE_URL", gw.db.owner_url())
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "pulsectl user create: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?.trim().to_owned())
}

#[tokio::test]
async fn sign_in_gives_a_hardened_session_that_sign_out_ends() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let password = admin_password(&gw)?;
        anyhow::ensure!(password.len() >= 20, "bootstrap password too short");

        // Signed out: pages send the browser to sign in, keeping where it wanted to go.
        let mut web = WebClient::new(&gw.url)?;
        let answer = web.get("/findings?severity=critical").await?;
        assert_eq!(answer.status, StatusCode::SEE_OTHER);
        assert_eq!(
            answer.location.as_deref(),
            Some("/signin?next=%2Ffindings%3Fseverity%3Dcritical")
        );

        // The sign-in form carries a double-submit token; the session cookie is HttpOnly and
        // SameSite, Secure only when the request came over TLS.
        let answer = web.sign_in("default", "admin", &password).await?;
        assert_eq!(answer.location.as_deref(), Some("/patrol"));
        let cookie = answer
            .set_cookie("pulse_session")
            .context("session cookie")?;
        assert!(cookie.contains("HttpOnly"), "{cookie}");
        assert!(cookie.contains("SameSite=Lax"), "{cookie}");
        assert!(!cookie.contains("Secure"), "{cookie}");
        let patrol = web.get("/patrol").await?;
        assert_eq!(patrol.status, StatusCode::OK);
        assert!(patrol.body.contains("<h1>Patrol</h1>"), "{}", patrol.body);
        assert!(patrol.body.contains("admin · default"));

        let mut over_tls = WebClient::new(&gw.url)?;
        let form = over_tls.get("/signin").await?;
        let csrf = pulse_test_support::web::csrf_field(&form.body).context("csrf")?;
        let answer = over_tls
            .answer_with_header(
                "/signin",
                ("x-forwarded-proto", "https"),
                &[
                    ("csrf", &csrf),
                    ("organization", "default"),
                    ("username", "admin"),
                    ("password", &password),
                ],
            )
            .await?;
        let secure = answer.set_cookie("pulse_session").context("tls cookie")?;
        assert!(secure.ends_with("; Secure"), "{secure}");

        // The cookie reads the API (the UI's event streams) but never writes through it.
        let status = web.get("/api/ai/patrol/status").await?;
        assert_eq!(status.status, StatusCode::OK, "{}", status.body);
        let refused = web
            .post(
                "/api/ai/patrol/acknowledge",
                &[("finding_id", "0000000000000000")],
            )
            .await?;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);

        // Sign-out ends the session for good, even if the cookie is replayed.
        let session = web.session().context("session")?.to_owned();
        let out = web.submit("/patrol", "/signout", &[]).await?;
        assert_eq!(out.status, StatusCode::SEE_OTHER);
        assert_eq!(out.location.as_deref(), Some("/signin"));
        let mut replay = WebClient::new(&gw.url)?;
        replay.cookies.push(("pulse_session".into(), session));
        assert_eq!(replay.get("/patrol").await?.status, StatusCode::SEE_OTHER);
        assert_eq!(
            replay.get("/api/ai/patrol/status").await?.status,
            StatusCode::UNAUTHORIZED
        );
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}

#[tokio::test]
async fn password_guessing_is_bounded_per_account() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let password = admin_password(&gw)?;
        let ops_password = create_user(&gw, "ops", "operator").await?;
        let mut web = WebClient::new(&gw.url)?;
        // Wrong organization, username and password all get the same answer.
        for (org, user, pass) in [
            ("nope", "admin", password.as_str()),
            ("default", "nobody", "whatever-password"),
            ("Not A Tenant!", "admin", "x"),
        ] {
            let answer = web.try_sign_in(org, user, pass).await?;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{org}/{user}");
            assert!(
                answer
                    .body
                    .contains("The organization, username or password is wrong.")
            );
            assert!(answer.set_cookie("pulse_session").is_none());
        }
        for _ in 0..5 {
            let answer = web
                .try_sign_in("default", "admin", "wrong-password-1")
                .await?;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        }
        // The account is locked for the window, even with the right password...
        let locked = web.try_sign_in("default", "admin", &password).await?;
        assert_eq!(
            locked.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{}",
            locked.body
        );
        assert!(
            locked.body.contains("Too many failed sign-ins"),
            "{}",
            locked.body
        );
        assert!(locked.set_cookie("pulse_session").is_none());
        // ...another account is not.
        let mut ops = WebClient::new(&gw.url)?;
        ops.sign_in("default", "ops", &ops_password).await?;
        // A sign-in form from elsewhere (no double-submit cookie) is refused.
        let mut forged = WebClient::new(&gw.url)?;
        let answer = forged
            .post(
                "/signin",
                &[
                    ("csrf", &"a".repeat(64)),
                    ("organization", "default"),
                    ("username", "ops"),
                    ("password", &ops_password),
                ],
            )
            .await?;
        assert_eq!(answer.status, StatusCode::FORBIDDEN);
        assert!(answer.set_cookie("pulse_session").is_none());
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}

#[tokio::test]
async fn every_form_without_the_sessions_csrf_token_is_refused() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let mut web = signed_in_admin(&gw).await?;
        let mut other = signed_in_admin(&gw).await?;
        let pages = [
            "/patrol",
            "/findings",
            "/runs",
            "/approvals",
            "/actions",
            "/resources",
            "/settings",
            "/cost",
        ];
        let mut forms = BTreeSet::new();
        for page in pages {
            let answer = web.get(page).await?;
            assert_eq!(answer.status, StatusCode::OK, "{page}: {}", answer.body);
            forms.extend(post_forms(&answer.body));
        }
        // Routes whose forms only appear beside data (a finding, an action).
        for route in pulse_gateway::FORM_ROUTES {
            forms.insert(
                route
                    .replace("{id}", "0000000000000000")
                    .replace("{action}", "acknowledge"),
            );
        }
        anyhow::ensure!(forms.len() >= 8, "too few forms found: {forms:?}");
        let foreign = pulse_test_support::web::csrf_field(&other.get("/patrol").await?.body)
            .context("other session's token")?;
        let before = gw
            .admin_json(reqwest::Method::GET, "/api/settings/ai", None)
            .await?;
        for form in &forms {
            for csrf in [None, Some("0".repeat(64)), Some(foreign.clone())] {
                let mut fields = vec![
                    ("enabled", "false"),
                    ("mode", "full"),
                    ("acknowledge", "yes"),
                ];
                if let Some(token) = &csrf {
                    fields.push(("csrf", token));
                }
                let answer = web.post(form, &fields).await?;
                assert_eq!(
                    answer.status,
                    StatusCode::FORBIDDEN,
                    "{form} with csrf {csrf:?}: {}",
                    answer.body
                );
                assert!(answer.body.contains("csrf_token_invalid"), "{form}");
            }
        }
        // Nothing changed: the settings are as they were, the session still works.
        let after = gw
            .admin_json(reqwest::Method::GET, "/api/settings/ai", None)
            .await?;
        assert_eq!(before.1["version"], after.1["version"]);
        assert_eq!(web.get("/patrol").await?.status, StatusCode::OK);
        other.get("/patrol").await?;
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}

#[tokio::test]
async fn roles_decide_what_a_signed_in_user_may_do() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let viewer_password = create_user(&gw, "watcher", "viewer").await?;
        let mut viewer = WebClient::new(&gw.url)?;
        viewer
            .sign_in("default", "watcher", &viewer_password)
            .await?;
        // A viewer reads Patrol but sees no mode, switch or run form, and cannot open settings.
        let patrol = viewer.get("/patrol").await?;
        assert_eq!(patrol.status, StatusCode::OK);
        assert!(!patrol.body.contains("action=\"/patrol/mode\""));
        assert!(!patrol.body.contains("action=\"/patrol/run\""));
        let settings = viewer.get("/settings").await?;
        assert_eq!(settings.status, StatusCode::FORBIDDEN);
        assert!(settings.body.contains("missing_scope"), "{}", settings.body);
        // A posted form is checked against the role too (not only hidden).
        let refused = viewer
            .submit("/patrol", "/patrol/enabled", &[("enabled", "false")])
            .await?;
        assert_eq!(refused.status, StatusCode::SEE_OTHER);
        let flash = viewer.get("/patrol").await?;
        assert!(flash.body.contains("missing_scope"), "{}", flash.body);

        // pulsectl refuses a duplicate user and a short password, with stable codes.
        let output = tokio::process::Command::new(binary("pulsectl")?)
            .args(["--state-dir"])
            .arg(&gw.state_dir)
            .args(["user", "create", "watcher"])
            .env("PULSE_DATABASE_URL", gw.db.owner_url())
            .output()
            .await?;
        assert_eq!(output.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&output.stderr).contains("user_exists"));

        // --password-stdin takes the operator's own password, checked for length.
        for (name, password, accepted) in [
            ("chosen", "a long enough passphrase", true),
            ("short", "too-short", false),
        ] {
            let mut child = tokio::process::Command::new(binary("pulsectl")?)
                .args(["--state-dir"])
                .arg(&gw.state_dir)
                .args([
                    "user",
                    "create",
                    name,
                    "--role",
                    "viewer",
                    "--password-stdin",
                ])
                .env("PULSE_DATABASE_URL", gw.db.owner_url())
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()?;
            {
                use tokio::io::AsyncWriteExt as _;
                let mut stdin = child.stdin.take().context("stdin")?;
                stdin.write_all(format!("{password}\n").as_bytes()).await?;
            }
            let output = child.wait_with_output().await?;
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                !stdout.contains(password),
                "a chosen password is never printed"
            );
            let mut web = WebClient::new(&gw.url)?;
            if accepted {
                assert!(
                    output.status.success(),
                    "{}",
                    String::from_utf8_lossy(&output.stderr)
                );
                web.sign_in("default", name, password).await?;
            } else {
                assert_eq!(output.status.code(), Some(2));
                assert!(String::from_utf8_lossy(&output.stderr).contains("invalid_password"));
                let answer = web.try_sign_in("default", name, password).await?;
                assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
            }
        }
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}

#[tokio::test]
async fn the_autopilot_acknowledgement_is_the_signed_in_users() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let mut web = signed_in_admin(&gw).await?;
        // Autopilot without ticking the terms is refused with the reason shown.
        let answer = web
            .submit("/patrol", "/patrol/mode", &[("mode", "full")])
            .await?;
        assert_eq!(answer.status, StatusCode::SEE_OTHER);
        let page = web.get("/patrol").await?;
        assert!(
            page.body.contains("Autopilot needs the acknowledgement"),
            "{}",
            page.body
        );

        let answer = web
            .submit(
                "/patrol",
                "/patrol/mode",
                &[("mode", "full"), ("acknowledge", "yes")],
            )
            .await?;
        assert_eq!(answer.status, StatusCode::SEE_OTHER);
        let (_, settings) = gw
            .admin_json(reqwest::Method::GET, "/api/settings/ai", None)
            .await?;
        assert_eq!(settings["autonomy_level"], "full", "{settings}");
        let by = settings["autopilot_acknowledgement"]["acknowledged_by"]
            .as_str()
            .context("acknowledged_by")?
            .to_owned();
        assert!(by.starts_with("user:"), "{by}");

        // Through the API a body cannot name someone else: the caller's user is recorded.
        let (status, body) = gw
            .admin_json(
                reqwest::Method::PUT,
                "/api/settings/ai",
                Some(json!({"autopilot_acknowledgement": {
                    "version": settings["autopilot_acknowledgement_version"],
                    "acknowledged_by": "someone-else",
                    "at": "2020-01-01T00:00:00Z"
                }})),
            )
            .await?;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            body["autopilot_acknowledgement"]["acknowledged_by"],
            by.as_str()
        );
        assert_ne!(
            body["autopilot_acknowledgement"]["at"],
            "2020-01-01T00:00:00Z"
        );

        // A token that belongs to no user cannot acknowledge.
        let store = gw.db.store();
        let tx = store
            .tenant_tx(&pulse_domain::TenantId::default_tenant())
            .await?;
        let issued = pulse_store::tokens::issue(
            &tx,
            pulse_store::tokens::NewToken {
                name: "robot".into(),
                scopes: [pulse_domain::Scope::Admin].into_iter().collect(),
                expires_at: None,
                created_by: None,
            },
        )
        .await?;
        tx.commit().await?;
        let (status, body) = gw
            .request_json(
                reqwest::Method::PUT,
                issued.secret.expose(),
                "/api/settings/ai",
                Some(json!({"autopilot_acknowledgement": {
                    "version": 1, "acknowledged_by": "robot", "at": "2026-01-01T00:00:00Z"
                }})),
            )
            .await?;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"], "acknowledgement_requires_human");
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}
