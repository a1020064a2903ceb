//! The decoder never panics, whatever arrives.

mod common;

use common::{Job, acme};
use proptest::prelude::*;
use pulse_bus::async_nats::HeaderMap;
use pulse_bus::envelope::{decode, encode, headers};

/// Header values as the network could deliver them (anything without a line break), mixed
/// with the valid ones so decoding gets past the early checks.
fn header_value(valid: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        proptest::sample::select(valid).prop_map(|v| Some(v.to_owned())),
        "[^\r\n]{0,40}".prop_map(Some),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        Just(br#"{"n":1}"#.to_vec()),
        Just(br#"{"n":-1}"#.to_vec()),
        Just(br#"{"n":1e400}"#.to_vec()),
        "\\{\"n\":[0-9]{1,12}\\}".prop_map(|s| s.into_bytes()),
        Just(b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[".to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decode_never_panics(
        msg_id in header_value(&["m-1", "0192b6a4-7c1e-7d2a-9f00-3b1c2d4e5f60"]),
        ty in header_value(&["test.job", "test.other"]),
        schema in header_value(&["v1", "v2", "v0", "v", "1"]),
        tenant in header_value(&["acme", "_sys", "Bad.Tenant", ""]),
        traceparent in header_value(&["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]),
        with_headers in any::<bool>(),
        body in body(),
    ) {
        let mut map = HeaderMap::new();
        for (name, value) in [
            (headers::MSG_ID, msg_id),
            (headers::TYPE, ty),
            (headers::SCHEMA, schema),
            (headers::TENANT, tenant),
            (headers::TRACEPARENT, traceparent),
        ] {
            if let Some(v) = value {
                map.insert(name, v.as_str());
            }
        }
        let headers = with_headers.then_some(&map);
        // Must return, Ok or a typed error, for every input.
        let result = decode::<Job>(headers, &body);
        if let Ok(decoded) = result {
            prop_assert_eq!(decoded.meta.message_type.as_str(), "test.job");
            prop_assert_eq!(decoded.meta.schema, 1);
            if let Some(tp) = decoded.meta.traceparent.as_deref() {
                // A present but malformed traceparent is ignored, never fatal.
                let _ = pulse_bus::trace::parse_traceparent(tp);
            }
        }
    }

    #[test]
    fn encoded_jobs_round_trip(n in any::<u32>(), id in "[a-zA-Z0-9_-]{1,40}") {
        let enc = encode(&acme(), &Job { n }, Some(&id)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let dec = decode::<Job>(Some(&enc.headers), &enc.body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(dec.payload, Job { n });
        prop_assert_eq!(dec.meta.message_id, id);
    }
}
