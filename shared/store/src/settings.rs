//! Tenant AI settings and encrypted provider credentials.
//!
//! The settings document is stored as the tenant set it (sparse, no keys) with a version for
//! optimistic concurrency. Provider keys are sealed with ChaCha20-Poly1305 under the master key;
//! the associated data binds each ciphertext to its tenant and provider, so a row copied to
//! another tenant or provider fails to open.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use chrono::{DateTime, Utc};
use rand::RngCore;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{StoreError, TenantTx};

pub const MASTER_KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;

/// Why settings could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SettingsStoreError {
    #[error("settings version {expected} is stale; the current version is {current}")]
    VersionConflict { expected: i64, current: i64 },
    #[error("credential for provider {provider} cannot be decrypted: {reason}")]
    Undecryptable { provider: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<tokio_postgres::Error> for SettingsStoreError {
    fn from(error: tokio_postgres::Error) -> Self {
        Self::Store(StoreError::Database(error))
    }
}

/// Why the master key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum MasterKeyError {
    #[error("master key file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("master key file {path} must hold exactly {MASTER_KEY_BYTES} bytes, found {found}")]
    WrongLength { path: String, found: usize },
}

/// The key that seals provider credentials. Never printed.
#[derive(Clone)]
pub struct MasterKey {
    key: [u8; MASTER_KEY_BYTES],
    id: String,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl MasterKey {
    pub fn from_bytes(key: [u8; MASTER_KEY_BYTES]) -> Self {
        // A fingerprint that names the key without revealing it.
        let digest = Sha256::digest([b"pulse-master-key-id:".as_slice(), &key].concat());
        Self {
            key,
            id: hex::encode(&digest[..8]),
        }
    }

    pub fn generate() -> Self {
        let mut key = [0u8; MASTER_KEY_BYTES];
        rand::rng().fill_bytes(&mut key);
        Self::from_bytes(key)
    }

    /// Reads the key at `path`, creating it (mode 0600, random bytes) when it does not exist.
    /// Blocking file IO: call it at startup or from `spawn_blocking`.
    pub fn load_or_create(path: &Path) -> Result<Self, MasterKeyError> {
        let io = |source| MasterKeyError::Io {
            path: path.display().to_string(),
            source,
        };
        match std::fs::read(path) {
            Ok(bytes) => {
                let key: [u8; MASTER_KEY_BYTES] =
                    bytes
                        .as_slice()
                        .try_into()
                        .map_err(|_| MasterKeyError::WrongLength {
                            path: path.display().to_string(),
                            found: bytes.len(),
                        })?;
                Ok(Self::from_bytes(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(io)?;
                }
                let created = Self::generate();
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::OpenOptionsExt as _;
                    options.mode(0o600);
                }
                match options.open(path) {
                    Ok(mut file) => {
                        file.write_all(&created.key).map_err(io)?;
                        file.sync_all().map_err(io)?;
                        Ok(created)
                    }
                    // Another process created it first: use theirs.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Self::load_or_create(path)
                    }
                    Err(e) => Err(io(e)),
                }
            }
            Err(e) => Err(io(e)),
        }
    }

    /// The fingerprint stored next to each ciphertext.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn cipher(&self) -> ChaCha20Poly1305 {
        ChaCha20Poly1305::new(Key::from_slice(&self.key))
    }
}

/// `pulse-credential|<tenant>|<provider>`: what a ciphertext is bound to.
fn associated_data(tenant: &str, provider: &str) -> Vec<u8> {
    format!("pulse-credential|{tenant}|{provider}").into_bytes()
}

/// A sealed value as stored: a provider credential, a chat transcript row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub ciphertext: Vec<u8>,
    pub nonce: Vec<u8>,
    pub key_id: String,
}

/// A sealed provider credential.
pub type SealedCredential = Sealed;

