//! AI settings and provider credentials against the real Postgres: versioned round trip,
//! encryption at rest, the tenant/provider binding of each ciphertext and tenant isolation.

use pulse_domain::TenantId;
use pulse_store::settings::{self, MasterKey, SettingsStoreError};
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

#[tokio::test]
async fn settings_round_trip_with_version_check() -> anyhow::Result<()> {
    let (db, acme, _) = setup().await?;
    let store = db.store();
    let tx = store.tenant_tx(&acme).await?;
    let empty = settings::get(&tx, false).await?;
    assert_eq!((empty.version, empty.document.clone()), (0, json!({})));
    let doc = json!({"patrol_model": "openai:gpt-4.1-mini"});
    assert_eq!(settings::put(&tx, 0, &doc, "token:a").await?, 1);
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let read = settings::get(&tx, true).await?;
    assert_eq!(read.document, doc);
    assert_eq!(read.version, 1);
    assert_eq!(read.updated_by.as_deref(), Some("token:a"));
    let doc2 = json!({"patrol_model": "openai:gpt-5"});
    assert_eq!(settings::put(&tx, 1, &doc2, "token:b").await?, 2);
    tx.commit().await?;

    // A writer that read version 1 (or never read) loses.
    for stale in [0, 1, 5] {
        let tx = store.tenant_tx(&acme).await?;
        let err = settings::put(&tx, stale, &json!({}), "token:c")
            .await
            .unwrap_err();
        assert!(
            matches!(err, SettingsStoreError::VersionConflict { expected, current: 2 } if expected == stale),
            "{err:?}"
        );
        tx.rollback().await?;
    }
    let tx = store.tenant_tx(&acme).await?;
    assert_eq!(settings::get(&tx, false).await?.document, doc2);
    tx.commit().await?;
    db.cleanup().await
}

#[tokio::test]
async fn credentials_are_encrypted_and_bound_to_tenant_and_provider() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let key = MasterKey::generate();
    let secret = "sk-plaintext-marker-0123456789";
    let tx = store.tenant_tx(&acme).await?;
    settings::set_credential(&tx, &key, "openai", secret).await?;
    settings::set_credential(&tx, &key, "groq", "gsk-other").await?;
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    let keys = settings::decrypted_credentials(&tx, &key).await?;
    assert_eq!(keys["openai"].expose(), secret);
    assert_eq!(keys["groq"].expose(), "gsk-other");
    assert!(!format!("{keys:?}").contains(secret));
    let configured = settings::configured_credentials(&tx).await?;
    assert_eq!(
        configured.keys().collect::<Vec<_>>(),
        vec!["groq", "openai"]
    );
    tx.commit().await?;

    // No column of any credential row holds the plaintext, as bytes or as text.
    let owner = db.owner_client().await?;
    let rows = owner
        .query(
            "SELECT tenant_id, provider_id, ciphertext, nonce, key_id, updated_at::text
             FROM provider_credentials",
            &[],
        )
        .await?;
    assert_eq!(rows.len(), 2);
    for row in &rows {
        let ciphertext: Vec<u8> = row.get(2);
        let nonce: Vec<u8> = row.get(3);
        for bytes in [&ciphertext, &nonce] {
            assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()));
        }
        for column in [0, 1, 4, 5] {
            let text: String = row.get(column);
            assert!(!text.contains(secret));
        }
    }

    // Copy acme's openai ciphertext to globex, and to another provider of acme: neither opens.
    owner
        .execute(
            "INSERT INTO provider_credentials (tenant_id, provider_id, ciphertext, nonce, key_id)
             SELECT 'globex', provider_id, ciphertext, nonce, key_id FROM provider_credentials
             WHERE tenant_id = 'acme' AND provider_id = 'openai'",
            &[],
        )
        .await?;
    let tx = store.tenant_tx(&globex).await?;
    let err = settings::decrypted_credentials(&tx, &key)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, SettingsStoreError::Undecryptable { provider, .. } if provider == "openai"),
        "{err:?}"
    );
    tx.rollback().await?;
    owner
        .execute(
            "UPDATE provider_credentials SET ciphertext = o.ciphertext, nonce = o.nonce
             FROM provider_credentials o
             WHERE provider_credentials.tenant_id = 'acme' AND provider_credentials.provider_id = 'groq'
               AND o.tenant_id = 'acme' AND o.provider_id = 'openai'",
            &[],
        )
        .await?;
    let tx = store.tenant_tx(&acme).await?;
    assert!(settings::decrypted_credentials(&tx, &key).await.is_err());
    // A different master key cannot open acme's rows either.
    assert!(
        settings::decrypted_credentials(&tx, &MasterKey::generate())
            .await
            .is_err()
    );
    tx.rollback().await?;
    db.cleanup().await
}

#[tokio::test]
async fn tenants_see_only_their_settings_and_credentials() -> anyhow::Result<()> {
    let (db, acme, globex) = setup().await?;
    let store = db.store();
    let key = MasterKey::generate();
    let tx = store.tenant_tx(&acme).await?;
    settings::put(&tx, 0, &json!({"model": "openai:gpt-4.1-mini"}), "token:a").await?;
    settings::set_credential(&tx, &key, "openai", "sk-acme").await?;
    tx.commit().await?;

    let tx = store.tenant_tx(&globex).await?;
    let theirs = settings::get(&tx, false).await?;
    assert_eq!((theirs.version, theirs.document), (0, json!({})));
    assert!(settings::configured_credentials(&tx).await?.is_empty());
    assert!(settings::decrypted_credentials(&tx, &key).await?.is_empty());
    // Clearing "openai" in globex does not touch acme's key.
    assert!(!settings::clear_credential(&tx, "openai").await?);
    // Globex's first save is version 1 of its own row.
    assert_eq!(
        settings::put(&tx, 0, &json!({"model": "groq:llama"}), "token:g").await?,
        1
    );
    tx.commit().await?;

    let tx = store.tenant_tx(&acme).await?;
    assert_eq!(
        settings::get(&tx, false).await?.document,
        json!({"model": "openai:gpt-4.1-mini"})
    );
    assert_eq!(
        settings::decrypted_credentials(&tx, &key).await?["openai"].expose(),
        "sk-acme"
    );
    assert!(settings::clear_credential(&tx, "openai").await?);
    assert!(settings::configured_credentials(&tx).await?.is_empty());
    tx.commit().await?;
    db.cleanup().await
}

#[test]
fn master_key_file_is_created_once_with_mode_0600() -> anyhow::Result<()> {
    let dir = pulse_test_support::service::scratch_dir("master-key")?;
    let path = dir.join("secrets").join("master.key");
    let created = MasterKey::load_or_create(&path)?;
    let loaded = MasterKey::load_or_create(&path)?;
    assert_eq!(created.id(), loaded.id());
    assert_eq!(std::fs::read(&path)?.len(), settings::MASTER_KEY_BYTES);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&path)?.permissions().mode() & 0o777,
            0o600
        );
    }
    std::fs::write(&path, b"short")?;
    assert!(MasterKey::load_or_create(&path).is_err());
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
