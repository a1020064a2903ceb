//! Hosted multi-tenancy end to end, against the real gateway, agent-relay, agents and `pulsectl`
//! binaries on real Postgres and NATS:
//!
//! - a platform token is minted database-direct (`pulsectl admin platform-token`); tenant tokens
//!   never reach the platform API, the platform token reaches no tenant route, and a tenant token
//!   cannot be created with a platform scope;
//! - two tenants are provisioned through `pulsectl tenant create`, each with an agent reporting
//!   and a finding and a Patrol run; every tenant `GET` route of the OpenAPI document (enumerated
//!   from the document, ids substituted) shows each tenant only its own data, and the other
//!   tenant's ids answer not-found;
//! - the request-rate quota refuses one tenant with 429 `quota_exceeded` and Retry-After while
//!   the other is unaffected;
//! - a suspended tenant's tokens get `tenant_suspended` with the reason from the gateway, and its
//!   agents are refused by the relay; resume restores both;
//! - deleting a tenant leaves no row in any table with a `tenant_id` column (enumerated from
//!   `information_schema`) and no message on its subjects in any stream, while the other tenant's
//!   rows and messages remain.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use chrono::Utc;
use futures::StreamExt as _;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_domain::patrol::run::{PatrolRun, RunType, TriggerReason};
use pulse_store::{findings, patrol_runs};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::agent::{AgentStack, host_id, sleeper_service, write_service};
use pulse_test_support::cli::{Pulsectl, describe, stderr, stdout};
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::service::binary;
use pulse_test_support::web::WebClient;
use reqwest::Method;
use serde_json::{Value, json};

const CLI_WITHIN: Duration = Duration::from_secs(60);
const SEEN_WITHIN: Duration = Duration::from_secs(30);

/// One tenant as the test knows it: its admin token and the ids and names of its data.
struct Org {
    id: String,
    admin_token: String,
    admin_password: String,
    host: String,
    service: String,
    resource: String,
    finding: String,
    finding_title: String,
    run: String,
}

impl Org {
    /// What must never appear in another tenant's answers.
    fn markers(&self) -> Vec<&str> {
        vec![
            &self.host,
            &self.service,
            &self.resource,
            &self.finding,
            &self.finding_title,
            &self.run,
        ]
    }

    /// The id a templated path takes, by the segment before `{id}`.
    fn id_for(&self, path: &str) -> Option<&str> {
        if !path.contains("{id}") {
            return None;
        }
        let before = path.split("/{id}").next()?.rsplit('/').next()?;
        match before {
            "resources" | "resource-context" | "resource-capabilities" => Some(&self.resource),
            "findings" => Some(&self.finding),
            "runs" => Some(&self.run),
            _ => None,
        }
    }
}

/// `pulsectl admin platform-token` with the database URL as its only Pulse setting.
async fn mint_platform_token(
    database_url: &str,
    state_dir: &std::path::Path,
) -> anyhow::Result<String> {
    let mut command = tokio::process::Command::new(binary("pulsectl")?);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PULSE_DATABASE_URL", database_url)
        .arg("--state-dir")
        .arg(state_dir)
        .args(["admin", "platform-token", "--name", "e2e-operator"])
        .kill_on_drop(true);
    let output = tokio::time::timeout(CLI_WITHIN, command.output())
        .await
        .context("pulsectl admin platform-token did not finish")??;
    ensure!(output.status.success(), "{}", describe(&output));
    let token = stdout(&output).trim().to_owned();
    ensure!(
        token.starts_with("pulse_platform_"),
        "{}",
        describe(&output)
    );
    ensure!(
        !stderr(&output).contains(&token),
        "the secret leaked to stderr"
    );
    Ok(token)
}

