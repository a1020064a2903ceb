-- Cost ledger: one row per provider call, with the tokens the provider reported and what they
-- cost. A metered call whose model has no exact price row stores cost_usd NULL and
-- price_known = false: an unknown price is never recorded as zero. Local model servers are not
-- metered, so their zero is a true zero.

CREATE TABLE cost_ledger (
    id            uuid PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id),
    occurred_at   timestamptz NOT NULL,
    surface       text NOT NULL CHECK (length(surface) BETWEEN 1 AND 64),
    route         text NOT NULL CHECK (length(route) BETWEEN 3 AND 300),
    provider      text NOT NULL CHECK (length(provider) BETWEEN 1 AND 64),
    model         text NOT NULL CHECK (length(model) BETWEEN 1 AND 256),
    route_class   text NOT NULL
        CHECK (route_class IN ('metered_api', 'local_model_server', 'coding_plan_allowance')),
    input_tokens  bigint NOT NULL CHECK (input_tokens >= 0),
    output_tokens bigint NOT NULL CHECK (output_tokens >= 0),
    cost_usd      numeric(24, 12) CHECK (cost_usd IS NULL OR cost_usd >= 0),
    price_known   boolean NOT NULL,
    run_id        text CHECK (run_id IS NULL OR length(run_id) BETWEEN 1 AND 200),
    CHECK (price_known = (cost_usd IS NOT NULL))
);
CREATE INDEX cost_ledger_tenant_time ON cost_ledger (tenant_id, occurred_at);
ALTER TABLE cost_ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE cost_ledger FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON cost_ledger
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT ON cost_ledger TO pulse_app;
