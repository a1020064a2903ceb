//! The envelope every message travels in: headers carry identity, type, schema version, tenant
//! and trace context; the body is the serde JSON of the payload.

use std::collections::BTreeMap;

use async_nats::HeaderMap;
use bytes::Bytes;
use pulse_domain::TenantId;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::subjects::SYSTEM_TENANT;
use crate::trace;

/// Header names.
pub mod headers {
    /// Message id, used by JetStream to drop duplicates within the stream's window.
    pub const MSG_ID: &str = "Nats-Msg-Id";
    pub const TYPE: &str = "Pulse-Type";
    /// `v<N>`.
    pub const SCHEMA: &str = "Pulse-Schema";
    /// The tenant id, or `_sys` for system messages.
    pub const TENANT: &str = "Pulse-Tenant";
    /// W3C trace context.
    pub const TRACEPARENT: &str = "traceparent";
    /// `error` on an [`ErrorReply`](crate::ErrorReply).
    pub const STATUS: &str = "Pulse-Status";
    /// On dead letters: why the last delivery failed.
    pub const DLQ_REASON: &str = "Pulse-Dlq-Reason";
    /// On dead letters: how many times the job was delivered.
    pub const DLQ_DELIVERIES: &str = "Pulse-Dlq-Deliveries";
    /// On dead letters: the subject the job was published on.
    pub const DLQ_SUBJECT: &str = "Pulse-Dlq-Subject";
    /// On dead letters: the job's own `Nats-Msg-Id`.
    pub const DLQ_ORIGINAL_MSG_ID: &str = "Pulse-Dlq-Original-Msg-Id";
    /// On dead letters: the job's sequence in the jobs stream.
    pub const DLQ_STREAM_SEQUENCE: &str = "Pulse-Dlq-Stream-Sequence";
}

/// A versioned wire type. `TYPE` names it on the wire (`Pulse-Type`); `SCHEMA` is its version
/// (`Pulse-Schema: v1`). A receiver refuses any other type or version.
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    const TYPE: &'static str;
    const SCHEMA: u32 = 1;
}

/// Why a message could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("wrong message type: expected {expected}, found {found:?}")]
    WrongType {
        expected: &'static str,
        found: String,
    },
    #[error("unsupported schema {found:?} for {message_type}: expected v{expected}")]
    UnsupportedSchema {
        message_type: &'static str,
        expected: u32,
        found: String,
    },
    #[error("bad tenant header {0:?}")]
    BadTenant(String),
    #[error("bad json body for {message_type}: {source}")]
    BadJson {
        message_type: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot encode {message_type}: {source}")]
    Encode {
        message_type: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("message id {0:?} is empty or contains a line break")]
    BadMessageId(String),
}

/// What the headers say about a received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvelopeMeta {
    pub message_id: String,
    pub message_type: String,
    pub schema: u32,
    /// `None` for system messages (`Pulse-Tenant: _sys`).
    pub tenant: Option<TenantId>,
    pub traceparent: Option<String>,
}

impl EnvelopeMeta {
    /// The remote trace this message belongs to, if it carried one.
    pub fn otel_context(&self) -> Option<opentelemetry::Context> {
        trace::remote_context(self.traceparent.as_deref())
    }
}

/// A decoded message.
#[derive(Debug, Clone)]
pub struct Decoded<M> {
    pub meta: EnvelopeMeta,
    pub payload: M,
}

/// An encoded message ready to publish.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub message_id: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Encodes a tenant message. The message id is a new UUID v7 unless given; the current trace
/// context, if any, goes into `traceparent`.
pub fn encode<M: Message>(
    tenant: &TenantId,
    msg: &M,
    message_id: Option<&str>,
) -> Result<Encoded, EnvelopeError> {
    encode_for(tenant.as_str(), msg, message_id)
}

/// Encodes a system message (`Pulse-Tenant: _sys`).
pub fn encode_system<M: Message>(
    msg: &M,
    message_id: Option<&str>,
) -> Result<Encoded, EnvelopeError> {
    encode_for(SYSTEM_TENANT, msg, message_id)
}

