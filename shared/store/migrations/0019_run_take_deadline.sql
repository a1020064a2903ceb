-- The take deadline of a dispatched run: a run still `queued` a while after its `jobs.watch`
-- job was written was taken by no runner (none is running, none is connected, or the job was
-- lost). The patrol-scheduler writes its job again a bounded number of times, each time moving
-- `dispatched_at` to the new job's transaction and counting it in `redispatch_count`; after the
-- last one it ends the run `error` with cause `runner_unavailable`.
--
-- Deadlines are measured on the database's clock (`now()`), like run leases.

ALTER TABLE patrol_runs
    ADD COLUMN redispatch_count integer NOT NULL DEFAULT 0 CHECK (redispatch_count >= 0);

-- The sweeper: dispatched runs no runner has taken yet, by dispatch time.
CREATE INDEX patrol_runs_untaken ON patrol_runs (dispatched_at)
    WHERE status = 'queued' AND dispatched_at IS NOT NULL;

-- Dispatched runs of every tenant still `queued` whose job was written at least
-- `take_deadline_ms` ago, oldest dispatch first, at most `max_rows`, with the database's clock.
-- The sweeper's door through row-level security: identities and the facts the job and the
-- decision need; each run is then handled in a transaction of its own tenant.
CREATE FUNCTION pulse_untaken_runs(take_deadline_ms bigint, max_rows integer)
RETURNS TABLE (tenant_id text, run_id uuid, run_type text, trigger_reason text,
               dispatched_at timestamptz, redispatch_count integer, db_now timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT r.tenant_id, r.id, r.run_type, r.trigger_reason, r.dispatched_at, r.redispatch_count,
           now()
    FROM public.patrol_runs r
    WHERE r.status = 'queued' AND r.dispatched_at IS NOT NULL
      AND r.dispatched_at <= now() - make_interval(secs => greatest(take_deadline_ms, 0) / 1000.0)
    ORDER BY r.dispatched_at
    LIMIT least(greatest(max_rows, 1), 10000)
$$;
REVOKE ALL ON FUNCTION pulse_untaken_runs(bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_untaken_runs(bigint, integer) TO pulse_app;
