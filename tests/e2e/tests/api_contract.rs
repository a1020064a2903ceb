//! The published contract of the API against the real gateway binary (with an action-broker, so
//! governed-action routes answer for real):
//!
//! - every operation of `GET /api/openapi.json` refuses a caller without a token (401
//!   `unauthorized`) and a token lacking its scopes (403 `missing_scope`), except the public
//!   documents and health; and answers another tenant's object ids (a real resource, finding,
//!   action, Patrol run, token and Proxmox connection of tenant B) like unknown ones (404 `*not_found`), while lists
//!   never show tenant B's objects;
//! - every capability of `GET /api/agent/capabilities` exists in the router and answers its
//!   declared method with its declared scopes (never 401/403, 404 route-not-found or 405), and no
//!   other method of its path is routed (405): the router and the registry agree both ways;
//! - no answer carried a code its route does not declare (the gateway's declared-codes check:
//!   no `x-pulse-undeclared-error` header, `pulse_http_undeclared_errors_total` never counted).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono::Utc;
use pulse_domain::action;
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_domain::patrol::run::{PatrolRun, RunType, TriggerReason};
use pulse_domain::{Scope, TenantId};
use pulse_store::{Store, findings, patrol_runs};
use pulse_test_support::action_api::{restart_plan, user_token};
use pulse_test_support::action_broker::TestActionBroker;
use pulse_test_support::fakepve::FakePve;
use pulse_test_support::runner::TestModelRunner;
use pulse_test_support::seed::{seed_service, service_resource};
use pulse_test_support::service::TestGateway;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const UNDECLARED_HEADER: &str = "x-pulse-undeclared-error";

const PVE_TOKEN: &str = "pulse@pve!contract";
const PVE_SECRET: &str = "0e6c1f2a-contract";

/// The Proxmox VE API (`fakepve`) each tenant's connection is to.
fn pve_spec() -> Value {
    json!({
        "tokens": { PVE_TOKEN: PVE_SECRET },
        "guests": [{"vmid": 100, "name": "web", "status": "running"}]
    })
}

/// Objects of one tenant that routes take ids of.
#[derive(Debug, Clone)]
struct Ids {
    resource: String,
    agent: String,
    finding: String,
    action: String,
    run: String,
    token: String,
    session: String,
    connection: String,
    /// The fake Proxmox VE API the connections talk to (not an object of a tenant).
    pve_url: String,
    pve_fingerprint: String,
}

impl Ids {
    /// Well-formed ids no object of any tenant has.
    fn unknown() -> Self {
        Self {
            resource: "service:no-such-host:web".to_owned(),
            agent: "no-such-host".to_owned(),
            finding: "00000000000000aa".to_owned(),
            action: uuid::Uuid::new_v4().to_string(),
            run: uuid::Uuid::new_v4().to_string(),
            token: uuid::Uuid::new_v4().to_string(),
            session: uuid::Uuid::new_v4().to_string(),
            connection: uuid::Uuid::new_v4().to_string(),
            pve_url: "https://127.0.0.1:9".to_owned(),
            pve_fingerprint: "00".repeat(32),
        }
    }

    fn all(&self) -> [&str; 8] {
        [
            &self.resource,
            &self.agent,
            &self.finding,
            &self.action,
            &self.run,
            &self.token,
            &self.session,
            &self.connection,
        ]
    }

    /// `template` with its `{id}` replaced by the id of the object the route is about.
    fn fill(&self, template: &str) -> String {
        let id = if template.starts_with("/api/ai/test/") {
            // A provider id: the same for every tenant.
            "openai"
        } else if template.starts_with("/api/tokens/") {
            self.token.as_str()
        } else if template.starts_with("/api/actions/") {
            &self.action
        } else if template.starts_with("/api/ai/patrol/runs/") {
            &self.run
        } else if template.starts_with("/api/ai/patrol/findings/") {
            &self.finding
        } else if template.starts_with("/api/ai/sessions/") {
            &self.session
        } else if template.starts_with("/api/agents/") {
            &self.agent
        } else if template.starts_with("/api/connections/") {
            &self.connection
        } else {
            &self.resource
        };
        template.replace("{id}", id)
    }
}

