-- Patrol findings, their bounded lifecycle events, and operator suppression rules.
--
-- `pulse-store::findings` is the only writer. As in 0009, the columns the store filters, orders
-- or compares on are plain columns and the whole record (Finding as JSON, without its lifecycle)
-- is `record`; both are rewritten by one compare-and-swap UPDATE on `version`. Lifecycle events
-- live in finding_events (at most 50 per finding, the oldest deleted in the same transaction).
-- Every table is tenant-owned with the same FORCE'd row-level security as 0004.

CREATE TABLE findings (
    tenant_id    text NOT NULL REFERENCES tenants (id),
    -- FindingId: first 8 bytes of sha256(resource_id:category:key) as lowercase hex.
    id           text NOT NULL CHECK (id ~ '^[0-9a-f]{16}$'),
    key          text NOT NULL CHECK (key ~ '^[a-z0-9]+(-[a-z0-9]+)*$' AND length(key) <= 64),
    resource_id  text NOT NULL CHECK (length(resource_id) BETWEEN 1 AND 1024),
    category     text NOT NULL CHECK (category IN ('performance', 'capacity', 'reliability',
                                                   'backup', 'security', 'general')),
    severity     text NOT NULL CHECK (severity IN ('info', 'watch', 'warning', 'critical')),
    status       text NOT NULL CHECK (status IN ('active', 'resolved', 'snoozed', 'dismissed',
                                                 'suppressed')),
    detected_at  timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    resolved_at  timestamptz,
    -- Compare-and-swap token: every write names the version it read and bumps it.
    version      bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    record       jsonb NOT NULL CHECK (jsonb_typeof(record) = 'object'),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id),
    CHECK ((status = 'resolved') = (resolved_at IS NOT NULL))
);
-- Open (active or snoozed) findings of a tenant, newest first.
CREATE INDEX findings_open ON findings (tenant_id, last_seen_at DESC, id)
    WHERE status IN ('active', 'snoozed');
-- Findings of one resource (sibling merge, resource pages).
CREATE INDEX findings_by_resource ON findings (tenant_id, resource_id, status);
-- Everything of a tenant, newest first (listing with resolved).
CREATE INDEX findings_latest ON findings (tenant_id, last_seen_at DESC, id);
ALTER TABLE findings ENABLE ROW LEVEL SECURITY;
ALTER TABLE findings FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON findings
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE ON findings TO pulse_app;

CREATE TABLE finding_events (
    tenant_id  text NOT NULL,
    finding_id text NOT NULL,
    -- Per-finding sequence, gap-free only within the retained window.
    seq        bigint NOT NULL CHECK (seq >= 1),
    at         timestamptz NOT NULL,
    event_type text NOT NULL CHECK (length(event_type) BETWEEN 1 AND 64),
    -- LifecycleEvent as JSON ({at, type, message, from, to, metadata}).
    event      jsonb NOT NULL CHECK (jsonb_typeof(event) = 'object'),
    PRIMARY KEY (tenant_id, finding_id, seq),
    FOREIGN KEY (tenant_id, finding_id) REFERENCES findings (tenant_id, id)
);
ALTER TABLE finding_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE finding_events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON finding_events
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
-- DELETE: the store trims each finding's events to the newest 50.
GRANT SELECT, INSERT, DELETE ON finding_events TO pulse_app;

CREATE TABLE finding_suppressions (
    tenant_id   text NOT NULL REFERENCES tenants (id),
    -- SuppressionId: derived from the scope, so suppressing one scope twice is one rule.
    id          text NOT NULL CHECK (id ~ '^[0-9a-f]{16}$'),
    -- NULL: every resource / every category; never both (that would silence Patrol).
    resource_id text CHECK (length(resource_id) BETWEEN 1 AND 1024),
    category    text CHECK (category IN ('performance', 'capacity', 'reliability', 'backup',
                                         'security', 'general')),
    created_at  timestamptz NOT NULL,
    created_by  text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 256),
    PRIMARY KEY (tenant_id, id),
    CHECK (resource_id IS NOT NULL OR category IS NOT NULL)
);
ALTER TABLE finding_suppressions ENABLE ROW LEVEL SECURITY;
ALTER TABLE finding_suppressions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON finding_suppressions
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, DELETE ON finding_suppressions TO pulse_app;
