//! Answers to the relay's requests: commands, fresh observations and bounded reads.

use chrono::Utc;
use pulse_domain::agent_protocol::{
    AgentMessage, MAX_REASON_BYTES, Observation, ReadResult, Refused, RelayMessage, bounded_text,
};

use crate::commands::{Commands, HostExecutor};
use crate::observe::Observer;
use crate::reads::Reader;

pub struct Requests {
    pub commands: Commands<HostExecutor>,
    pub observer: Observer,
    pub reader: Reader,
}

fn refused(request_id: &str, reason: String, code: Option<String>) -> AgentMessage {
    AgentMessage::Refused(Refused {
        request_id: request_id.to_owned(),
        reason: bounded_text(&reason, MAX_REASON_BYTES).0,
        code,
    })
}

impl pulse_agent_session::Answer for Requests {
    /// The answer to a request form; `None` for anything else.
    async fn answer(&self, message: RelayMessage) -> Option<AgentMessage> {
        match message {
            RelayMessage::Command(command) => {
                Some(AgentMessage::Receipt(self.commands.handle(&command).await))
            }
            RelayMessage::Observe(observe) => {
                Some(match self.observer.observe(&observe.target).await {
                    Ok((resource, observed_at)) => AgentMessage::Observation(Observation {
                        request_id: observe.request_id,
                        observed_at,
                        resource,
                    }),
                    Err(reason) => refused(&observe.request_id, reason, None),
                })
            }
            RelayMessage::Read(read) => Some(match self.reader.read(&read.read).await {
                Ok(output) => AgentMessage::ReadResult(ReadResult {
                    request_id: read.request_id,
                    read_at: Utc::now(),
                    output,
                }),
                Err(refusal) => refused(&read.request_id, refusal.reason, refusal.code),
            }),
            _ => None,
        }
    }
}
