//! Executes one batch of admitted tool calls: in parallel up to a bound, or sequentially in the
//! model's order when the batch reads the finding snapshot and writes findings in the same turn
//! (the writes must see the snapshot the model reasoned from). Results come back in call order
//! whatever order the handlers finish in.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use pulse_capabilities::{AdmittedCall, ToolName};

use super::ToolHandler;
use crate::provider::types::{ToolCall, ToolResult};

/// One admitted call waiting to run, with its position in the model's batch.
pub(crate) struct Pending<'c> {
    pub index: usize,
    pub call: &'c ToolCall,
    pub admitted: AdmittedCall,
}

/// One executed call.
pub(crate) struct Executed {
    pub index: usize,
    pub result: ToolResult,
    pub duration: Duration,
    pub timed_out: bool,
}

/// Whether the batch must run one call at a time in the model's order.
pub(crate) fn must_run_sequentially(pending: &[Pending<'_>]) -> bool {
    let reads_snapshot = pending
        .iter()
        .any(|p| p.admitted.tool == ToolName::PatrolGetFindings);
    let writes_findings = pending.iter().any(|p| {
        matches!(
            p.admitted.tool,
            ToolName::PatrolReportFinding | ToolName::PatrolAssessFinding
        )
    });
    reads_snapshot && writes_findings
}

/// Runs the batch and returns one result per pending call, in the order given.
pub(crate) async fn execute(
    handler: &dyn ToolHandler,
    pending: Vec<Pending<'_>>,
    max_parallel: usize,
    timeout: Duration,
) -> Vec<Executed> {
    let width = if must_run_sequentially(&pending) {
        1
    } else {
        max_parallel.max(1)
    };
    // The futures are built before the stream (they are lazy; at most `width` run at once), so
    // no closure lives across an await: that keeps the loop's future provably `Send` for
    // callers that spawn it.
    let calls: Vec<_> = pending
        .into_iter()
        .map(|p| run_one(handler, p, timeout))
        .collect();
    let mut done: Vec<Executed> = futures::stream::iter(calls)
        .buffer_unordered(width)
        .collect()
        .await;
    done.sort_by_key(|e| e.index);
    done
}

async fn run_one(handler: &dyn ToolHandler, pending: Pending<'_>, timeout: Duration) -> Executed {
    let started = Instant::now();
    let call_id = pending.call.id.clone();
    let outcome =
        tokio::time::timeout(timeout, handler.call(pending.call, &pending.admitted)).await;
    let duration = started.elapsed();
    match outcome {
        Ok(mut result) => {
            // The result answers this call whatever id the handler put on it: pairing is the
            // loop's invariant, not the handler's.
            result.call_id = call_id;
            Executed {
                index: pending.index,
                result,
                duration,
                timed_out: false,
            }
        }
        Err(_) => Executed {
            index: pending.index,
            result: ToolResult::error(
                call_id,
                format!(
                    "the tool did not finish within {} s; its outcome is unknown",
                    timeout.as_secs()
                ),
            ),
            duration,
            timed_out: true,
        },
    }
}
