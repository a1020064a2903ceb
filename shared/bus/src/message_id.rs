//! Every `Nats-Msg-Id` the bus sends, in one place.
//!
//! JetStream drops a message whose id the stream saw within its duplicate window (2 minutes by
//! default) as a copy. That is what makes a retried publish safe, and also how a message is lost
//! when two different messages share an id. So an id must be the same for every publish of one
//! message and unique across everything else that reaches the same stream: other processes,
//! other databases on the same NATS server (a second installation, a shard, a database
//! re-created or restored from a backup), and a stream that was deleted and created again. A
//! counter that restarts (a row id, a stream sequence) is never an id on its own.
//!
//! - [`fresh`]: a message published straight to the stream gets a new UUID v7 unless the caller
//!   names one ([`crate::Bus::publish_job`], [`crate::Bus::publish_event`]).
//! - Outbox rows: `outbox-<random UUID>`, fixed by the database when the row is inserted (the
//!   `message_id` column's default), so a relay that republishes a row sends the same id. The
//!   relay reads it from the row; [`crate::outbox::message_id_of`] shows it.
//! - [`dead_letter`]: the original message's id together with its place in its stream, so a
//!   retried dead-letter publish of one stored message is dropped and no other message's is.

/// A new message id: a UUID v7 (time-ordered, 74 random bits).
pub fn fresh() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The dead-letter id of the message stored at `sequence` of `stream` whose own id is
/// `original` (`None` when it had none). The same for every delivery of that stored message.
/// The original id (unique since every publisher follows this module) keeps the dead-letter id
/// unique when a deleted stream is created again and its sequences restart.
pub fn dead_letter(stream: &str, sequence: u64, original: Option<&str>) -> String {
    match original {
        Some(original) => format!("dlq-{stream}-{sequence}-{original}"),
        None => format!("dlq-{stream}-{sequence}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_never_repeat() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| fresh()).collect();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn a_dead_letter_id_names_the_stored_message_and_its_original_id() {
        let a = dead_letter("JOBS", 7, Some("outbox-0b6c"));
        assert_eq!(a, dead_letter("JOBS", 7, Some("outbox-0b6c")));
        // A stream created again restarts its sequences: the original id tells them apart.
        assert_ne!(a, dead_letter("JOBS", 7, Some("outbox-91fe")));
        assert_ne!(a, dead_letter("JOBS", 8, Some("outbox-0b6c")));
        assert_ne!(a, dead_letter("EVENTS", 7, Some("outbox-0b6c")));
        assert_eq!(dead_letter("JOBS", 7, None), "dlq-JOBS-7");
    }
}
