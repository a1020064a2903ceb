//! W3C `traceparent` in message headers: injected from the current span on send, extracted on
//! receive so the handler's span continues the sender's trace.
//!
//! The header is formatted and parsed here rather than through a global propagator so it works
//! whether or not the process installed one.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `traceparent` of the current span, if it belongs to a valid trace.
pub fn current_traceparent() -> Option<String> {
    let from_span = tracing::Span::current().context();
    let span_ref = from_span.span();
    let sc = span_ref.span_context();
    if sc.is_valid() {
        return Some(format_traceparent(sc));
    }
    let cx = opentelemetry::Context::current();
    let span_ref = cx.span();
    let sc = span_ref.span_context();
    sc.is_valid().then(|| format_traceparent(sc))
}

/// `00-<trace id>-<span id>-<flags>`.
pub fn format_traceparent(sc: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    )
}

/// Parses a version-00 `traceparent` into a remote span context; `None` when malformed.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let flags = parts.next()?;
    // Version 00 has exactly four fields; later versions may append more.
    if version.len() != 2 || !is_lower_hex(version) || version == "ff" {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    if trace_id.len() != 32 || span_id.len() != 16 || flags.len() != 2 {
        return None;
    }
    if !is_lower_hex(trace_id) || !is_lower_hex(span_id) || !is_lower_hex(flags) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// An OpenTelemetry context whose parent is the remote span of `traceparent`.
pub fn remote_context(traceparent: Option<&str>) -> Option<opentelemetry::Context> {
    let sc = parse_traceparent(traceparent?)?;
    Some(opentelemetry::Context::new().with_remote_span_context(sc))
}

/// Makes `span` a child of the remote span in `traceparent`. Does nothing without an
/// OpenTelemetry layer or without a valid header.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(cx) = remote_context(traceparent) {
        // Fails only when no OpenTelemetry layer is installed: then there is no trace to keep.
        let _ = span.set_parent(cx);
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_a_traceparent() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse_traceparent(header).unwrap();
        assert!(sc.is_remote());
        assert!(sc.is_sampled());
        assert_eq!(format_traceparent(&sc), header);
    }

    #[test]
    fn rejects_malformed_traceparents() {
        for bad in [
            "",
            "00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn no_current_trace_means_no_header() {
        assert_eq!(current_traceparent(), None);
    }
}
