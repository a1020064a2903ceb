-- Patrol run records: one row per accepted run id, from `queued` to exactly one terminal status.
--
-- The columns the store filters, orders or compares on are plain columns; the whole record
-- (PatrolRun as JSON: counts, bounded tool calls, finding assessments, the classified error) is
-- `record`, rewritten together with `status` by one compare-and-swap UPDATE, so the two cannot
-- disagree. Tenant-owned with the same FORCE'd row-level security as 0004.

CREATE TABLE patrol_runs (
    tenant_id      text NOT NULL REFERENCES tenants (id),
    id             uuid NOT NULL,
    trigger_reason text NOT NULL CHECK (length(trigger_reason) BETWEEN 1 AND 64),
    run_type       text NOT NULL CHECK (run_type IN ('full', 'scoped')),
    status         text NOT NULL CHECK (status IN ('queued', 'running', 'healthy',
                                                   'issues_found', 'error')),
    queued_at      timestamptz NOT NULL,
    started_at     timestamptz,
    completed_at   timestamptz,
    -- The requested identities as the caller named them, and the canonical ids they resolved to.
    scope_resource_ids           text[] NOT NULL DEFAULT '{}',
    effective_scope_resource_ids text[] NOT NULL DEFAULT '{}',
    error_cause    text,
    -- The requesting actor (token name or user), for the audit trail of manual runs.
    requested_by   text CHECK (length(requested_by) <= 256),
    record         jsonb NOT NULL CHECK (jsonb_typeof(record) = 'object'),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    -- A run has a completion time exactly when it is terminal.
    CHECK ((status IN ('healthy', 'issues_found', 'error')) = (completed_at IS NOT NULL)),
    CHECK ((status = 'error') = (error_cause IS NOT NULL))
);
-- Latest runs of a tenant (listing, last full run, last activity).
CREATE INDEX patrol_runs_latest ON patrol_runs (tenant_id, queued_at DESC, id DESC);
-- The current run: the newest non-terminal one.
CREATE INDEX patrol_runs_current ON patrol_runs (tenant_id, queued_at DESC)
    WHERE status IN ('queued', 'running');
-- The last terminal run of a type.
CREATE INDEX patrol_runs_terminal ON patrol_runs (tenant_id, run_type, completed_at DESC)
    WHERE completed_at IS NOT NULL;
ALTER TABLE patrol_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE patrol_runs FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON patrol_runs
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON patrol_runs TO pulse_app;
