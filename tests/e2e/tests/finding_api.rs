//! The operator finding API through the real gateway binary, on findings seeded with
//! `pulse_store::findings::report` in the gateway's database (as Patrol would report them):
//!
//! - every route: list (active / `include_resolved=1`), get with lifecycle, acknowledge, snooze,
//!   dismiss (the `will_fix_later` reminder date in the answer) and its undo, resolve, suppress
//!   (narrow by default, broad only with `allow_broad_scope`) and its undo, note; the token
//!   name recorded as the actor;
//! - stable codes: `invalid_finding_request` naming the field, `finding_not_found`,
//!   `finding_action_not_allowed` with the allowed actions, `missing_scope` for an `ai:chat`
//!   token;
//! - a Patrol regression of an acknowledged (resolved, or dismissed and escalated) finding
//!   clears the acknowledgement;
//! - another tenant's finding is 404; the list defaults to 200 findings and caps at 500.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};
use pulse_domain::finding::{Category, ReportedFinding, Severity};
use pulse_domain::{Scope, TenantId};
use pulse_store::findings;
use pulse_store::tokens::{self, NewToken};
use pulse_store::{Store, TenantTx};
use pulse_test_support::service::TestGateway;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn reported(resource: &str, category: Category, key: &str, severity: Severity) -> ReportedFinding {
    ReportedFinding {
        key: key.to_owned(),
        severity,
        category,
        resource_id: resource.to_owned(),
        resource_name: resource.trim_start_matches("host:").to_owned(),
        resource_type: "host".to_owned(),
        title: format!("{key} on {resource}"),
        description: format!("{key} observed on {resource}"),
        recommendation: "look at the host".to_owned(),
        evidence: "metric above threshold for 20m".to_owned(),
        impact: String::new(),
    }
}

/// Reports `finding` in `tenant` as Patrol would; returns its id.
async fn seed(
    store: &Store,
    tenant: &TenantId,
    finding: &ReportedFinding,
) -> anyhow::Result<String> {
    let tx = store.tenant_tx(tenant).await?;
    let outcome = findings::report(&tx, finding, None, Utc::now()).await?;
    tx.commit().await?;
    Ok(outcome.finding.finding.id.as_hex())
}

async fn get(gw: &TestGateway, token: &str, path: &str) -> anyhow::Result<(StatusCode, Value)> {
    let response = gw.http.get(gw.url(path)).bearer_auth(token).send().await?;
    let status = response.status();
    Ok((status, response.json().await?))
}

async fn post(
    gw: &TestGateway,
    token: &str,
    route: &str,
    body: Value,
) -> anyhow::Result<(StatusCode, Value)> {
    let response = gw
        .http
        .post(gw.url(&format!("/api/ai/patrol/{route}")))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    Ok((status, response.json().await?))
}

/// Posts an action that must succeed; returns the finding from the answer.
async fn act(gw: &TestGateway, token: &str, route: &str, body: Value) -> anyhow::Result<Value> {
    let (status, answer) = post(gw, token, route, body.clone()).await?;
    anyhow::ensure!(
        status == StatusCode::OK,
        "{route} {body} answered {status} {answer}"
    );
    Ok(answer["finding"].clone())
}

/// Asserts an error answer's status and code; returns its message.
fn refused(answer: &(StatusCode, Value), status: u16, code: &str) -> String {
    assert_eq!(
        (answer.0.as_u16(), answer.1["error"].as_str()),
        (status, Some(code)),
        "{}",
        answer.1
    );
    answer.1["message"].as_str().unwrap_or_default().to_owned()
}

async fn finding(gw: &TestGateway, token: &str, id: &str) -> anyhow::Result<Value> {
    let (status, body) = get(gw, token, &format!("/api/ai/patrol/findings/{id}")).await?;
    anyhow::ensure!(status == StatusCode::OK, "get {id}: {status} {body}");
    Ok(body["finding"].clone())
}

async fn listed_ids(gw: &TestGateway, token: &str, query: &str) -> anyhow::Result<Vec<String>> {
    let (status, body) = get(gw, token, &format!("/api/ai/patrol/findings{query}")).await?;
    anyhow::ensure!(status == StatusCode::OK, "list: {status} {body}");
    let ids = body["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(ids)
}

fn time(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("not a time: {value}"))
}

