-- Patrol readiness: the outcome of each tenant's last Patrol preflight (one real model turn with
-- one tool through the Patrol route), which the readiness gate consults. Safe fields only: the
-- classified cause, summary and recommendation, never a key or the provider's raw error.
-- Tenant-owned with the same FORCE'd row-level security as 0009.

CREATE TABLE patrol_preflights (
    tenant_id          text PRIMARY KEY REFERENCES tenants (id),
    -- The `provider:model` route and the base URL (NULL: the provider default) it checked.
    route              text NOT NULL CHECK (length(route) BETWEEN 3 AND 512),
    model              text NOT NULL CHECK (length(model) BETWEEN 1 AND 512),
    base_url           text CHECK (length(base_url) <= 2048),
    ok                 boolean NOT NULL,
    tool_call_observed boolean NOT NULL,
    cause              text CHECK (length(cause) BETWEEN 1 AND 64),
    summary            text NOT NULL CHECK (length(summary) <= 1000),
    recommendation     text CHECK (length(recommendation) <= 1000),
    action             text CHECK (length(action) <= 512),
    checked_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL DEFAULT now(),
    -- A failed preflight carries its cause; a passed one proved a tool call.
    CHECK (ok OR cause IS NOT NULL),
    CHECK (NOT tool_call_observed OR ok)
);
ALTER TABLE patrol_preflights ENABLE ROW LEVEL SECURITY;
ALTER TABLE patrol_preflights FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON patrol_preflights
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON patrol_preflights TO pulse_app;

-- Every tenant id, at most `max_rows`, in id order: the model-runner's boot preflight visits
-- each tenant (a route may come from the operator's config, so a tenant without stored settings
-- can still have one) and reads its settings in a transaction of that tenant. Identities only.
CREATE FUNCTION pulse_preflight_tenants(max_rows integer)
RETURNS TABLE (tenant_id text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT t.id FROM public.tenants t ORDER BY t.id
    LIMIT least(greatest(max_rows, 1), 100000)
$$;
REVOKE ALL ON FUNCTION pulse_preflight_tenants(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_preflight_tenants(integer) TO pulse_app;
