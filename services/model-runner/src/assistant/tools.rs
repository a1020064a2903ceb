//! The Interactive Assistant's tools. The reads are Patrol's own handlers (`pulse_query`,
//! `pulse_metrics`, `pulse_read` through [`WatchTools`]) over the whole tenant inventory; the
//! rest are the Assistant's: `pulse_alerts` (alerts and findings, read only), `pulse_summarize`,
//! `pulse_question` (a card for the user) and `pulse_control type=resource`, which only *plans*
//! an action through the action-broker and returns the approval card. Nothing here executes a
//! change: execution needs a human's approval through the action routes.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use pulse_bus::actions_api::{ActionCapabilitiesRequest, ActionPlanRequest};
use pulse_bus::{ActionBrokerClient, ClientError};
use pulse_capabilities::{AdmittedCall, ExecutionProfile, PolicyError, ToolName, ToolPolicy};
use pulse_domain::action::{ApprovalFloor, Severity as ActionSeverity};
use pulse_domain::resource::Health;
use pulse_store::alerts::{self, AlertFilter, StateFilter};
use pulse_store::findings::{self, ListFilter};
use serde_json::{Value, json};

use crate::tools::findings::finding_row;
use crate::tools::query::compact_row;
use crate::tools::{
    ASSISTANT_READ, CANONICAL_READS, Narrowing, ToolContext, WatchTools, count_arg, json_result,
    text_arg,
};
use pulse_agent_loop::agent_loop::{BoxFuture, ToolHandler};
use pulse_agent_loop::provider::{ToolCall, ToolResult};

/// How long a broker request may take.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// Rows a list answer holds at most.
const MAX_ROWS: usize = 50;

/// The Assistant's tool policy at a control level: reads, alerts and findings, summaries, the
/// question card and, above `read_only`, the typed action planner.
pub fn assistant_policy(profile: ExecutionProfile) -> Result<Arc<ToolPolicy>, PolicyError> {
    // Patrol's own read narrowing (one owner), with `pulse_read` widened to the host reads.
    let mut tools: Vec<Narrowing> = CANONICAL_READS
        .iter()
        .map(|read| {
            if read.0 == ToolName::PulseRead {
                ASSISTANT_READ
            } else {
                *read
            }
        })
        .collect();
    tools.extend([
        (
            ToolName::PulseAlerts,
            &["list", "findings", "resolved"][..],
            &["action", "severity", "resource_id", "limit"][..],
        ),
        (
            ToolName::PulseSummarize,
            &["resource", "fleet"],
            &["action", "resource_id"],
        ),
        (ToolName::PulseQuestion, &[], &[]),
        (
            ToolName::PulseControl,
            &["resource"],
            &["type", "resource_id", "action"],
        ),
    ]);
    ToolPolicy::narrowed_properties(profile, &tools)
}

/// A card a tool produced for the user, beside its result for the model.
#[derive(Debug, Clone, PartialEq)]
pub enum Card {
    /// A planned action waiting for a human.
    Approval { action_id: uuid::Uuid, card: Value },
    /// A clarification question.
    Question(Value),
}

/// Where the tools hand their cards (the turn's event sink).
pub trait CardSink: Send + Sync {
    fn card(&self, call: &ToolCall, card: Card);
}

/// Who the turn acts for.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The actor a plan is requested by.
    pub actor: String,
    pub may_plan: bool,
    /// Every plan needs a human approval (a finding handoff, the `controlled` level).
    pub approval_required: bool,
    /// The session, named in every plan's reason.
    pub session_id: uuid::Uuid,
}

/// The Assistant's [`ToolHandler`].
pub struct AssistantTools {
    pub reads: WatchTools,
    pub broker: Option<ActionBrokerClient>,
    pub caller: Caller,
    pub cards: Arc<dyn CardSink>,
}

impl AssistantTools {
    fn ctx(&self) -> &ToolContext {
        &self.reads.ctx
    }