/// The agent of a seeded service: `service:<agent>:<name>`.
fn agent_of(service_id: &str) -> String {
    service_id.split(':').nth(1).unwrap_or_default().to_owned()
}

/// A valid body for the operation, naming this tenant's objects.
fn body_for(name: &str, ids: &Ids, target: &str) -> Option<Value> {
    let f = &ids.finding;
    Some(match name {
        "create_token" => json!({"name": "contract", "scopes": ["admin"]}),
        "run_patrol" => json!({}),
        "acknowledge_finding" | "undo_dismiss_finding" | "undo_suppress_finding" => {
            json!({"finding_id": f})
        }
        "snooze_finding" => json!({"finding_id": f, "duration_hours": 1}),
        "dismiss_finding" => json!({"finding_id": f, "reason": "not_an_issue"}),
        "resolve_finding" => json!({"finding_id": f}),
        "note_finding" => json!({"finding_id": f, "note": "checked"}),
        "suppress_finding" => {
            json!({"finding_id": f, "resource_id": ids.resource, "category": "capacity"})
        }
        "update_ai_settings" => json!({}),
        "plan_action" => json!(restart_plan(
            &ids.resource,
            target,
            action::Severity::Warning
        )),
        "decide_action" => json!({"outcome": "rejected", "reason": "contract check"}),
        "set_remediation_lock" => json!({"never_auto_remediate": false}),
        "set_operator_state" => {
            json!({"intentionally_offline": false, "never_auto_remediate": false})
        }
        "assistant_chat" => json!({"prompt": "Is anything unhealthy?"}),
        "create_assistant_session" => json!({"title": "contract"}),
        "rename_assistant_session" => json!({"title": "renamed"}),
        "fork_assistant_session" => json!({}),
        "undo_assistant_turn" | "redo_assistant_turn" => json!({"expected_prompt": "none"}),
        "steer_assistant_turn" => json!({"text": "focus on disks"}),
        "test_ai_provider" => json!({"model": "gpt-contract"}),
        "set_connection_guest_actions" => json!({"enabled": false}),
        "add_connection" | "test_connection" => json!({
            "kind": "proxmox-ve", "url": ids.pve_url, "name": "contract",
            "token_id": PVE_TOKEN, "token_secret": PVE_SECRET, "fingerprint": ids.pve_fingerprint
        }),
        _ => return None,
    })
}

/// Whether the operation names a tenant's object (in its path or its body); a provider id names
/// none.
fn takes_an_id(path: &str, name: &str) -> bool {
    (path.contains("{id}") && !path.starts_with("/api/ai/test/"))
        || name.ends_with("_finding")
        || name == "plan_action"
}

struct Answer {
    status: StatusCode,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"].as_str().unwrap_or_default()
    }
}

async fn send(
    gw: &TestGateway,
    method: &Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> anyhow::Result<Answer> {
    let mut request = gw.http.request(method.clone(), gw.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await?;
    let status = response.status();
    if let Some(undeclared) = response.headers().get(UNDECLARED_HEADER) {
        anyhow::bail!("{method} {path} -> {status}: undeclared code {undeclared:?}");
    }
    let streaming = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if streaming {
        // An accepted event stream never ends: its status is the answer.
        return Ok(Answer {
            status,
            body: Value::Null,
        });
    }
    let text = response.text().await?;
    Ok(Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
    })
}

/// One operation of the OpenAPI document.
#[derive(Debug, Clone)]
struct Operation {
    method: Method,
    path: String,
    name: String,
    scopes: Vec<Scope>,
    public: bool,
}

fn scope(name: &str) -> Scope {
    Scope::ALL
        .into_iter()
        .find(|s| s.as_str() == name)
        .unwrap_or_else(|| panic!("unknown scope {name}"))
}

fn operations(document: &Value) -> Vec<Operation> {
    let mut out = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let scopes: Vec<Scope> = op["x-pulse-scopes"]
                .as_array()
                .expect("x-pulse-scopes")
                .iter()
                .map(|s| scope(s.as_str().expect("scope")))
                .collect();
            out.push(Operation {
                method: Method::from_bytes(method.to_ascii_uppercase().as_bytes()).expect("method"),
                path: path.clone(),
                name: op["operationId"].as_str().expect("operationId").to_owned(),
                public: op["security"] == json!([]),
                scopes,
            });
        }
    }
    out
}

