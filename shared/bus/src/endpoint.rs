//! Requests whose type fixes their subject, their queue group and their reply.
//!
//! Each service's request/reply API is a module of endpoint types ([`crate::patrol_api`],
//! [`crate::actions_api`], [`crate::verify_api`], [`crate::relay_api`]). Callers outside the
//! serving service use the typed clients in [`crate::clients`]; the service serves its endpoints
//! with [`Bus::serve_endpoint`]. Nothing else builds a request subject.

use std::future::Future;
use std::time::Duration;

use pulse_capabilities::ErrorCode;
use pulse_domain::TenantId;

use crate::bus::{Bus, Request};
use crate::error::{BusError, CodedError};
use crate::responder::{RequestContext, Responder};
use crate::subjects::Subjects;

/// A request served by one service.
pub trait Endpoint: Request {
    /// What follows `pulse.<tenant>.` in the subject, e.g. `actions.plan.request`.
    const SUBJECT: &'static str;
    /// The queue group the serving service's replicas share the requests in.
    const QUEUE_GROUP: &'static str;
    /// Every code the serving service answers this request with. The service's error type is
    /// tested against it, a reply with another code is logged when it is sent, and callers
    /// (the gateway's route table) declare their codes from it: one owner per endpoint.
    const ERRORS: &'static [ErrorCode];
    /// The code a caller answers with when no replica of the serving service answered.
    const UNAVAILABLE: ErrorCode;
}

impl Subjects {
    /// `pulse.<tenant>.<E::SUBJECT>`: where one tenant's request of type `E` is sent.
    pub fn endpoint<E: Endpoint>(&self, tenant: &TenantId) -> String {
        self.tenant(tenant, E::SUBJECT)
    }

    /// `pulse.*.<E::SUBJECT>`: what the serving service subscribes to.
    pub fn endpoint_any_tenant<E: Endpoint>(&self) -> String {
        self.any_tenant(E::SUBJECT)
    }
}

impl Bus {
    /// Sends `request` to the service that serves `E` for `tenant` and waits up to `timeout`.
    pub async fn call<E: Endpoint>(
        &self,
        tenant: &TenantId,
        request: &E,
        timeout: Duration,
    ) -> Result<E::Reply, BusError> {
        let subject = self.subjects().endpoint::<E>(tenant);
        self.request(tenant, &subject, request, timeout).await
    }

    /// Serves `E` for every tenant in its queue group.
    pub async fn serve_endpoint<E, Err, F, Fut>(&self, handler: F) -> Result<Responder, BusError>
    where
        E: Endpoint,
        Err: CodedError + Send + 'static,
        F: Fn(RequestContext, E) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<E::Reply, Err>> + Send + 'static,
    {
        let subject = self.subjects().endpoint_any_tenant::<E>();
        let checked = move |context: RequestContext, request: E| {
            let answer = handler(context, request);
            async move {
                let answer = answer.await;
                if let Err(error) = &answer {
                    let code = error.code();
                    if !E::ERRORS.contains(&code) {
                        tracing::error!(
                            subject = E::SUBJECT,
                            code = code.code(),
                            "a reply's error code is not declared by its endpoint"
                        );
                    }
                }
                answer
            }
        };
        self.serve::<E, Err, _, _>(&subject, Some(E::QUEUE_GROUP), checked)
            .await
    }
}