    async fn alerts(&self, call: &ToolCall) -> ToolResult {
        let action = text_arg(&call.arguments, "action").unwrap_or("list");
        let resource = text_arg(&call.arguments, "resource_id").map(str::to_owned);
        let limit = count_arg(&call.arguments, "limit", 20, MAX_ROWS);
        let tx = match self.ctx().store.tenant_tx(&self.ctx().tenant).await {
            Ok(tx) => tx,
            Err(e) => return ToolResult::error(&call.id, format!("the store is unavailable: {e}")),
        };
        let rows: Result<Vec<Value>, String> = match action {
            "findings" | "resolved" => {
                let filter = if action == "findings" {
                    ListFilter::Active
                } else {
                    ListFilter::IncludeResolved
                };
                findings::list(&tx, filter, Some(200), Utc::now())
                    .await
                    .map(|list| {
                        list.iter()
                            .filter(|f| {
                                resource
                                    .as_deref()
                                    .is_none_or(|r| f.finding.resource_id == r)
                            })
                            .filter(|f| {
                                action == "findings" || f.finding.status.as_str() == "resolved"
                            })
                            .take(limit)
                            .map(|f| finding_row(&f.finding, false))
                            .collect()
                    })
                    .map_err(|e| e.to_string())
            }
            _ => alerts::list(
                &tx,
                &AlertFilter {
                    state: StateFilter::Firing,
                    resource_id: resource,
                    limit: i64::try_from(limit).unwrap_or(20),
                },
            )
            .await
            .map(|list| {
                list.iter()
                    .map(|a| {
                        json!({
                            "id": a.id, "type": a.rule, "level": a.level, "value": a.value,
                            "threshold": a.threshold, "resource_id": a.resource_id,
                            "message": a.message, "fired_at": a.fired_at,
                        })
                    })
                    .collect()
            })
            .map_err(|e| e.to_string()),
        };
        match rows {
            Ok(rows) => json_result(
                call,
                &json!({"action": action, "count": rows.len(), "items": rows}),
            ),
            Err(e) => ToolResult::error(&call.id, format!("could not read {action}: {e}")),
        }
    }

    fn summarize(&self, call: &ToolCall) -> ToolResult {
        let scope = &self.ctx().scope;
        match text_arg(&call.arguments, "action") {
            Some("resource") => {
                let Some(id) = text_arg(&call.arguments, "resource_id") else {
                    return ToolResult::error(
                        &call.id,
                        "resource_id is required for action=resource",
                    );
                };
                match self.ctx().in_scope(id) {
                    Some(r) => json_result(call, &json!({"resource": compact_row(r)})),
                    None => ToolResult::error(
                        &call.id,
                        format!("no resource {id}; list resources with pulse_query first"),
                    ),
                }
            }
            _ => {
                let count = |h: Health| scope.iter().filter(|r| r.health == h).count();
                let unhealthy: Vec<Value> = scope
                    .iter()
                    .filter(|r| r.health != Health::Healthy)
                    .take(MAX_ROWS)
                    .map(compact_row)
                    .collect();
                json_result(
                    call,
                    &json!({
                        "resources": scope.len(),
                        "healthy": count(Health::Healthy),
                        "not_healthy": scope.len() - count(Health::Healthy),
                        "not_healthy_resources": unhealthy,
                    }),
                )
            }
        }
    }

    fn question(&self, call: &ToolCall) -> ToolResult {
        let card = json!({
            "question": text_arg(&call.arguments, "question").unwrap_or_default(),
            "type": text_arg(&call.arguments, "type").unwrap_or("text"),
            "options": call.arguments.get("options").cloned().unwrap_or(json!([])),
        });
        self.cards.card(call, Card::Question(card));
        ToolResult::ok(
            &call.id,
            "The question is shown to the user. End this turn now; the answer arrives as the \
             user's next message.",
        )
    }

