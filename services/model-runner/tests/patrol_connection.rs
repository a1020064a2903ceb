//! The connection the model-runner builds from a tenant's stored settings carries the provider's
//! `tool_calls_from_text` setting, which the agent loop is then given: `auto` is on for a local
//! model server and off for a hosted API; `on` and `off` are the operator's word.

use std::collections::BTreeMap;

use pulse_domain::TenantId;
use pulse_model_runner::patrol_connection::patrol_connection;
use pulse_store::settings::{self, ConfigLayer, MasterKey};
use pulse_store::tenants;
use pulse_test_support::db::TestDb;
use serde_json::{Value, json};

async fn recovers_text_calls(
    db: &TestDb,
    tenant: &TenantId,
    version: i64,
    document: &Value,
) -> anyhow::Result<bool> {
    let tx = db.store().tenant_tx(tenant).await?;
    settings::put(&tx, version, document, "test").await?;
    let connection = patrol_connection(
        &tx,
        &ConfigLayer::default(),
        &BTreeMap::new(),
        &MasterKey::generate(),
    )
    .await?;
    tx.commit().await?;
    Ok(connection.connection.tool_calls_from_text())
}

#[tokio::test]
async fn the_provider_setting_decides_with_auto_by_route_class() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let tenant = TenantId::new("text-calls")?;
    tenants::create(db.store(), &tenant, "Text calls").await?;
    let local = |setting: Value| {
        json!({
            "patrol_model": "llamacpp:qwen2.5-coder-1.5b",
            "providers": {"llamacpp": {
                "base_url": "http://127.0.0.1:8080/v1",
                "tool_calls_from_text": setting
            }}
        })
    };
    let hosted = |setting: Value| {
        json!({
            "patrol_model": "openai:gpt-4o-mini",
            "providers": {"openai": {"tool_calls_from_text": setting}}
        })
    };
    let cases = [
        (local(Value::Null), true),
        (local(json!("off")), false),
        (hosted(Value::Null), false),
        (hosted(json!("auto")), false),
        (hosted(json!("on")), true),
    ];
    for (version, (document, expected)) in (0..).zip(cases) {
        assert_eq!(
            recovers_text_calls(&db, &tenant, version, &document).await?,
            expected,
            "{document}"
        );
    }
    db.cleanup().await
}
