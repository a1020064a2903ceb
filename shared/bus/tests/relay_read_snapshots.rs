//! Wire shapes of `relay.read` as other services send it ([`RelayReadRequest`]): the same JSON
//! the agent-relay's own `api::ReadRequest` and `api::ReadReply` carry.

use chrono::{TimeZone, Utc};
use pulse_bus::Message;
use pulse_bus::relay_api::{RelayReadReply, RelayReadRequest};
use pulse_domain::agent_protocol::{LogLine, LogSource, ReadOutput, ReadRequest, ReadResult};

#[test]
fn relay_read_wire_shape() {
    let request = RelayReadRequest {
        agent_id: "h1".to_owned(),
        read: ReadRequest::LogTail {
            source: LogSource::Service {
                name: "web".to_owned(),
            },
            max_lines: 50,
            max_bytes: 16_384,
        },
        requester: None,
    };
    assert_eq!(RelayReadRequest::TYPE, "pulse.relay.read");
    insta::assert_json_snapshot!("relay_read_request", request);
    let reply = RelayReadReply(ReadResult {
        request_id: "r-1".to_owned(),
        read_at: Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap(),
        output: ReadOutput::LogTail {
            lines: vec![LogLine {
                stream: "stderr".to_owned(),
                text: "health check failed".to_owned(),
            }],
            truncated: false,
        },
    });
    assert_eq!(RelayReadReply::TYPE, "pulse.relay.read.reply");
    insta::assert_json_snapshot!("relay_read_reply", reply);
    let text = serde_json::to_string(&request).unwrap();
    assert_eq!(
        serde_json::from_str::<RelayReadRequest>(&text).unwrap(),
        request
    );
}
