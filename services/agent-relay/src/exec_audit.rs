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
use pulse_domain::agent_protocol::{ReadOutput, ReadRequest as ReadSpec};
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

/// Refuses an exec the classifier does not admit; every other read passes.
pub fn gate(request: &ReadRequest) -> Result<(), RelayError> {
    match stages(&request.read) {
        Some(stages) => exec_intent::check_stages(stages)
            .map(drop)
            .map_err(|refusal| RelayError::InvalidRequest(refusal.to_string())),
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

/// A refusal by the agent, with its stable code when it gave one.
pub struct AgentRefusal<'a> {
    pub code: Option<&'a str>,
}

fn ending(answer: Result<&ReadReply, (&RelayError, Option<AgentRefusal<'_>>)>) -> Ending {
    match answer {
        Ok(ReadReply(result)) => match &result.output {
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
        Err((_, Some(AgentRefusal { code }))) => {
            let code = code.unwrap_or(ErrorCode::AgentRefused.code());
            let outcome = if code == "read_failed" {
                ExecOutcome::Failed
            } else {
                ExecOutcome::Refused
            };
            Ending::without_output(outcome, code)
        }
        Err((RelayError::InvalidRequest(_), None)) => {
            Ending::without_output(ExecOutcome::Refused, ErrorCode::InvalidRequest.code())
        }
        Err((error, None)) => Ending::without_output(ExecOutcome::Failed, error.code().code()),
    }
}

/// Records the attempt `request` (an exec; anything else is not audited) and how it ended. A
/// refusal by the relay's gate records the classifier's code.
pub async fn record(
    state: &RelayState,
    tenant: &TenantId,
    request: &ReadRequest,
    started: Instant,
    answer: Result<&ReadReply, (&RelayError, Option<AgentRefusal<'_>>)>,
) {
    let Some(stages) = stages(&request.read) else {
        return;
    };
    let mut ending = ending(answer);
    if let (ExecOutcome::Refused, Err(refusal)) =
        (ending.outcome, exec_intent::check_stages(stages))
    {
        ending.code = Some(refusal.code.as_str().to_owned());
    }
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
