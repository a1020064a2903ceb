-- Foundation: the application role, tenants, users and API tokens.
--
-- Every tenant-owned table carries tenant_id and FORCEs row-level security keyed on the
-- transaction-local setting app.tenant_id. The application connects as pulse_app, which owns
-- nothing and cannot bypass RLS, so a query that forgets its tenant filter sees only the tenant
-- of its TenantTx, and a connection with no tenant set sees nothing.

DO $$
BEGIN
    CREATE ROLE pulse_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOINHERIT;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO pulse_app', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO pulse_app;
GRANT SELECT ON schema_migrations TO pulse_app;

CREATE TABLE tenants (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenants
    USING (id = current_setting('app.tenant_id', true))
    WITH CHECK (id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON tenants TO pulse_app;

CREATE TABLE users (
    id            uuid PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id),
    username      text NOT NULL CHECK (length(username) BETWEEN 1 AND 200),
    role          text NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    password_hash text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, username)
);
ALTER TABLE users ENABLE ROW LEVEL SECURITY;
ALTER TABLE users FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON users
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON users TO pulse_app;

CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants (id),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- sha256 of the secret; the secret itself is never stored
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    scopes       text[] NOT NULL,
    created_by   uuid REFERENCES users (id),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id, created_at);
ALTER TABLE api_tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON api_tokens
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON api_tokens TO pulse_app;

-- Authentication happens before the tenant is known. This function is the one door through
-- RLS for it: it answers only for the exact hash presented, so the application role can resolve
-- a presented token without being able to list anyone's tokens.
CREATE FUNCTION pulse_token_by_hash(presented bytea)
RETURNS TABLE (
    id uuid, tenant_id text, name text, scopes text[], created_by uuid,
    expires_at timestamptz, revoked_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT t.id, t.tenant_id, t.name, t.scopes, t.created_by, t.expires_at, t.revoked_at
    FROM public.api_tokens t
    WHERE t.token_hash = presented
$$;
REVOKE ALL ON FUNCTION pulse_token_by_hash(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_token_by_hash(bytea) TO pulse_app;
