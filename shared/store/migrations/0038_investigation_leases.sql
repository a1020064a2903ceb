-- Investigation leases: a `running` investigation attempt is held by one model-runner, which
-- renews its lease while it works. When a runner dies mid-investigation its lease lapses and
-- another runner takes the attempt over (it runs again from the committed finding: the
-- investigation is read-only until its one proposal). `takeovers` counts how often that
-- happened, so an attempt that keeps killing its runners ends instead of being retried forever.
--
-- Lease times are the database's clock. An ended attempt keeps its runner id (who ended it)
-- and drops the expiry. Attempts begun before this migration have no lease and still end by
-- the investigation timeout.

ALTER TABLE investigations
    ADD COLUMN runner_id text CHECK (length(runner_id) BETWEEN 1 AND 200),
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN takeovers integer NOT NULL DEFAULT 0 CHECK (takeovers >= 0);
ALTER TABLE investigations ADD CONSTRAINT investigations_lease_is_held
    CHECK (lease_expires_at IS NULL OR (status = 'running' AND runner_id IS NOT NULL));

CREATE INDEX investigations_lease_expiry ON investigations (lease_expires_at)
    WHERE status = 'running';

-- Running attempts of every tenant whose lease expired, oldest expiry first, at most
-- `max_rows`: identities only, each is then taken over in a transaction of its own tenant.
CREATE FUNCTION pulse_expired_investigation_leases(max_rows integer)
RETURNS TABLE (tenant_id text, investigation_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT i.tenant_id, i.id
    FROM public.investigations i
    WHERE i.status = 'running' AND i.lease_expires_at < now()
    ORDER BY i.lease_expires_at
    LIMIT least(greatest(max_rows, 1), 10000)
$$;
REVOKE ALL ON FUNCTION pulse_expired_investigation_leases(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_expired_investigation_leases(integer) TO pulse_app;
