-- Run dispatch: a run is recorded `queued` when it is accepted, but its `jobs.watch` job is
-- enqueued only when the patrol-scheduler's dispatcher admits it (cadence, fairness, capacity).
-- `dispatched_at` is set in the transaction that writes the job's outbox row, so a run has a job
-- exactly when it has a dispatch time.

ALTER TABLE patrol_runs ADD COLUMN dispatched_at timestamptz;
-- Runs accepted before this migration had their job written with the record.
UPDATE patrol_runs SET dispatched_at = queued_at;

-- The dispatcher's work list: accepted runs still waiting for admission, oldest first.
CREATE INDEX patrol_runs_undispatched ON patrol_runs (queued_at)
    WHERE status = 'queued' AND dispatched_at IS NULL;

-- Every tenant with the cadence it stored (NULL: not set; the operator's config or the default
-- applies) and when its last successful full run completed, at most `max_rows`, in id order.
-- The dispatcher's door through row-level security: identities and schedule facts only.
CREATE FUNCTION pulse_patrol_schedule(max_rows integer)
RETURNS TABLE (tenant_id text, patrol_interval_minutes integer,
               last_successful_full_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT t.id,
           CASE WHEN jsonb_typeof(s.document -> 'patrol_interval_minutes') = 'number'
                THEN (s.document ->> 'patrol_interval_minutes')::numeric::integer END,
           (SELECT r.completed_at FROM public.patrol_runs r
            WHERE r.tenant_id = t.id AND r.run_type = 'full' AND r.completed_at IS NOT NULL
              AND r.status IN ('healthy', 'issues_found')
            ORDER BY r.completed_at DESC LIMIT 1)
    FROM public.tenants t
    LEFT JOIN public.ai_settings s ON s.tenant_id = t.id
    ORDER BY t.id
    LIMIT least(greatest(max_rows, 1), 100000)
$$;
REVOKE ALL ON FUNCTION pulse_patrol_schedule(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_patrol_schedule(integer) TO pulse_app;

-- Runs of every tenant waiting for dispatch, oldest accepted first, at most `max_rows`.
-- Identities and the facts admission orders by; each run is dispatched in its own tenant's
-- transaction.
CREATE FUNCTION pulse_undispatched_runs(max_rows integer)
RETURNS TABLE (tenant_id text, run_id uuid, run_type text, trigger_reason text,
               queued_at timestamptz, scope_resource_ids text[])
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT r.tenant_id, r.id, r.run_type, r.trigger_reason, r.queued_at, r.scope_resource_ids
    FROM public.patrol_runs r
    WHERE r.status = 'queued' AND r.dispatched_at IS NULL
    ORDER BY r.queued_at, r.id
    LIMIT least(greatest(max_rows, 1), 100000)
$$;
REVOKE ALL ON FUNCTION pulse_undispatched_runs(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_undispatched_runs(integer) TO pulse_app;

-- Dispatched runs of every tenant that have not ended yet (a dispatcher taking over resumes
-- them as in flight), at most `max_rows`.
CREATE FUNCTION pulse_dispatched_in_flight(max_rows integer)
RETURNS TABLE (tenant_id text, run_id uuid, run_type text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT r.tenant_id, r.id, r.run_type
    FROM public.patrol_runs r
    WHERE r.status IN ('queued', 'running') AND r.dispatched_at IS NOT NULL
    ORDER BY r.dispatched_at
    LIMIT least(greatest(max_rows, 1), 100000)
$$;
REVOKE ALL ON FUNCTION pulse_dispatched_in_flight(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_dispatched_in_flight(integer) TO pulse_app;

-- Of the named runs (tenant and id pairs), those that ended, with how and when.
CREATE FUNCTION pulse_finished_runs(tenant_ids text[], run_ids uuid[])
RETURNS TABLE (tenant_id text, run_id uuid, run_type text, status text,
               completed_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT r.tenant_id, r.id, r.run_type, r.status, r.completed_at
    FROM unnest(tenant_ids, run_ids) AS w (tenant_id, run_id)
    JOIN public.patrol_runs r ON r.tenant_id = w.tenant_id AND r.id = w.run_id
    WHERE r.completed_at IS NOT NULL
$$;
REVOKE ALL ON FUNCTION pulse_finished_runs(text[], uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_finished_runs(text[], uuid[]) TO pulse_app;
