-- Patrol investigations: one row per investigation attempt of one finding, dispatched after the
-- Watch run that reported or reconfirmed the finding committed.
--
-- `pulse-store::investigations` is the only writer. The row is the investigation gate's state
-- (attempts, last attempt, last outcome, running count) and, once the attempt ended, its durable
-- `InvestigationRecord` (`record`, the operator-facing contract). Proposal params are not kept
-- here: the canonical action (`action_id`) and its audit are their home.
-- Tenant-owned with the same FORCE'd row-level security as 0004.

CREATE TABLE investigations (
    tenant_id    text NOT NULL REFERENCES tenants (id),
    id           uuid NOT NULL,
    finding_id   text NOT NULL,
    -- The Watch run whose committed outcome dispatched this attempt; one attempt per finding
    -- per run, so a redelivered run event dispatches nothing new.
    watch_run_id uuid NOT NULL,
    status       text NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'timed_out')),
    -- InvestigationOutcome (snake_case) once ended.
    outcome      text,
    attempt      integer NOT NULL CHECK (attempt >= 1),
    started_at   timestamptz NOT NULL,
    completed_at timestamptz,
    action_id    uuid,
    record       jsonb CHECK (record IS NULL OR jsonb_typeof(record) = 'object'),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, finding_id, watch_run_id),
    FOREIGN KEY (tenant_id, finding_id) REFERENCES findings (tenant_id, id),
    CHECK ((status = 'running') = (completed_at IS NULL))
);
-- The attempts of one finding, newest first (gate state, latest record).
CREATE INDEX investigations_by_finding ON investigations (tenant_id, finding_id, started_at DESC);
-- Running attempts of a tenant (the concurrency bound).
CREATE INDEX investigations_running ON investigations (tenant_id, started_at)
    WHERE status = 'running';
ALTER TABLE investigations ENABLE ROW LEVEL SECURITY;
ALTER TABLE investigations FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON investigations
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON investigations TO pulse_app;
