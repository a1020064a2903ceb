//! `/api/settings/ai` through the real gateway binary: admin only, keys write-only and encrypted
//! at rest, bad input refused with stable codes, optimistic versions, and one
//! `events.settings.changed` per save saying whether Patrol's route moved.

use std::time::Duration;

use futures::StreamExt;
use pulse_domain::ai_settings::{AUTOPILOT_ACK_VERSION, SettingsChanged};
use pulse_domain::{Scope, TenantId};
use pulse_store::tokens::{self, NewToken};
use pulse_test_support::service::{ANY_PORT, ServiceProcess, TestGateway, small_streams_env};
use pulse_test_support::wait;
use reqwest::StatusCode;
use serde_json::{Value, json};

const SECRET: &str = "sk-e2e-plaintext-marker-6d1f0c";

async fn send(
    gw: &TestGateway,
    method: reqwest::Method,
    token: &str,
    body: Option<reqwest::Body>,
    if_match: Option<&str>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut request = gw
        .http
        .request(method, gw.url("/api/settings/ai"))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body);
    }
    if let Some(version) = if_match {
        request = request.header("if-match", version);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((status, value))
}

async fn get(gw: &TestGateway, token: &str) -> anyhow::Result<(StatusCode, Value)> {
    send(gw, reqwest::Method::GET, token, None, None).await
}

async fn put(gw: &TestGateway, token: &str, body: Value) -> anyhow::Result<(StatusCode, Value)> {
    send(
        gw,
        reqwest::Method::PUT,
        token,
        Some(body.to_string().into()),
        None,
    )
    .await
}

async fn next_event(
    events: &mut async_nats::Subscriber,
) -> anyhow::Result<pulse_bus::envelope::Decoded<SettingsChanged>> {
    let message = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .map_err(|_| anyhow::anyhow!("no events.settings.changed within 10s"))?
        .ok_or_else(|| anyhow::anyhow!("subscription closed"))?;
    Ok(pulse_bus::envelope::decode::<SettingsChanged>(
        message.headers.as_ref(),
        &message.payload,
    )?)
}