async fn request(
    stack: &AgentStack,
    method: Method,
    token: &str,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(u16, Value, reqwest::header::HeaderMap)> {
    let mut builder = stack
        .gateway
        .http
        .request(method, stack.gateway.url(path))
        .bearer_auth(token);
    if let Some(body) = body {
        builder = builder.json(&body);
    }
    let response = builder.send().await?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    // Every answer's code is one its route declares (the gateway names any other in this
    // header in debug builds).
    ensure!(
        !headers.contains_key("x-pulse-undeclared-error"),
        "{path} answered an undeclared code: {:?}",
        headers.get("x-pulse-undeclared-error")
    );
    let text = response.text().await?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((status, body, headers))
}

/// Provisions `id` through `pulsectl tenant create`, then gives it an agent reporting a service,
/// a finding on it and a queued Patrol run.
async fn provision(
    stack: &AgentStack,
    cli: &Pulsectl<'_>,
    platform: &str,
    id: &str,
    agents: &mut Vec<pulse_test_support::service::ServiceProcess>,
) -> anyhow::Result<Org> {
    let created = cli
        .ok(
            platform,
            &[
                "tenant",
                "create",
                id,
                "--name",
                &format!("{id} Corp"),
                "--findings",
                "100",
                "--usd-per-day",
                "2.5",
            ],
        )
        .await?;
    let admin_token = created
        .lines()
        .find_map(|line| line.strip_prefix("admin_token: "))
        .with_context(|| format!("no admin token in {created}"))?
        .trim()
        .to_owned();
    let admin_password = created
        .lines()
        .find_map(|line| line.strip_prefix("admin_password: "))
        .with_context(|| format!("no admin password in {created}"))?
        .trim()
        .to_owned();
    let (status, body, _) = request(
        stack,
        Method::POST,
        &admin_token,
        "/api/tokens",
        Some(json!({"name": "agent", "scopes": ["agent:report"]})),
    )
    .await?;
    ensure!(status == 201, "agent token for {id}: {status} {body}");
    let agent_token = body["token"].as_str().context("token")?.to_owned();
    let host = host_id(&format!("{id}-host"));
    let service = format!("{id}-svc-{}", &host[host.len() - 6..]);
    let spec = stack.agent_spec(&host, &agent_token, Duration::from_millis(500))?;
    write_service(&spec.services_dir, "svc.toml", &sleeper_service(&service))?;
    agents.push(stack.spawn_agent(&spec)?);
    let resource = stack
        .service_resource_id(&admin_token, &host, &service, SEEN_WITHIN)
        .await?;
    let tenant = TenantId::new(id)?;
    let store = stack.gateway.db.store();
    let tx = store.tenant_tx(&tenant).await?;
    let finding_title = format!("{service} keeps restarting");
    let reported = ReportedFinding {
        key: "restart-loop".to_owned(),
        severity: Severity::Warning,
        category: Category::Reliability,
        resource_id: resource.clone(),
        resource_name: service.clone(),
        resource_type: "service".to_owned(),
        title: finding_title.clone(),
        description: format!("{service} restarted often"),
        recommendation: "check its logs".to_owned(),
        evidence: "restarts=9".to_owned(),
        impact: String::new(),
    };
    let finding = findings::report(&tx, &reported, None, Utc::now())
        .await?
        .finding
        .finding
        .id
        .as_hex();
    let run = PatrolRun::queued(
        patrol_runs::new_run_id(),
        TriggerReason::Manual,
        RunType::Full,
        Utc::now(),
    );
    ensure!(patrol_runs::insert_queued(&tx, &run, None).await?);
    tx.commit().await?;
    Ok(Org {
        id: id.to_owned(),
        admin_token,
        admin_password,
        host,
        service,
        resource,
        finding,
        finding_title,
        run: run.id.to_string(),
    })
}

/// The tenant `GET` operations of the OpenAPI document: not public, not the platform API, not
/// event streams.
fn tenant_reads(document: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    for (path, item) in document["paths"].as_object().into_iter().flatten() {
        let Some(op) = item.get("get") else { continue };
        let public = op["security"] == json!([]);
        let streams = op["responses"]["200"]["content"]
            .get("text/event-stream")
            .is_some();
        if public || streams || path.starts_with("/api/platform/") {
            continue;
        }
        paths.push(path.clone());
    }
    paths
}

/// `viewer` reads every tenant route: its own ids show its own data and nothing of `other`;
/// `other`'s ids answer not-found.
async fn check_isolation(
    stack: &AgentStack,
    paths: &[String],
    viewer: &Org,
    other: &Org,
) -> anyhow::Result<usize> {
    let mut checked = 0;
    for template in paths {
        let own_path = match viewer.id_for(template) {
            Some(id) => template.replace("{id}", &urlencode(id)),
            None if template.contains("{id}") => template.replace("{id}", "no-such-id"),
            None => template.clone(),
        };
        let (status, body, _) =
            request(stack, Method::GET, &viewer.admin_token, &own_path, None).await?;
        let text = body.to_string();
        for marker in other.markers() {
            ensure!(
                !text.contains(marker),
                "GET {own_path} as {} shows {}'s {marker}: {text}",
                viewer.id,
                other.id
            );
        }
        if !template.contains("{id}") {
            ensure!(
                (200..300).contains(&status),
                "GET {own_path} as {}: {status} {text}",
                viewer.id
            );
        } else if viewer.id_for(template).is_some() {
            // Its own object is found (a route may still want a query parameter for it).
            ensure!(
                status < 500 && status != 404,
                "GET {own_path} as {}: {status} {text}",
                viewer.id
            );
        }
        if let Some(foreign) = other.id_for(template) {
            let path = template.replace("{id}", &urlencode(foreign));
            let (status, body, _) =
                request(stack, Method::GET, &viewer.admin_token, &path, None).await?;
            let code = body["error"].as_str().unwrap_or_default();
            ensure!(
                status == 404 && code.ends_with("not_found"),
                "GET {path} (a {} id) as {}: {status} {body}",
                other.id,
                viewer.id
            );
        }
        checked += 1;
    }
    Ok(checked)
}

fn urlencode(raw: &str) -> String {
    raw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Rows of `tenant` in every table with a `tenant_id` column (from `information_schema`), plus
/// its `tenants` row; read as the superuser owner.
async fn tenant_rows(stack: &AgentStack, tenant: &str) -> anyhow::Result<BTreeMap<String, i64>> {
    let owner = stack.gateway.db.owner_client().await?;
    let tables = owner
        .query(
            "SELECT c.table_name::text FROM information_schema.columns c
             JOIN information_schema.tables t
               ON t.table_schema = c.table_schema AND t.table_name = c.table_name
             WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id'
               AND t.table_type = 'BASE TABLE'",
            &[],
        )
        .await?;
    let mut counts = BTreeMap::new();
    for row in tables {
        let table: String = row.get(0);
        let n: i64 = owner
            .query_one(
                &format!("SELECT count(*) FROM \"{table}\" WHERE tenant_id = $1"),
                &[&tenant],
            )
            .await?
            .get(0);
        counts.insert(table, n);
    }
    let n: i64 = owner
        .query_one("SELECT count(*) FROM tenants WHERE id = $1", &[&tenant])
        .await?
        .get(0);
    counts.insert("tenants".to_owned(), n);
    Ok(counts)
}

/// Messages on `<prefix>.pulse.<tenant>.>` in every stream of the stack's prefix.
async fn stream_messages(stack: &AgentStack, tenant: &str) -> anyhow::Result<usize> {
    let client = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let js = async_nats::jetstream::new(client);
    let subjects = pulse_bus::Subjects::try_new(Some(&stack.gateway.prefix))?;
    let filter = subjects.tenant_all(&TenantId::new(tenant)?);
    let mut total = 0;
    for name in [
        subjects.jobs_stream(),
        subjects.events_stream(),
        subjects.dlq_stream(),
    ] {
        let Ok(stream) = js.get_stream(&name).await else {
            continue;
        };
        let mut counts = stream.info_with_subjects(&filter).await?;
        while let Some(entry) = counts.next().await {
            total += entry?.1;
        }
    }
    Ok(total)
}

/// Opens the relay's agent WebSocket with `token`; the HTTP status and body of a refusal, or
/// `101` when it upgraded.
async fn relay_answer(stack: &AgentStack, token: &str) -> anyhow::Result<(u16, String)> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let url = format!(
        "{}/api/agent/ws",
        stack.relay_url.replacen("http://", "ws://", 1)
    );
    let mut request = url.into_client_request()?;
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    match tokio_tungstenite::connect_async(request).await {
        Ok((mut socket, response)) => {
            let _ = socket.close(None).await;
            Ok((response.status().as_u16(), String::new()))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body = response
                .body()
                .as_ref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            Ok((response.status().as_u16(), body))
        }
        Err(error) => Err(error.into()),
    }
}

#[tokio::test]
async fn two_hosted_tenants_are_isolated_suspended_limited_and_erased() -> anyhow::Result<()> {
    let stack = AgentStack::start(&[]).await?;
    // Capability reads ask the action-broker's catalogue.
    let broker =
        TestActionBroker::start(&stack.gateway, &stack.gateway.state_dir.join("broker"), &[])
            .await?;
    // The model catalogue (`GET /api/ai/models`) asks the model-runner: each tenant sees only
    // its own providers.
    let runner =
        TestModelRunner::start(&stack.gateway, &stack.gateway.state_dir.join("runner"), &[])
            .await?;
    let mut agents = Vec::new();
    let result = async {
        let cli = Pulsectl::new(&stack.gateway, CLI_WITHIN);
        let platform = mint_platform_token(stack.gateway.db.owner_url(), &cli.state_dir).await?;

        // One authority each way.
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &stack.gateway.admin_token,
            "/api/platform/tenants",
            None,
        )
        .await?;
        ensure!(
            status == 401 && body["error"] == "platform_token_required",
            "a tenant admin token reached the platform API: {status} {body}"
        );
        let (status, body, _) =
            request(&stack, Method::GET, &platform, "/api/resources", None).await?;
        ensure!(
            status == 401 && body["error"] == "unauthorized",
            "the platform token reached a tenant route: {status} {body}"
        );
        let (status, body, _) = request(
            &stack,
            Method::POST,
            &stack.gateway.admin_token,
            "/api/tokens",
            Some(json!({"name": "sneaky", "scopes": ["admin", "platform:operator"]})),
        )
        .await?;
        ensure!(
            status == 403 && body["error"] == "platform_scope_refused",
            "a tenant token with a platform scope: {status} {body}"
        );

        let acme = provision(&stack, &cli, &platform, "acme", &mut agents).await?;
        let globex = provision(&stack, &cli, &platform, "globex", &mut agents).await?;
        // The quotas given at creation are the tenant's.
        let shown: Value =
            serde_json::from_str(&cli.ok(&platform, &["tenant", "show", "acme"]).await?)?;
        ensure!(
            shown["quotas"]["findings"] == 100
                && shown["quotas"]["usd_micros_per_day"] == 2_500_000
                && shown["quotas"]["agents"].is_null()
                && shown["tenant"]["standing"]["state"] == "active",
            "{shown}"
        );
        let listed = cli.ok(&platform, &["tenant", "list"]).await?;
        for id in ["default", "acme", "globex"] {
            ensure!(
                listed
                    .lines()
                    .any(|l| l.starts_with(&format!("{id}\tactive"))),
                "{listed}"
            );
        }
        // The id is taken.
        let again = cli
            .fails(
                &platform,
                &["tenant", "create", "acme", "--name", "Again"],
                2,
            )
            .await?;
        ensure!(
            stderr(&again).contains("tenant_exists"),
            "{}",
            describe(&again)
        );

        // Isolation over every tenant read of the published document.
        let (status, document, _) = request(
            &stack,
            Method::GET,
            &acme.admin_token,
            "/api/openapi.json",
            None,
        )
        .await?;
        ensure!(status == 200, "{document}");
        let paths = tenant_reads(&document);
        ensure!(paths.len() >= 15, "tenant GET routes: {paths:?}");
        let checked = check_isolation(&stack, &paths, &acme, &globex).await?;
        ensure!(checked == paths.len());
        check_isolation(&stack, &paths, &globex, &acme).await?;
        eprintln!(
            "isolation: {} tenant GET routes of the OpenAPI document checked both ways",
            paths.len()
        );

        // The request-rate quota of one tenant never slows the other.
        cli.ok(
            &platform,
            &["tenant", "quota", "acme", "--api-requests-per-sec", "3"],
        )
        .await?;
        let mut refused = None;
        for _ in 0..12 {
            let (status, body, headers) = request(
                &stack,
                Method::GET,
                &acme.admin_token,
                "/api/resources",
                None,
            )
            .await?;
            if status == 429 {
                refused = Some((body, headers));
                break;
            }
            ensure!(status == 200, "{status} {body}");
        }
        let (body, headers) = refused.context("12 requests in a burst were never limited")?;
        ensure!(body["error"] == "quota_exceeded", "{body}");
        let message = body["message"].as_str().unwrap_or_default();
        ensure!(
            message.contains("api_requests_per_sec") && message.contains("limit 3"),
            "{message}"
        );
        ensure!(headers.contains_key("retry-after"), "{headers:?}");
        for _ in 0..12 {
            let (status, body, _) = request(
                &stack,
                Method::GET,
                &globex.admin_token,
                "/api/resources",
                None,
            )
            .await?;
            ensure!(
                status == 200,
                "globex was limited by acme's quota: {status} {body}"
            );
        }
        cli.ok(
            &platform,
            &["tenant", "quota", "acme", "--api-requests-per-sec", "none"],
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(1_100)).await;

        // Suspension: the tenant's tokens and agents are refused with the reason.
        let agent_token = {
            let (status, body, _) = request(
                &stack,
                Method::POST,
                &acme.admin_token,
                "/api/tokens",
                Some(json!({"name": "agent-2", "scopes": ["agent:report"]})),
            )
            .await?;
            ensure!(status == 201, "{body}");
            body["token"].as_str().context("token")?.to_owned()
        };
        ensure!(relay_answer(&stack, &agent_token).await?.0 == 101);
        // The tenant's first admin signs in to the web UI with the password create printed.
        let mut web = WebClient::new(&stack.gateway.url)?;
        web.sign_in("acme", "admin", &acme.admin_password).await?;
        let page = web.get("/patrol").await?;
        ensure!(page.status == 200, "{} {}", page.status, page.body);
        cli.ok(
            &platform,
            &["tenant", "suspend", "acme", "--reason", "invoice overdue"],
        )
        .await?;
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &acme.admin_token,
            "/api/resources",
            None,
        )
        .await?;
        ensure!(
            status == 403
                && body["error"] == "tenant_suspended"
                && body["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("invoice overdue"),
            "{status} {body}"
        );
        let (status, refusal) = relay_answer(&stack, &agent_token).await?;
        ensure!(
            status == 403
                && refusal.contains("tenant_suspended")
                && refusal.contains("invoice overdue"),
            "the relay took a suspended tenant's agent: {status} {refusal}"
        );
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &globex.admin_token,
            "/api/resources",
            None,
        )
        .await?;
        ensure!(
            status == 200,
            "globex suffered acme's suspension: {status} {body}"
        );
        // Its signed-in users too, pages and API alike.
        let page = web.get("/patrol").await?;
        ensure!(
            page.status == 403 && page.body.contains("invoice overdue"),
            "a suspended tenant's web session: {} {}",
            page.status,
            page.body
        );
        let api = web.get("/api/ai/patrol/status").await?;
        ensure!(
            api.status == 403 && api.body.contains("tenant_suspended"),
            "{} {}",
            api.status,
            api.body
        );
        // The session acme's agent opened before the suspension is closed with the reason.
        let acme_agent = &agents[0];
        pulse_test_support::wait::until(
            Duration::from_secs(40),
            "acme's open agent session to be closed as suspended",
            || async {
                acme_agent
                    .log_tail(400)
                    .contains("tenant_suspended")
                    .then_some(())
            },
        )
        .await?;
        ensure!(
            !agents[1].log_tail(400).contains("tenant_suspended"),
            "globex's agent saw acme's suspension"
        );
        let listed = cli.ok(&platform, &["tenant", "list"]).await?;
        ensure!(
            listed
                .lines()
                .any(|l| l.starts_with("acme\tsuspended (invoice overdue)")),
            "{listed}"
        );
        cli.ok(&platform, &["tenant", "resume", "acme"]).await?;
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &acme.admin_token,
            "/api/resources",
            None,
        )
        .await?;
        ensure!(status == 200, "after resume: {status} {body}");
        ensure!(relay_answer(&stack, &agent_token).await?.0 == 101);

        // The agents quota: acme's one agent fills it, so a token with no agent yet is refused
        // by the relay; globex is not limited.
        cli.ok(&platform, &["tenant", "quota", "acme", "--agents", "1"])
            .await?;
        let (status, refusal) = relay_answer(&stack, &agent_token).await?;
        ensure!(
            status == 429 && refusal.contains("quota_exceeded") && refusal.contains("quota agents"),
            "a second acme agent past its quota: {status} {refusal}"
        );
        let (status, body, _) = request(
            &stack,
            Method::POST,
            &globex.admin_token,
            "/api/tokens",
            Some(json!({"name": "agent-2", "scopes": ["agent:report"]})),
        )
        .await?;
        ensure!(status == 201, "{body}");
        let globex_agent = body["token"].as_str().context("token")?.to_owned();
        ensure!(relay_answer(&stack, &globex_agent).await?.0 == 101);
        cli.ok(&platform, &["tenant", "quota", "acme", "--agents", "none"])
            .await?;
        ensure!(relay_answer(&stack, &agent_token).await?.0 == 101);

        // The resources quota: globex is at it, so a new agent's report adding resources is
        // refused with the quota and nothing of it is stored.
        let (status, listed, _) = request(
            &stack,
            Method::GET,
            &globex.admin_token,
            "/api/resources",
            None,
        )
        .await?;
        ensure!(status == 200, "{listed}");
        let held = listed["resources"].as_array().map_or(0, Vec::len);
        ensure!(held >= 1, "{listed}");
        cli.ok(
            &platform,
            &[
                "tenant",
                "quota",
                "globex",
                "--resources",
                &held.to_string(),
            ],
        )
        .await?;
        let extra_host = host_id("globex-extra");
        let spec = stack.agent_spec(&extra_host, &globex_agent, Duration::from_millis(500))?;
        write_service(
            &spec.services_dir,
            "svc.toml",
            &sleeper_service("globex-extra"),
        )?;
        agents.push(stack.spawn_agent(&spec)?);
        let extra = agents.last().context("agent")?;
        pulse_test_support::wait::until(
            SEEN_WITHIN,
            "the extra agent's report to be refused by the resources quota",
            || async {
                let log = extra.log_tail(400);
                (log.contains("quota_exceeded") && log.contains("quota resources")).then_some(())
            },
        )
        .await?;
        let (_, listed, _) = request(
            &stack,
            Method::GET,
            &globex.admin_token,
            "/api/resources",
            None,
        )
        .await?;
        ensure!(
            listed["resources"].as_array().map_or(0, Vec::len) == held
                && !listed.to_string().contains(&extra_host),
            "a report past the resources quota was stored: {listed}"
        );
        cli.ok(
            &platform,
            &["tenant", "quota", "globex", "--resources", "none"],
        )
        .await?;
        stack
            .service_resource_id(
                &globex.admin_token,
                &extra_host,
                "globex-extra",
                SEEN_WITHIN,
            )
            .await?;

        // Deletion: no row anywhere, no stream message, the other tenant untouched.
        if let Some(agent) = agents.drain(..1).next() {
            agent.stop(Duration::from_secs(5)).await.ok();
        }
        let acme_before = tenant_rows(&stack, "acme").await?;
        let globex_before = tenant_rows(&stack, "globex").await?;
        ensure!(
            acme_before.values().filter(|n| **n > 0).count() >= 8,
            "acme has too little data to show an erasure: {acme_before:?}"
        );
        wait_for_events(&stack, "acme").await?;
        let globex_messages = stream_messages(&stack, "globex").await?;
        let deleted = cli.run(&platform, &["tenant", "delete", "acme"]).await?;
        ensure!(!deleted.status.success(), "deleted without --yes");
        let deleted = cli
            .ok(&platform, &["tenant", "delete", "acme", "--yes"])
            .await;
        deleted?;
        let acme_after = tenant_rows(&stack, "acme").await?;
        let left: Vec<_> = acme_after.iter().filter(|(_, n)| **n > 0).collect();
        ensure!(
            left.is_empty(),
            "rows of the deleted tenant remain: {left:?}"
        );
        eprintln!(
            "erasure: {} tenant tables, {} acme rows before, 0 after",
            acme_after.len(),
            acme_before.values().sum::<i64>()
        );
        ensure!(
            stream_messages(&stack, "acme").await? == 0,
            "stream messages of the deleted tenant remain"
        );
        let globex_after = tenant_rows(&stack, "globex").await?;
        for (table, before) in &globex_before {
            let after = globex_after.get(table).copied().unwrap_or(0);
            ensure!(
                after >= *before,
                "globex lost rows in {table}: {before} -> {after}"
            );
        }
        ensure!(stream_messages(&stack, "globex").await? >= globex_messages);
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &acme.admin_token,
            "/api/resources",
            None,
        )
        .await?;
        ensure!(
            status == 401,
            "a deleted tenant's token still works: {status} {body}"
        );
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &platform,
            "/api/platform/tenants/acme",
            None,
        )
        .await?;
        ensure!(
            status == 404 && body["error"] == "tenant_not_found",
            "{status} {body}"
        );
        // Deleting again finds nothing left to erase or purge.
        let (status, body, _) = request(
            &stack,
            Method::DELETE,
            &platform,
            "/api/platform/tenants/acme",
            None,
        )
        .await?;
        ensure!(
            status == 404 && body["error"] == "tenant_not_found",
            "a second deletion: {status} {body}"
        );
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &globex.admin_token,
            "/api/resources",
            None,
        )
        .await?;
        ensure!(
            status == 200 && body.to_string().contains(&globex.resource),
            "{status} {body}"
        );
        // Users per tenant, through the platform API.
        let password = cli
            .ok(
                &platform,
                &["tenant", "user-create", "globex", "bob", "--role", "viewer"],
            )
            .await?;
        ensure!(password.trim().len() == 24, "{password}");
        let users = cli.ok(&platform, &["tenant", "users", "globex"]).await?;
        let users: Value = serde_json::from_str(&users)?;
        let names: Vec<&str> = users["users"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u["username"].as_str())
            .collect();
        ensure!(names == ["admin", "bob"], "{users}");
        let mut bob = WebClient::new(&stack.gateway.url)?;
        bob.sign_in("globex", "bob", password.trim()).await?;

        // A revoked platform token is refused at once.
        let listed = {
            let mut command = tokio::process::Command::new(binary("pulsectl")?);
            command
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("PULSE_DATABASE_URL", stack.gateway.db.owner_url())
                .arg("--state-dir")
                .arg(&cli.state_dir)
                .args(["admin", "platform-token", "--list"])
                .kill_on_drop(true);
            let output = tokio::time::timeout(CLI_WITHIN, command.output()).await??;
            ensure!(output.status.success(), "{}", describe(&output));
            stdout(&output)
        };
        ensure!(!listed.contains(&platform), "the list shows a secret");
        let id = listed
            .lines()
            .find(|l| l.contains("e2e-operator"))
            .and_then(|l| l.split('\t').next())
            .with_context(|| format!("no e2e-operator token in {listed}"))?
            .to_owned();
        let mut command = tokio::process::Command::new(binary("pulsectl")?);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("PULSE_DATABASE_URL", stack.gateway.db.owner_url())
            .arg("--state-dir")
            .arg(&cli.state_dir)
            .args(["admin", "platform-token", "--revoke", &id])
            .kill_on_drop(true);
        let output = tokio::time::timeout(CLI_WITHIN, command.output()).await??;
        ensure!(output.status.success(), "{}", describe(&output));
        let (status, body, _) = request(
            &stack,
            Method::GET,
            &platform,
            "/api/platform/tenants",
            None,
        )
        .await?;
        ensure!(
            status == 401 && body["error"] == "platform_token_required",
            "a revoked platform token: {status} {body}"
        );
        Ok(())
    }
    .await;
    for agent in agents {
        agent.stop(Duration::from_secs(5)).await.ok();
    }
    let broker_stopped = broker.stop().await;
    let runner_stopped = runner.stop().await;
    let stopped = stack.stop().await;
    let stopped = broker_stopped.and(runner_stopped).and(stopped);
    result.and(stopped)
}

/// Waits until the tenant's outbox has been published (its events are in the stream), so the
/// erasure has messages to purge.
async fn wait_for_events(stack: &AgentStack, tenant: &str) -> anyhow::Result<()> {
    pulse_test_support::wait::until(SEEN_WITHIN, "the tenant's events in the stream", || async {
        (stream_messages(stack, tenant).await.ok()? > 0).then_some(())
    })
    .await
}