/// Tokens of the admin's tenant by scope set, created through the API.
struct Tokens<'a> {
    gw: &'a TestGateway,
    by_scopes: BTreeMap<BTreeSet<Scope>, String>,
}

impl Tokens<'_> {
    async fn with(&mut self, scopes: BTreeSet<Scope>) -> anyhow::Result<String> {
        if let Some(token) = self.by_scopes.get(&scopes) {
            return Ok(token.clone());
        }
        let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        let label = format!("contract-{}", self.by_scopes.len());
        let token = self.gw.create_token(&label, &names).await?;
        self.by_scopes.insert(scopes, token.clone());
        Ok(token)
    }
}

fn reported(resource: &str) -> ReportedFinding {
    ReportedFinding {
        key: "disk-high".to_owned(),
        severity: Severity::Warning,
        category: Category::Capacity,
        resource_id: resource.to_owned(),
        resource_name: "web".to_owned(),
        resource_type: "service".to_owned(),
        title: "Disk almost full".to_owned(),
        description: "/var is 93% full".to_owned(),
        recommendation: "free space".to_owned(),
        evidence: "used_percent=93".to_owned(),
        impact: String::new(),
    }
}

/// A resource, a finding on it, a pending action on it, a queued run and a token of `tenant`.
async fn seed(
    gw: &TestGateway,
    store: &Store,
    tenant: &TenantId,
    label: &str,
    pve: &FakePve,
) -> anyhow::Result<Ids> {
    let resource = seed_service(store, tenant, label, service_resource("web")).await?;
    let tx = store.tenant_tx(tenant).await?;
    let finding = findings::report(&tx, &reported(&resource), None, Utc::now())
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
    anyhow::ensure!(patrol_runs::insert_queued(&tx, &run, None).await?);
    tx.commit().await?;
    // Plans wait for a human in approval mode (the default mode, monitor, plans nothing).
    let admin = user_token(
        store,
        tenant,
        Some(&format!("{label}-admin")),
        &[Scope::Admin],
    )
    .await?;
    let mode = send(
        gw,
        &Method::PUT,
        "/api/settings/ai",
        Some(&admin),
        Some(&json!({"autonomy_level": "approval"})),
    )
    .await?;
    anyhow::ensure!(
        mode.status == StatusCode::OK,
        "{} {}",
        mode.status,
        mode.body
    );
    let token = user_token(
        store,
        tenant,
        Some(&format!("{label}-planner")),
        &[Scope::ActionsPlan, Scope::MonitoringRead],
    )
    .await?;
    let planned = send(
        gw,
        &Method::POST,
        "/api/actions/plan",
        Some(&token),
        Some(&json!(restart_plan(
            &resource,
            "web",
            action::Severity::Critical
        ))),
    )
    .await?;
    anyhow::ensure!(
        planned.status == StatusCode::CREATED && planned.body["state"] == "pending_approval",
        "{} {}",
        planned.status,
        planned.body
    );
    let action = planned.body["action_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let tx = store.tenant_tx(tenant).await?;
    let token_id = pulse_store::tokens::list(&tx)
        .await?
        .into_iter()
        .find(|t| t.name.starts_with(&format!("{label}-planner")))
        .map(|t| t.id.to_string())
        .unwrap_or_default();
    tx.commit().await?;
    // An Assistant session of a user of the tenant: in the default tenant the admin's (whose
    // tokens, created through the API, are the admin's too), elsewhere a user of its own.
    let chat_token = if *tenant == TenantId::default_tenant() {
        gw.create_token(&format!("{label}-chat"), &["ai:chat"])
            .await?
    } else {
        user_token(
            store,
            tenant,
            Some(&format!("{label}-chat")),
            &[Scope::AiChat],
        )
        .await?
    };
    let created = send(
        gw,
        &Method::POST,
        "/api/ai/sessions",
        Some(&chat_token),
        Some(&json!({"title": format!("{label} session")})),
    )
    .await?;
    anyhow::ensure!(
        created.status == StatusCode::CREATED,
        "{} {}",
        created.status,
        created.body
    );
    let session = created.body["id"].as_str().unwrap_or_default().to_owned();
    let added = send(
        gw,
        &Method::POST,
        "/api/connections",
        Some(&admin),
        Some(&json!({
            "kind": "proxmox-ve", "url": pve.url, "name": format!("{label}-pve"),
            "token_id": PVE_TOKEN, "token_secret": PVE_SECRET, "fingerprint": pve.fingerprint
        })),
    )
    .await?;
    anyhow::ensure!(
        added.status == StatusCode::CREATED,
        "{} {}",
        added.status,
        added.body
    );
    let connection = added.body["id"].as_str().unwrap_or_default().to_owned();
    Ok(Ids {
        connection,
        pve_url: pve.url.clone(),
        pve_fingerprint: pve.fingerprint.clone(),
        agent: agent_of(&resource),
        resource,
        finding,
        action,
        run: run.id.to_string(),
        token: token_id,
        session,
    })
}

async fn undeclared_count(gw: &TestGateway) -> anyhow::Result<Vec<String>> {
    let text = gw.http.get(gw.url("/metrics")).send().await?.text().await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("pulse_http_undeclared_errors_total{"))
        .map(str::to_owned)
        .collect())
}

