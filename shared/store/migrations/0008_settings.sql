-- Tenant AI settings (`/api/settings/ai`) and the provider keys they refer to.
--
-- `ai_settings.document` holds only what the tenant set (a sparse JSON object, never a key);
-- defaults and the operator's config fill the rest when the settings are read. `version` is the
-- optimistic-concurrency token a writer must present. Provider keys live apart, encrypted by the
-- service (AEAD under the master key named by `key_id`, tenant and provider as associated data),
-- so no column ever holds a key in plaintext.

CREATE TABLE ai_settings (
    tenant_id  text NOT NULL PRIMARY KEY REFERENCES tenants (id),
    document   jsonb NOT NULL CHECK (jsonb_typeof(document) = 'object'),
    version    bigint NOT NULL CHECK (version >= 1),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- `token:<id>` or `user:<id>` of the last writer.
    updated_by text NOT NULL CHECK (length(updated_by) BETWEEN 1 AND 200)
);
ALTER TABLE ai_settings ENABLE ROW LEVEL SECURITY;
ALTER TABLE ai_settings FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON ai_settings
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON ai_settings TO pulse_app;

CREATE TABLE provider_credentials (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    provider_id text NOT NULL CHECK (length(provider_id) BETWEEN 1 AND 64),
    ciphertext  bytea NOT NULL CHECK (length(ciphertext) BETWEEN 17 AND 8192),
    nonce       bytea NOT NULL CHECK (length(nonce) = 12),
    -- Which master key sealed it (a fingerprint, not the key).
    key_id      text NOT NULL CHECK (length(key_id) BETWEEN 1 AND 64),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, provider_id)
);
ALTER TABLE provider_credentials ENABLE ROW LEVEL SECURITY;
ALTER TABLE provider_credentials FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON provider_credentials
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON provider_credentials TO pulse_app;
