//! Typed clients of the services' request/reply APIs. A client's request type fixes the subject
//! and the reply ([`Endpoint`]); its error says which service did not answer and carries the
//! remote code typed. Every caller outside the serving service uses these.
//!
//! | client | serves it | requests |
//! |---|---|---|
//! | [`PatrolClient`] | patrol-scheduler, model-runner | run, preflight |
//! | [`ModelsClient`] | model-runner | model catalogue, provider test |
//! | [`ActionBrokerClient`] | action-broker | plan, decide, execute, capabilities |
//! | [`VerifierClient`] | verifier | resolution, postcondition |
//! | [`RelayClient`] | agent-relay | command, observe, read |

use std::time::Duration;

use pulse_capabilities::ErrorCode;
use pulse_domain::TenantId;
use pulse_domain::patrol::readiness::PreflightRecord;

use crate::actions_api::{
    ActionCapabilitiesReply, ActionCapabilitiesRequest, ActionDecisionRequest,
    ActionExecuteRequest, ActionPlanRequest, ActionReply,
};
use crate::patrol_api::{PatrolPreflightRequest, PatrolRunAccepted, PatrolRunRequest};
use crate::relay_api::{
    RelayCommandReceipt, RelayCommandRequest, RelayObserveReply, RelayObserveRequest,
    RelayReadReply, RelayReadRequest,
};
use crate::verify_api::{
    PostconditionReply, PostconditionRequest, ResolutionCheckReply, ResolutionCheckRequest,
};
use crate::{Bus, BusError, Endpoint};

/// Why a client call got no typed reply.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No replica of the service is subscribed.
    #[error("no {service} is running")]
    NoResponder {
        service: &'static str,
        /// The code a caller answers with when this service cannot be reached.
        unavailable: ErrorCode,
    },
    /// The service did not answer within the timeout.
    #[error("the {service} did not answer within {} s", timeout.as_secs_f32())]
    Timeout {
        service: &'static str,
        unavailable: ErrorCode,
        timeout: Duration,
    },
    /// The service answered with an error reply.
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
    /// The service answered with a code outside the table.
    #[error("the {service} answered with an unknown error code {code:?}: {message}")]
    UnknownCode {
        service: &'static str,
        code: String,
        message: String,
    },
    /// The message bus itself failed (connection, encoding, subject).
    #[error("the message bus failed: {0}")]
    Bus(#[source] BusError),
}