impl MasterKey {
    /// Seals `plaintext` bound to `aad`: it opens only with this key and the same `aad`.
    pub fn seal_bytes(&self, aad: &[u8], plaintext: &[u8]) -> Option<Sealed> {
        let mut nonce = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut nonce);
        let ciphertext = self
            .cipher()
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .ok()?;
        Some(Sealed {
            ciphertext,
            nonce: nonce.to_vec(),
            key_id: self.id.clone(),
        })
    }

    /// Opens what [`MasterKey::seal_bytes`] sealed under the same `aad`; the error says why not.
    pub fn open_bytes(&self, aad: &[u8], sealed: &Sealed) -> Result<Vec<u8>, &'static str> {
        if sealed.key_id != self.id {
            return Err("sealed under a different master key");
        }
        if sealed.nonce.len() != NONCE_BYTES {
            return Err("malformed nonce");
        }
        self.cipher()
            .decrypt(
                Nonce::from_slice(&sealed.nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad,
                },
            )
            .map_err(|_| "authentication failed")
    }
}

pub fn seal(
    key: &MasterKey,
    tenant: &str,
    provider: &str,
    plaintext: &str,
) -> Result<SealedCredential, SettingsStoreError> {
    key.seal_bytes(&associated_data(tenant, provider), plaintext.as_bytes())
        .ok_or_else(|| SettingsStoreError::Undecryptable {
            provider: provider.to_owned(),
            reason: "encryption failed".to_owned(),
        })
}

pub fn open(
    key: &MasterKey,
    tenant: &str,
    provider: &str,
    sealed: &SealedCredential,
) -> Result<String, SettingsStoreError> {
    let failed = |reason: &str| SettingsStoreError::Undecryptable {
        provider: provider.to_owned(),
        reason: reason.to_owned(),
    };
    let plaintext = key
        .open_bytes(&associated_data(tenant, provider), sealed)
        .map_err(failed)?;
    String::from_utf8(plaintext).map_err(|_| failed("not UTF-8"))
}

/// The tenant's Patrol switch, from its stored settings (the only layer that sets it): the
/// scheduler reads it before accepting a run, the runner again before starting one.
pub async fn patrol_enabled(tx: &TenantTx) -> Result<bool, StoreError> {
    let stored = get(tx, false).await.map_err(|e| match e {
        SettingsStoreError::Store(e) => e,
        other => StoreError::Invalid(other.to_string()),
    })?;
    Ok(pulse_domain::ai_settings::patrol_enabled_in(
        &stored.document,
    ))
}

/// The operator's `[ai]` config as a settings layer: the one construction the gateway, the
/// patrol-scheduler and the model-runner share, so they resolve the same effective settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigLayer {
    /// The `ai.*` config as a sparse settings layer; holds no key.
    pub layer: Value,
    /// Providers whose key comes from config or the environment.
    pub environment_keys: std::collections::BTreeSet<String>,
}

impl Default for ConfigLayer {
    /// No `[ai]` config: an empty layer.
    fn default() -> Self {
        Self {
            layer: Value::Object(Default::default()),
            environment_keys: Default::default(),
        }
    }
}

