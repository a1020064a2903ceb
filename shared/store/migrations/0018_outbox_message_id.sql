-- Outbox message ids unique across databases and time. The relay publishes each row with its
-- `message_id` as Nats-Msg-Id. Row ids restart in every database (a second installation, a
-- shard, a database re-created or restored from a backup), so an id derived from them would be
-- taken by JetStream's duplicate window for a copy of another database's row and dropped; a
-- random UUID per row is not. The id is fixed when the row is written, so a relay that publishes
-- a row again (it died between the stream's ack and the mark) still sends the same id and the
-- stream drops the copy.
--
-- Rows written before this migration keep the id they were (or will be) published with.

ALTER TABLE outbox ADD COLUMN message_id text;
UPDATE outbox SET message_id = 'outbox-' || id;
ALTER TABLE outbox
    ALTER COLUMN message_id SET DEFAULT 'outbox-' || gen_random_uuid(),
    ALTER COLUMN message_id SET NOT NULL,
    ADD CONSTRAINT outbox_message_id_length CHECK (length(message_id) BETWEEN 1 AND 200);
