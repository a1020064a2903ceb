-- The connector service (ADR 0013): one poller per connection, chosen by lease, reporting to the
-- relay as agent `pve.<name>` with a token bound to that agent id.
--
-- Tokens: `agent_id`, when set, is the only agent id the token may report as. The relay refuses
-- a token bound elsewhere, and refuses the connector prefixes (`pve.`, `pbs.`) to every token not
-- bound to them, so no host agent can speak for a cluster.
--
-- Connections: `cadence_seconds` is how often the connector reads the cluster; the lease columns
-- say which connector replica reads it until when (`lease_generation` grows with each claim, so a
-- renewal is a compare-and-set that fails the moment another replica took over); the agent
-- token is minted by the connector on its first claim, sealed with the master key like the API
-- token secret (associated data `pulse-connector-token|<tenant>|<id>`), and revoked when the
-- connection is removed.
--
-- Liveness: an agent is swept offline after the relay's timeout or three of its own report
-- intervals, whichever is longer, so a cluster read every 30 s is not offline between reads.

ALTER TABLE api_tokens ADD COLUMN agent_id text CHECK (agent_id ~ '^[A-Za-z0-9._-]{1,128}$');

DROP FUNCTION pulse_token_by_hash(bytea);
CREATE FUNCTION pulse_token_by_hash(presented bytea)
RETURNS TABLE (
    id uuid, tenant_id text, name text, scopes text[], created_by uuid,
    expires_at timestamptz, revoked_at timestamptz, agent_id text
)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT t.id, t.tenant_id, t.name, t.scopes, t.created_by, t.expires_at, t.revoked_at,
           t.agent_id
    FROM public.api_tokens t
    WHERE t.token_hash = presented
$$;
REVOKE ALL ON FUNCTION pulse_token_by_hash(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_token_by_hash(bytea) TO pulse_app;

ALTER TABLE connections
    ADD COLUMN cadence_seconds    integer NOT NULL DEFAULT 30
        CHECK (cadence_seconds BETWEEN 10 AND 3600),
    ADD COLUMN lease_holder       text,
    ADD COLUMN lease_expires_at   timestamptz,
    ADD COLUMN lease_generation   bigint NOT NULL DEFAULT 0,
    ADD COLUMN agent_token_id     uuid,
    ADD COLUMN agent_token_sealed bytea,
    ADD COLUMN agent_token_nonce  bytea,
    ADD COLUMN agent_token_key_id text,
    ADD CONSTRAINT connections_agent_token_whole CHECK (
        (agent_token_id IS NULL) = (agent_token_sealed IS NULL)
        AND (agent_token_sealed IS NULL) = (agent_token_nonce IS NULL)
        AND (agent_token_nonce IS NULL) = (agent_token_key_id IS NULL));
-- The claim scan: connections whose lease is free or lapsed.
CREATE INDEX connections_lease ON connections (lease_expires_at NULLS FIRST);

-- Claims up to `max_rows` connections of `kinds` whose lease is free or lapsed, for `holder`,
-- until now + `lease_ms`; a connection of a suspended tenant is not claimed. Rows another
-- replica is claiming at the same instant are skipped, never waited for. The one door through
-- row-level security for the connector, which serves every tenant; it returns identities only.
CREATE FUNCTION pulse_claim_connections(holder text, kinds text[], lease_ms bigint,
                                        max_rows integer)
RETURNS TABLE (tenant_id text, id uuid, generation bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    WITH due AS (
        SELECT c.tenant_id, c.id
        FROM public.connections c
        JOIN public.tenants t ON t.id = c.tenant_id
        WHERE c.kind = ANY (kinds)
          AND t.suspended_at IS NULL
          AND (c.lease_expires_at IS NULL OR c.lease_expires_at < now())
        ORDER BY c.lease_expires_at NULLS FIRST
        LIMIT least(greatest(max_rows, 0), 1000)
        FOR UPDATE OF c SKIP LOCKED
    )
    UPDATE public.connections c
    SET lease_holder = holder,
        lease_expires_at = now() + make_interval(secs => greatest(lease_ms, 1000) / 1000.0),
        lease_generation = c.lease_generation + 1
    FROM due
    WHERE c.tenant_id = due.tenant_id AND c.id = due.id
    RETURNING c.tenant_id, c.id, c.lease_generation
$$;
REVOKE ALL ON FUNCTION pulse_claim_connections(text, text[], bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_claim_connections(text, text[], bigint, integer) TO pulse_app;

-- Online agents silent at `at` for longer than `offline_after_ms` and three of their own report
-- intervals.
DROP FUNCTION pulse_stale_agents(timestamptz);
CREATE FUNCTION pulse_stale_agents(at timestamptz, offline_after_ms bigint)
RETURNS TABLE (tenant_id text, id text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $$
    SELECT a.tenant_id, a.id
    FROM public.agents a
    WHERE a.status = 'online'
      AND a.last_seen_at < at - make_interval(
              secs => greatest(offline_after_ms, a.report_interval_ms * 3) / 1000.0)
    ORDER BY a.last_seen_at
    LIMIT 1000
$$;
REVOKE ALL ON FUNCTION pulse_stale_agents(timestamptz, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pulse_stale_agents(timestamptz, bigint) TO pulse_app;