fn last_event(finding: &Value) -> Value {
    finding["lifecycle"]
        .as_array()
        .and_then(|events| events.last().cloned())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn operators_triage_findings_through_every_route() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let ops = gw.create_token("ops", &["ai:execute"]).await?;
    let chat = gw.create_token("chatter", &["ai:chat"]).await?;
    let store = gw.db.store();
    let tenant = TenantId::default_tenant();
    let web_cpu = seed(
        store,
        &tenant,
        &reported(
            "host:web-1",
            Category::Performance,
            "cpu-high",
            Severity::Warning,
        ),
    )
    .await?;
    let web_disk = seed(
        store,
        &tenant,
        &reported(
            "host:web-1",
            Category::Capacity,
            "disk-high",
            Severity::Warning,
        ),
    )
    .await?;
    let db1_disk = seed(
        store,
        &tenant,
        &reported(
            "host:db-1",
            Category::Capacity,
            "disk-high",
            Severity::Warning,
        ),
    )
    .await?;
    let db2_mem = seed(
        store,
        &tenant,
        &reported(
            "host:db-2",
            Category::Capacity,
            "memory-high",
            Severity::Warning,
        ),
    )
    .await?;

    // Reading and acting need ai:execute: an ai:chat token is refused on every route.
    let list = get(&gw, &chat, "/api/ai/patrol/findings").await?;
    refused(&list, 403, "missing_scope");
    let ack = post(&gw, &chat, "acknowledge", json!({"finding_id": web_cpu})).await?;
    assert!(refused(&ack, 403, "missing_scope").contains("ai:execute"));
    let active = listed_ids(&gw, &ops, "").await?;
    assert_eq!(
        active.iter().collect::<BTreeSet<_>>(),
        [&web_cpu, &web_disk, &db1_disk, &db2_mem]
            .into_iter()
            .collect()
    );

    // Get: the record, its lifecycle and what it accepts.
    let (status, body) = get(&gw, &ops, &format!("/api/ai/patrol/findings/{web_cpu}")).await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["finding"]["status"], "active");
    assert_eq!(body["finding"]["lifecycle"][0]["type"], "detected");
    assert!(body["version"].as_i64().is_some());
    assert!(
        body["allowed_actions"]
            .as_array()
            .is_some_and(|a| a.contains(&json!("acknowledge")))
    );

    // Acknowledge records the token name as the actor.
    let acked = act(&gw, &ops, "acknowledge", json!({"finding_id": web_cpu})).await?;
    assert!(acked["acknowledged_at"].is_string(), "{acked}");
    let event = last_event(&acked);
    assert_eq!(
        (event["type"].as_str(), event["metadata"]["actor"].as_str()),
        (Some("acknowledged"), Some("token:ops"))
    );

    // Snooze hides the finding from the active list until the snooze runs out.
    let before = Utc::now();
    let snoozed = act(
        &gw,
        &ops,
        "snooze",
        json!({"finding_id": web_disk, "duration_hours": 2}),
    )
    .await?;
    assert_eq!(snoozed["status"], "snoozed");
    let until = time(&snoozed["snoozed_until"]);
    assert!(until >= before + Duration::hours(2) && until <= Utc::now() + Duration::hours(2));
    assert!(!listed_ids(&gw, &ops, "").await?.contains(&web_disk));
    let bad = post(
        &gw,
        &ops,
        "snooze",
        json!({"finding_id": web_disk, "duration_hours": 0}),
    )
    .await?;
    assert!(refused(&bad, 400, "invalid_finding_request").contains("duration_hours"));

    // Dismiss will_fix_later answers the reminder date, seven days out.
    let before = Utc::now();
    let dismissed = act(
        &gw,
        &ops,
        "dismiss",
        json!({"finding_id": web_cpu, "reason": "will_fix_later", "note": "ticket OPS-12"}),
    )
    .await?;
    assert_eq!(
        (
            dismissed["status"].as_str(),
            dismissed["dismissed_reason"].as_str()
        ),
        (Some("dismissed"), Some("will_fix_later"))
    );
    let remind = time(&dismissed["remind_at"]);
    assert!(
        remind >= before + Duration::days(7) && remind <= Utc::now() + Duration::days(7),
        "{remind}"
    );
    assert_eq!(last_event(&dismissed)["message"], "ticket OPS-12");

    // The state machine refuses acknowledging a dismissed finding and says what it accepts.
    let again = post(&gw, &ops, "acknowledge", json!({"finding_id": web_cpu})).await?;
    let message = refused(&again, 409, "finding_action_not_allowed");
    assert!(
        message.contains("dismissed") && message.contains("dismiss/undo"),
        "{message}"
    );

    // Undo dismiss.
    let undone = act(&gw, &ops, "dismiss/undo", json!({"finding_id": web_cpu})).await?;
    assert_eq!(undone["status"], "active");
    assert!(
        undone.get("dismissed_reason").is_none() && undone.get("remind_at").is_none(),
        "{undone}"
    );
    let not_dismissed = post(&gw, &ops, "dismiss/undo", json!({"finding_id": web_cpu})).await?;
    refused(&not_dismissed, 409, "finding_action_not_allowed");

    // Strict bodies and ids.
    let bad_reason = post(
        &gw,
        &ops,
        "dismiss",
        json!({"finding_id": web_cpu, "reason": "meh"}),
    )
    .await?;
    assert!(refused(&bad_reason, 400, "invalid_finding_request").contains("will_fix_later"));
    let unknown = post(
        &gw,
        &ops,
        "acknowledge",
        json!({"finding_id": web_cpu, "force": true}),
    )
    .await?;
    assert!(refused(&unknown, 400, "invalid_finding_request").contains("force"));
    let missing = post(&gw, &ops, "resolve", json!({"note": "x"})).await?;
    assert!(refused(&missing, 400, "invalid_finding_request").contains("finding_id"));
    let malformed = post(&gw, &ops, "acknowledge", json!({"finding_id": "../etc"})).await?;
    refused(&malformed, 400, "invalid_finding_request");
    let absent = post(
        &gw,
        &ops,
        "acknowledge",
        json!({"finding_id": "00000000deadbeef"}),
    )
    .await?;
    refused(&absent, 404, "finding_not_found");
    let absent = get(&gw, &ops, "/api/ai/patrol/findings/00000000deadbeef").await?;
    refused(&absent, 404, "finding_not_found");
    let bad_query = get(&gw, &ops, "/api/ai/patrol/findings?status=open").await?;
    assert!(refused(&bad_query, 400, "invalid_finding_request").contains("status"));

    // Note.
    let noted = act(
        &gw,
        &ops,
        "findings/note",
        json!({"finding_id": db1_disk, "note": "checked with the DBA"}),
    )
    .await?;
    assert_eq!(noted["user_note"], "checked with the DBA");
    let empty = post(
        &gw,
        &ops,
        "findings/note",
        json!({"finding_id": db1_disk, "note": "  "}),
    )
    .await?;
    refused(&empty, 400, "invalid_finding_request");

    // Suppress is narrow by default: a wildcard side needs allow_broad_scope.
    let broad = post(
        &gw,
        &ops,
        "suppress",
        json!({"resource_id": "*", "category": "capacity"}),
    )
    .await?;
    assert!(refused(&broad, 400, "invalid_finding_request").contains("allow_broad_scope"));
    let everything = post(
        &gw,
        &ops,
        "suppress",
        json!({"resource_id": "*", "category": "*", "allow_broad_scope": true}),
    )
    .await?;
    refused(&everything, 400, "invalid_finding_request");
    let outside = post(
        &gw,
        &ops,
        "suppress",
        json!({"finding_id": db2_mem, "resource_id": "host:db-1", "category": "capacity"}),
    )
    .await?;
    refused(&outside, 400, "invalid_finding_request");
    let nothing = post(
        &gw,
        &ops,
        "suppress",
        json!({"resource_id": "host:none", "category": "capacity"}),
    )
    .await?;
    refused(&nothing, 404, "finding_not_found");
    let suppressed = act(
        &gw,
        &ops,
        "suppress",
        json!({"resource_id": "host:db-1", "category": "capacity"}),
    )
    .await?;
    assert_eq!(
        (suppressed["id"].as_str(), suppressed["status"].as_str()),
        (Some(db1_disk.as_str()), Some("suppressed"))
    );
    assert_eq!(
        finding(&gw, &ops, &db2_mem).await?["status"],
        "active",
        "the narrow rule left db-2 alone"
    );
    let lifted = act(&gw, &ops, "suppress/undo", json!({"finding_id": db1_disk})).await?;
    assert_eq!(lifted["status"], "active");

    // A broad rule with allow_broad_scope suppresses every open capacity finding; undo on one
    // of them releases them all.
    let broad = act(&gw, &ops, "suppress", json!({"finding_id": db1_disk, "resource_id": "*", "category": "capacity", "allow_broad_scope": true})).await?;
    assert_eq!(broad["status"], "suppressed");
    for id in [&db2_mem, &web_disk] {
        assert_eq!(
            finding(&gw, &ops, id).await?["status"],
            "suppressed",
            "{id}"
        );
    }
    assert_eq!(
        finding(&gw, &ops, &web_cpu).await?["status"],
        "active",
        "performance is outside the rule"
    );
    act(&gw, &ops, "suppress/undo", json!({"finding_id": db2_mem})).await?;
    for id in [&db1_disk, &db2_mem, &web_disk] {
        assert_eq!(finding(&gw, &ops, id).await?["status"], "active", "{id}");
    }

    // Resolve with a note; resolved findings leave the default list but not the full one.
    let resolved = act(
        &gw,
        &ops,
        "resolve",
        json!({"finding_id": web_cpu, "note": "replaced the fan"}),
    )
    .await?;
    assert_eq!(
        (
            resolved["status"].as_str(),
            resolved["resolve_reason"].as_str(),
            resolved["auto_resolved"].as_bool()
        ),
        (Some("resolved"), Some("replaced the fan"), Some(false))
    );
    let ack_resolved = post(&gw, &ops, "acknowledge", json!({"finding_id": web_cpu})).await?;
    assert!(refused(&ack_resolved, 409, "finding_action_not_allowed").contains("allowed: note"));
    assert!(!listed_ids(&gw, &ops, "").await?.contains(&web_cpu));
    assert!(
        listed_ids(&gw, &ops, "?include_resolved=1")
            .await?
            .contains(&web_cpu)
    );

    // A regression clears the acknowledgement: of a resolved finding reported again, and of a
    // dismissed one reported at a higher severity.
    act(&gw, &ops, "acknowledge", json!({"finding_id": db2_mem})).await?;
    act(&gw, &ops, "resolve", json!({"finding_id": db2_mem})).await?;
    seed(
        store,
        &tenant,
        &reported(
            "host:db-2",
            Category::Capacity,
            "memory-high",
            Severity::Warning,
        ),
    )
    .await?;
    let regressed = finding(&gw, &ops, &db2_mem).await?;
    assert_eq!(regressed["status"], "active");
    assert!(regressed.get("acknowledged_at").is_none(), "{regressed}");
    assert_eq!(last_event(&regressed)["type"], "regressed");

    act(&gw, &ops, "acknowledge", json!({"finding_id": db1_disk})).await?;
    act(
        &gw,
        &ops,
        "dismiss",
        json!({"finding_id": db1_disk, "reason": "expected_behavior"}),
    )
    .await?;
    seed(
        store,
        &tenant,
        &reported(
            "host:db-1",
            Category::Capacity,
            "disk-high",
            Severity::Critical,
        ),
    )
    .await?;
    let escalated = finding(&gw, &ops, &db1_disk).await?;
    assert_eq!(
        (escalated["status"].as_str(), escalated["severity"].as_str()),
        (Some("active"), Some("critical"))
    );
    assert!(escalated.get("acknowledged_at").is_none(), "{escalated}");
    assert!(escalated.get("dismissed_reason").is_none(), "{escalated}");

    gw.stop().await
}

