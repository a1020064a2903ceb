//! What the event streams (`GET /api/ai/patrol/stream`, `GET /api/agent/events`) take: the
//! resume point. An event id is the message's sequence in the events stream.

use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// Resume after this event id (the `Last-Event-ID` header wins); empty for no resume point.
    #[schemars(with = "Option<EventId>")]
    pub last_event_id: Option<String>,
}

/// Digits of an event id at most: every such number is a sequence number (`u64`).
const MAX_EVENT_ID_DIGITS: usize = 19;

/// An event id as [`EventId::parse`] reads it: up to [`MAX_EVENT_ID_DIGITS`] decimal digits,
/// or nothing, between optional spaces and tabs.
pub struct EventId;

impl EventId {
    fn pattern() -> String {
        format!("^[ \\t]*([0-9]{{1,{MAX_EVENT_ID_DIGITS}}})?[ \\t]*$")
    }

    /// The sequence number `raw` names, `Ok(None)` for no resume point (empty, as SSE resets
    /// the last event id), or `Err(())` when it is not an event id.
    #[allow(clippy::result_unit_err)]
    pub fn parse(raw: &str) -> Result<Option<u64>, ()> {
        let raw = raw.trim_matches([' ', '\t']);
        if raw.is_empty() {
            return Ok(None);
        }
        if raw.len() > MAX_EVENT_ID_DIGITS || !raw.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        raw.parse::<u64>().map(Some).map_err(|_| ())
    }
}

impl schemars::JsonSchema for EventId {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "EventId".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": Self::pattern()})
    }
}

/// The `gap` event: events after `last_event_id` are no longer retained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Gap {
    pub last_event_id: u64,
    /// Delivery resumes with the first event after this id.
    pub resumed_after: u64,
}