impl ClientError {
    /// The stable code this error answers with.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NoResponder { unavailable, .. } | Self::Timeout { unavailable, .. } => {
                *unavailable
            }
            Self::Remote { code, .. } => *code,
            Self::UnknownCode { .. } => ErrorCode::InternalError,
            Self::Bus(_) => ErrorCode::ServiceUnavailable,
        }
    }

    /// The remote code, when the service answered with an error reply.
    pub fn remote_code(&self) -> Option<ErrorCode> {
        match self {
            Self::Remote { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Nobody answered (no replica, or none in time).
    pub fn is_unanswered(&self) -> bool {
        matches!(self, Self::NoResponder { .. } | Self::Timeout { .. })
    }
}

impl crate::CodedError for ClientError {
    fn code(&self) -> ErrorCode {
        ClientError::code(self)
    }
}

/// One service's name and a bus to reach it.
#[derive(Debug, Clone)]
struct Target {
    bus: Bus,
    service: &'static str,
}

impl Target {
    async fn call<E: Endpoint>(
        &self,
        tenant: &TenantId,
        request: &E,
        timeout: Duration,
    ) -> Result<E::Reply, ClientError> {
        self.bus
            .call(tenant, request, timeout)
            .await
            .map_err(|error| self.error(error, timeout, E::UNAVAILABLE))
    }

    fn error(&self, error: BusError, timeout: Duration, unavailable: ErrorCode) -> ClientError {
        match error {
            BusError::NoResponders { .. } => ClientError::NoResponder {
                service: self.service,
                unavailable,
            },
            BusError::Timeout { .. } => ClientError::Timeout {
                service: self.service,
                unavailable,
                timeout,
            },
            BusError::Remote { code, message } => ClientError::Remote { code, message },
            BusError::UnknownErrorCode { code, message } => ClientError::UnknownCode {
                service: self.service,
                code,
                message,
            },
            other => ClientError::Bus(other),
        }
    }
}

/// The Patrol API: manual runs (patrol-scheduler) and preflights (model-runner).
#[derive(Debug, Clone)]
pub struct PatrolClient {
    scheduler: Target,
    runner: Target,
}

impl PatrolClient {
    pub fn new(bus: Bus) -> Self {
        Self {
            scheduler: Target {
                bus: bus.clone(),
                service: "patrol-scheduler",
            },
            runner: Target {
                bus,
                service: "model-runner",
            },
        }
    }

    /// Asks the patrol-scheduler to accept a manual run.
    pub async fn run(
        &self,
        tenant: &TenantId,
        request: &PatrolRunRequest,
        timeout: Duration,
    ) -> Result<PatrolRunAccepted, ClientError> {
        self.scheduler.call(tenant, request, timeout).await
    }

    /// Asks a model-runner to run a fresh preflight of the tenant's Patrol route.
    pub async fn preflight(
        &self,
        tenant: &TenantId,
        request: &PatrolPreflightRequest,
        timeout: Duration,
    ) -> Result<PreflightRecord, ClientError> {
        self.runner.call(tenant, request, timeout).await
    }
}

/// The providers' model lists and provider tests (model-runner).
#[derive(Debug, Clone)]
pub struct ModelsClient {
    target: Target,
}

impl ModelsClient {
    pub fn new(bus: Bus) -> Self {
        Self {
            target: Target {
                bus,
                service: "model-runner",
            },
        }
    }

    /// Asks a model-runner for the models of every provider the tenant uses.
    pub async fn catalogue(
        &self,
        tenant: &TenantId,
        request: &crate::models_api::ModelCatalogueRequest,
        timeout: Duration,
    ) -> Result<pulse_domain::model_catalogue::ModelCatalogue, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    /// Asks a model-runner to test one provider and model without saving anything.
    pub async fn test(
        &self,
        tenant: &TenantId,
        request: &crate::models_api::ProviderTestRequest,
        timeout: Duration,
    ) -> Result<PreflightRecord, ClientError> {
        self.target.call(tenant, request, timeout).await
    }
}

/// Pulse Assistant turns and compaction (model-runner).
#[derive(Debug, Clone)]
pub struct AssistantClient {
    target: Target,
}

impl AssistantClient {
    pub fn new(bus: Bus) -> Self {
        Self {
            target: Target {
                bus,
                service: "model-runner",
            },
        }
    }

    /// Asks a model-runner to run the turn the session holds.
    pub async fn turn(
        &self,
        tenant: &TenantId,
        request: &crate::assistant_api::AssistantTurnRequest,
        timeout: Duration,
    ) -> Result<crate::assistant_api::AssistantTurnAccepted, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    /// Asks a model-runner to compact an idle session.
    pub async fn summarize(
        &self,
        tenant: &TenantId,
        request: &crate::assistant_api::AssistantSummarizeRequest,
        timeout: Duration,
    ) -> Result<crate::assistant_api::AssistantSummarizeReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }
}

/// The action-broker: plan, decide, execute and the action catalogue.
#[derive(Debug, Clone)]
pub struct ActionBrokerClient {
    target: Target,
}

impl ActionBrokerClient {
    pub fn new(bus: Bus) -> Self {
        Self {
            target: Target {
                bus,
                service: "action-broker",
            },
        }
    }

    pub async fn plan(
        &self,
        tenant: &TenantId,
        request: &ActionPlanRequest,
        timeout: Duration,
    ) -> Result<ActionReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    pub async fn decide(
        &self,
        tenant: &TenantId,
        request: &ActionDecisionRequest,
        timeout: Duration,
    ) -> Result<ActionReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    pub async fn execute(
        &self,
        tenant: &TenantId,
        request: &ActionExecuteRequest,
        timeout: Duration,
    ) -> Result<ActionReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    pub async fn capabilities(
        &self,
        tenant: &TenantId,
        request: &ActionCapabilitiesRequest,
        timeout: Duration,
    ) -> Result<ActionCapabilitiesReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }
}

/// The verifier: resolution and postcondition checks.
#[derive(Debug, Clone)]
pub struct VerifierClient {
    target: Target,
}

impl VerifierClient {
    pub fn new(bus: Bus) -> Self {
        Self {
            target: Target {
                bus,
                service: "verifier",
            },
        }
    }

    pub async fn resolution(
        &self,
        tenant: &TenantId,
        request: &ResolutionCheckRequest,
        timeout: Duration,
    ) -> Result<ResolutionCheckReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    pub async fn postcondition(
        &self,
        tenant: &TenantId,
        request: &PostconditionRequest,
        timeout: Duration,
    ) -> Result<PostconditionReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }
}

/// The agent-relay: commands, observations and bounded reads on an agent.
#[derive(Debug, Clone)]
pub struct RelayClient {
    target: Target,
}

impl RelayClient {
    pub fn new(bus: Bus) -> Self {
        Self {
            target: Target {
                bus,
                service: "agent-relay",
            },
        }
    }

    pub async fn command(
        &self,
        tenant: &TenantId,
        request: &RelayCommandRequest,
        timeout: Duration,
    ) -> Result<RelayCommandReceipt, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    pub async fn observe(
        &self,
        tenant: &TenantId,
        request: &RelayObserveRequest,
        timeout: Duration,
    ) -> Result<RelayObserveReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }

    pub async fn read(
        &self,
        tenant: &TenantId,
        request: &RelayReadRequest,
        timeout: Duration,
    ) -> Result<RelayReadReply, ClientError> {
        self.target.call(tenant, request, timeout).await
    }
}
