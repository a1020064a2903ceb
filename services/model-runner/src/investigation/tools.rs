//! The Investigation profile's tools: the Watch run's canonical reads (`pulse_query`,
//! `pulse_metrics`, `pulse_read`, through [`WatchTools`]) under an evidence budget, plus
//! `patrol_action_capabilities` (the broker's typed catalogue of one resource, no side effects)
//! and `patrol_propose_action` (validated into the run's [`ProposalCapture`]). No finding
//! lifecycle tool and no control tool: the policy offers none, and the gate denies a fabricated
//! call before it reaches this handler.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pulse_bus::actions_api::{ActionCapabilitiesReply, ActionCapabilitiesRequest};
use pulse_bus::{ActionBrokerClient, Bus, ClientError};
use pulse_capabilities::{AdmittedCall, ExecutionProfile, PolicyError, ToolName, ToolPolicy};
use pulse_domain::TenantId;
use pulse_domain::resource::truncate_chars;
use pulse_redaction::Redactor;
use serde_json::{Value, json};

use super::capture::{ProposalCapture, fingerprint, validate};
use crate::redaction::display_summary;
use crate::tools::{WatchTools, canonical_reads_and};
use pulse_agent_loop::agent_loop::{AllowanceDecision, BoxFuture, TokenAllowance, ToolHandler};
use pulse_agent_loop::provider::{ToolCall, ToolResult, Usage};

/// Evidence-tool calls of one investigation.
pub const EVIDENCE_BUDGET: u32 = 15;
/// Characters of an evidence summary kept on the record.
const EVIDENCE_SUMMARY_CHARS: usize = 200;

/// The tools of the evidence phase: reads and both proposal tools.
pub fn investigation_policy() -> Result<Arc<ToolPolicy>, PolicyError> {
    ToolPolicy::narrowed_properties(
        ExecutionProfile::PatrolInvestigation,
        &canonical_reads_and(&[
            (ToolName::PatrolActionCapabilities, &[], &[]),
            (ToolName::PatrolProposeAction, &[], &[]),
        ]),
    )
}

/// After the evidence checkpoint: the evidence tools are gone; only the typed proposal route
/// (and final prose) remains.
pub fn checkpoint_policy() -> Result<Arc<ToolPolicy>, PolicyError> {
    ToolPolicy::narrowed(
        ExecutionProfile::PatrolInvestigation,
        &[
            (ToolName::PatrolActionCapabilities, &[]),
            (ToolName::PatrolProposeAction, &[]),
        ],
    )
}

fn is_evidence(tool: ToolName) -> bool {
    crate::tools::is_canonical_read(tool)
}

/// One evidence read, for the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceRead {
    pub call_id: String,
    pub tool: String,
    pub summary: String,
}

/// The evidence calls of one run.
#[derive(Debug, Default)]
pub struct EvidenceLedger {
    reads: Mutex<Vec<EvidenceRead>>,
}

impl EvidenceLedger {
    fn with<T>(&self, f: impl FnOnce(&mut Vec<EvidenceRead>) -> T) -> T {
        let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut reads)
    }

    /// Takes one unit of budget; `false` when it is spent.
    fn take(&self, call: &ToolCall, tool: ToolName) -> bool {
        self.with(|reads| {
            if reads.len() >= EVIDENCE_BUDGET as usize {
                return false;
            }
            reads.push(EvidenceRead {
                call_id: call.id.clone(),
                tool: tool.wire_name().to_owned(),
                summary: String::new(),
            });
            true
        })
    }

    fn summarize(&self, call_id: &str, summary: String) {
        self.with(|reads| {
            if let Some(read) = reads.iter_mut().find(|r| r.call_id == call_id) {
                read.summary = summary;
            }
        });
    }

    pub fn used(&self) -> u32 {
        self.with(|reads| u32::try_from(reads.len()).unwrap_or(u32::MAX))
    }

    /// The reads as the record stores them: each summary sanitized like provider-bound text
    /// (the run's `redactor`), then shortened.
    pub fn stored_reads(&self, redactor: &Redactor) -> Vec<EvidenceRead> {
        self.with(|reads| {
            reads
                .iter()
                .map(|read| EvidenceRead {
                    summary: truncate_chars(
                        &display_summary(redactor, &read.summary),
                        EVIDENCE_SUMMARY_CHARS,
                    ),
                    ..read.clone()
                })
                .collect()
        })
    }
}