impl ConfigLayer {
    /// Builds the layer and checks it with the same rules as a stored document, so unknown
    /// providers and bad values in config are refused at startup with the field named.
    pub fn from_config(
        config: &pulse_config::AiConfig,
    ) -> Result<Self, pulse_domain::ai_settings::SettingsError> {
        use pulse_domain::ai_settings;
        use serde_json::{Map, json};
        let mut layer = Map::new();
        let mut providers = Map::new();
        let mut environment_keys = std::collections::BTreeSet::new();
        for (id, provider) in &config.providers {
            let mut entry = Map::new();
            let fields = [
                ("base_url", provider.base_url.as_ref().map(|v| json!(v))),
                ("streaming", provider.streaming.as_ref().map(|v| json!(v))),
                (
                    "tool_calls_from_text",
                    provider.tool_calls_from_text.as_ref().map(|v| json!(v)),
                ),
                (
                    "request_timeout_seconds",
                    provider.request_timeout_seconds.map(|v| json!(v)),
                ),
                ("keep_alive", provider.keep_alive.as_ref().map(|v| json!(v))),
                ("num_ctx", provider.num_ctx.map(|v| json!(v))),
                ("think", provider.think.map(|v| json!(v))),
            ];
            for (key, value) in fields {
                if let Some(value) = value {
                    entry.insert(key.to_owned(), value);
                }
            }
            providers.insert(id.clone(), Value::Object(entry));
            if provider.api_key.as_ref().is_some_and(|k| !k.0.is_empty()) {
                environment_keys.insert(id.clone());
            }
        }
        if !providers.is_empty() {
            layer.insert("providers".to_owned(), Value::Object(providers));
        }
        let fields = [
            ("model", &config.model),
            ("chat_model", &config.chat_model),
            ("patrol_model", &config.patrol_model),
            ("auto_fix_model", &config.auto_fix_model),
            ("autonomy_level", &config.autonomy_level),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                layer.insert(key.to_owned(), json!(value));
            }
        }
        if let Some(minutes) = config.patrol_interval_minutes {
            layer.insert("patrol_interval_minutes".to_owned(), json!(minutes));
        }
        let layer = Value::Object(layer);
        let checked = ai_settings::apply_patch(&json!({}), &ai_settings::parse_patch(&layer)?);
        ai_settings::resolve(&[&checked])?;
        Ok(Self {
            layer: checked,
            environment_keys,
        })
    }

    /// The tenant's effective settings over this layer.
    pub fn resolve(
        &self,
        stored: &StoredSettings,
    ) -> Result<pulse_domain::ai_settings::AiSettings, pulse_domain::ai_settings::SettingsError>
    {
        pulse_domain::ai_settings::resolve(&[&self.layer, &stored.document])
    }
}

/// The tenant's stored settings document.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSettings {
    /// The sparse document; `{}` when the tenant never saved.
    pub document: Value,
    /// 0 when the tenant never saved.
    pub version: i64,
    pub updated_at: Option<DateTime<Utc>>,
    pub updated_by: Option<String>,
}

/// Reads the tenant's document; locks the row when `for_update` so a read-modify-write in the
/// same transaction cannot lose an update.
pub async fn get(tx: &TenantTx, for_update: bool) -> Result<StoredSettings, SettingsStoreError> {
    let sql = if for_update {
        "SELECT document, version, updated_at, updated_by FROM ai_settings FOR UPDATE"
    } else {
        "SELECT document, version, updated_at, updated_by FROM ai_settings"
    };
    let row = tx.client().query_opt(sql, &[]).await?;
    Ok(match row {
        Some(row) => StoredSettings {
            document: row.get(0),
            version: row.get(1),
            updated_at: Some(row.get(2)),
            updated_by: Some(row.get(3)),
        },
        None => StoredSettings {
            document: Value::Object(Default::default()),
            version: 0,
            updated_at: None,
            updated_by: None,
        },
    })
}

/// Writes the document if the stored version is still `expected_version` (0: never saved).
/// Returns the new version.
pub async fn put(
    tx: &TenantTx,
    expected_version: i64,
    document: &Value,
    updated_by: &str,
) -> Result<i64, SettingsStoreError> {
    let tenant = tx.tenant().as_str();
    let next = expected_version + 1;
    let written = if expected_version == 0 {
        tx.client()
            .execute(
                "INSERT INTO ai_settings (tenant_id, document, version, updated_at, updated_by)
                 VALUES ($1, $2, 1, now(), $3) ON CONFLICT (tenant_id) DO NOTHING",
                &[&tenant, document, &updated_by],
            )
            .await?
    } else {
        tx.client()
            .execute(
                "UPDATE ai_settings SET document = $1, version = $2, updated_at = now(),
                     updated_by = $3
                 WHERE version = $4",
                &[document, &next, &updated_by, &expected_version],
            )
            .await?
    };
    if written == 1 {
        return Ok(next);
    }
    let current = get(tx, false).await?.version;
    Err(SettingsStoreError::VersionConflict {
        expected: expected_version,
        current,
    })
}