#[tokio::test]
async fn every_operation_checks_token_scope_and_tenant() -> anyhow::Result<()> {
    let pve = FakePve::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &pve_spec()).await?;
    let gw = TestGateway::start().await?;
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    // The model list and provider tests are answered by a model-runner.
    let runner = TestModelRunner::start(&gw, &gw.state_dir.join("runner"), &[]).await?;
    let store = gw.db.store().clone();
    let b = TenantId::new("tenant-b")?;
    pulse_store::tenants::create(&store, &b, "Tenant B").await?;
    let b_ids = seed(&gw, &store, &b, "b", &pve).await?;

    let document = send(&gw, &Method::GET, "/api/openapi.json", None, None).await?;
    assert_eq!(document.status, StatusCode::OK);
    assert_eq!(document.body["openapi"], "3.1.0");
    let operations = operations(&document.body);
    assert!(operations.len() >= 40, "{}", operations.len());
    let mut tokens = Tokens {
        gw: &gw,
        by_scopes: BTreeMap::new(),
    };
    let public: BTreeSet<&str> = operations
        .iter()
        .filter(|op| op.public)
        .map(|op| op.path.as_str())
        .collect();
    assert_eq!(
        public,
        BTreeSet::from([
            "/api/health",
            "/api/openapi.json",
            "/api/agent/capabilities"
        ])
    );

    for op in &operations {
        // The platform operator's routes answer platform tokens only, not tenant scopes; their
        // authority and tenant isolation are checked in tenants.rs.
        if op.path.starts_with("/api/platform/") {
            continue;
        }
        let path = b_ids.fill(&op.path);
        let body = body_for(&op.name, &b_ids, "web");
        let what = format!("{} {} ({})", op.method, op.path, op.name);

        // Without a token.
        let anonymous = send(&gw, &op.method, &path, None, body.as_ref()).await?;
        if op.public {
            assert_eq!(
                anonymous.status,
                StatusCode::OK,
                "{what}: {}",
                anonymous.body
            );
            continue;
        }
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{what}");
        assert_eq!(anonymous.code(), "unauthorized", "{what}");

        // With every scope but the ones it requires.
        let lacking: BTreeSet<Scope> = Scope::ALL
            .into_iter()
            .filter(|s| !op.scopes.contains(s))
            .collect();
        let token = tokens.with(lacking).await?;
        let refused = send(&gw, &op.method, &path, Some(&token), body.as_ref()).await?;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "{what}: {}",
            refused.body
        );
        assert_eq!(refused.code(), "missing_scope", "{what}");

        // Tenant A's admin naming tenant B's objects: they do not exist for A, so the answer is
        // the one for ids nobody has (404 for an id in the path).
        if takes_an_id(&op.path, &op.name) {
            let answer = send(&gw, &op.method, &path, Some(&gw.admin_token), body.as_ref()).await?;
            let unknown = Ids::unknown();
            let unknown_body = body_for(&op.name, &unknown, "web");
            let baseline = send(
                &gw,
                &op.method,
                &unknown.fill(&op.path),
                Some(&gw.admin_token),
                unknown_body.as_ref(),
            )
            .await?;
            assert_eq!(
                (answer.status, answer.code()),
                (baseline.status, baseline.code()),
                "{what}: tenant B's ids {} vs unknown ids {}",
                answer.body,
                baseline.body
            );
            if op.path.contains("{id}") {
                assert_eq!(
                    answer.status,
                    StatusCode::NOT_FOUND,
                    "{what}: {}",
                    answer.body
                );
                assert!(
                    [
                        "not_found",
                        "finding_not_found",
                        "action_not_found",
                        "assistant_session_not_found",
                    ]
                    .contains(&answer.code()),
                    "{what}: {}",
                    answer.body
                );
            } else {
                assert!(answer.status.is_client_error(), "{what}: {}", answer.body);
            }
        } else if op.method == Method::GET {
            let answer = send(&gw, &op.method, &path, Some(&gw.admin_token), None).await?;
            assert!(answer.status.is_success(), "{what}: {}", answer.status);
            let text = answer.body.to_string();
            for id in b_ids.all() {
                assert!(!text.contains(id), "{what} shows tenant B's {id}");
            }
        }
    }
    assert_eq!(undeclared_count(&gw).await?, Vec::<String>::new());
    runner.kill().await?;
    broker.stop().await?;
    gw.stop().await
}

