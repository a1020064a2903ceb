//! What the gateway's Server-Sent Event streams over the JetStream events stream share: the
//! per-tenant bound on open streams (and their end at shutdown), the resume point a client
//! gives (`Last-Event-ID`, or `?last_event_id=`), where delivery continues for it and the `gap`
//! frame when events after it are no longer retained, and an event message's name and data.
//!
//! An event id is the message's sequence in the events stream, so an id means the same on every
//! gateway and on every stream over it (`/api/ai/patrol/stream`, `/api/agent/events`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::Event;
use pulse_api::events::{EventId, Gap};
use pulse_capabilities::ErrorCode;
use pulse_domain::TenantId;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;

/// How often an idle stream shows it is alive.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
/// The server deletes a consumer nobody pulls from for this long (the gateway died).
pub const CONSUMER_INACTIVE_THRESHOLD: Duration = Duration::from_secs(30);
/// The `Last-Event-ID` header (a browser's `EventSource` sends it on reconnect).
pub const LAST_EVENT_ID: &str = "last-event-id";

/// The open event streams: counted per tenant against the bound, and ended at shutdown (an open
/// stream would otherwise hold the graceful shutdown forever).
#[derive(Debug)]
pub struct StreamLimits {
    max_per_tenant: usize,
    open: Mutex<HashMap<TenantId, usize>>,
    shutdown: CancellationToken,
}

/// One open stream; closing it (dropping this) frees the slot.
#[derive(Debug)]
pub struct StreamPermit {
    limits: Arc<StreamLimits>,
    tenant: TenantId,
}

impl StreamLimits {
    pub fn new(max_per_tenant: usize, shutdown: CancellationToken) -> Self {
        Self {
            max_per_tenant,
            open: Mutex::new(HashMap::new()),
            shutdown,
        }
    }

    pub fn max_per_tenant(&self) -> usize {
        self.max_per_tenant
    }

    /// Cancelled when the gateway shuts down: every stream ends then.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// A slot for one more stream of `tenant`, or `None` when it holds the maximum.
    pub fn try_acquire(self: &Arc<Self>, tenant: &TenantId) -> Option<StreamPermit> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(tenant.clone()).or_insert(0);
        if *count >= self.max_per_tenant {
            return None;
        }
        *count += 1;
        Some(StreamPermit {
            limits: self.clone(),
            tenant: tenant.clone(),
        })
    }

    /// [`Self::try_acquire`], refusing with 429 `too_many_streams` when the tenant holds the
    /// maximum.
    pub fn acquire(self: &Arc<Self>, tenant: &TenantId) -> Result<StreamPermit, ApiError> {
        self.try_acquire(tenant).ok_or_else(|| {
            ApiError::new(
                ErrorCode::TooManyStreams,
                format!(
                    "this tenant already has {} event streams open (gateway.max_streams_per_tenant)",
                    self.max_per_tenant
                ),
            )
        })
    }

    /// Streams `tenant` holds open.
    pub fn open_for(&self, tenant: &TenantId) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(tenant).copied().unwrap_or(0)
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

fn parse_event_id(raw: &str) -> Result<Option<u64>, ApiError> {
    EventId::parse(raw).map_err(|()| invalid_id(raw.trim_matches([' ', '\t'])))
}

fn invalid_id(raw: &str) -> ApiError {
    let shown: String = raw.chars().take(40).collect();
    ApiError::new(
        ErrorCode::InvalidLastEventId,
        format!("Last-Event-ID {shown:?} is not an event id: expected a decimal sequence number"),
    )
}

/// The resume point: the `Last-Event-ID` header, else the `last_event_id` query parameter.
pub fn resume_point(headers: &HeaderMap, query: Option<&str>) -> Result<Option<u64>, ApiError> {
    match headers.get(LAST_EVENT_ID) {
        Some(value) => {
            let value = value
                .to_str()
                .map_err(|_| invalid_id(&String::from_utf8_lossy(value.as_bytes())))?;
            parse_event_id(value)
        }
        None => query.map_or(Ok(None), parse_event_id),
    }
}

/// Where delivery continues for a client's resume point, and whether events after it were lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// Delivery continues with the first event after this sequence.
    pub after: u64,
    pub gap: Option<Gap>,
}

/// Where delivery continues for a client that saw `last_seen`, given the stream's oldest and
/// newest retained sequence (`first_seq` is `last_seq + 1` for an empty stream): right after it,
/// or when what follows it is no longer retained, before the oldest retained event with a gap.
pub fn resume_after(last_seen: u64, first_seq: u64, last_seq: u64) -> Resume {
    let wanted = last_seen.saturating_add(1);
    // An id beyond the newest event belongs to a stream that was reset: all it holds is unseen.
    let start = if last_seen > last_seq {
        first_seq
    } else {
        wanted.max(first_seq)
    };
    let after = start.saturating_sub(1);
    let gap = (start != wanted).then_some(Gap {
        last_event_id: last_seen,
        resumed_after: after,
    });
    Resume { after, gap }
}

