//! Row-level security keeps tenants apart even when a query forgets its tenant filter.

use std::collections::BTreeSet;

use pulse_domain::{Scope, TenantId};
use pulse_store::tokens::{self, NewToken};
use pulse_store::{tenants, users};
use pulse_test_support::db::TestDb;

fn tenant(id: &str) -> TenantId {
    TenantId::new(id).unwrap()
}

async fn seed(db: &TestDb, id: &TenantId, username: &str) -> anyhow::Result<()> {
    let store = db.store();
    tenants::create(store, id, id.as_str()).await?;
    let tx = store.tenant_tx(id).await?;
    users::create(&tx, username, users::UserRole::Admin).await?;
    tokens::issue(
        &tx,
        NewToken {
            name: format!("{username}-token"),
            scopes: BTreeSet::from([Scope::MonitoringRead]),
            expires_at: None,
            created_by: None,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn unfiltered_select_through_tenant_tx_sees_only_that_tenant() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    seed(&db, &a, "alice").await?;
    seed(&db, &b, "bob").await?;

    let tx = db.store().tenant_tx(&a).await?;
    // Deliberately no WHERE clause: row-level security is the only filter.
    for (table, column) in [
        ("tenants", "id"),
        ("users", "tenant_id"),
        ("api_tokens", "tenant_id"),
        ("audit_events", "tenant_id"),
    ] {
        let rows = tx
            .client()
            .query(&format!("SELECT {column} FROM {table}"), &[])
            .await?;
        let seen: BTreeSet<String> = rows.iter().map(|r| r.get(0)).collect();
        assert!(
            !seen.contains("tenant-b"),
            "{table} leaked tenant-b rows to tenant-a: {seen:?}"
        );
    }
    let names: Vec<String> = tx
        .client()
        .query("SELECT username FROM users", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(names, vec!["alice".to_owned()]);
    tx.commit().await?;

    // The owner (superuser) sees both: the rows exist, RLS hid them.
    let owner = db.owner_client().await?;
    let total: i64 = owner
        .query_one("SELECT count(*) FROM users", &[])
        .await?
        .get(0);
    assert_eq!(total, 2);
    db.cleanup().await
}

#[tokio::test]
async fn a_tenant_cannot_write_rows_for_another() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    seed(&db, &a, "alice").await?;
    seed(&db, &b, "bob").await?;
    let tx = db.store().tenant_tx(&a).await?;
    let err = tx
        .client()
        .execute(
            "INSERT INTO users (id, tenant_id, username, role) VALUES (gen_random_uuid(), 'tenant-b', 'mallory', 'admin')",
            &[],
        )
        .await
        .expect_err("insert for another tenant must be refused");
    let message = err
        .as_db_error()
        .map(|e| e.message().to_owned())
        .unwrap_or_default();
    assert!(
        message.contains("row-level security"),
        "unexpected error: {err:?}"
    );
    drop(tx);
    // Updates cannot reach the other tenant either.
    let tx = db.store().tenant_tx(&a).await?;
    let changed = tx
        .client()
        .execute("UPDATE users SET role = 'viewer'", &[])
        .await?;
    assert_eq!(changed, 1, "only alice's row is visible to update");
    tx.rollback().await?;
    db.cleanup().await
}

#[tokio::test]
async fn without_a_tenant_nothing_is_visible() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    seed(&db, &tenant("tenant-a"), "alice").await?;
    let client = db.app_pool().get().await?;
    let count: i64 = client
        .query_one("SELECT count(*) FROM users", &[])
        .await?
        .get(0);
    assert_eq!(count, 0);
    db.cleanup().await
}

#[tokio::test]
async fn tenant_setting_does_not_leak_to_the_next_pooled_transaction() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    seed(&db, &tenant("tenant-a"), "alice").await?;
    // One connection in the pool guarantees the next checkout reuses it.
    let store = pulse_store::Store::connect_app(&pulse_config::DatabaseConfig {
        pool_size: 1,
        ..db.database_config()
    })
    .await?;
    {
        let tx = store.tenant_tx(&tenant("tenant-a")).await?;
        let n: i64 = tx
            .client()
            .query_one("SELECT count(*) FROM users", &[])
            .await?
            .get(0);
        assert_eq!(n, 1);
        // dropped without commit: rolled back, setting gone
    }
    let tx = store.tenant_tx(&tenant("tenant-b")).await?;
    let n: i64 = tx
        .client()
        .query_one("SELECT count(*) FROM users", &[])
        .await?
        .get(0);
    assert_eq!(n, 0);
    tx.commit().await?;
    let client = store.pool().get().await?;
    let setting: Option<String> = client
        .query_one(
            "SELECT nullif(current_setting('app.tenant_id', true), '')",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(setting, None);
    drop(client);
    db.cleanup().await
}

#[tokio::test]
async fn the_application_role_cannot_bypass_rls() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let client = db.app_pool().get().await?;
    let row = client
        .query_one(
            "SELECT current_user::text, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await?;
    assert_eq!(row.get::<_, String>(0), "pulse_app");
    assert!(!row.get::<_, bool>(1));
    assert!(!row.get::<_, bool>(2));
    // And a superuser configured as the app role is refused at connect time.
    let err = pulse_store::Store::connect_app(&pulse_config::DatabaseConfig {
        app_url: Some(db.owner_url().to_owned()),
        ..db.database_config()
    })
    .await
    .expect_err("superuser app role must be refused");
    assert!(
        matches!(err, pulse_store::StoreError::UnsafeAppRole { .. }),
        "{err}"
    );
    drop(client);
    db.cleanup().await
}
