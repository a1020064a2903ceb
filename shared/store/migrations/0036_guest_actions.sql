-- Guest power actions (`guest.start`, `guest.shutdown`, `guest.reboot`, `guest.stop`) on the
-- guests of a Proxmox VE connection, run by the connector that holds the connection's lease.
--
-- Connections: `guest_actions` is the operator's switch, off by default. While it is off the
-- broker's catalogue offers no guest capability for the connection's guests (so nothing can be
-- planned) and the connector refuses any command it is sent anyway.
--
-- Tokens: a connector token now also carries `agent:exec`, so the relay forwards commands to its
-- session; the switch above, not the token, decides whether a command runs.
--
-- The command log: the connector's idempotency log, in Postgres because the replica that runs a
-- command may not be the one that receives it again. A command is written `accepted` before the
-- Proxmox API is asked, gets the task's UPID as soon as Proxmox answers, and `finished` with its
-- receipt. A redelivered action id returns the recorded receipt and never runs again; an
-- accepted action with a UPID is waited on (any replica can resume the wait); an accepted action
-- without one (the connector stopped before Proxmox answered) is refused, never re-run.

ALTER TABLE connections ADD COLUMN guest_actions boolean NOT NULL DEFAULT false;

UPDATE api_tokens
SET scopes = array_append(scopes, 'agent:exec')
WHERE agent_id IS NOT NULL
  AND (agent_id LIKE 'pve.%' OR agent_id LIKE 'pbs.%')
  AND NOT ('agent:exec' = ANY (scopes));

CREATE TABLE connector_commands (
    tenant_id        text NOT NULL REFERENCES tenants (id),
    action_id        text NOT NULL CHECK (length(action_id) BETWEEN 1 AND 256),
    connection_id    uuid NOT NULL,
    capability       text NOT NULL,
    target           text NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    state            text NOT NULL CHECK (state IN ('accepted', 'finished')),
    upid             text,
    accepted_at      timestamptz NOT NULL,
    receipt          jsonb,
    finished_at      timestamptz,
    PRIMARY KEY (tenant_id, action_id),
    FOREIGN KEY (tenant_id, connection_id) REFERENCES connections (tenant_id, id)
        ON DELETE CASCADE,
    CHECK ((state = 'finished') = (receipt IS NOT NULL))
);
CREATE INDEX connector_commands_connection ON connector_commands (tenant_id, connection_id);

ALTER TABLE connector_commands ENABLE ROW LEVEL SECURITY;
ALTER TABLE connector_commands FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON connector_commands
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON connector_commands TO pulse_app;

-- The alert floor asks, for each guest it evaluates, when Pulse last completed (or is executing)
-- an approved `guest.shutdown` or `guest.stop` of it: a stop after the guest was last seen running
-- was meant, so `guest_stopped` does not fire for it.
CREATE INDEX actions_ran_by_resource ON actions (tenant_id, resource_id, capability)
    WHERE state IN ('executing', 'completed');
