-- Signed-in browser sessions and failed sign-in attempts.
--
-- A session is a random secret held in an HttpOnly cookie; only its sha256 is stored, with the
-- CSRF token every form of the session must carry. Like API tokens, a presented session is
-- resolved through a SECURITY DEFINER function that answers only for the exact hash, so the
-- application role can find the tenant of a cookie without being able to list sessions.
-- Failed sign-ins are kept per tenant and username to bound password guessing.

CREATE TABLE web_sessions (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants (id),
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    secret_hash  bytea NOT NULL UNIQUE CHECK (length(secret_hash) = 32),
    csrf_token   text NOT NULL CHECK (length(csrf_token) = 64),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz
);
CREATE INDEX web_sessions_user ON web_sessions (tenant_id, user_id);
ALTER TABLE web_sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE web_sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON web_sessions
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON web_sessions TO pulse_app;

CREATE FUNCTION pulse_web_session_by_hash(presented bytea)
RETURNS TABLE (
    id uuid, tenant_id text, user_id uuid, username text, role text, csrf_token text,
    expires_at timestamptz, revoked_at timestamptz
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT s.id, s.tenant_id, s.user_id, u.username, u.role, s.csrf_token, s.expires_at,
           s.revoked_at
    FROM public.web_sessions s
    JOIN public.users u ON u.id = s.user_id AND u.tenant_id = s.tenant_id
    WHERE s.secret_hash = presented
$$;
REVOKE ALL ON FUNCTION pulse_web_session_by_hash(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_web_session_by_hash(bytea) TO pulse_app;

CREATE TABLE sign_in_failures (
    tenant_id  text NOT NULL REFERENCES tenants (id),
    username   text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sign_in_failures_recent ON sign_in_failures (tenant_id, username, at);
ALTER TABLE sign_in_failures ENABLE ROW LEVEL SECURITY;
ALTER TABLE sign_in_failures FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON sign_in_failures
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, DELETE ON sign_in_failures TO pulse_app;
