-- Run leases: a `running` Patrol run is held by exactly one runner, which renews its lease while
-- it works. A lease that is not renewed in time means the runner died or lost contact; the
-- patrol-scheduler's sweeper then ends the run `error` (cause `runner_lost`).
--
-- Lease times are the database's clock (`now()` at renewal), never a runner's, so runners on
-- machines with skewed clocks neither steal nor lose leases. A terminal run keeps its runner id
-- (who ran it) and drops the expiry.

ALTER TABLE patrol_runs
    ADD COLUMN runner_id text CHECK (length(runner_id) BETWEEN 1 AND 200),
    ADD COLUMN lease_expires_at timestamptz;
-- Only a running run has an expiry, and an expiry always has a holder.
ALTER TABLE patrol_runs ADD CONSTRAINT patrol_runs_lease_is_held
    CHECK (lease_expires_at IS NULL OR (status = 'running' AND runner_id IS NOT NULL));

-- The sweeper: running runs by lease expiry, across tenants.
CREATE INDEX patrol_runs_lease_expiry ON patrol_runs (lease_expires_at)
    WHERE status = 'running';

-- Running runs of every tenant whose lease expired, oldest expiry first, at most `max_rows`.
-- The sweeper's door through row-level security: identities only, and the runs are then ended
-- one by one in a transaction of their own tenant.
CREATE FUNCTION pulse_expired_run_leases(max_rows integer)
RETURNS TABLE (tenant_id text, run_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT r.tenant_id, r.id
    FROM public.patrol_runs r
    WHERE r.status = 'running' AND r.lease_expires_at < now()
    ORDER BY r.lease_expires_at
    LIMIT least(greatest(max_rows, 1), 10000)
$$;
REVOKE ALL ON FUNCTION pulse_expired_run_leases(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_expired_run_leases(integer) TO pulse_app;
