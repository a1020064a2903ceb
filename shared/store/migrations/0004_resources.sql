-- Agents, the resources they report (canonical ids, source ids, aliases) and metric history.
--
-- Every table is tenant-owned with the same FORCE'd row-level security as 0001. The relay's
-- liveness check must find silent agents before it knows their tenant: pulse_stale_agents is the
-- one door through RLS for it and returns identities only.

CREATE TABLE agents (
    tenant_id          text NOT NULL REFERENCES tenants (id),
    id                 text NOT NULL CHECK (id ~ '^[A-Za-z0-9._-]{1,128}$'),
    hostname           text NOT NULL CHECK (length(hostname) <= 256),
    agent_version      text NOT NULL CHECK (length(agent_version) <= 64),
    status             text NOT NULL CHECK (status IN ('online', 'offline')),
    report_interval_ms bigint NOT NULL CHECK (report_interval_ms > 0),
    token_id           uuid,
    connected_at       timestamptz NOT NULL DEFAULT now(),
    last_seen_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
-- The liveness scan: online agents by last report.
CREATE INDEX agents_online_last_seen ON agents (last_seen_at) WHERE status = 'online';
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agents
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON agents TO pulse_app;

CREATE TABLE resources (
    tenant_id     text NOT NULL REFERENCES tenants (id),
    id            text NOT NULL CHECK (length(id) BETWEEN 1 AND 1024),
    resource_type text NOT NULL CHECK (resource_type IN ('host', 'app-container', 'service', 'storage')),
    source_id     text NOT NULL CHECK (length(source_id) <= 512),
    name          text NOT NULL CHECK (length(name) <= 256),
    parent_id     text,
    agent_id      text NOT NULL,
    status        text NOT NULL CHECK (status IN ('running', 'exited', 'stopped', 'unknown')),
    health        text NOT NULL CHECK (health IN ('healthy', 'unhealthy', 'unknown')),
    restart_count integer CHECK (restart_count >= 0),
    labels        jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(labels) = 'object'),
    details       jsonb NOT NULL DEFAULT '{}'::jsonb,
    observed_at   timestamptz NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, id)
);
-- The resolver looks up by source id and by name; listings and liveness by agent and type.
CREATE INDEX resources_source_id ON resources (tenant_id, source_id);
CREATE INDEX resources_name ON resources (tenant_id, name);
CREATE INDEX resources_agent ON resources (tenant_id, agent_id);
CREATE INDEX resources_type ON resources (tenant_id, resource_type, id);
ALTER TABLE resources ENABLE ROW LEVEL SECURITY;
ALTER TABLE resources FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON resources
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON resources TO pulse_app;

CREATE TABLE resource_aliases (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    resource_id text NOT NULL,
    alias       text NOT NULL CHECK (length(alias) BETWEEN 1 AND 256),
    PRIMARY KEY (tenant_id, resource_id, alias),
    FOREIGN KEY (tenant_id, resource_id) REFERENCES resources (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX resource_aliases_alias ON resource_aliases (tenant_id, alias);
ALTER TABLE resource_aliases ENABLE ROW LEVEL SECURITY;
ALTER TABLE resource_aliases FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON resource_aliases
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON resource_aliases TO pulse_app;

-- History outlives the resource row (a removed service keeps its past), so no foreign key.
CREATE TABLE metric_samples (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    resource_id text NOT NULL,
    metric      text NOT NULL CHECK (length(metric) BETWEEN 1 AND 128),
    at          timestamptz NOT NULL,
    value       double precision NOT NULL
);
CREATE INDEX metric_samples_history ON metric_samples (tenant_id, resource_id, metric, at DESC);
ALTER TABLE metric_samples ENABLE ROW LEVEL SECURITY;
ALTER TABLE metric_samples FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON metric_samples
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, DELETE ON metric_samples TO pulse_app;

CREATE FUNCTION pulse_stale_agents(cutoff timestamptz)
RETURNS TABLE (tenant_id text, id text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT a.tenant_id, a.id
    FROM public.agents a
    WHERE a.status = 'online' AND a.last_seen_at < cutoff
    ORDER BY a.last_seen_at
    LIMIT 1000
$$;
REVOKE ALL ON FUNCTION pulse_stale_agents(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_stale_agents(timestamptz) TO pulse_app;
