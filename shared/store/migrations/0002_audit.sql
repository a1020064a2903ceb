-- The per-tenant, hash-chained, append-only audit log.
--
-- row_hash = sha256(prev_hash || RFC 8785 canonical JSON of the row). The sequence is gap-free
-- because it comes from audit_heads, locked in the appending transaction, not from a Postgres
-- sequence (which skips numbers on rollback).

CREATE TABLE audit_heads (
    tenant_id  text PRIMARY KEY REFERENCES tenants (id),
    seq        bigint NOT NULL CHECK (seq >= 0),
    head_hash  bytea NOT NULL CHECK (length(head_hash) = 32)
);
ALTER TABLE audit_heads ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_heads FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON audit_heads
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON audit_heads TO pulse_app;

CREATE TABLE audit_events (
    tenant_id    text NOT NULL REFERENCES tenants (id),
    seq          bigint NOT NULL CHECK (seq >= 1),
    occurred_at  timestamptz NOT NULL,
    actor        text NOT NULL,
    kind         text NOT NULL,
    subject      text NOT NULL,
    payload      jsonb NOT NULL,
    prev_hash    bytea NOT NULL CHECK (length(prev_hash) = 32),
    row_hash     bytea NOT NULL CHECK (length(row_hash) = 32),
    PRIMARY KEY (tenant_id, seq)
);
ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON audit_events
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
-- Append-only: the application may read and insert, never change or remove.
GRANT SELECT, INSERT ON audit_events TO pulse_app;

CREATE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
