//! Patrol readiness over the real Postgres: the stored preflight outcome per tenant, tenant
//! isolation, and the gate that combines settings, keys and the last preflight.

use chrono::{Duration, Utc};
use pulse_domain::TenantId;
use pulse_domain::patrol::readiness::{PreflightRecord, TurnTransport};
use pulse_domain::patrol::status::{BlockedCause, CheckStatus, ReadinessCheckId};
use pulse_store::patrol_readiness::{self, MAX_PREFLIGHT_TENANTS};
use pulse_store::settings::{self, ConfigLayer, MasterKey};
use pulse_store::tenants;
use pulse_test_support::db::TestDb;
use serde_json::json;

async fn setup() -> anyhow::Result<(TestDb, TenantId, TenantId)> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    tenants::create(db.store(), &acme, "Acme").await?;
    tenants::create(db.store(), &globex, "Globex").await?;
    Ok((db, acme, globex))
}

fn record(ok: bool, cause: Option<&str>) -> PreflightRecord {
    PreflightRecord {
        route: "openai:gpt-4.1-mini".to_owned(),
        model: "gpt-4.1-mini".to_owned(),
        base_url: None,
        ok,
        tool_call_observed: ok,
        tool_calls_recovered: 0,
        cause: cause.map(str::to_owned),
        summary: "the provider rejected the API key".to_owned(),
        recommendation: Some("check the API key".to_owned()),
        action: Some("/settings/pulse-intelligence/provider".to_owned()),
        // Postgres keeps microseconds.
        checked_at: Utc::now().with_timezone(&Utc) - Duration::seconds(1),
        transport: ok.then_some(TurnTransport::Buffered),
    }
}

fn truncate(mut r: PreflightRecord) -> PreflightRecord {
    let micros = r.checked_at.timestamp_micros();
    r.checked_at = chrono::DateTime::from_timestamp_micros(micros).unwrap();
    r
}

#[tokio::test]
async fn preflight_round_trips_and_stays_in_its_tenant() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let tx = store.tenant_tx(&acme).await?;
    assert_eq!(patrol_readiness::load_preflight(&tx).await?, None);
    let failed = truncate(record(false, Some("auth")));
    patrol_readiness::record_preflight(&tx, &failed).await?;
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    assert_eq!(patrol_readiness::load_preflight(&tx).await?, Some(failed));
    // The next outcome replaces the last one, with the calls it recovered from text.
    let passed = truncate(PreflightRecord {
        tool_calls_recovered: 1,
        ..record(true, None)
    });
    patrol_readiness::record_preflight(&tx, &passed).await?;
    assert_eq!(patrol_readiness::load_preflight(&tx).await?, Some(passed));
    tx.commit().await?;

    let tx = store.tenant_tx(&globex).await?;
    assert_eq!(patrol_readiness::load_preflight(&tx).await?, None);
    tx.commit().await?;

    let ids = patrol_readiness::tenants(store, MAX_PREFLIGHT_TENANTS).await?;
    assert!(ids.contains(&acme) && ids.contains(&globex), "{ids:?}");
    db.cleanup().await
}

#[tokio::test]
async fn the_gate_combines_settings_keys_and_the_last_preflight() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = db.store();
    let config = ConfigLayer::default();
    let key = MasterKey::generate();

    // Nothing configured: blocked on the provider.
    let tx = store.tenant_tx(&acme).await?;
    let blocked = patrol_readiness::gate(&tx, &config, Utc::now())
        .await?
        .expect_err("no route");
    assert_eq!(blocked.cause, BlockedCause::ProviderNotConfigured);

    // A route without a key: still blocked.
    settings::put(&tx, 0, &json!({"patrol_model": "openai:gpt-4.1-mini"}), "t").await?;
    let blocked = patrol_readiness::gate(&tx, &config, Utc::now())
        .await?
        .expect_err("no key");
    assert!(blocked.reason.contains("no API key"), "{}", blocked.reason);

    // A key from config counts.
    let mut with_env = config.clone();
    with_env.environment_keys.insert("openai".to_owned());
    assert!(
        patrol_readiness::gate(&tx, &with_env, Utc::now())
            .await?
            .is_ok()
    );

    // A stored key and no preflight yet: not blocked, tool calling not assessed.
    settings::set_credential(&tx, &key, "openai", "sk-test").await?;
    tx.commit().await?;
    let tx = store.tenant_tx(&acme).await?;
    let checks = patrol_readiness::assess(&tx, &config, Utc::now()).await?;
    assert_eq!(checks[4].id, ReadinessCheckId::ToolCalling);
    assert_eq!(checks[4].status, CheckStatus::NotAssessed);

    // A failed preflight after the key was set blocks with its cause.
    let mut failed = record(false, Some("auth"));
    failed.checked_at = Utc::now();
    patrol_readiness::record_preflight(&tx, &failed).await?;
    let blocked = patrol_readiness::gate(&tx, &config, Utc::now())
        .await?
        .expect_err("auth failed");
    assert_eq!(blocked.cause, BlockedCause::ProviderAuth);
    tx.commit().await?;

    // Replacing the key makes that outcome stale: not blocked until a new preflight says so.
    let tx = store.tenant_tx(&acme).await?;
    settings::set_credential(&tx, &key, "openai", "sk-rotated").await?;
    tx.commit().await?;
    let tx = store.tenant_tx(&acme).await?;
    assert!(
        patrol_readiness::gate(&tx, &config, Utc::now())
            .await?
            .is_ok()
    );
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn config_layer_keeps_keys_out_and_rejects_bad_values() -> anyhow::Result<()> {
    let mut config = pulse_config::AiConfig {
        patrol_model: Some("openai:gpt-4.1-mini".to_owned()),
        ..Default::default()
    };
    config.providers.insert(
        "openai".to_owned(),
        pulse_config::AiProviderConfig {
            api_key: Some(pulse_config::SecretString("sk-env".to_owned())),
            base_url: Some("http://127.0.0.1:9/v1".to_owned()),
            ..Default::default()
        },
    );
    let layer = ConfigLayer::from_config(&config)?;
    assert!(!layer.layer.to_string().contains("sk-env"));
    assert!(layer.environment_keys.contains("openai"));
    let stored = settings::StoredSettings {
        document: json!({}),
        version: 0,
        updated_at: None,
        updated_by: None,
    };
    let resolved = layer.resolve(&stored)?;
    assert_eq!(resolved.base_url("openai"), Some("http://127.0.0.1:9/v1"));
    config.patrol_model = Some("nosuch:model".to_owned());
    let err = ConfigLayer::from_config(&config).unwrap_err();
    assert_eq!(err.field(), "patrol_model");
    Ok(())
}