    async fn control(&self, call: &ToolCall) -> ToolResult {
        let Some(broker) = &self.broker else {
            return ToolResult::error(&call.id, "action planning is unavailable");
        };
        if !self.caller.may_plan {
            return ToolResult::error(
                &call.id,
                "the caller's token lacks actions:plan, so no action can be planned for them; \
                 tell the user which scope is needed",
            );
        }
        let (Some(resource_id), Some(verb)) = (
            text_arg(&call.arguments, "resource_id"),
            text_arg(&call.arguments, "action"),
        ) else {
            return ToolResult::error(&call.id, "resource_id and action are required");
        };
        let tenant = &self.ctx().tenant;
        let catalogue = match broker
            .capabilities(
                tenant,
                &ActionCapabilitiesRequest {
                    resource_id: resource_id.to_owned(),
                },
                BROKER_TIMEOUT,
            )
            .await
        {
            Ok(c) => c,
            Err(e) => {
                return ToolResult::error(&call.id, broker_error("read the capabilities", &e));
            }
        };
        let suffix = format!(".{verb}");
        let Some(entry) = catalogue
            .capabilities
            .iter()
            .find(|c| c.name.ends_with(&suffix))
        else {
            let offered: Vec<&str> = catalogue
                .capabilities
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return ToolResult::error(
                &call.id,
                format!(
                    "{} does not advertise a {verb} capability; it offers: {}",
                    catalogue.resource_id,
                    if offered.is_empty() {
                        "none".to_owned()
                    } else {
                        offered.join(", ")
                    }
                ),
            );
        };
        // The one target value the capability's schema allows (the resource's own name).
        let params = match entry
            .params_schema
            .pointer("/properties/target/enum")
            .and_then(Value::as_array)
            .and_then(|v| v.first())
        {
            Some(target) => json!({"target": target}),
            None => json!({}),
        };
        let floor = if self.caller.approval_required {
            Some(ApprovalFloor::Admin)
        } else {
            None
        };
        let plan = ActionPlanRequest {
            resource_id: catalogue.resource_id.clone(),
            capability: entry.name.clone(),
            params,
            reason: format!(
                "Planned by Pulse Assistant (session {})",
                self.caller.session_id
            ),
            severity: ActionSeverity::Warning,
            approval_floor: floor,
            requested_by: self.caller.actor.clone(),
            finding_id: None,
        };
        let reply = match broker.plan(tenant, &plan, BROKER_TIMEOUT).await {
            Ok(r) => r,
            Err(e) => return ToolResult::error(&call.id, broker_error("plan the action", &e)),
        };
        let card = json!({
            "action_id": reply.action_id,
            "resource_id": catalogue.resource_id,
            "resource_name": catalogue.resource_name,
            "capability": entry.name,
            "params": plan.params,
            "plan_hash": reply.plan_hash,
            "state": reply.state,
            "policy": reply.policy_decision,
            "requested_by": plan.requested_by,
            "decision_route": format!("/api/actions/{}/decision", reply.action_id),
        });
        self.cards.card(
            call,
            Card::Approval {
                action_id: reply.action_id,
                card: card.clone(),
            },
        );
        json_result(
            call,
            &json!({
                "planned": card,
                "note": "Nothing has run. A human must approve this action; its outcome is \
                         reported only after the verifier has checked it.",
            }),
        )
    }
}

fn broker_error(what: &str, error: &ClientError) -> String {
    format!("could not {what}: {} ({})", error, error.code())
}

impl ToolHandler for AssistantTools {
    fn call<'a>(
        &'a self,
        call: &'a ToolCall,
        admitted: &'a AdmittedCall,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            match admitted.tool {
                read if crate::tools::is_canonical_read(read) => {
                    self.reads.call(call, admitted).await
                }
                ToolName::PulseAlerts => self.alerts(call).await,
                ToolName::PulseSummarize => self.summarize(call),
                ToolName::PulseQuestion => self.question(call),
                ToolName::PulseControl => self.control(call).await,
                other => ToolResult::error(
                    &call.id,
                    format!("{other} is not available to Pulse Assistant"),
                ),
            }
        })
    }
}
