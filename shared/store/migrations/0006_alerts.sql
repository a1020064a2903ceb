-- Deterministic alerts: the alert lifecycle (firing -> cleared) and the per-resource rule state
-- the patrol-scheduler keeps between observations, so a restart neither re-fires nor forgets.
--
-- Every table is tenant-owned with the same FORCE'd row-level security as 0004. The scheduler
-- finds work before it knows the tenant: pulse_alert_scan (agents with new reports) and
-- pulse_alert_orphans (firing alerts of removed resources) are its doors through RLS and return
-- identities only.

CREATE TABLE alerts (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    id          uuid NOT NULL,
    -- AlertKey: `<resource_id>:<rule>`.
    key         text NOT NULL CHECK (length(key) BETWEEN 1 AND 1100),
    rule        text NOT NULL CHECK (rule IN ('unhealthy', 'unexpected_exit', 'restart_loop',
                                              'filesystem_usage', 'memory_usage', 'agent_offline')),
    level       text NOT NULL CHECK (level IN ('warning', 'critical')),
    value       double precision NOT NULL,
    threshold   double precision NOT NULL,
    resource_id text NOT NULL CHECK (length(resource_id) BETWEEN 1 AND 1024),
    message     text NOT NULL CHECK (length(message) <= 4096),
    state       text NOT NULL CHECK (state IN ('firing', 'cleared')),
    fired_at    timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    cleared_at  timestamptz,
    PRIMARY KEY (tenant_id, id),
    CHECK ((state = 'cleared') = (cleared_at IS NOT NULL))
);
-- One alert per key can be firing; cleared ones are history.
CREATE UNIQUE INDEX alerts_one_firing_per_key ON alerts (tenant_id, key) WHERE state = 'firing';
-- Listings: by state, newest first, optionally for one resource.
CREATE INDEX alerts_by_state ON alerts (tenant_id, state, fired_at DESC);
CREATE INDEX alerts_by_resource ON alerts (tenant_id, resource_id, fired_at DESC);
ALTER TABLE alerts ENABLE ROW LEVEL SECURITY;
ALTER TABLE alerts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON alerts
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON alerts TO pulse_app;

-- No foreign key to resources: the state outlives a resource row that is re-created.
CREATE TABLE resource_alert_states (
    tenant_id    text NOT NULL REFERENCES tenants (id),
    resource_id  text NOT NULL CHECK (length(resource_id) BETWEEN 1 AND 1024),
    -- ResourceAlertState as JSON.
    state        jsonb NOT NULL CHECK (jsonb_typeof(state) = 'object'),
    -- The last observation fed to the rules, and the agent status fed with it.
    observed_at  timestamptz NOT NULL,
    agent_online boolean,
    -- `resources.received_at` of the row version last evaluated.
    received_at  timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, resource_id)
);
ALTER TABLE resource_alert_states ENABLE ROW LEVEL SECURITY;
ALTER TABLE resource_alert_states FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON resource_alert_states
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON resource_alert_states TO pulse_app;

-- What the scheduler last evaluated of each agent: its reports advance `agents.last_seen_at` in
-- the same transaction as its resources, and going offline changes `agents.status` in the same
-- transaction as marking its resources unknown, so an agent whose row differs from its mark has
-- resource versions to evaluate. Comparing per agent (not against one global clock) means a
-- report that commits late is still found, and no index on `resources` is needed (each report
-- rewrites every resource row; an index on a column that changes each time would cost every
-- report an index write per index).
CREATE TABLE alert_agent_marks (
    tenant_id    text NOT NULL REFERENCES tenants (id),
    agent_id     text NOT NULL,
    last_seen_at timestamptz NOT NULL,
    status       text NOT NULL CHECK (status IN ('online', 'offline')),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);
ALTER TABLE alert_agent_marks ENABLE ROW LEVEL SECURITY;
ALTER TABLE alert_agent_marks FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON alert_agent_marks
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON alert_agent_marks TO pulse_app;

-- Agents of every tenant that reported or changed status since the scheduler last evaluated
-- them, least recently seen first. Identities only.
CREATE FUNCTION pulse_alert_scan(max_rows integer)
RETURNS TABLE (tenant_id text, agent_id text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT a.tenant_id, a.id
    FROM public.agents a
    LEFT JOIN public.alert_agent_marks m ON m.tenant_id = a.tenant_id AND m.agent_id = a.id
    WHERE m.agent_id IS NULL OR m.last_seen_at < a.last_seen_at OR m.status <> a.status
    ORDER BY a.last_seen_at
    LIMIT least(greatest(max_rows, 1), 10000)
$$;
REVOKE ALL ON FUNCTION pulse_alert_scan(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_alert_scan(integer) TO pulse_app;

-- Resources of every tenant with a firing alert whose resource row is gone (its agent stopped
-- reporting it), at most `max_rows`. Identities only.
CREATE FUNCTION pulse_alert_orphans(max_rows integer)
RETURNS TABLE (tenant_id text, resource_id text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT DISTINCT a.tenant_id, a.resource_id
    FROM public.alerts a
    WHERE a.state = 'firing'
      AND NOT EXISTS (
          SELECT 1 FROM public.resources r
          WHERE r.tenant_id = a.tenant_id AND r.id = a.resource_id
      )
    ORDER BY 1, 2
    LIMIT least(greatest(max_rows, 1), 10000)
$$;
REVOKE ALL ON FUNCTION pulse_alert_orphans(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_alert_orphans(integer) TO pulse_app;
