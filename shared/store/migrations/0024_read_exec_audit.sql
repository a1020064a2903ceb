-- Every `pulse_read` exec the agent-relay was asked for, ran or refused: which agent, the
-- command (bounded and redacted; never its output), how it ended, how long it took, how much
-- it printed, who asked and when. Rows are only inserted and read: the audit is not edited.

CREATE TABLE read_exec_audit (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants (id),
    occurred_at  timestamptz NOT NULL,
    agent_id     text NOT NULL CHECK (length(agent_id) BETWEEN 1 AND 128),
    command      text NOT NULL CHECK (length(command) BETWEEN 1 AND 2048),
    outcome      text NOT NULL CHECK (outcome IN ('ran', 'timed_out', 'refused', 'failed')),
    exit_status  integer,
    -- The refusal or failure code (`read_exec_disabled`, `exec_write_command`, ...).
    code         text CHECK (code IS NULL OR length(code) BETWEEN 1 AND 64),
    duration_ms  bigint NOT NULL CHECK (duration_ms >= 0),
    output_bytes bigint NOT NULL CHECK (output_bytes >= 0),
    truncated    boolean NOT NULL DEFAULT false,
    requester    text CHECK (requester IS NULL OR length(requester) BETWEEN 1 AND 200),
    -- A refusal names its code and ran nothing; a command that ran has no refusal code.
    CHECK (outcome <> 'refused' OR (code IS NOT NULL AND exit_status IS NULL)),
    CHECK (outcome <> 'ran' OR code IS NULL)
);
CREATE INDEX read_exec_audit_tenant_time ON read_exec_audit (tenant_id, occurred_at);
ALTER TABLE read_exec_audit ENABLE ROW LEVEL SECURITY;
ALTER TABLE read_exec_audit FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON read_exec_audit
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT ON read_exec_audit TO pulse_app;
