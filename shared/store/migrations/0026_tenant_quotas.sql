-- Per-tenant quotas of a hosted installation, set by the platform operator. A NULL limit means
-- no quota on that dimension; a tenant without a row has no quotas at all. Each limit is
-- enforced where the thing it bounds is created (see docs/tenants.md).

CREATE TABLE tenant_quotas (
    tenant_id            text PRIMARY KEY REFERENCES tenants (id),
    patrol_runs_per_hour integer CHECK (patrol_runs_per_hour >= 0),
    tokens_per_day       bigint CHECK (tokens_per_day >= 0),
    -- whole micro-dollars, like the spend budgets in the AI settings
    usd_micros_per_day   bigint CHECK (usd_micros_per_day >= 0),
    agents               integer CHECK (agents >= 0),
    resources            integer CHECK (resources >= 0),
    findings             integer CHECK (findings >= 0),
    api_requests_per_sec integer CHECK (api_requests_per_sec >= 1),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE tenant_quotas ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_quotas FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_quotas
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_quotas TO pulse_app;
