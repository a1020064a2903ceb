-- Pulse Assistant sessions and their transcripts.
--
-- A session belongs to one tenant. Its title and every message body are sealed with the master
-- key (ChaCha20-Poly1305, as provider credentials are); the associated data binds a ciphertext to
-- its tenant, session and row, so a row copied elsewhere does not open. What stays in clear is
-- what the service needs to order and govern a transcript without reading it: roles, states,
-- the undo mark, the model route, sizes and times.
--
-- `kind` separates chat sessions from the system sessions of Patrol and investigations, which
-- are never offered for resume. `state` of a tool row is `running` only while its turn runs;
-- ending a turn in any way (done, error, abort, a lost client) closes such rows, so a transcript
-- never keeps an orphan tool row.

CREATE TABLE chat_sessions (
    tenant_id          text NOT NULL REFERENCES tenants (id),
    id                 uuid NOT NULL,
    kind               text NOT NULL DEFAULT 'chat'
        CHECK (kind IN ('chat', 'patrol', 'investigation')),
    title_sealed       bytea NOT NULL,
    title_nonce        bytea NOT NULL,
    key_id             text NOT NULL,
    created_by         text NOT NULL,
    control_level      text NOT NULL DEFAULT 'read_only'
        CHECK (control_level IN ('read_only', 'controlled', 'autonomous')),
    approval_required  boolean NOT NULL DEFAULT false,
    finding_id         text,
    status             text NOT NULL DEFAULT 'idle' CHECK (status IN ('idle', 'running')),
    -- The turn that holds `running`; abort and steer address it.
    active_turn        uuid,
    model_route        text,
    forked_from        uuid,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, id)
);
CREATE INDEX chat_sessions_recent ON chat_sessions (tenant_id, updated_at DESC);
ALTER TABLE chat_sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE chat_sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON chat_sessions
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON chat_sessions TO pulse_app;

CREATE TABLE chat_messages (
    tenant_id    text NOT NULL,
    session_id   uuid NOT NULL,
    seq          bigint NOT NULL,
    id           uuid NOT NULL,
    turn_id      uuid NOT NULL,
    role         text NOT NULL
        CHECK (role IN ('user', 'assistant', 'tool', 'approval', 'question', 'outcome',
                        'summary', 'steer', 'error')),
    state        text NOT NULL DEFAULT 'done'
        CHECK (state IN ('done', 'running', 'failed', 'cancelled', 'denied', 'pending',
                         'applied')),
    undone       boolean NOT NULL DEFAULT false,
    -- Rows a summary replaced stay for the record but leave the model's context.
    compacted    boolean NOT NULL DEFAULT false,
    body_sealed  bytea NOT NULL,
    body_nonce   bytea NOT NULL,
    key_id       text NOT NULL,
    model_route  text,
    -- The action an approval row or an outcome row is about.
    action_id    uuid,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id, seq),
    UNIQUE (tenant_id, id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES chat_sessions (tenant_id, id) ON DELETE CASCADE
);
CREATE INDEX chat_messages_running ON chat_messages (tenant_id, session_id) WHERE state = 'running';
ALTER TABLE chat_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE chat_messages FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON chat_messages
    USING (tenant_id = current_setting('app.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('app.tenant_id', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON chat_messages TO pulse_app;