#[tokio::test]
async fn admin_reads_and_writes_keys_stay_write_only_and_events_follow_saves() -> anyhow::Result<()>
{
    let gw = TestGateway::start().await?;
    let tenant = TenantId::default_tenant();
    let nats = async_nats::connect(pulse_test_support::nats::nats_url()).await?;
    let subjects = pulse_bus::Subjects::try_new(Some(&gw.prefix))?;
    let mut events = nats
        .subscribe(subjects.event(&tenant, "settings", "changed"))
        .await?;
    nats.flush().await?;

    let (status, initial) = get(&gw, &gw.admin_token).await?;
    assert_eq!(status, StatusCode::OK, "{initial}");
    assert_eq!(initial["version"], 0);
    assert_eq!(initial["patrol_preflight"], Value::Null);
    assert_eq!(initial["preflight_state"], "not_run");
    assert_eq!(initial["providers"]["openai"]["configured"], false);

    // A Patrol route change with a key for its provider.
    let (status, saved) = put(
        &gw,
        &gw.admin_token,
        json!({
            "patrol_model": "openai:gpt-4.1-mini",
            "providers": {"openai": {"api_key": SECRET, "base_url": "http://127.0.0.1:9/v1"}}
        }),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{saved}");
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["providers"]["openai"]["configured"], true);
    assert_eq!(saved["providers"]["openai"]["key_source"], "settings");
    assert!(!saved.to_string().contains(SECRET));
    let first = next_event(&mut events).await?;
    assert_eq!(
        first.payload,
        SettingsChanged {
            version: 1,
            patrol_route_changed: true
        }
    );

    // A routine save: the Patrol transport is unchanged.
    let (status, saved) = put(
        &gw,
        &gw.admin_token,
        json!({"chat_model": "groq:llama-3.3-70b", "patrol_interval_minutes": 30,
               "budgets": {"daily_usd": "5.00"}}),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{saved}");
    let second = next_event(&mut events).await?;
    assert_eq!(
        second.payload,
        SettingsChanged {
            version: 2,
            patrol_route_changed: false
        }
    );

    let (status, read) = get(&gw, &gw.admin_token).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read["version"], 2);
    assert_eq!(read["patrol_model"], "openai:gpt-4.1-mini");
    assert_eq!(read["chat_model"], "groq:llama-3.3-70b");
    assert_eq!(read["patrol_interval_minutes"], 30);
    assert_eq!(read["budgets"]["daily_usd"], "5.00");
    assert_eq!(
        read["providers"]["openai"]["base_url"],
        "http://127.0.0.1:9/v1"
    );
    assert!(!read.to_string().contains(SECRET));

    // Exactly one event per save was enqueued (and so published once).
    let owner = gw.db.owner_client().await?;
    let outbox = owner
        .query(
            "SELECT payload FROM outbox WHERE subject = $1 ORDER BY id",
            &[&subjects.event(&tenant, "settings", "changed")],
        )
        .await?;
    let payloads: Vec<Value> = outbox.iter().map(|row| row.get(0)).collect();
    assert_eq!(
        payloads,
        vec![
            json!({"version": 1, "patrol_route_changed": true}),
            json!({"version": 2, "patrol_route_changed": false})
        ]
    );

    // The plaintext key is in no column of the settings, credential, audit or outbox rows.
    let hex_secret = hex::encode(SECRET);
    for table in [
        "ai_settings",
        "provider_credentials",
        "audit_events",
        "outbox",
    ] {
        let rows = owner
            .query(&format!("SELECT t::text FROM {table} t"), &[])
            .await?;
        assert!(!rows.is_empty(), "{table} has rows");
        for row in rows {
            let text: String = row.get(0);
            assert!(!text.contains(SECRET), "{table}: {text}");
            assert!(!text.contains(&hex_secret), "{table}");
        }
    }
    // The audit rows name the changed fields.
    let audit = owner
        .query(
            "SELECT payload FROM audit_events WHERE kind = 'settings.ai.updated' ORDER BY seq",
            &[],
        )
        .await?;
    let changed: Vec<Value> = audit
        .iter()
        .map(|row| row.get::<_, Value>(0)["changed_fields"].clone())
        .collect();
    assert_eq!(
        changed,
        vec![
            json!([
                "patrol_model",
                "providers.openai.api_key",
                "providers.openai.base_url"
            ]),
            json!(["budgets.daily_usd", "chat_model", "patrol_interval_minutes"])
        ]
    );

    // Clearing the key of Patrol's provider is a Patrol transport change.
    let (status, cleared) = put(
        &gw,
        &gw.admin_token,
        json!({"providers": {"openai": {"api_key": ""}}}),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{cleared}");
    assert_eq!(cleared["providers"]["openai"]["configured"], false);
    assert_eq!(
        next_event(&mut events).await?.payload,
        SettingsChanged {
            version: 3,
            patrol_route_changed: true
        }
    );
    let remaining: i64 = owner
        .query_one("SELECT count(*) FROM provider_credentials", &[])
        .await?
        .get(0);
    assert_eq!(remaining, 0);

    // A writer holding a stale version is refused and changes nothing.
    let (status, conflict) = send(
        &gw,
        reqwest::Method::PUT,
        &gw.admin_token,
        Some(json!({"model": "openai:gpt-5"}).to_string().into()),
        Some("\"2\""),
    )
    .await?;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["error"], "settings_version_conflict");
    let (status, current) = send(
        &gw,
        reqwest::Method::PUT,
        &gw.admin_token,
        Some(json!({"model": "openai:gpt-5"}).to_string().into()),
        Some("\"3\""),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{current}");
    assert_eq!(current["version"], 4);

    // Non-admin tokens are refused.
    let store = gw.db.store();
    let tx = store.tenant_tx(&tenant).await?;
    let reader = tokens::issue(
        &tx,
        NewToken {
            name: "reader".to_owned(),
            scopes: [Scope::MonitoringRead].into_iter().collect(),
            expires_at: None,
            created_by: None,
        },
    )
    .await?;
    tx.commit().await?;
    let reader = reader.secret.expose().to_owned();
    let (status, body) = get(&gw, &reader).await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["error"], "missing_scope");
    let (status, body) = put(&gw, &reader, json!({"model": "openai:x"})).await?;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    drop(events);
    gw.stop().await
}