pub fn gap_event(gap: Gap) -> Event {
    let data = serde_json::json!({
        "last_event_id": gap.last_event_id.to_string(),
        "resumed_after": gap.resumed_after.to_string(),
        "message": "events after last_event_id are no longer retained; \
                    some events up to resumed_after were lost",
    });
    Event::default()
        .event("gap")
        .id(gap.resumed_after.to_string())
        .data(data.to_string())
}

/// The frame name of an event message: its subject after `events_prefix` (`run.accepted`,
/// `finding.created`); `None` for a subject outside it.
pub fn event_name<'a>(events_prefix: &str, subject: &'a str) -> Option<&'a str> {
    subject.strip_prefix(events_prefix)
}

/// An event message body as SSE `data`: `None` when it is not JSON (not one of ours). A body
/// with raw line breaks is re-encoded: SSE data lines cannot carry them.
pub fn event_data(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    Some(match std::str::from_utf8(payload) {
        Ok(text) if !text.contains(['\r', '\n']) => text.to_owned(),
        _ => value.to_string(),
    })
}

pub fn bus_unavailable(what: &str, error: impl std::fmt::Display) -> ApiError {
    tracing::warn!(%error, "{what}");
    ApiError::new(
        ErrorCode::ServiceUnavailable,
        "the message bus is unavailable; retry shortly",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    #[test]
    fn event_ids_are_decimal_sequences() {
        assert_eq!(parse_event_id("42").unwrap(), Some(42));
        assert_eq!(parse_event_id(" 7 ").unwrap(), Some(7));
        assert_eq!(parse_event_id("").unwrap(), None);
        assert_eq!(parse_event_id("0").unwrap(), Some(0));
        for bad in ["-1", "+1", "abc", "1.5", "0x10", "99999999999999999999999"] {
            let err = parse_event_id(bad).expect_err(bad);
            assert_eq!(err.code, ErrorCode::InvalidLastEventId, "{bad}");
        }
    }

    #[test]
    fn the_header_wins_over_the_query() {
        let mut headers = HeaderMap::new();
        assert_eq!(resume_point(&headers, Some("5")).unwrap(), Some(5));
        assert_eq!(resume_point(&headers, None).unwrap(), None);
        headers.insert(LAST_EVENT_ID, "9".parse().unwrap());
        assert_eq!(resume_point(&headers, Some("5")).unwrap(), Some(9));
        headers.insert(LAST_EVENT_ID, "nine".parse().unwrap());
        assert!(resume_point(&headers, Some("5")).is_err());
    }

    #[test]
    fn resume_continues_after_the_id_or_reports_a_gap() {
        // Retained: right after the id, no gap.
        assert_eq!(
            resume_after(7, 3, 10),
            Resume {
                after: 7,
                gap: None
            }
        );
        // The newest id: waits for the next event.
        assert_eq!(resume_after(10, 3, 10).gap, None);
        // Trimmed: from the oldest retained, with a gap.
        assert_eq!(
            resume_after(1, 5, 10),
            Resume {
                after: 4,
                gap: Some(Gap {
                    last_event_id: 1,
                    resumed_after: 4
                })
            }
        );
        // Purged (empty, first = last + 1).
        assert_eq!(
            resume_after(2, 11, 10).gap,
            Some(Gap {
                last_event_id: 2,
                resumed_after: 10
            })
        );
        // An id from before a reset: everything retained, with a gap.
        assert_eq!(
            resume_after(50, 1, 10),
            Resume {
                after: 0,
                gap: Some(Gap {
                    last_event_id: 50,
                    resumed_after: 0
                })
            }
        );
    }

    #[test]
    fn an_event_is_named_after_its_subject_and_sent_as_one_line_of_json() {
        let prefix = "p.pulse.acme.events.";
        assert_eq!(
            event_name(prefix, "p.pulse.acme.events.run.accepted"),
            Some("run.accepted")
        );
        assert_eq!(
            event_name(prefix, "p.pulse.other.events.run.accepted"),
            None
        );
        assert_eq!(
            event_data(br#"{"run_id":"r1"}"#).as_deref(),
            Some(r#"{"run_id":"r1"}"#)
        );
        assert_eq!(event_data(b"not json"), None);
        assert_eq!(event_data(b"{\"a\":\n1}").as_deref(), Some(r#"{"a":1}"#));
    }

    #[test]
    fn permits_bound_streams_per_tenant() {
        let limits = Arc::new(StreamLimits::new(2, CancellationToken::new()));
        let (a, b) = (tenant("a"), tenant("b"));
        let first = limits.try_acquire(&a).expect("first");
        let second = limits.try_acquire(&a).expect("second");
        assert!(limits.try_acquire(&a).is_none());
        let refused = limits.acquire(&a).expect_err("over the bound");
        assert_eq!(refused.code, ErrorCode::TooManyStreams);
        // Another tenant has its own budget.
        let other = limits.try_acquire(&b).expect("other tenant");
        drop(first);
        assert_eq!(limits.open_for(&a), 1);
        let third = limits.try_acquire(&a).expect("a freed slot");
        drop((second, third, other));
        assert_eq!(limits.open_for(&a), 0);
        assert_eq!(limits.open_for(&b), 0);
    }
}
