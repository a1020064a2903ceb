//! Patrol runs: `POST /api/ai/patrol/run`, `POST /api/ai/patrol/preflight`,
//! `GET /api/ai/patrol/runs`, `GET /api/ai/patrol/runs/{id}` and `GET /api/ai/patrol/status`
//! (the run body and the status are the domain's own types:
//! [`pulse_domain::patrol::scope::RawRunRequest`], [`pulse_domain::patrol::status::PatrolStatus`]).

use chrono::{DateTime, Utc};
use pulse_domain::listing::MAX_PATROL_RUNS;
use pulse_domain::patrol::readiness::PreflightState;
use pulse_domain::patrol::run::{PatrolRun, RunId, RunStatus, RunType, TriggerReason};
use serde::{Deserialize, Serialize};

use crate::constraints::IntegerIn;
use crate::settings::PreflightView;

/// The answer to an accepted run request.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunAccepted {
    pub status: RunStatus,
    #[serde(flatten)]
    pub accepted: PatrolRunAccepted,
}

/// The run the scheduler accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PatrolRunAccepted {
    pub run_id: RunId,
    pub trigger_reason: TriggerReason,
    #[serde(rename = "type")]
    pub run_type: RunType,
    pub queued_at: DateTime<Utc>,
    pub scope_resource_ids: Vec<String>,
    pub effective_scope_resource_ids: Vec<String>,
}

/// The answer to `POST /api/ai/patrol/preflight`.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PreflightAnswer {
    pub preflight_state: PreflightState,
    pub patrol_preflight: PreflightView,
}

#[derive(Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::query::integer_in::<_, 1, MAX_PATROL_RUNS>"
    )]
    #[schemars(with = "Option<RunsLimit>")]
    pub limit: Option<i64>,
}

/// How many runs a list answers.
pub type RunsLimit = IntegerIn<1, MAX_PATROL_RUNS>;

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunList {
    pub runs: Vec<PatrolRun>,
}