/// Ends the evidence phase once the budget is spent (the loop asks after every turn).
pub struct EvidenceAllowance {
    pub evidence: Arc<EvidenceLedger>,
}

impl TokenAllowance for EvidenceAllowance {
    fn after_turn(&mut self, _turn: u32, _turn_usage: Usage, _total: Usage) -> AllowanceDecision {
        if self.evidence.used() >= EVIDENCE_BUDGET {
            AllowanceDecision::Stop
        } else {
            AllowanceDecision::Continue
        }
    }
}

/// Where the typed action catalogue comes from: the action-broker in production.
pub trait CapabilityCatalogue: Send + Sync {
    fn capabilities<'a>(
        &'a self,
        tenant: &'a TenantId,
        resource_id: &'a str,
    ) -> BoxFuture<'a, Result<ActionCapabilitiesReply, String>>;
}

/// The action-broker's catalogue over NATS.
#[derive(Clone)]
pub struct BrokerCatalogue {
    pub bus: Bus,
    pub timeout: Duration,
}

impl CapabilityCatalogue for BrokerCatalogue {
    fn capabilities<'a>(
        &'a self,
        tenant: &'a TenantId,
        resource_id: &'a str,
    ) -> BoxFuture<'a, Result<ActionCapabilitiesReply, String>> {
        Box::pin(async move {
            let request = ActionCapabilitiesRequest {
                resource_id: resource_id.to_owned(),
            };
            match ActionBrokerClient::new(self.bus.clone())
                .capabilities(tenant, &request, self.timeout)
                .await
            {
                Ok(reply) => Ok(reply),
                Err(ClientError::Remote { message, .. }) => Err(message),
                Err(error) if error.is_unanswered() => {
                    Err("the action catalogue is unavailable right now".to_owned())
                }
                Err(other) => {
                    tracing::warn!(error = %other, "action catalogue request failed");
                    Err("the action catalogue is unavailable right now".to_owned())
                }
            }
        })
    }
}

/// The handler of an investigation's admitted calls.
pub struct InvestigationTools {
    pub reads: WatchTools,
    pub catalogue: Arc<dyn CapabilityCatalogue>,
    pub capture: Arc<ProposalCapture>,
    pub evidence: Arc<EvidenceLedger>,
}

impl InvestigationTools {
    fn tenant(&self) -> &TenantId {
        &self.reads.ctx.tenant
    }

    async fn evidence(&self, call: &ToolCall, admitted: &AdmittedCall) -> ToolResult {
        if !self.evidence.take(call, admitted.tool) {
            return ToolResult::error(
                &call.id,
                "the evidence budget of this investigation is spent; answer from the evidence you have",
            );
        }
        let result = self.reads.call(call, admitted).await;
        // Kept whole: [`EvidenceLedger::stored_reads`] redacts before it shortens, so a
        // secret is never cut where the sanitizer no longer recognizes it.
        let summary = if result.is_error {
            format!("error: {}", result.content)
        } else {
            result.content.clone()
        };
        self.evidence.summarize(&call.id, summary);
        result
    }

    async fn capabilities(&self, call: &ToolCall) -> ToolResult {
        let Some(id) = call
            .arguments
            .get("resource_id")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            return ToolResult::error(&call.id, "resource_id is required");
        };
        match self.catalogue.capabilities(self.tenant(), id).await {
            Ok(reply) => match serde_json::to_value(&reply) {
                Ok(value) => ToolResult::ok(&call.id, value.to_string()),
                Err(_) => ToolResult::error(&call.id, "the catalogue could not be encoded"),
            },
            Err(message) => ToolResult::error(&call.id, message),
        }
    }

    async fn propose(&self, call: &ToolCall) -> ToolResult {
        let arguments = &call.arguments;
        let field = |name: &str| {
            arguments
                .get(name)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        let (Some(resource), Some(causal)) = (field("resource_id"), field("causal_resource_id"))
        else {
            self.capture.refused();
            return ToolResult::error(&call.id, "resource_id and causal_resource_id are required");
        };
        // Both references resolve to exactly one canonical resource, or the proposal fails
        // closed.
        let catalogue = match self.catalogue.capabilities(self.tenant(), resource).await {
            Ok(reply) => reply,
            Err(message) => {
                self.capture.refused();
                return ToolResult::error(&call.id, format!("resource_id: {message}"));
            }
        };
        let causal = if causal == resource {
            catalogue.resource_id.clone()
        } else {
            match self.catalogue.capabilities(self.tenant(), causal).await {
                Ok(reply) => reply.resource_id,
                Err(message) => {
                    self.capture.refused();
                    return ToolResult::error(&call.id, format!("causal_resource_id: {message}"));
                }
            }
        };
        let proposal = match validate(arguments, &catalogue, &causal) {
            Ok(proposal) => proposal,
            Err(error) => {
                self.capture.refused();
                return ToolResult::error(&call.id, error.to_string());
            }
        };
        let print = match fingerprint(arguments) {
            Ok(print) => print,
            Err(error) => {
                self.capture.refused();
                return ToolResult::error(&call.id, error);
            }
        };
        let answer = json!({
            "ok": true,
            "resource_id": proposal.resource_id,
            "capability_name": proposal.capability_name,
            "note": "proposal recorded; Pulse submits it for the tenant's approval policy after this investigation",
        });
        match self.capture.offer(&call.id, &print, proposal) {
            Ok(()) => ToolResult::ok(&call.id, answer.to_string()),
            Err(error) => ToolResult::error(&call.id, error.to_string()),
        }
    }
}