#[tokio::test]
async fn another_tenants_finding_is_not_found() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let ops_a = gw.create_token("ops", &["ai:execute"]).await?;
    let store = gw.db.store();
    let tenant_b = TenantId::new(format!(
        "b{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    ))?;
    pulse_store::tenants::create(store, &tenant_b, "Tenant B").await?;
    let tx: TenantTx = store.tenant_tx(&tenant_b).await?;
    let ops_b = tokens::issue(
        &tx,
        NewToken {
            name: "ops-b".to_owned(),
            scopes: BTreeSet::from([Scope::AiExecute]),
            expires_at: None,
            created_by: None,
        },
    )
    .await?;
    tx.commit().await?;
    let theirs = seed(
        store,
        &tenant_b,
        &reported(
            "host:b-1",
            Category::Security,
            "ssh-open",
            Severity::Critical,
        ),
    )
    .await?;

    let (status, body) = get(
        &gw,
        ops_b.secret.expose(),
        &format!("/api/ai/patrol/findings/{theirs}"),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{body}");
    let read = get(&gw, &ops_a, &format!("/api/ai/patrol/findings/{theirs}")).await?;
    refused(&read, 404, "finding_not_found");
    for (route, body) in [
        ("acknowledge", json!({"finding_id": theirs})),
        (
            "dismiss",
            json!({"finding_id": theirs, "reason": "not_an_issue"}),
        ),
        (
            "suppress",
            json!({"finding_id": theirs, "resource_id": "host:b-1", "category": "security"}),
        ),
        (
            "findings/note",
            json!({"finding_id": theirs, "note": "mine now"}),
        ),
    ] {
        let answer = post(&gw, &ops_a, route, body).await?;
        refused(&answer, 404, "finding_not_found");
    }
    let nothing = post(
        &gw,
        &ops_a,
        "suppress",
        json!({"resource_id": "host:b-1", "category": "security"}),
    )
    .await?;
    refused(&nothing, 404, "finding_not_found");
    assert!(
        listed_ids(&gw, &ops_a, "?include_resolved=1")
            .await?
            .is_empty()
    );
    let still = finding(&gw, ops_b.secret.expose(), &theirs).await?;
    assert_eq!(still["status"], "active");
    assert!(
        still.get("acknowledged_at").is_none() && still["user_note"] == "",
        "{still}"
    );
    gw.stop().await
}

#[tokio::test]
async fn the_list_defaults_to_200_and_caps_at_500() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let ops = gw.create_token("ops", &["ai:execute"]).await?;
    let store = gw.db.store();
    let tx = store.tenant_tx(&TenantId::default_tenant()).await?;
    let now = Utc::now();
    for i in 0..501 {
        let r = reported(
            &format!("host:h-{i:03}"),
            Category::Capacity,
            "disk-high",
            Severity::Warning,
        );
        findings::report(&tx, &r, None, now + Duration::milliseconds(i)).await?;
    }
    tx.commit().await?;

    let count = |query: &'static str| {
        let gw = &gw;
        let ops = &ops;
        async move {
            let (status, body) = get(gw, ops, &format!("/api/ai/patrol/findings{query}")).await?;
            anyhow::ensure!(status == StatusCode::OK, "{query}: {status} {body}");
            let listed = body["findings"].as_array().map_or(0, Vec::len);
            anyhow::ensure!(body["count"] == listed, "{query}: count {}", body["count"]);
            anyhow::Ok((listed, body["limit"].clone()))
        }
    };
    assert_eq!(count("").await?, (200, json!(200)));
    assert_eq!(count("?include_resolved=1").await?, (200, json!(200)));
    assert_eq!(
        count("?include_resolved=1&limit=1000").await?,
        (500, json!(500))
    );
    assert_eq!(count("?limit=7").await?, (7, json!(7)));
    // Most recently seen first.
    let first = listed_ids(&gw, &ops, "?limit=1").await?;
    let newest = findings::list(
        &store.tenant_tx(&TenantId::default_tenant()).await?,
        findings::ListFilter::Active,
        Some(1),
        Utc::now(),
    )
    .await?;
    assert_eq!(first, vec![newest[0].finding.id.as_hex()]);
    assert_eq!(newest[0].finding.resource_id, "host:h-500");
    for bad in [
        "?limit=0",
        "?limit=-3",
        "?limit=many",
        "?include_resolved=maybe",
    ] {
        let answer = get(&gw, &ops, &format!("/api/ai/patrol/findings{bad}")).await?;
        refused(&answer, 400, "invalid_finding_request");
    }
    gw.stop().await
}