#[tokio::test]
async fn bad_input_gets_stable_codes_and_changes_nothing() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let cases: Vec<(Value, StatusCode, &str, &str)> = vec![
        (
            json!({"modle": "openai:x"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "modle",
        ),
        (
            json!({"patrol_model": "gpt-4.1"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "patrol_model",
        ),
        (
            json!({"model": "nosuch:model"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "model",
        ),
        (
            json!({"providers": {"openai": {"base_url": "ftp://x"}}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "providers.openai.base_url",
        ),
        (
            json!({"providers": {"openai": {"keep_alive": "10m"}}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "providers.openai.keep_alive",
        ),
        (
            json!({"providers": {"ollama": {"streaming": "sometimes"}}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "providers.ollama.streaming",
        ),
        (
            json!({"providers": {"ollama": {"request_timeout_seconds": 2}}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "providers.ollama.request_timeout_seconds",
        ),
        (
            json!({"budgets": {"monthly_usd": "-3"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "budgets.monthly_usd",
        ),
        (
            json!({"autonomy_level": "full"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "autopilot_not_acknowledged",
            "autonomy_level",
        ),
        (
            json!({"autonomy_level": "full", "autopilot_acknowledgement":
                {"version": AUTOPILOT_ACK_VERSION + 1, "acknowledged_by": "ops", "at": "2026-11-29T10:00:00Z"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "autopilot_not_acknowledged",
            "autonomy_level",
        ),
    ];
    for (body, status_expected, code, field) in cases {
        let (status, answer) = put(&gw, &gw.admin_token, body.clone()).await?;
        assert_eq!(status, status_expected, "{body}: {answer}");
        assert_eq!(answer["error"], code, "{body}: {answer}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(field)),
            "{body}: {answer}"
        );
    }
    let (status, answer) = send(
        &gw,
        reqwest::Method::PUT,
        &gw.admin_token,
        Some("{\"model\": ".into()),
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"], "invalid_json");
    let huge = format!("{{\"model\": \"openai:{}\"}}", "x".repeat(2 * 1024 * 1024));
    let (status, answer) = send(
        &gw,
        reqwest::Method::PUT,
        &gw.admin_token,
        Some(huge.into()),
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_eq!(answer["error"], "payload_too_large");

    // Full autonomy with a current acknowledgement is accepted.
    let (status, answer) = put(
        &gw,
        &gw.admin_token,
        json!({"autonomy_level": "full", "autopilot_acknowledgement":
            {"version": AUTOPILOT_ACK_VERSION, "acknowledged_by": "ops", "at": "2026-11-29T10:00:00Z"}}),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["autonomy_level"], "full");
    assert_eq!(
        answer["version"], 1,
        "refused saves did not bump the version"
    );
    gw.stop().await
}

/// A second gateway on `gw`'s database, state directory and subject prefix, with extra
/// environment. Returns the process and, when `wait_ready`, its base URL once it is ready.
async fn gateway_with_env(
    gw: &TestGateway,
    extra: &[(&str, &str)],
    log_name: &str,
    wait_ready: bool,
) -> anyhow::Result<(ServiceProcess, String)> {
    let mut env = vec![
        (
            "PULSE_DATABASE_URL".to_owned(),
            gw.db.owner_url().to_owned(),
        ),
        (
            "PULSE_NATS_URL".to_owned(),
            pulse_test_support::nats::nats_url(),
        ),
        ("PULSE_NATS__SUBJECT_PREFIX".to_owned(), gw.prefix.clone()),
        (
            "PULSE_STATE_DIR".to_owned(),
            gw.state_dir.display().to_string(),
        ),
        ("PULSE_GATEWAY__LISTEN".to_owned(), ANY_PORT.to_owned()),
    ];
    env.extend(small_streams_env());
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    let mut process = ServiceProcess::spawn("pulse-gateway", &env, &gw.state_dir.join(log_name))?;
    if !wait_ready {
        // A gateway meant to refuse its configuration may exit before it listens.
        return Ok((process, String::new()));
    }
    let url = process.wait_base_url().await?;
    process.wait_ready(&gw.http, &url).await?;
    Ok((process, url))
}

async fn call(
    gw: &TestGateway,
    url: &str,
    method: reqwest::Method,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut request = gw
        .http
        .request(method, format!("{url}/api/settings/ai"))
        .bearer_auth(&gw.admin_token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    Ok((response.status(), response.json().await?))
}

#[tokio::test]
async fn config_and_environment_fill_what_the_tenant_did_not_set() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let env_key = "sk-env-plaintext-marker-41aa";
    let (headless, url) = gateway_with_env(
        &gw,
        &[
            ("PULSE_AI__PATROL_MODEL", "openai:gpt-4.1-mini"),
            ("PULSE_AI__PATROL_INTERVAL_MINUTES", "45"),
            ("PULSE_AI__PROVIDERS__OPENAI__API_KEY", env_key),
            (
                "PULSE_AI__PROVIDERS__OPENAI__BASE_URL",
                "http://127.0.0.1:9/v1",
            ),
        ],
        "headless.log",
        true,
    )
    .await?;
    let (status, read) = call(&gw, &url, reqwest::Method::GET, None).await?;
    assert_eq!(status, StatusCode::OK, "{read}");
    assert_eq!(read["patrol_model"], "openai:gpt-4.1-mini");
    assert_eq!(read["patrol_interval_minutes"], 45);
    assert_eq!(read["providers"]["openai"]["configured"], true);
    assert_eq!(read["providers"]["openai"]["key_source"], "environment");
    assert_eq!(
        read["providers"]["openai"]["base_url"],
        "http://127.0.0.1:9/v1"
    );
    assert!(!read.to_string().contains(env_key));

    // Stored values override config; resetting one with null falls back to config.
    let (_, saved) = call(
        &gw,
        &url,
        reqwest::Method::PUT,
        Some(json!({"patrol_interval_minutes": 20, "providers": {"openai": {"api_key": "sk-tenant"}}})),
    )
    .await?;
    assert_eq!(saved["patrol_interval_minutes"], 20);
    assert_eq!(saved["providers"]["openai"]["key_source"], "settings");
    let (_, reset) = call(
        &gw,
        &url,
        reqwest::Method::PUT,
        Some(json!({"patrol_interval_minutes": null, "providers": {"openai": {"api_key": null}}})),
    )
    .await?;
    assert_eq!(reset["patrol_interval_minutes"], 45);
    assert_eq!(reset["providers"]["openai"]["key_source"], "environment");
    // The plain gateway has no config layer: the defaults show through.
    let (_, plain) = call(&gw, &gw.url, reqwest::Method::GET, None).await?;
    assert_eq!(plain["patrol_interval_minutes"], 360);
    assert_eq!(plain["patrol_model"], Value::Null);
    assert_eq!(plain["providers"]["openai"]["configured"], false);
    let status = headless.stop(Duration::from_secs(10)).await?;
    assert!(status.success(), "headless gateway exited with {status}");

    // A config value that fails validation stops the gateway with the field named.
    let (refused, _) = gateway_with_env(
        &gw,
        &[("PULSE_AI__PATROL_MODEL", "nosuch:model")],
        "refused.log",
        false,
    )
    .await?;
    let named = wait::until(Duration::from_secs(30), "the startup refusal", || {
        let log = refused.log_tail(50);
        async move { log.contains("patrol_model").then_some(()) }
    })
    .await;
    let log = refused.log_tail(50);
    let status = refused.stop(Duration::from_secs(10)).await?;
    named.map_err(|e| anyhow::anyhow!("{e}; log:\n{log}"))?;
    assert!(!status.success(), "{log}");
    gw.stop().await
}

#[tokio::test]
async fn provider_options_round_trip_and_reset() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let options = json!({
        "streaming": "off", "tool_calls_from_text": "on", "request_timeout_seconds": 900,
        "keep_alive": "-1m", "num_ctx": 8192, "think": false
    });
    let (status, saved) = put(
        &gw,
        &gw.admin_token,
        json!({"providers": {"ollama": options}}),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{saved}");
    let (_, view) = get(&gw, &gw.admin_token).await?;
    let ollama = &view["providers"]["ollama"];
    for (field, value) in options.as_object().into_iter().flatten() {
        assert_eq!(&ollama[field], value, "{field}: {ollama}");
    }
    // Other providers keep the defaults.
    assert_eq!(view["providers"]["openai"]["streaming"], "auto", "{view}");
    assert_eq!(
        view["providers"]["openai"]["request_timeout_seconds"],
        Value::Null
    );

    // null resets one field to the default; the others stay.
    let (status, _) = put(
        &gw,
        &gw.admin_token,
        json!({"providers": {"ollama": {"streaming": null, "num_ctx": null}}}),
    )
    .await?;
    assert_eq!(status, StatusCode::OK);
    let (_, view) = get(&gw, &gw.admin_token).await?;
    let ollama = &view["providers"]["ollama"];
    assert_eq!(ollama["streaming"], "auto", "{ollama}");
    assert_eq!(ollama["num_ctx"], Value::Null, "{ollama}");
    assert_eq!(ollama["keep_alive"], "-1m", "{ollama}");
    gw.stop().await
}