#[tokio::test]
async fn every_capability_is_routed_with_its_method_and_scopes_only() -> anyhow::Result<()> {
    let pve = FakePve::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &pve_spec()).await?;
    let gw = TestGateway::start().await?;
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    // The model list and provider tests are answered by a model-runner.
    let runner = TestModelRunner::start(&gw, &gw.state_dir.join("runner"), &[]).await?;
    let store = gw.db.store().clone();
    let a = TenantId::default_tenant();
    let ids = seed(&gw, &store, &a, "a", &pve).await?;

    let manifest = send(&gw, &Method::GET, "/api/agent/capabilities", None, None).await?;
    assert_eq!(manifest.status, StatusCode::OK);
    let document = send(&gw, &Method::GET, "/api/openapi.json", None, None).await?;
    let capabilities = manifest.body["capabilities"]
        .as_array()
        .expect("capabilities")
        .clone();
    let manifest_names: BTreeSet<String> = capabilities
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    // The platform operator's routes are documented but are no tenant's capabilities.
    let document_names: BTreeSet<String> = operations(&document.body)
        .into_iter()
        .filter(|op| !op.path.starts_with("/api/platform/"))
        .map(|op| op.name)
        .collect();
    assert_eq!(manifest_names, document_names);
    for tool in manifest.body["surfaceToolContracts"][0]["tools"]
        .as_array()
        .expect("tools")
    {
        assert!(
            manifest_names.contains(tool.as_str().unwrap_or_default()),
            "{tool}"
        );
    }

    let mut tokens = Tokens {
        gw: &gw,
        by_scopes: BTreeMap::new(),
    };
    let mut methods_by_path: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for capability in &capabilities {
        let name = capability["name"].as_str().expect("name");
        let method = capability["method"].as_str().expect("method");
        let template = capability["path"].as_str().expect("path");
        methods_by_path
            .entry(template.to_owned())
            .or_default()
            .insert(method.to_owned());
        let scopes: BTreeSet<Scope> = capability["scopes"]
            .as_array()
            .expect("scopes")
            .iter()
            .map(|s| scope(s.as_str().unwrap_or_default()))
            .collect();
        let declared: BTreeSet<&str> = capability["errorCodes"]
            .as_array()
            .expect("errorCodes")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let token = if scopes.is_empty() {
            None
        } else {
            Some(tokens.with(scopes).await?)
        };
        let path = if name == "revoke_token" {
            // A token of its own, so the others stay usable.
            gw.create_token("spare", &["monitoring:read"]).await?;
            let listed = send(
                &gw,
                &Method::GET,
                "/api/tokens",
                Some(&gw.admin_token),
                None,
            )
            .await?;
            let id = listed.body["tokens"]
                .as_array()
                .and_then(|l| l.iter().find(|t| t["name"] == "spare"))
                .and_then(|t| t["id"].as_str())
                .unwrap_or_default()
                .to_owned();
            template.replace("{id}", &id)
        } else if name == "forget_agent" {
            // An agent of its own, so the seeded resources stay.
            let spare = seed_service(&store, &a, "spare", service_resource("spare")).await?;
            template.replace("{id}", &agent_of(&spare))
        } else if name == "get_resource_forecast" {
            // A service has no default metric to forecast.
            format!("{}?metric=used_percent", ids.fill(template))
        } else {
            ids.fill(template)
        };
        let body = body_for(name, &ids, "web");
        let method = Method::from_bytes(method.as_bytes())?;
        let answer = send(&gw, &method, &path, token.as_deref(), body.as_ref()).await?;
        let what = format!(
            "{method} {path} ({name}) -> {}: {}",
            answer.status, answer.body
        );
        assert_ne!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{what}");
        assert!(
            !(answer.status == StatusCode::NOT_FOUND && answer.body["message"] == "no such route"),
            "{what}"
        );
        assert!(
            !matches!(
                answer.status,
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
            ),
            "{what}"
        );
        if answer.status.is_success() {
            if let Some(status) = capability["responseShape"]["status"].as_u64() {
                assert_eq!(u64::from(answer.status.as_u16()), status, "{what}");
            }
        } else {
            assert!(declared.contains(answer.code()), "{what}");
        }
        if method == Method::GET {
            assert!(answer.status.is_success(), "{what}");
        }
    }

    // No method beyond the declared ones is routed on any path.
    for (template, declared) in &methods_by_path {
        let path = ids.fill(template);
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            if declared.contains(method) {
                continue;
            }
            let method = Method::from_bytes(method.as_bytes())?;
            let answer = send(&gw, &method, &path, Some(&gw.admin_token), None).await?;
            assert_eq!(
                answer.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}: {}",
                answer.body
            );
            assert_eq!(answer.code(), "method_not_allowed");
        }
    }
    assert_eq!(undeclared_count(&gw).await?, Vec::<String>::new());
    runner.kill().await?;
    broker.stop().await?;
    gw.stop().await
}