impl ToolHandler for InvestigationTools {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            match admitted.tool {
                tool if is_evidence(tool) => self.evidence(call, admitted).await,
                ToolName::PatrolActionCapabilities => self.capabilities(call).await,
                ToolName::PatrolProposeAction => self.propose(call).await,
                other => ToolResult::error(
                    &call.id,
                    format!("{other} is not available in an investigation"),
                ),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_evidence_is_redacted_before_it_is_shortened() {
        let connection = crate::preflight::RouteConnection::new(
            pulse_agent_loop::route::Route::parse("openai:gpt-4o-mini").unwrap(),
        );
        let redactor =
            crate::redaction::redactor(&connection, crate::registry::RouteClass::MeteredApi)
                .unwrap();
        let ledger = EvidenceLedger::default();
        let token = format!("ghp_{}", "A1b2C3d4E5".repeat(4));
        let reads = [
            ("call-1", "db ok; password=hunter2-canary".to_owned()),
            // The token straddles the stored length: cut first, its head would survive.
            (
                "call-2",
                format!("{} {token} tail", "x".repeat(EVIDENCE_SUMMARY_CHARS - 12)),
            ),
        ];
        for (id, content) in &reads {
            let call = ToolCall {
                id: (*id).to_owned(),
                name: "pulse_read".to_owned(),
                arguments: json!({}),
                thought_signature: None,
            };
            assert!(ledger.take(&call, ToolName::PulseRead));
            ledger.summarize(id, content.clone());
        }
        let stored = ledger.stored_reads(&redactor);
        assert_eq!(stored.len(), 2);
        assert!(
            !stored[0].summary.contains("hunter2"),
            "{}",
            stored[0].summary
        );
        assert!(stored[0].summary.starts_with("db ok; password="));
        assert!(!stored[1].summary.contains("ghp_"), "{}", stored[1].summary);
        assert!(stored[1].summary.chars().count() <= EVIDENCE_SUMMARY_CHARS);
        assert_eq!(stored[1].call_id, "call-2");
        assert_eq!(stored[1].tool, "pulse_read");
    }

    #[test]
    fn the_profile_offers_reads_and_proposal_tools_only_and_the_checkpoint_drops_the_reads() {
        let policy = investigation_policy().expect("policy");
        let offered: Vec<&str> = policy.offered_tools().map(|t| t.name).collect();
        assert_eq!(
            offered,
            [
                "pulse_query",
                "pulse_metrics",
                "pulse_storage",
                "pulse_read",
                "patrol_action_capabilities",
                "patrol_propose_action"
            ]
        );
        for fabricated in [
            ToolName::PatrolReportFinding,
            ToolName::PatrolAssessFinding,
            ToolName::PatrolResolveFinding,
            ToolName::PulseControl,
        ] {
            assert!(!policy.offers(fabricated), "{fabricated}");
        }
        let checkpoint = checkpoint_policy().expect("policy");
        let offered: Vec<&str> = checkpoint.offered_tools().map(|t| t.name).collect();
        assert_eq!(
            offered,
            ["patrol_action_capabilities", "patrol_propose_action"]
        );
    }
}
