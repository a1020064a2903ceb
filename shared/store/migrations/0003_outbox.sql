-- The transactional outbox: a message to publish is inserted in the same transaction as the
-- change it announces; the relay (pulse-bus OutboxRelay) publishes unpublished rows in id order
-- with "outbox-<id>" as Nats-Msg-Id and only then sets published_at.
--
-- A system table read by the relay across tenants: no row-level security on purpose. The
-- application writes rows of its own tenant only through pulse_bus::outbox::enqueue.

CREATE TABLE outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenants (id),
    subject         text NOT NULL CHECK (length(subject) BETWEEN 1 AND 1024),
    message_type    text NOT NULL CHECK (length(message_type) BETWEEN 1 AND 200),
    schema_version  integer NOT NULL CHECK (schema_version >= 1),
    -- extra headers (traceparent...), a flat object of strings
    headers         jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(headers) = 'object'),
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz,
    -- set when the row can never be published (malformed); such rows are skipped
    failed_at       timestamptz,
    last_error      text
);

-- The relay's claim: unpublished, not failed, in id order.
CREATE INDEX outbox_pending ON outbox (id) WHERE published_at IS NULL AND failed_at IS NULL;
-- Pruning of published rows by age.
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

GRANT SELECT, INSERT, UPDATE, DELETE ON outbox TO pulse_app;
GRANT USAGE, SELECT ON SEQUENCE outbox_id_seq TO pulse_app;
