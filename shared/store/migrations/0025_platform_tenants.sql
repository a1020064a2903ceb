-- Hosted operation: platform-operator tokens, tenant suspension and tenant erasure.
--
-- Platform authority is not a tenant scope. Platform tokens live in their own table with no
-- tenant, and the application role may neither read nor write it: it can only resolve a
-- presented hash (pulse_platform_token_by_hash). Tokens are minted and revoked by whoever holds
-- the schema owner's credentials (pulsectl admin platform-token), never through the API.

CREATE TABLE platform_tokens (
    id           uuid PRIMARY KEY,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- sha256 of the secret; the secret itself is never stored
    token_hash   bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);
REVOKE ALL ON platform_tokens FROM PUBLIC;

CREATE FUNCTION pulse_platform_token_by_hash(presented bytea)
RETURNS TABLE (id uuid, name text, revoked_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT t.id, t.name, t.revoked_at FROM public.platform_tokens t WHERE t.token_hash = presented
$$;
REVOKE ALL ON FUNCTION pulse_platform_token_by_hash(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_platform_token_by_hash(bytea) TO pulse_app;

-- A tenant token can never carry a platform scope, whatever writes the row.
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_no_platform_scope
    CHECK (position('platform:' IN array_to_string(scopes, ' ')) = 0);

-- Suspension: set by the platform operator with a reason, cleared on resume.
ALTER TABLE tenants
    ADD COLUMN suspended_at     timestamptz,
    ADD COLUMN suspended_reason text CHECK (length(suspended_reason) BETWEEN 1 AND 500),
    ADD CONSTRAINT tenants_suspension_has_reason
        CHECK ((suspended_at IS NULL) = (suspended_reason IS NULL));

-- The schema owner reads every tenant (the definer functions below run as it); when the owner is
-- not a superuser, FORCE ROW LEVEL SECURITY would otherwise hide them.
DO $$
BEGIN
    EXECUTE format(
        'CREATE POLICY platform_owner_read ON tenants FOR SELECT TO %I USING (true)',
        current_user
    );
END
$$;

-- Whether a tenant is suspended, for token checks that run before any tenant is set. It answers
-- only for the tenant named, and only its standing.
CREATE FUNCTION pulse_tenant_standing(tenant text)
RETURNS TABLE (suspended_at timestamptz, suspended_reason text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT t.suspended_at, t.suspended_reason FROM public.tenants t WHERE t.id = tenant
$$;
REVOKE ALL ON FUNCTION pulse_tenant_standing(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_tenant_standing(text) TO pulse_app;

-- Every tenant, for the platform operator's list (the gateway calls it only for a platform token).
CREATE FUNCTION pulse_platform_tenants()
RETURNS TABLE (id text, name text, created_at timestamptz, suspended_at timestamptz,
               suspended_reason text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT t.id, t.name, t.created_at, t.suspended_at, t.suspended_reason
    FROM public.tenants t ORDER BY t.created_at, t.id
$$;
REVOKE ALL ON FUNCTION pulse_platform_tenants() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_platform_tenants() TO pulse_app;

-- The audit chain stays append-only for everyone, except for the erasure of a whole tenant by
-- pulse_platform_delete_tenant (which marks the tenant it erases for this transaction only).
CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND current_setting('pulse.erasing_tenant', true) IS NOT NULL
       AND current_setting('pulse.erasing_tenant', true) = OLD.tenant_id THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_events is append-only' USING ERRCODE = 'insufficient_privilege';
END
$$;

-- Erases one tenant: every row of every table with a tenant_id column, then the tenant. Tables
-- are found from the catalogue, so a table added later is covered without changing this.
-- Foreign keys between tenant tables are satisfied by deleting in passes: a table whose rows are
-- still referenced is retried after the others. Returns the rows deleted per table.
CREATE FUNCTION pulse_platform_delete_tenant(target text)
RETURNS TABLE (table_name text, deleted bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
DECLARE
    remaining text[];
    pending   text[];
    tbl       text;
    n         bigint;
    pass      integer := 0;
    previous  text := current_setting('app.tenant_id', true);
BEGIN
    -- Row-level security applies to the owner too (FORCE): scope it to the erased tenant.
    PERFORM set_config('app.tenant_id', target, true);
    PERFORM set_config('pulse.erasing_tenant', target, true);
    SELECT array_agg(c.table_name::text ORDER BY c.table_name)
      INTO remaining
      FROM information_schema.columns c
      JOIN information_schema.tables t
        ON t.table_schema = c.table_schema AND t.table_name = c.table_name
     WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id'
       AND t.table_type = 'BASE TABLE';
    remaining := coalesce(remaining, ARRAY[]::text[]);
    WHILE array_length(remaining, 1) > 0 LOOP
        pass := pass + 1;
        IF pass > 50 THEN
            RAISE EXCEPTION 'tenant % could not be erased: rows of % are still referenced',
                target, remaining;
        END IF;
        pending := ARRAY[]::text[];
        FOREACH tbl IN ARRAY remaining LOOP
            BEGIN
                EXECUTE format('DELETE FROM public.%I WHERE tenant_id = $1', tbl) USING target;
                GET DIAGNOSTICS n = ROW_COUNT;
                table_name := tbl;
                deleted := n;
                RETURN NEXT;
            EXCEPTION WHEN foreign_key_violation THEN
                pending := pending || tbl;
            END;
        END LOOP;
        remaining := pending;
    END LOOP;
    DELETE FROM public.tenants WHERE id = target;
    GET DIAGNOSTICS n = ROW_COUNT;
    table_name := 'tenants';
    deleted := n;
    RETURN NEXT;
    PERFORM set_config('pulse.erasing_tenant', '', true);
    PERFORM set_config('app.tenant_id', coalesce(previous, ''), true);
END
$$;
REVOKE ALL ON FUNCTION pulse_platform_delete_tenant(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_platform_delete_tenant(text) TO pulse_app;