#[tokio::test]
async fn agent_context_reads_the_tenant_and_the_broker_catalogue() -> anyhow::Result<()> {
    let pve = FakePve::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &pve_spec()).await?;
    let gw = TestGateway::start().await?;
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    let store = gw.db.store().clone();
    let a = TenantId::default_tenant();
    let ids = seed(&gw, &store, &a, "a", &pve).await?;
    let b = TenantId::new("tenant-b")?;
    pulse_store::tenants::create(&store, &b, "Tenant B").await?;
    let b_ids = seed(&gw, &store, &b, "b", &pve).await?;
    let reader = gw.create_token("reader", &["monitoring:read"]).await?;

    let fleet = send(
        &gw,
        &Method::GET,
        "/api/agent/fleet-context",
        Some(&reader),
        None,
    )
    .await?;
    assert_eq!(fleet.status, StatusCode::OK, "{}", fleet.body);
    let resources = fleet.body["resources"].as_array().expect("resources");
    assert_eq!(resources.len(), 1, "{}", fleet.body);
    assert_eq!(resources[0]["id"], json!(ids.resource));
    assert_eq!(resources[0]["open_findings"]["warning"], 1);
    assert_eq!(fleet.body["pending_approvals"], 1);
    assert!(!fleet.body.to_string().contains(&b_ids.resource));
    let filtered = send(
        &gw,
        &Method::GET,
        "/api/agent/fleet-context?type=host",
        Some(&reader),
        None,
    )
    .await?;
    assert_eq!(filtered.body["resource_count"], 0, "{}", filtered.body);
    let bad = send(
        &gw,
        &Method::GET,
        "/api/agent/fleet-context?status=up",
        Some(&reader),
        None,
    )
    .await?;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.code(), "invalid_parameter");

    let context = send(
        &gw,
        &Method::GET,
        &format!("/api/agent/resource-context/{}", ids.resource),
        Some(&reader),
        None,
    )
    .await?;
    assert_eq!(context.status, StatusCode::OK, "{}", context.body);
    assert_eq!(context.body["resource"]["id"], json!(ids.resource));
    assert_eq!(context.body["open_findings"][0]["id"], json!(ids.finding));
    assert_eq!(
        context.body["recent_actions"][0]["action_id"],
        json!(ids.action)
    );
    assert_eq!(context.body["never_auto_remediate"], false);
    // By name, as every resource route accepts.
    let by_name = send(
        &gw,
        &Method::GET,
        "/api/agent/resource-context/web",
        Some(&reader),
        None,
    )
    .await?;
    assert_eq!(by_name.body["resource"]["id"], json!(ids.resource));

    let catalogue = send(
        &gw,
        &Method::GET,
        &format!("/api/agent/resource-capabilities/{}", ids.resource),
        Some(&reader),
        None,
    )
    .await?;
    assert_eq!(catalogue.status, StatusCode::OK, "{}", catalogue.body);
    let names: Vec<&str> = catalogue.body["capabilities"]
        .as_array()
        .expect("capabilities")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["service.restart", "service.start", "service.stop"]);
    assert_eq!(
        catalogue.body["capabilities"][0]["params_schema"]["properties"]["target"]["enum"],
        json!(["web"])
    );

    for path in [
        "/api/agent/patrol-control/status",
        "/api/agent/operations-loop/status",
    ] {
        let status = send(&gw, &Method::GET, path, Some(&reader), None).await?;
        assert_eq!(status.status, StatusCode::OK, "{}", status.body);
        assert_eq!(
            status.body["active_findings"]["warning"], 1,
            "{}",
            status.body
        );
        assert_eq!(status.body["active_findings"]["total"], 1);
        assert_eq!(status.body["pending_approvals"], 1);
        assert_eq!(status.body["running_runs"], 0);
        assert_eq!(status.body["patrol"]["enabled"], true);
        assert!(status.body["patrol"]["mode"].is_string(), "{}", status.body);
    }
    assert_eq!(undeclared_count(&gw).await?, Vec::<String>::new());
    broker.stop().await?;
    gw.stop().await
}

