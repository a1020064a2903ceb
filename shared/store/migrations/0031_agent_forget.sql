-- An operator can forget an agent (a decommissioned host): its resources are deleted and the
-- agent row stays, `forgotten`, so the foreign keys of its history hold and an agent that still
-- runs comes back, online, with its next report. A forgotten agent is never swept offline (only
-- `online` agents are), never evaluated by the alert floor and never counted against the
-- `agents` quota.

ALTER TABLE agents DROP CONSTRAINT agents_status_check;
ALTER TABLE agents ADD CONSTRAINT agents_status_check
    CHECK (status IN ('online', 'offline', 'forgotten'));

CREATE OR REPLACE FUNCTION pulse_alert_scan(max_rows integer)
RETURNS TABLE (tenant_id text, agent_id text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT a.tenant_id, a.id
    FROM public.agents a
    LEFT JOIN public.alert_agent_marks m ON m.tenant_id = a.tenant_id AND m.agent_id = a.id
    WHERE a.status <> 'forgotten'
      AND (m.agent_id IS NULL OR m.last_seen_at < a.last_seen_at OR m.status <> a.status)
    ORDER BY a.last_seen_at
    LIMIT least(greatest(max_rows, 1), 10000)
$$;