/// Providers with a stored key, and when it was last set.
pub async fn configured_credentials(
    tx: &TenantTx,
) -> Result<BTreeMap<String, DateTime<Utc>>, SettingsStoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT provider_id, updated_at FROM provider_credentials ORDER BY provider_id",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Stores `plaintext` for `provider`, sealed under `key`.
pub async fn set_credential(
    tx: &TenantTx,
    key: &MasterKey,
    provider: &str,
    plaintext: &str,
) -> Result<(), SettingsStoreError> {
    let tenant = tx.tenant().as_str();
    let sealed = seal(key, tenant, provider, plaintext)?;
    tx.client()
        .execute(
            "INSERT INTO provider_credentials
                 (tenant_id, provider_id, ciphertext, nonce, key_id, updated_at)
             VALUES ($1, $2, $3, $4, $5, now())
             ON CONFLICT (tenant_id, provider_id) DO UPDATE SET
                 ciphertext = EXCLUDED.ciphertext, nonce = EXCLUDED.nonce,
                 key_id = EXCLUDED.key_id, updated_at = EXCLUDED.updated_at",
            &[
                &tenant,
                &provider,
                &sealed.ciphertext,
                &sealed.nonce,
                &sealed.key_id,
            ],
        )
        .await?;
    Ok(())
}

/// Removes the key of `provider`; `false` when none was stored.
pub async fn clear_credential(tx: &TenantTx, provider: &str) -> Result<bool, SettingsStoreError> {
    let removed = tx
        .client()
        .execute(
            "DELETE FROM provider_credentials WHERE provider_id = $1",
            &[&provider],
        )
        .await?;
    Ok(removed > 0)
}

/// The sealed rows, as stored.
pub async fn sealed_credentials(
    tx: &TenantTx,
) -> Result<BTreeMap<String, SealedCredential>, SettingsStoreError> {
    let rows = tx
        .client()
        .query(
            "SELECT provider_id, ciphertext, nonce, key_id FROM provider_credentials",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            (
                row.get(0),
                SealedCredential {
                    ciphertext: row.get(1),
                    nonce: row.get(2),
                    key_id: row.get(3),
                },
            )
        })
        .collect())
}

/// A decrypted provider key, for server-side use only: not serializable, redacted in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderKey(String);

impl ProviderKey {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ProviderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProviderKey(<redacted>)")
    }
}

/// Every stored key of the tenant, decrypted. For the model-runner; never for an API response.
pub async fn decrypted_credentials(
    tx: &TenantTx,
    key: &MasterKey,
) -> Result<BTreeMap<String, ProviderKey>, SettingsStoreError> {
    let tenant = tx.tenant().as_str().to_owned();
    sealed_credentials(tx)
        .await?
        .into_iter()
        .map(|(provider, sealed)| {
            let plaintext = open(key, &tenant, &provider, &sealed)?;
            Ok((provider, ProviderKey(plaintext)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_keys_open_only_for_their_tenant_and_provider() {
        let key = MasterKey::generate();
        let sealed = seal(&key, "acme", "openai", "sk-secret").unwrap();
        assert_eq!(open(&key, "acme", "openai", &sealed).unwrap(), "sk-secret");
        assert!(open(&key, "other", "openai", &sealed).is_err());
        assert!(open(&key, "acme", "groq", &sealed).is_err());
        assert!(open(&MasterKey::generate(), "acme", "openai", &sealed).is_err());
        let again = seal(&key, "acme", "openai", "sk-secret").unwrap();
        assert_ne!(again.nonce, sealed.nonce);
        assert!(!format!("{key:?}").contains(&hex::encode(key.key)));
    }
}