fn encode_for<M: Message>(
    tenant: &str,
    msg: &M,
    message_id: Option<&str>,
) -> Result<Encoded, EnvelopeError> {
    let message_id = match message_id {
        Some(id) => {
            check_header_value(id).map_err(|_| EnvelopeError::BadMessageId(id.to_owned()))?;
            id.to_owned()
        }
        None => crate::message_id::fresh(),
    };
    let body = serde_json::to_vec(msg).map_err(|source| EnvelopeError::Encode {
        message_type: M::TYPE,
        source,
    })?;
    let mut headers = HeaderMap::new();
    headers.insert(headers::MSG_ID, message_id.as_str());
    headers.insert(headers::TYPE, M::TYPE);
    headers.insert(headers::SCHEMA, schema_header(M::SCHEMA));
    headers.insert(headers::TENANT, tenant);
    if let Some(tp) = trace::current_traceparent() {
        headers.insert(headers::TRACEPARENT, tp);
    }
    Ok(Encoded {
        message_id,
        headers,
        body: Bytes::from(body),
    })
}

/// `v<N>`.
pub fn schema_header(schema: u32) -> String {
    format!("v{schema}")
}

/// Parses `v<N>`.
pub fn parse_schema_header(value: &str) -> Option<u32> {
    let digits = value.strip_prefix('v')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Decodes a message of type `M`, checking type and schema first. Never panics.
pub fn decode<M: Message>(
    headers: Option<&HeaderMap>,
    body: &[u8],
) -> Result<Decoded<M>, EnvelopeError> {
    let meta = decode_meta_for::<M>(headers)?;
    let payload = serde_json::from_slice(body).map_err(|source| EnvelopeError::BadJson {
        message_type: M::TYPE,
        source,
    })?;
    Ok(Decoded { meta, payload })
}

fn decode_meta_for<M: Message>(headers: Option<&HeaderMap>) -> Result<EnvelopeMeta, EnvelopeError> {
    let message_type = required(headers, headers::TYPE)?;
    if message_type != M::TYPE {
        return Err(EnvelopeError::WrongType {
            expected: M::TYPE,
            found: message_type.to_owned(),
        });
    }
    let schema_raw = required(headers, headers::SCHEMA)?;
    let schema = match parse_schema_header(schema_raw) {
        Some(s) if s == M::SCHEMA => s,
        _ => {
            return Err(EnvelopeError::UnsupportedSchema {
                message_type: M::TYPE,
                expected: M::SCHEMA,
                found: schema_raw.to_owned(),
            });
        }
    };
    let message_id = required(headers, headers::MSG_ID)?.to_owned();
    let tenant_raw = required(headers, headers::TENANT)?;
    let tenant = if tenant_raw == SYSTEM_TENANT {
        None
    } else {
        Some(
            TenantId::new(tenant_raw)
                .map_err(|_| EnvelopeError::BadTenant(tenant_raw.to_owned()))?,
        )
    };
    let traceparent = header(headers, headers::TRACEPARENT).map(str::to_owned);
    Ok(EnvelopeMeta {
        message_id,
        message_type: message_type.to_owned(),
        schema,
        tenant,
        traceparent,
    })
}

/// The first value of a header, if present.
pub fn header<'a>(headers: Option<&'a HeaderMap>, name: &str) -> Option<&'a str> {
    headers?.get(name).map(|v| v.as_str())
}

fn required<'a>(
    headers: Option<&'a HeaderMap>,
    name: &'static str,
) -> Result<&'a str, EnvelopeError> {
    header(headers, name).ok_or(EnvelopeError::MissingHeader(name))
}

/// Every header as a sorted map of name to values, for logs and snapshots.
pub fn sorted_headers(headers: &HeaderMap) -> BTreeMap<String, Vec<String>> {
    headers
        .iter()
        .map(|(name, values)| {
            (
                name.to_string(),
                values.iter().map(|v| v.as_str().to_owned()).collect(),
            )
        })
        .collect()
}

/// A header value may not be empty here and may never hold a line break (the client panics on
/// one, the protocol can not carry it).
pub(crate) fn check_header_value(value: &str) -> Result<(), ()> {
    if value.is_empty() || value.contains(['\r', '\n']) {
        Err(())
    } else {
        Ok(())
    }
}

