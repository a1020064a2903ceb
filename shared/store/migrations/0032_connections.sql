-- Platform connections (ADR 0013): a Proxmox VE cluster or a Proxmox Backup Server Pulse reads
-- through its HTTPS API with an API token.
--
-- The token secret is sealed with the master key (ChaCha20-Poly1305, as provider credentials
-- and transcripts are); the associated data binds it to its tenant and connection id, so a row
-- copied elsewhere does not open. It is never returned, logged or sent to a model.
--
-- TLS is always verified: `pinned` holds the server certificate's SHA-256 fingerprint, `ca` a
-- PEM CA the chain must lead to (with the name checked), `public` the platform's roots.
--
-- `state` is what the last check or poll saw, with the stable error code and the cause that
-- says what to fix; `presented_fingerprint` is what the server showed, so a mismatch names what
-- to pin. `name` is unique per tenant and kind: the connector reports as agent `pve.<name>` or
-- `pbs.<name>`.

CREATE TABLE connections (
    tenant_id              text NOT NULL REFERENCES tenants (id),
    id                     uuid NOT NULL,
    kind                   text NOT NULL CHECK (kind IN ('proxmox-ve', 'proxmox-backup')),
    name                   text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    url                    text NOT NULL,
    token_id               text NOT NULL,
    secret_sealed          bytea NOT NULL,
    secret_nonce           bytea NOT NULL,
    key_id                 text NOT NULL,
    tls_mode               text NOT NULL CHECK (tls_mode IN ('pinned', 'ca', 'public')),
    fingerprint            text,
    ca_pem                 text,
    state                  text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'connected', 'auth_failed', 'unreachable', 'tls_mismatch',
                         'no_quorum')),
    state_code             text,
    state_cause            text,
    presented_fingerprint  text,
    version                text,
    checked_at             timestamptz,
    created_by             text NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, kind, name),
    CHECK ((tls_mode = 'pinned') = (fingerprint IS NOT NULL)),
    CHECK ((tls_mode = 'ca') = (ca_pem IS NOT NULL))
);
ALTER TABLE connections ENABLE ROW LEVEL SECURITY;
ALTER TABLE connections FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON connections
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON connections TO pulse_app;
