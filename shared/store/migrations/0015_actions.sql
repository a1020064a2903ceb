-- Governed actions (Step 6): one row per planned action, from `planned` to exactly one terminal
-- state, and the per-resource remediation locks the broker consults before anything runs.
--
-- `pulse-store::actions` is the only writer. As in 0014 the columns the store filters, orders or
-- compares on are plain columns and the whole plan (ActionPlan as JSON, plan_hash included) is
-- `plan`; every state change is one compare-and-swap UPDATE on `version` and appends the
-- tenant's hash-chained audit row in the same transaction. Tenant-owned with the same FORCE'd
-- row-level security as 0004.

CREATE TABLE actions (
    tenant_id       text NOT NULL REFERENCES tenants (id),
    id              uuid NOT NULL,
    resource_id     text NOT NULL CHECK (length(resource_id) BETWEEN 1 AND 1024),
    agent_id        text NOT NULL CHECK (length(agent_id) BETWEEN 1 AND 1024),
    capability      text NOT NULL CHECK (length(capability) BETWEEN 1 AND 64),
    state           text NOT NULL CHECK (state IN ('planned', 'pending_approval', 'approved',
                                                   'rejected', 'expired', 'executing',
                                                   'completed', 'failed')),
    severity        text NOT NULL CHECK (severity IN ('warning', 'critical')),
    -- 0 critical, 1 warning: the pending queue's risk order.
    risk_rank       smallint NOT NULL CHECK (risk_rank IN (0, 1)),
    approval_floor  text NOT NULL CHECK (approval_floor IN ('none', 'dry_run_only', 'admin',
                                                            'mfa')),
    requested_by    text NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 256),
    plan_hash       text NOT NULL CHECK (plan_hash ~ '^[0-9a-f]{64}$'),
    planned_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    -- The human who approved or rejected it; NULL for policy decisions.
    decided_by      text CHECK (length(decided_by) <= 256),
    decision_reason text CHECK (length(decision_reason) <= 2000),
    human_approved  boolean NOT NULL DEFAULT false,
    -- The execution lease, taken together with approved -> executing.
    lease_id        text CHECK (length(lease_id) <= 256),
    lease_expires_at timestamptz,
    -- {status, reason, output, exit_status, at} of the agent's receipt, or the refusal.
    result          jsonb CHECK (result IS NULL OR jsonb_typeof(result) = 'object'),
    -- Compare-and-swap token: every write names the version it read and bumps it.
    version         bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    plan            jsonb NOT NULL CHECK (jsonb_typeof(plan) = 'object'),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CHECK ((state = 'executing') <= (lease_id IS NOT NULL))
);
-- Listing, newest first.
CREATE INDEX actions_latest ON actions (tenant_id, planned_at DESC, id DESC);
-- The approval queue: soonest expiry, highest risk, oldest, id.
CREATE INDEX actions_pending ON actions (tenant_id, expires_at, risk_rank, planned_at, id)
    WHERE state = 'pending_approval';
ALTER TABLE actions ENABLE ROW LEVEL SECURITY;
ALTER TABLE actions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON actions
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON actions TO pulse_app;

-- `never_auto_remediate`: no action runs on the resource, approved or not.
CREATE TABLE resource_remediation_locks (
    tenant_id            text NOT NULL REFERENCES tenants (id),
    resource_id          text NOT NULL CHECK (length(resource_id) BETWEEN 1 AND 1024),
    never_auto_remediate boolean NOT NULL,
    set_by               text NOT NULL CHECK (length(set_by) BETWEEN 1 AND 256),
    set_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, resource_id)
);
ALTER TABLE resource_remediation_locks ENABLE ROW LEVEL SECURITY;
ALTER TABLE resource_remediation_locks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON resource_remediation_locks
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON resource_remediation_locks TO pulse_app;