/// Whether an answer refuses the request for its body (missing, not JSON or not declared JSON).
fn refused_for_the_body(answer: &Answer) -> bool {
    [
        "unsupported_media_type",
        "invalid_json",
        "invalid_request",
        "invalid_finding_request",
        "invalid_chat_request",
    ]
    .contains(&answer.code())
}

/// Every operation's documented `requestBody.required` is what the route does: a route whose
/// body is required refuses a request without one (415 without a content type, a body error
/// with an empty JSON body), and a route documented without a body, or with an optional one,
/// takes a request without one (it may refuse it for other reasons, never for its body).
#[tokio::test]
async fn every_documented_body_requirement_is_the_routes() -> anyhow::Result<()> {
    let pve = FakePve::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &pve_spec()).await?;
    let gw = TestGateway::start().await?;
    let broker = TestActionBroker::start(&gw, &gw.state_dir.join("broker"), &[]).await?;
    let store = gw.db.store().clone();
    let ids = seed(&gw, &store, &TenantId::default_tenant(), "a", &pve).await?;
    let b = TenantId::new("tenant-b")?;
    pulse_store::tenants::create(&store, &b, "Tenant B").await?;
    let owner = gw.db.owner_client().await?;
    let platform = pulse_store::platform::issue(&owner, "contract")
        .await?
        .secret
        .expose()
        .to_owned();
    let document = send(&gw, &Method::GET, "/api/openapi.json", None, None).await?;
    let mut tokens = Tokens {
        gw: &gw,
        by_scopes: BTreeMap::new(),
    };
    let (mut required, mut optional, mut none) = (0, 0, 0);
    for op in operations(&document.body) {
        let documented = &document.body["paths"][&op.path][op.method.as_str().to_ascii_lowercase()]
            ["requestBody"];
        let (path, token) = if op.path.starts_with("/api/platform/") {
            (op.path.replace("{id}", b.as_str()), Some(platform.clone()))
        } else if op.public {
            (ids.fill(&op.path), None)
        } else {
            let scopes: BTreeSet<Scope> = op.scopes.iter().copied().collect();
            (ids.fill(&op.path), Some(tokens.with(scopes).await?))
        };
        let what = format!("{} {} ({})", op.method, op.path, op.name);
        let bare = send(&gw, &op.method, &path, token.as_deref(), None).await?;
        let mut request = gw
            .http
            .request(op.method.clone(), gw.url(&path))
            .header("content-type", "application/json");
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        let status = response.status();
        let streaming = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let empty = Answer {
            status,
            body: if streaming {
                Value::Null
            } else {
                serde_json::from_str(&response.text().await?).unwrap_or(Value::Null)
            },
        };
        match documented["required"].as_bool() {
            Some(true) => {
                required += 1;
                assert_eq!(
                    (bare.status, bare.code()),
                    (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
                    "{what}: documented as requiring a body, but without one: {}",
                    bare.body
                );
                assert!(
                    empty.status == StatusCode::BAD_REQUEST && refused_for_the_body(&empty),
                    "{what}: documented as requiring a body, but with an empty one: {} {}",
                    empty.status,
                    empty.body
                );
            }
            Some(false) | None => {
                if documented.is_null() {
                    none += 1;
                } else {
                    optional += 1;
                }
                for answer in [&bare, &empty] {
                    assert!(
                        !refused_for_the_body(answer),
                        "{what}: documented as taking no body or an optional one, but refused \
                         without one: {} {}",
                        answer.status,
                        answer.body
                    );
                    assert!(
                        answer.status != StatusCode::UNAUTHORIZED
                            && answer.status != StatusCode::FORBIDDEN,
                        "{what}: the check did not reach the route: {}",
                        answer.body
                    );
                }
            }
        }
    }
    println!("body requirements: {required} required, {optional} optional, {none} without a body");
    assert!(required > 0 && optional > 0 && none > 0);
    assert_eq!(undeclared_count(&gw).await?, Vec::<String>::new());
    broker.stop().await?;
    gw.stop().await
}
