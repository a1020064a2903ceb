//! The action-broker's series for `/metrics`: actions entering each state (every state change
//! goes through [`transition`], which counts it), verification outcomes recorded, and the time
//! from an action's approval to its recorded verification. Labels are states, outcomes and the
//! capability (`restart`, `start`, `stop`); never a tenant, resource or action id.

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use pulse_domain::action::{ActionEvent, ActionState, Verification};
use pulse_store::TenantTx;
use pulse_store::actions::{self, ActionsError, StoredAction, TransitionDetail};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerificationLabels {
    /// `verified`, `still_failing` or `inconclusive`.
    pub outcome: &'static str,
    pub capability: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub outcome: &'static str,
    /// `human` or `policy` (auto-authorized).
    pub approval: &'static str,
}

/// From approval to a recorded judgement: the command, the agent's restart, the verifier's wait.
const APPROVE_TO_VERIFIED_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// `pulse_actions_total{state}` (actions that entered the state), `pulse_action_verifications_total{outcome,capability}`
/// and `pulse_action_approve_to_verified_seconds{outcome,approval}`.
#[derive(Clone)]
pub struct ActionMetrics {
    pub entered: Family<StateLabels, Counter>,
    pub verifications: Family<VerificationLabels, Counter>,
    pub approve_to_verified: Family<LatencyLabels, Histogram>,
}

impl Default for ActionMetrics {
    fn default() -> Self {
        Self {
            entered: Family::default(),
            verifications: Family::default(),
            approve_to_verified: Family::new_with_constructor(|| {
                Histogram::new(APPROVE_TO_VERIFIED_BUCKETS.iter().copied())
            }),
        }
    }
}

impl ActionMetrics {
    /// The process's series (the broker's handlers and its lifecycle share them).
    pub fn shared() -> &'static Self {
        static METRICS: LazyLock<ActionMetrics> = LazyLock::new(ActionMetrics::default);
        &METRICS
    }

    pub fn register(metrics: &pulse_telemetry::Metrics) {
        let this = Self::shared().clone();
        // Every state, outcome and capability at zero, so each series exists before its event.
        for state in ActionState::ALL {
            let _ = this.entered.get_or_create(&StateLabels {
                state: state.as_str(),
            });
        }
        for outcome in Verification::ALL {
            for capability in pulse_domain::action::Capability::ALL {
                let _ = this.verifications.get_or_create(&VerificationLabels {
                    outcome: outcome.as_str(),
                    capability: capability.as_str(),
                });
            }
            for approval in ["human", "policy"] {
                let _ = this.approve_to_verified.get_or_create(&LatencyLabels {
                    outcome: outcome.as_str(),
                    approval,
                });
            }
        }
        metrics.register(|registry| {
            registry.register("actions", "Actions that entered each state", this.entered);
            registry.register(
                "action_verifications",
                "Verifications recorded on completed actions, by outcome",
                this.verifications,
            );
            registry.register(
                "action_approve_to_verified_seconds",
                "Time from an action's approval to its recorded verification",
                this.approve_to_verified,
            );
        });
    }

    pub fn entered(&self, state: ActionState) {
        self.entered
            .get_or_create(&StateLabels {
                state: state.as_str(),
            })
            .inc();
    }

    /// A verification of `action` recorded at `verified_at`; `approved_at` from its audit trail.
    pub fn verified(
        &self,
        action: &StoredAction,
        outcome: Verification,
        approved_at: Option<DateTime<Utc>>,
        verified_at: DateTime<Utc>,
    ) {
        self.verifications
            .get_or_create(&VerificationLabels {
                outcome: outcome.as_str(),
                capability: action.plan.capability.as_str(),
            })
            .inc();
        if let Some(approved_at) = approved_at {
            let seconds = (verified_at - approved_at).num_milliseconds().max(0) as f64 / 1000.0;
            self.approve_to_verified
                .get_or_create(&LatencyLabels {
                    outcome: outcome.as_str(),
                    approval: if action.human_approved {
                        "human"
                    } else {
                        "policy"
                    },
                })
                .observe(seconds);
        }
    }
}

/// [`actions::transition`], counting the state the action entered.
pub(crate) async fn transition(
    tx: &TenantTx,
    current: &StoredAction,
    event: ActionEvent,
    actor: &str,
    detail: TransitionDetail,
) -> Result<StoredAction, ActionsError> {
    let moved = actions::transition(tx, current, event, actor, detail).await?;
    ActionMetrics::shared().entered(moved.state);
    Ok(moved)
}

/// When action `id` was approved, from its audit trail (`None` when it never was, or the
/// trail cannot be read: the latency is then not observed).
pub(crate) async fn approved_at(tx: &TenantTx, id: uuid::Uuid) -> Option<DateTime<Utc>> {
    match actions::audit_trail(tx, id).await {
        Ok(trail) => trail
            .iter()
            .find(|row| row.kind == "action.approved")
            .map(|row| row.occurred_at),
        Err(error) => {
            tracing::debug!(action_id = %id, %error, "audit trail not read for the approval time");
            None
        }
    }
}