/// Makes free text (an error message) safe to carry in a header: line breaks and other control
/// characters become spaces, and it is cut at `max` bytes on a character boundary.
pub(crate) fn header_text(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    if out.is_empty() {
        out.push('-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Ping {
        n: u32,
    }
    impl Message for Ping {
        const TYPE: &'static str = "test.ping";
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct PingV2 {
        n: u32,
    }
    impl Message for PingV2 {
        const TYPE: &'static str = "test.ping";
        const SCHEMA: u32 = 2;
    }

    fn acme() -> TenantId {
        TenantId::new("acme").unwrap()
    }

    #[test]
    fn round_trips() {
        let enc = encode(&acme(), &Ping { n: 7 }, None).unwrap();
        let dec = decode::<Ping>(Some(&enc.headers), &enc.body).unwrap();
        assert_eq!(dec.payload, Ping { n: 7 });
        assert_eq!(dec.meta.message_id, enc.message_id);
        assert_eq!(dec.meta.tenant, Some(acme()));
        assert_eq!(dec.meta.schema, 1);
        assert_eq!(
            uuid::Uuid::parse_str(&enc.message_id)
                .unwrap()
                .get_version_num(),
            7
        );
    }

    #[test]
    fn given_message_id_is_kept_and_checked() {
        let enc = encode(&acme(), &Ping { n: 1 }, Some("job-1")).unwrap();
        assert_eq!(header(Some(&enc.headers), headers::MSG_ID), Some("job-1"));
        assert!(matches!(
            encode(&acme(), &Ping { n: 1 }, Some("a\r\nb")),
            Err(EnvelopeError::BadMessageId(_))
        ));
        assert!(matches!(
            encode(&acme(), &Ping { n: 1 }, Some("")),
            Err(EnvelopeError::BadMessageId(_))
        ));
    }

    #[test]
    fn system_messages_have_no_tenant() {
        let enc = encode_system(&Ping { n: 1 }, None).unwrap();
        assert_eq!(header(Some(&enc.headers), headers::TENANT), Some("_sys"));
        assert_eq!(
            decode::<Ping>(Some(&enc.headers), &enc.body)
                .unwrap()
                .meta
                .tenant,
            None
        );
    }

    #[test]
    fn typed_errors() {
        let enc = encode(&acme(), &Ping { n: 1 }, None).unwrap();
        assert!(matches!(
            decode::<Ping>(None, &enc.body),
            Err(EnvelopeError::MissingHeader(headers::TYPE))
        ));
        assert!(matches!(
            decode::<PingV2>(Some(&enc.headers), &enc.body),
            Err(EnvelopeError::UnsupportedSchema { expected: 2, .. })
        ));
        assert!(matches!(
            decode::<Ping>(Some(&enc.headers), b"{\"n\":\"x\"}"),
            Err(EnvelopeError::BadJson { .. })
        ));
        let mut other = enc.headers.clone();
        other.insert(headers::TYPE, "test.pong");
        assert!(matches!(
            decode::<Ping>(Some(&other), &enc.body),
            Err(EnvelopeError::WrongType { .. })
        ));
        let mut bad_tenant = enc.headers.clone();
        bad_tenant.insert(headers::TENANT, "Not.A.Tenant");
        assert!(matches!(
            decode::<Ping>(Some(&bad_tenant), &enc.body),
            Err(EnvelopeError::BadTenant(_))
        ));
        let mut no_id = HeaderMap::new();
        no_id.insert(headers::TYPE, "test.ping");
        no_id.insert(headers::SCHEMA, "v1");
        assert!(matches!(
            decode::<Ping>(Some(&no_id), &enc.body),
            Err(EnvelopeError::MissingHeader(headers::MSG_ID))
        ));
    }

    #[test]
    fn schema_header_parsing() {
        assert_eq!(parse_schema_header("v1"), Some(1));
        assert_eq!(parse_schema_header("v12"), Some(12));
        for bad in ["", "v", "1", "v-1", "v+1", "V1", "v1.0", "v99999999999"] {
            assert_eq!(parse_schema_header(bad), None, "{bad}");
        }
    }

    #[test]
    fn header_text_is_safe() {
        assert_eq!(header_text("a\r\nb", 100), "a  b");
        assert_eq!(header_text("", 100), "-");
        assert_eq!(header_text("héllo", 2), "h");
        assert!(check_header_value(&header_text("x\ny\u{0}", 10)).is_ok());
    }
}
