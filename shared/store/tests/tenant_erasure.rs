//! Tenant provisioning, suspension, quotas and erasure against real Postgres (migrations 0025
//! and 0026).
//!
//! The erasure check enumerates every table with a `tenant_id` column from
//! `information_schema`, so a table added later is covered without touching this test: after
//! deleting one tenant, none of them holds a row of it, and the other tenant's rows are all
//! still there.

use std::collections::BTreeMap;

use chrono::Utc;
use pulse_domain::TenantId;
use pulse_domain::finding::{Category, ReportedFinding};
use pulse_domain::tenant::{Quota, TenantQuotas};
use pulse_store::tenants::Standing;
use pulse_store::{bootstrap, findings, platform, quotas, tenants, tokens};
use pulse_test_support::db::TestDb;
use pulse_test_support::seed;

/// Every base table of the schema with a `tenant_id` column.
async fn tenant_tables(owner: &tokio_postgres::Client) -> anyhow::Result<Vec<String>> {
    let rows = owner
        .query(
            "SELECT c.table_name::text FROM information_schema.columns c
             JOIN information_schema.tables t
               ON t.table_schema = c.table_schema AND t.table_name = c.table_name
             WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id'
               AND t.table_type = 'BASE TABLE'
             ORDER BY 1",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Rows of `tenant` per tenant table, plus its `tenants` row, read as the superuser owner (no
/// row-level security in the way).
async fn rows_of(
    owner: &tokio_postgres::Client,
    tables: &[String],
    tenant: &TenantId,
) -> anyhow::Result<BTreeMap<String, i64>> {
    let mut counts = BTreeMap::new();
    for table in tables {
        let n: i64 = owner
            .query_one(
                &format!("SELECT count(*) FROM \"{table}\" WHERE tenant_id = $1"),
                &[&tenant.as_str()],
            )
            .await?
            .get(0);
        counts.insert(table.clone(), n);
    }
    let n: i64 = owner
        .query_one(
            "SELECT count(*) FROM tenants WHERE id = $1",
            &[&tenant.as_str()],
        )
        .await?
        .get(0);
    counts.insert("tenants".to_owned(), n);
    Ok(counts)
}

/// Data in as many tenant tables as the store's writers reach: the tenant with its admin,
/// token and audit rows, an agent with a resource, a finding with its events and outbox row,
/// quotas.
async fn populate(db: &TestDb, tenant: &TenantId) -> anyhow::Result<()> {
    bootstrap::provision_tenant(db.store(), tenant, "Org", "admin", "platform:test").await?;
    seed::seed_service(
        db.store(),
        tenant,
        tenant.as_str(),
        seed::service_resource("nginx"),
    )
    .await?;
    let tx = db.store().tenant_tx(tenant).await?;
    let reported = ReportedFinding {
        key: "service-down".to_owned(),
        severity: pulse_domain::finding::Severity::Critical,
        category: Category::Reliability,
        resource_id: "service:h1:nginx".to_owned(),
        resource_name: "nginx".to_owned(),
        resource_type: "service".to_owned(),
        title: "nginx is down".to_owned(),
        description: "nginx exited".to_owned(),
        recommendation: "restart nginx".to_owned(),
        evidence: "status=failed".to_owned(),
        impact: String::new(),
    };
    findings::report(&tx, &reported, None, Utc::now()).await?;
    quotas::set(
        &tx,
        &TenantQuotas {
            agents: Some(5),
            ..TenantQuotas::default()
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn erasing_a_tenant_leaves_no_row_in_any_tenant_table_and_spares_the_other()
-> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    populate(&db, &acme).await?;
    populate(&db, &globex).await?;
    let owner = db.owner_client().await?;
    let tables = tenant_tables(&owner).await?;
    assert!(tables.len() >= 25, "tenant tables found: {tables:?}");
    let acme_before = rows_of(&owner, &tables, &acme).await?;
    let globex_before = rows_of(&owner, &tables, &globex).await?;
    let populated: Vec<&String> = acme_before
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(t, _)| t)
        .collect();
    // The check is only as good as the data: most kinds of tenant rows are present.
    for table in [
        "users",
        "api_tokens",
        "audit_events",
        "agents",
        "resources",
        "findings",
        "finding_events",
        "outbox",
        "tenant_quotas",
    ] {
        assert!(
            acme_before.get(table).copied().unwrap_or(0) > 0,
            "{table} has no acme rows to erase (populated: {populated:?})"
        );
    }

    let erasure = tenants::erase(db.store(), &acme).await?;
    assert!(erasure.found());
    assert_eq!(
        erasure.total() as i64,
        acme_before.values().sum::<i64>(),
        "{erasure:?} against {acme_before:?}"
    );

    let acme_after = rows_of(&owner, &tables, &acme).await?;
    let left: Vec<_> = acme_after.iter().filter(|(_, n)| **n > 0).collect();
    assert!(left.is_empty(), "acme rows left: {left:?}");
    assert_eq!(rows_of(&owner, &tables, &globex).await?, globex_before);
    // The other tenant's audit chain is intact and still append-only.
    let tx = db.store().tenant_tx(&globex).await?;
    assert!(pulse_store::audit::verify(&tx).await?.is_intact());
    tx.rollback().await?;
    let tamper = owner
        .execute("DELETE FROM audit_events WHERE tenant_id = 'globex'", &[])
        .await;
    assert!(
        tamper.is_err(),
        "audit rows of a live tenant were deletable"
    );

    // Erasing again finds nothing; the id can be provisioned afresh.
    assert!(!tenants::erase(db.store(), &acme).await?.found());
    bootstrap::provision_tenant(db.store(), &acme, "Acme again", "admin", "platform:test").await?;
    db.cleanup().await
}

#[tokio::test]
async fn suspension_refuses_the_tenants_tokens_with_the_reason_until_resumed() -> anyhow::Result<()>
{
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    let a = bootstrap::provision_tenant(db.store(), &acme, "Acme", "admin", "platform:t").await?;
    let g = bootstrap::provision_tenant(db.store(), &globex, "Globex", "ops", "platform:t").await?;
    assert_eq!(a.admin.username, "admin");
    assert_eq!(g.admin.username, "ops");
    assert!(matches!(
        bootstrap::provision_tenant(db.store(), &acme, "Again", "admin", "platform:t").await,
        Err(bootstrap::ProvisionError::Exists(_))
    ));

    let tx = db.store().tenant_tx(&acme).await?;
    assert!(tenants::set_suspension(&tx, Some("invoice overdue")).await?);
    tx.commit().await?;
    assert!(matches!(
        tenants::standing(db.store(), &acme).await?,
        Some(Standing::Suspended { ref reason, .. }) if reason == "invoice overdue"
    ));
    match tokens::authenticate(db.store(), a.token.secret.expose(), Utc::now()).await {
        Err(tokens::AuthFailure::Suspended { reason }) => assert_eq!(reason, "invoice overdue"),
        other => panic!("a suspended tenant's token was not refused: {other:?}"),
    }
    // The other tenant is unaffected.
    let principal = tokens::authenticate(db.store(), g.token.secret.expose(), Utc::now()).await?;
    assert_eq!(principal.tenant, globex);
    let listed = tenants::list_all(db.store()).await?;
    assert_eq!(
        listed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        vec!["acme", "globex"]
    );

    let tx = db.store().tenant_tx(&acme).await?;
    assert!(tenants::set_suspension(&tx, None).await?);
    tx.commit().await?;
    assert_eq!(
        tenants::standing(db.store(), &acme).await?,
        Some(Standing::Active)
    );
    tokens::authenticate(db.store(), a.token.secret.expose(), Utc::now()).await?;
    let missing = TenantId::new("nobody")?;
    assert_eq!(tenants::standing(db.store(), &missing).await?, None);
    db.cleanup().await
}

#[tokio::test]
async fn platform_tokens_are_minted_by_the_owner_only_and_never_pass_as_tenant_tokens()
-> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let owner = db.owner_client().await?;
    let issued = platform::issue(&owner, "ops-team").await?;
    let principal = platform::authenticate(db.store(), issued.secret.expose()).await?;
    assert_eq!(principal.token_id, issued.token.id);
    // A platform secret is no tenant token, and a tenant token is no platform token.
    assert!(matches!(
        tokens::authenticate(db.store(), issued.secret.expose(), Utc::now()).await,
        Err(tokens::AuthFailure::Malformed)
    ));
    let acme = TenantId::new("acme")?;
    let a = bootstrap::provision_tenant(db.store(), &acme, "Acme", "admin", "platform:t").await?;
    assert!(matches!(
        platform::authenticate(db.store(), a.token.secret.expose()).await,
        Err(platform::PlatformAuthFailure::Malformed)
    ));
    // The application role can neither read nor mint platform tokens.
    let app = db.store().pool().get().await?;
    let read = app.query("SELECT * FROM platform_tokens", &[]).await;
    assert!(read.is_err(), "the application role read platform_tokens");
    // No tenant token row can carry a platform scope, whoever writes it.
    let tx = db.store().tenant_tx(&acme).await?;
    let forged = tx
        .client()
        .execute(
            "INSERT INTO api_tokens (id, tenant_id, name, token_hash, scopes)
             VALUES (gen_random_uuid(), 'acme', 'x', decode(repeat('ab', 32), 'hex'),
                     ARRAY['admin', 'platform:operator'])",
            &[],
        )
        .await;
    assert!(forged.is_err(), "a tenant token row took a platform scope");
    drop(tx);
    // Revoked is refused.
    assert!(platform::revoke(&owner, issued.token.id).await?);
    assert!(matches!(
        platform::authenticate(db.store(), issued.secret.expose()).await,
        Err(platform::PlatformAuthFailure::Revoked)
    ));
    db.cleanup().await
}

#[tokio::test]
async fn quotas_count_what_the_tenant_has_and_refuse_at_the_limit() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let acme = TenantId::new("acme")?;
    let globex = TenantId::new("globex")?;
    populate(&db, &acme).await?;
    populate(&db, &globex).await?;
    let tx = db.store().tenant_tx(&acme).await?;
    assert_eq!(quotas::usage(&tx, Quota::Agents).await?, Some(1));
    assert_eq!(quotas::usage(&tx, Quota::Findings).await?, Some(1));
    quotas::admit(&tx, Quota::Agents).await?;
    quotas::set(
        &tx,
        &TenantQuotas {
            agents: Some(1),
            ..TenantQuotas::default()
        },
    )
    .await?;
    match quotas::admit(&tx, Quota::Agents).await {
        Err(quotas::QuotaError::Exceeded(exceeded)) => {
            assert_eq!((exceeded.quota, exceeded.limit), (Quota::Agents, 1));
        }
        other => panic!("the agents quota did not refuse: {other:?}"),
    }
    tx.commit().await?;
    // The other tenant keeps its own quota.
    let tx = db.store().tenant_tx(&globex).await?;
    assert_eq!(quotas::get(&tx).await?.agents, Some(5));
    quotas::admit(&tx, Quota::Agents).await?;
    tx.rollback().await?;

    // A new finding beyond the findings quota is refused with the quota; the other tenant
    // still records new findings.
    let tx = db.store().tenant_tx(&acme).await?;
    quotas::set(
        &tx,
        &TenantQuotas {
            findings: Some(1),
            ..TenantQuotas::default()
        },
    )
    .await?;
    tx.commit().await?;
    let another = |resource: &str| ReportedFinding {
        key: "disk-full".to_owned(),
        severity: pulse_domain::finding::Severity::Warning,
        category: Category::Capacity,
        resource_id: format!("service:h2:{resource}"),
        resource_name: resource.to_owned(),
        resource_type: "service".to_owned(),
        title: format!("{resource} disk is full"),
        description: "no space left".to_owned(),
        recommendation: "free space".to_owned(),
        evidence: "use=100%".to_owned(),
        impact: String::new(),
    };
    let tx = db.store().tenant_tx(&acme).await?;
    match findings::report(&tx, &another("db"), None, Utc::now()).await {
        Err(findings::FindingsError::Report(pulse_domain::finding::ReportError::Quota(q))) => {
            assert_eq!((q.quota, q.limit), (Quota::Findings, 1));
            assert!(q.to_string().contains("resolve or dismiss"), "{q}");
        }
        other => panic!("the findings quota did not refuse: {other:?}"),
    }
    tx.rollback().await?;
    let tx = db.store().tenant_tx(&globex).await?;
    findings::report(&tx, &another("db"), None, Utc::now()).await?;
    tx.commit().await?;
    db.cleanup().await
}
