//! The route registry: the one table of the HTTP API, and the router built from it.
//!
//! Every `/api/` route is one [`RouteSpec`] in [`API_ROUTES`]. The router ([`router`]) is built
//! from the table (each entry carries its handler), so a route cannot exist without an entry.
//! The same table is projected to the OpenAPI 3.1 document (`GET /api/openapi.json`,
//! [`crate::openapi`]) and the agent capabilities manifest (`GET /api/agent/capabilities`,
//! [`crate::manifest`]), and every error answer is checked against the entry's declared codes
//! ([`crate::declared_errors`]).
//!
//! Adding a route is one entry plus its handler:
//!
//! ```text
//! RouteSpec {
//!     method: "GET",                       // one method per entry
//!     path: "/api/things/{id}",            // axum path syntax; `{id}` is the only parameter name
//!     scopes: &[Scope::MonitoringRead],    // every scope required; empty only when public
//!     public: false,                       // answers without a token
//!     name: "get_thing",                   // stable capability name (operationId, MCP tool)
//!     title: "Get a thing",
//!     description: "What it answers, in a sentence or two.",
//!     category: Category::Inventory,
//!     action_mode: ActionMode::Read,       // read | mixed | write
//!     approval_policy: ApprovalPolicy::ScopeOnly, // scope_only | action_plan
//!     id: Some(schema::<Uuid>),            // what the handler accepts as `{id}`, or None
//!     query: Some(schema::<ThingQuery>),   // the handler's query type, or None
//!     body: None,                          // Some(Body::required(schema::<T>)) or ::optional
//!     response: Answer::Json { status: 200, schema: schema::<Thing> },
//!     errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
//!     handler: || get(things::get),
//! },
//! ```
//!
//! `errors` lists what the handler itself can answer; [`RouteSpec::error_codes`] adds what every
//! route can answer ([`ALWAYS`]; plus [`AUTHENTICATED`] for a route that needs a token). The
//! schemas are derived (`schemars`) from the types the handler really extracts and answers.

use std::collections::BTreeSet;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, State};
use axum::routing::{MethodRouter, delete, get, patch, post, put};
use axum::{Json, Router, middleware};
use pulse_api::system::{ActionMode, ApprovalPolicy, Category, HealthReport};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::{
    ApiError, AppState, actions, agent_context, agent_events, alerts, assistant, audit, auth,
    body_limit, declared_errors, findings, forecast, manifest, observe, openapi, patrol,
    patrol_stream, remediation_locks, resources, settings, tokens,
};
use crate::{cost, operator_state};

/// Produces the schema of one type in a generator (a `$ref` to a shared definition).
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T`, as a [`SchemaFn`] for the table.
pub fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// What a route answers on success.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// A JSON body of this schema with this status.
    Json { status: u16, schema: SchemaFn },
    /// A JSON body of this schema with `status`, or with `or` (e.g. 200 when there was nothing
    /// to do, 202 when work was started); the answer tells which case it is.
    JsonEither {
        status: u16,
        or: u16,
        schema: SchemaFn,
    },
    /// No body (`204 No Content`).
    Empty { status: u16 },
    /// A Server-Sent Events stream (`text/event-stream`), status 200, of events named one of
    /// `events` (any name when empty), each with a JSON `data` line.
    EventStream { events: &'static [&'static str] },
    /// A CSV document (`text/csv`), status 200.
    Csv,
}

impl Answer {
    /// The status of the usual answer.
    pub fn status(&self) -> u16 {
        match self {
            Answer::Json { status, .. }
            | Answer::JsonEither { status, .. }
            | Answer::Empty { status } => *status,
            Answer::EventStream { .. } | Answer::Csv => 200,
        }
    }

    /// Every status a success can have.
    pub fn statuses(&self) -> Vec<u16> {
        match self {
            Answer::JsonEither { status, or, .. } => vec![*status, *or],
            other => vec![other.status()],
        }
    }
}

/// The JSON body a route reads.
#[derive(Debug, Clone, Copy)]
pub struct Body {
    pub schema: SchemaFn,
    /// Whether a request without a body is refused; when not, no body means the defaults.
    pub required: bool,
}

impl Body {
    pub const fn required(schema: SchemaFn) -> Self {
        Self {
            schema,
            required: true,
        }
    }

    pub const fn optional(schema: SchemaFn) -> Self {
        Self {
            schema,
            required: false,
        }
    }
}

/// A documented API route: who may call it, what it takes and answers, which error codes it
/// can answer with, and its handler.
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec {
    pub method: &'static str,
    pub path: &'static str,
    /// Every scope required; empty for public routes.
    pub scopes: &'static [Scope],
    pub public: bool,
    /// The stable capability name: the OpenAPI operationId and the manifest (MCP tool) name.
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub category: Category,
    pub action_mode: ActionMode,
    pub approval_policy: ApprovalPolicy,
    /// What the handler accepts as the `{id}` path parameter, when the path has one.
    pub id: Option<SchemaFn>,
    /// The query string the handler parses, when it takes one.
    pub query: Option<SchemaFn>,
    /// The JSON body the handler parses, when it takes one.
    pub body: Option<Body>,
    pub response: Answer,
    /// The codes the handler itself answers with (see [`RouteSpec::error_codes`]).
    pub errors: &'static [ErrorCode],
    /// The handler, as a method router for `path` answering `method` only.
    pub handler: fn() -> MethodRouter<AppState>,
}

/// Codes any route can answer: an oversized body is refused before routing, and an unexpected
/// fault is always possible.
pub const ALWAYS: &[ErrorCode] = &[ErrorCode::PayloadTooLarge, ErrorCode::InternalError];

/// Codes any route that needs a token can answer (authentication reads the token store).
pub const AUTHENTICATED: &[ErrorCode] = &[
    ErrorCode::Unauthorized,
    ErrorCode::MissingScope,
    ErrorCode::ServiceUnavailable,
    // The caller's tenant is suspended, or over its request-rate quota.
    ErrorCode::TenantSuspended,
    ErrorCode::QuotaExceeded,
];

/// Codes a request that matched no route (or no method of its path) can answer.
pub const UNROUTED: &[ErrorCode] = &[
    ErrorCode::NotFound,
    ErrorCode::MethodNotAllowed,
    ErrorCode::Unauthorized,
    ErrorCode::PayloadTooLarge,
    ErrorCode::ServiceUnavailable,
    ErrorCode::InternalError,
];

impl RouteSpec {
    /// Every code the route can answer with, in table order: its own, the authentication codes
    /// (unless public) and [`ALWAYS`].
    pub fn error_codes(&self) -> Vec<ErrorCode> {
        let mut set: BTreeSet<usize> = BTreeSet::new();
        let index = |code: &ErrorCode| ErrorCode::ALL.iter().position(|c| c == code);
        let auth: &[ErrorCode] = if self.public { &[] } else { AUTHENTICATED };
        for code in self.errors.iter().chain(auth).chain(ALWAYS) {
            if let Some(i) = index(code) {
                set.insert(i);
            }
        }
        set.into_iter().map(|i| ErrorCode::ALL[i]).collect()
    }

    /// Whether `code` is declared for this route.
    pub fn declares(&self, code: ErrorCode) -> bool {
        self.errors.contains(&code)
            || ALWAYS.contains(&code)
            || (!self.public && AUTHENTICATED.contains(&code))
    }

    /// The path parameters, in order (`{id}` -> `id`).
    pub fn path_params(&self) -> Vec<&'static str> {
        self.path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect()
    }
}

/// The entry for a request's method and matched route template (`HEAD` is answered by the `GET`
/// handler).
pub fn find(method: &str, path: &str) -> Option<&'static RouteSpec> {
    let method = if method.eq_ignore_ascii_case("HEAD") {
        "GET"
    } else {
        method
    };
    all_routes().find(|r| r.path == path && r.method.eq_ignore_ascii_case(method))
}

/// Every route the gateway serves: the tenant API, then the platform API.
pub fn all_routes() -> impl Iterator<Item = &'static RouteSpec> {
    API_ROUTES
        .iter()
        .chain(crate::platform::PLATFORM_ROUTES.iter())
}

/// Whether `path` (a concrete request path) is a public route: answered without a token.
pub fn is_public_path(path: &str) -> bool {
    API_ROUTES.iter().any(|r| r.public && r.path == path)
}

/// Body codes of a route that parses its JSON body with [`crate::extract::ApiJson`].
const JSON_BODY: [ErrorCode; 3] = [
    ErrorCode::InvalidJson,
    ErrorCode::UnsupportedMediaType,
    ErrorCode::InvalidRequest,
];

/// What a finding operator action can answer.
const FINDING_ACTION: &[ErrorCode] = &[
    ErrorCode::InvalidFindingRequest,
    ErrorCode::UnsupportedMediaType,
    ErrorCode::FindingNotFound,
    ErrorCode::FindingActionNotAllowed,
    ErrorCode::Conflict,
    ErrorCode::PatrolUnavailable,
];

/// A resource reference in the path: malformed, unknown (or another tenant's), or ambiguous.
const RESOURCE_REF: [ErrorCode; 3] = [
    ErrorCode::InvalidParameter,
    ErrorCode::NotFound,
    ErrorCode::AmbiguousResource,
];

/// What the action-broker can answer to a plan, decision or execution, and its absence.
const BROKER: [ErrorCode; 17] = [
    ErrorCode::ActionExecutorUnavailable,
    ErrorCode::ActionNotFound,
    ErrorCode::NotFound,
    ErrorCode::AmbiguousResource,
    ErrorCode::InvalidActionRequest,
    ErrorCode::Conflict,
    ErrorCode::ActionDecisionNotAllowed,
    ErrorCode::ActionNotApproved,
    ErrorCode::ActionAlreadyExecuting,
    ErrorCode::ActionExecutionFinal,
    ErrorCode::ActionStepUpUnavailable,
    ErrorCode::ActionSelfApprovalForbidden,
    ErrorCode::ActionDecisionRequiresHuman,
    ErrorCode::ActionPlanExpired,
    ErrorCode::ActionPlanDrift,
    ErrorCode::ResourceRemediationLocked,
    ErrorCode::ActionRefused,
];

const fn concat<const A: usize, const B: usize, const N: usize>(
    a: [ErrorCode; A],
    b: [ErrorCode; B],
) -> [ErrorCode; N] {
    assert!(A + B == N);
    let mut out = [ErrorCode::InternalError; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

const PLAN_ERRORS: [ErrorCode; 20] = concat(JSON_BODY, BROKER);
const DECIDE_ERRORS: [ErrorCode; 20] = concat(JSON_BODY, BROKER);
const LOCK_PUT_ERRORS: [ErrorCode; 6] = concat(RESOURCE_REF, JSON_BODY);
const TOKEN_CREATE_ERRORS: [ErrorCode; 4] = concat(JSON_BODY, [ErrorCode::PlatformScopeRefused]);

// Routes being added alongside this registry, with the capability names they take when ported:
// - GET /api/agent/events (SSE)                       subscribe_events     (context, read)
// - GET /api/ai/cost/summary                          get_cost_summary     (settings, read)
// - GET /api/ai/cost/export                           export_cost_ledger   (settings, read)
// - GET /api/resources/{id}/operator-state            get_operator_state   (context, read)
// - PUT /api/resources/{id}/operator-state            set_operator_state   (context, write)
// - DELETE /api/resources/{id}/operator-state         clear_operator_state (context, write)

/// Every `/api/` route.
pub const API_ROUTES: &[RouteSpec] = &[
    // --- system ---
    RouteSpec {
        method: "GET",
        path: "/api/health",
        scopes: &[],
        public: true,
        name: "get_health",
        title: "Fleet health",
        description: "Whether every Pulse service has a fresh, ready instance (from their heartbeats).",
        category: Category::System,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<HealthReport>,
        },
        errors: &[],
        handler: || get(health),
    },
    RouteSpec {
        method: "GET",
        path: "/api/openapi.json",
        scopes: &[],
        public: true,
        name: "get_openapi_document",
        title: "OpenAPI document",
        description: "This API as an OpenAPI 3.1 document, generated from the route registry.",
        category: Category::System,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<serde_json::Value>,
        },
        errors: &[],
        handler: || get(openapi::document),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/capabilities",
        scopes: &[],
        public: true,
        name: "get_agent_capabilities",
        title: "Agent capabilities manifest",
        description: "The capabilities external agents (and the MCP adapter) may use: each route's scope, action mode, approval policy, input and output schemas and error codes, plus the surface contracts and workflow prompts.",
        category: Category::System,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::system::Manifest>,
        },
        errors: &[],
        handler: || get(manifest::capabilities),
    },
    // --- tokens ---
    RouteSpec {
        method: "POST",
        path: "/api/tokens",
        scopes: &[Scope::Admin],
        public: false,
        name: "create_token",
        title: "Create an API token",
        description: "Issues a token of the caller's tenant with the given scopes (never more than the caller holds); the secret is in this answer only.",
        category: Category::Tokens,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(
            schema::<pulse_api::tokens::CreateTokenRequest>,
        )),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::tokens::CreatedToken>,
        },
        errors: &TOKEN_CREATE_ERRORS,
        handler: || post(tokens::create),
    },
    RouteSpec {
        method: "GET",
        path: "/api/tokens",
        scopes: &[Scope::Admin],
        public: false,
        name: "list_tokens",
        title: "List API tokens",
        description: "The tenant's tokens, revoked and expired ones included; never a secret.",
        category: Category::Tokens,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::tokens::TokenList>,
        },
        errors: &[],
        handler: || get(tokens::list),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/tokens/{id}",
        scopes: &[Scope::Admin],
        public: false,
        name: "revoke_token",
        title: "Revoke an API token",
        description: "Revokes one token of the tenant; revoking a revoked token is a no-op.",
        category: Category::Tokens,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::tokens::TokenId>),
        query: None,
        body: None,
        response: Answer::Empty { status: 204 },
        errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
        handler: || delete(tokens::revoke),
    },
    // --- inventory ---
    RouteSpec {
        method: "GET",
        path: "/api/resources",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_resources",
        title: "List resources",
        description: "The tenant's resources as the agents last reported them, optionally of one type.",
        category: Category::Inventory,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::resources::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::resources::ResourceList>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(resources::list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_resource",
        title: "Get a resource",
        description: "One resource by canonical id, source id, name or alias.",
        category: Category::Inventory,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_domain::resource::Resource>,
        },
        errors: &RESOURCE_REF,
        handler: || get(resources::get),
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/forecast",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_resource_forecast",
        title: "Capacity forecast",
        description: "The capacity forecast of one percent-used metric of a resource from its recent history.",
        category: Category::Inventory,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: Some(schema::<pulse_api::forecast::ForecastQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::forecast::ForecastResponse>,
        },
        errors: &RESOURCE_REF,
        handler: || get(forecast::get),
    },
    RouteSpec {
        method: "GET",
        path: "/api/alerts",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_alerts",
        title: "List alerts",
        description: "The alerts of the deterministic floor: firing by default, or cleared or all, optionally of one resource.",
        category: Category::Inventory,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::alerts::AlertsQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::alerts::AlertList>,
        },
        errors: &RESOURCE_REF,
        handler: || get(alerts::list),
    },
    // --- patrol ---
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/run",
        scopes: &[Scope::Admin, Scope::AiExecute],
        public: false,
        name: "run_patrol",
        title: "Request a Patrol run",
        description: "Queues a full run (no body or {}) or a run scoped to resources; answers the run id once the scheduler accepted it.",
        category: Category::Patrol,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::optional(
            schema::<pulse_domain::patrol::scope::RawRunRequest>,
        )),
        response: Answer::Json {
            status: 202,
            schema: schema::<pulse_api::patrol::RunAccepted>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::UnprocessableScope,
            ErrorCode::PatrolRunInProgress,
            ErrorCode::PatrolQueueFull,
            ErrorCode::PatrolNotReady,
            ErrorCode::PatrolSchedulerUnavailable,
        ],
        handler: || post(patrol::run),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/preflight",
        scopes: &[Scope::Admin, Scope::AiExecute],
        public: false,
        name: "run_patrol_preflight",
        title: "Run a Patrol preflight",
        description: "Checks the Patrol provider and model with one bounded model turn and answers the stored outcome.",
        category: Category::Patrol,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::patrol::PreflightAnswer>,
        },
        errors: &[
            ErrorCode::PatrolNotReady,
            ErrorCode::PatrolRunnerUnavailable,
        ],
        handler: || post(patrol::preflight),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/runs",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_patrol_runs",
        title: "List Patrol runs",
        description: "The tenant's Patrol run records, newest first.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::patrol::RunsQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::patrol::RunList>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(patrol::list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/runs/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_patrol_run",
        title: "Get a Patrol run",
        description: "One Patrol run record.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::patrol::run::RunId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_domain::patrol::run::PatrolRun>,
        },
        errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
        handler: || get(patrol::get),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/status",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_patrol_status",
        title: "Patrol status",
        description: "Patrol's runtime state, last and next runs, health verdict and readiness checks.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_domain::patrol::status::PatrolStatus>,
        },
        errors: &[],
        handler: || get(patrol::status),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/stream",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "stream_patrol_events",
        title: "Patrol run event stream",
        description: "The tenant's Patrol run events as Server-Sent Events, resumable with Last-Event-ID.",
        category: Category::Patrol,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::events::StreamQuery>),
        body: None,
        response: Answer::EventStream {
            events: &patrol_stream::EVENT_NAMES,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::InvalidLastEventId,
            ErrorCode::TooManyStreams,
        ],
        handler: || get(patrol_stream::stream),
    },
    // --- assistant ---
    RouteSpec {
        method: "POST",
        path: "/api/ai/chat",
        scopes: &[Scope::AiChat],
        public: false,
        name: "assistant_chat",
        title: "Chat with Pulse Assistant",
        description: "One Assistant turn as Server-Sent Events: session first, then workflow_state, content, tool rows, approval and question cards, and exactly one done or error. Changes are only planned (approval cards), never run.",
        category: Category::Assistant,
        action_mode: ActionMode::Mixed,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::ChatBody>)),
        response: Answer::EventStream {
            events: &pulse_bus::assistant_api::ChatEventKind::NAMES,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::AssistantSessionBusy,
            ErrorCode::AssistantSystemSession,
            ErrorCode::FindingNotFound,
        ],
        handler: || post(assistant::chat),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/sessions",
        scopes: &[Scope::AiChat],
        public: false,
        name: "list_assistant_sessions",
        title: "List Assistant sessions",
        description: "The caller's chat sessions, most recent first; Patrol and investigation transcripts only with include_system.",
        category: Category::Assistant,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::assistant::SessionsQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::SessionList>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(assistant::list),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions",
        scopes: &[Scope::AiChat],
        public: false,
        name: "create_assistant_session",
        title: "Create an Assistant session",
        description: "An empty chat session, optionally from a finding (approval-required) and at a control level.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(
            schema::<pulse_api::assistant::NewSessionBody>,
        )),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::assistant::SessionView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
            ErrorCode::FindingNotFound,
        ],
        handler: || post(assistant::create),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/sessions/{id}/messages",
        scopes: &[Scope::AiChat],
        public: false,
        name: "get_assistant_messages",
        title: "Read an Assistant transcript",
        description: "The session's transcript for restoring a view: prompts, answers, tool rows, cards and outcome notes. Provider reasoning is never stored.",
        category: Category::Assistant,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: Some(schema::<pulse_api::assistant::MessagesQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::MessageList>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
        ],
        handler: || get(assistant::messages),
    },
    RouteSpec {
        method: "PATCH",
        path: "/api/ai/sessions/{id}",
        scopes: &[Scope::AiChat],
        public: false,
        name: "rename_assistant_session",
        title: "Rename an Assistant session",
        description: "Sets the session's title.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::RenameBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::SessionView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
        ],
        handler: || patch(assistant::rename),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/ai/sessions/{id}",
        scopes: &[Scope::AiChat],
        public: false,
        name: "delete_assistant_session",
        title: "Delete an Assistant session",
        description: "Deletes an idle session and its transcript.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: None,
        response: Answer::Empty { status: 204 },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::AssistantSessionBusy,
        ],
        handler: || delete(assistant::delete),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/abort",
        scopes: &[Scope::AiChat],
        public: false,
        name: "abort_assistant_turn",
        title: "Stop an Assistant turn",
        description: "Stops the running turn: the provider call is cancelled and open tool rows are closed as cancelled. 202 when a turn was asked to stop (aborted: true), 200 when the session was idle (aborted: false).",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: None,
        response: Answer::JsonEither {
            status: 200,
            or: 202,
            schema: schema::<pulse_api::assistant::AbortAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
        ],
        handler: || post(assistant::abort),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/fork",
        scopes: &[Scope::AiChat],
        public: false,
        name: "fork_assistant_session",
        title: "Fork an Assistant session",
        description: "Copies the live transcript (up to through_seq) into a new session.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::ForkBody>)),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::assistant::SessionView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::AssistantSystemSession,
        ],
        handler: || post(assistant::fork),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/summarize",
        scopes: &[Scope::AiChat],
        public: false,
        name: "summarize_assistant_session",
        title: "Compact an Assistant session",
        description: "Summarizes the older rows of an idle session with the chat model (bounded, redacted input); the summary replaces them in the model's context.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::SummarizeAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::AssistantSessionBusy,
            ErrorCode::AssistantSystemSession,
            ErrorCode::AssistantNotConfigured,
            ErrorCode::AssistantUnavailable,
        ],
        handler: || post(assistant::summarize),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/undo",
        scopes: &[Scope::AiChat],
        public: false,
        name: "undo_assistant_turn",
        title: "Undo the last Assistant turn",
        description: "Takes the last turn out of the transcript when its prompt is expected_prompt.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::UndoBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::UndoAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::AssistantSessionBusy,
            ErrorCode::AssistantSystemSession,
            ErrorCode::AssistantUndoConflict,
        ],
        handler: || post(assistant::undo),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/redo",
        scopes: &[Scope::AiChat],
        public: false,
        name: "redo_assistant_turn",
        title: "Redo an undone Assistant turn",
        description: "Restores the undone turn when its prompt is expected_prompt.",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::UndoBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::assistant::UndoAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::AssistantSessionBusy,
            ErrorCode::AssistantSystemSession,
            ErrorCode::AssistantUndoConflict,
        ],
        handler: || post(assistant::redo),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/sessions/{id}/steer",
        scopes: &[Scope::AiChat],
        public: false,
        name: "steer_assistant_turn",
        title: "Steer a running Assistant turn",
        description: "Adds operator guidance to the running turn, applied at its next turn boundary (steer_applied).",
        category: Category::Assistant,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::assistant::SessionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::assistant::SteerBody>)),
        response: Answer::Json {
            status: 202,
            schema: schema::<pulse_api::assistant::SteerAnswer>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::AssistantSessionNotFound,
            ErrorCode::InvalidJson,
            ErrorCode::InvalidRequest,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidChatRequest,
            ErrorCode::Conflict,
        ],
        handler: || post(assistant::steer),
    },
    // --- findings ---
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/findings",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "list_findings",
        title: "List findings",
        description: "Active Patrol findings (every finding with include_resolved=1), most recently seen first.",
        category: Category::Findings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::findings::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingList>,
        },
        errors: &[
            ErrorCode::InvalidFindingRequest,
            ErrorCode::PatrolUnavailable,
        ],
        handler: || get(findings::list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/patrol/findings/{id}",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "get_finding",
        title: "Get a finding",
        description: "One finding with its lifecycle, the actions its status accepts and its newest investigation record.",
        category: Category::Findings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_domain::finding::FindingId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: &[
            ErrorCode::InvalidFindingRequest,
            ErrorCode::FindingNotFound,
            ErrorCode::PatrolUnavailable,
        ],
        handler: || get(findings::get),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/acknowledge",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "acknowledge_finding",
        title: "Acknowledge a finding",
        description: "Marks an active finding as seen by an operator.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::FindingRef>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::acknowledge),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/snooze",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "snooze_finding",
        title: "Snooze a finding",
        description: "Hides a finding for 1 to 2160 hours; it returns if still present afterwards.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::SnoozeBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::snooze),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/dismiss",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "dismiss_finding",
        title: "Dismiss a finding",
        description: "Dismisses a finding with a reason (not_an_issue, expected_behavior, will_fix_later) and an optional note.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::DismissBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::dismiss),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/dismiss/undo",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "undo_dismiss_finding",
        title: "Undo a dismissal",
        description: "Reopens a dismissed finding.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::FindingRef>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::undo_dismiss),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/resolve",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "resolve_finding",
        title: "Resolve a finding",
        description: "Marks a finding resolved by an operator, with an optional note.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::ResolveBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::resolve),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/suppress",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "suppress_finding",
        title: "Suppress findings",
        description: "Creates a suppression rule from a finding (or the newest open one matching resource_id and category); * on one side needs allow_broad_scope.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::SuppressBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::suppress),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/suppress/undo",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "undo_suppress_finding",
        title: "Undo a suppression",
        description: "Removes the suppression a finding was suppressed by and reopens it.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::FindingRef>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::undo_suppress),
    },
    RouteSpec {
        method: "POST",
        path: "/api/ai/patrol/findings/note",
        scopes: &[Scope::AiExecute],
        public: false,
        name: "note_finding",
        title: "Add a note to a finding",
        description: "Appends an operator note to a finding's lifecycle.",
        category: Category::Findings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::findings::NoteBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::findings::FindingAnswer>,
        },
        errors: FINDING_ACTION,
        handler: || post(findings::note),
    },
    // --- settings ---
    RouteSpec {
        method: "GET",
        path: "/api/settings/ai",
        scopes: &[Scope::Admin],
        public: false,
        name: "get_ai_settings",
        title: "Get the AI settings",
        description: "The effective AI settings (defaults, config, then the tenant's document) with per-provider key presence; never a key. The ETag is the version.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::settings::SettingsView>,
        },
        errors: &[],
        handler: || get(settings::get),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/settings/ai",
        scopes: &[Scope::Admin],
        public: false,
        name: "update_ai_settings",
        title: "Update the AI settings",
        description: "Applies a partial settings document (provider keys are write-only); If-Match with the version refuses a stale write.",
        category: Category::Settings,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: Some(Body::required(
            schema::<pulse_domain::ai_settings::SettingsPatchSchema>,
        )),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::settings::SettingsView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidParameter,
            ErrorCode::SettingsVersionConflict,
            ErrorCode::AutopilotNotAcknowledged,
            ErrorCode::AcknowledgementRequiresHuman,
        ],
        handler: || put(settings::put),
    },
    // --- actions ---
    RouteSpec {
        method: "POST",
        path: "/api/actions/plan",
        scopes: &[Scope::ActionsPlan],
        public: false,
        name: "plan_action",
        title: "Plan an action",
        description: "Plans one typed capability on a resource (see list_resource_capabilities). Nothing runs: policy either authorizes it or it waits for a human decision.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ActionPlan,
        id: None,
        query: None,
        body: Some(Body::required(schema::<pulse_api::actions::PlanBody>)),
        response: Answer::Json {
            status: 201,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: &PLAN_ERRORS,
        handler: || post(actions::plan),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_actions",
        title: "List actions",
        description: "The tenant's actions, newest first.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::actions::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Vec<pulse_api::actions::ActionView>>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(actions::list),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/pending",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_pending_approvals",
        title: "List pending approvals",
        description: "Actions waiting for a decision, by expiry, risk and age.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::actions::ListQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Vec<pulse_api::actions::ActionView>>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(actions::pending),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_action",
        title: "Get an action",
        description: "One action: its plan, state, decision, execution result and verification.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: &[ErrorCode::ActionNotFound],
        handler: || get(actions::get),
    },
    RouteSpec {
        method: "POST",
        path: "/api/actions/{id}/decision",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "decide_action",
        title: "Approve or reject an action",
        description: "A human's decision on a pending action; an approval starts its execution.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ActionPlan,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::actions::DecisionBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: &DECIDE_ERRORS,
        handler: || post(actions::decision),
    },
    RouteSpec {
        method: "POST",
        path: "/api/actions/{id}/execute",
        scopes: &[Scope::ActionsExecute],
        public: false,
        name: "execute_action",
        title: "Execute an approved action",
        description: "Runs an approved action that is not running yet; never runs one twice.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ActionPlan,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::ActionView>,
        },
        errors: &BROKER,
        handler: || post(actions::execute),
    },
    RouteSpec {
        method: "GET",
        path: "/api/actions/{id}/audit",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_action_audit",
        title: "Action audit trail",
        description: "The audit records of one action, in order.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::actions::ActionId>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<Vec<pulse_api::actions::AuditRecord>>,
        },
        errors: &[ErrorCode::ActionNotFound],
        handler: || get(actions::audit),
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/remediation-lock",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_remediation_lock",
        title: "Get a remediation lock",
        description: "Whether a resource is marked never_auto_remediate.",
        category: Category::Actions,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::LockView>,
        },
        errors: &RESOURCE_REF,
        handler: || get(remediation_locks::get),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/resources/{id}/remediation-lock",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "set_remediation_lock",
        title: "Set a remediation lock",
        description: "Marks a resource never_auto_remediate (no action runs on it, approved or not) or clears the mark; audited.",
        category: Category::Actions,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: Some(Body::required(schema::<pulse_api::actions::LockBody>)),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::actions::LockView>,
        },
        errors: &LOCK_PUT_ERRORS,
        handler: || put(remediation_locks::put),
    },
    // --- audit ---
    RouteSpec {
        method: "GET",
        path: "/api/audit/verify",
        scopes: &[Scope::Admin],
        public: false,
        name: "verify_audit_chain",
        title: "Verify the audit chain",
        description: "Recomputes the tenant's hash-chained audit log; a broken chain is a normal answer (ok: false).",
        category: Category::Audit,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::audit::VerifyView>,
        },
        errors: &[],
        handler: || get(audit::verify),
    },
    // --- agent context ---
    RouteSpec {
        method: "GET",
        path: "/api/agent/fleet-context",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_fleet_context",
        title: "Fleet context",
        description: "Every resource with its health, open finding counts and firing alerts, plus the pending approvals count; optionally of one type or status.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::context::FleetQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::FleetContext>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(agent_context::fleet),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/resource-context/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_resource_context",
        title: "Resource context",
        description: "One resource with a summary of its recent metrics, its open findings, its recent actions and its remediation lock.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::ResourceContext>,
        },
        errors: &RESOURCE_REF,
        handler: || get(agent_context::resource),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/resource-capabilities/{id}",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "list_resource_capabilities",
        title: "Resource action capabilities",
        description: "The typed action capabilities a resource advertises, each with its params schema and approval floor: the inputs plan_action needs.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::ResourceCapabilities>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
            ErrorCode::AmbiguousResource,
            ErrorCode::ActionExecutorUnavailable,
        ],
        handler: || get(agent_context::capabilities),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/patrol-control/status",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_patrol_control_status",
        title: "Patrol control status",
        description: "Counts only: Patrol enabled, mode and readiness, active findings by severity, pending approvals and running runs.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::PatrolControlStatus>,
        },
        errors: &[ErrorCode::PatrolUnavailable],
        handler: || get(agent_context::patrol_control_status),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/operations-loop/status",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_operations_loop_status",
        title: "Patrol control status (legacy alias)",
        description: "The same answer as get_patrol_control_status, under its older path for older clients.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::context::PatrolControlStatus>,
        },
        errors: &[ErrorCode::PatrolUnavailable],
        handler: || get(agent_context::patrol_control_status),
    },
    RouteSpec {
        method: "GET",
        path: "/api/agent/events",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "subscribe_events",
        title: "Agent event stream",
        description: "The tenant's finding, approval and action events as Server-Sent Events \
            (stream.connected, heartbeat, finding.created|updated|resolved, approval.pending, \
            action.completed), resumable with Last-Event-ID.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::events::StreamQuery>),
        body: None,
        response: Answer::EventStream {
            events: &agent_events::EVENT_NAMES,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::InvalidLastEventId,
            ErrorCode::TooManyStreams,
        ],
        handler: || get(agent_events::stream),
    },
    RouteSpec {
        method: "GET",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_operator_state",
        title: "Get a resource's operator state",
        description: "What the operator says about a resource: maintenance window, intentionally \
            offline, never auto-remediate, criticality and note, with whether it silences \
            findings now.",
        category: Category::Context,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::operator_state::OperatorStateView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
            ErrorCode::AmbiguousResource,
        ],
        handler: || get(operator_state::get),
    },
    RouteSpec {
        method: "PUT",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "set_operator_state",
        title: "Set a resource's operator state",
        description: "Replaces the resource's operator state. A maintenance window or \
            intentionally offline dismisses its open findings (expected_behavior) until it \
            lifts; never_auto_remediate is the remediation lock every dispatch checks.",
        category: Category::Context,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: Some(Body::required(
            schema::<pulse_api::operator_state::OperatorStateBody>,
        )),
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::operator_state::OperatorStateView>,
        },
        errors: &[
            ErrorCode::InvalidJson,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
            ErrorCode::AmbiguousResource,
            ErrorCode::Conflict,
        ],
        handler: || put(operator_state::put),
    },
    RouteSpec {
        method: "DELETE",
        path: "/api/resources/{id}/operator-state",
        scopes: &[Scope::ActionsApprove],
        public: false,
        name: "clear_operator_state",
        title: "Clear a resource's operator state",
        description: "Removes the resource's operator state: maintenance ends, the lock lifts.",
        category: Category::Context,
        action_mode: ActionMode::Write,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: Some(schema::<pulse_api::constraints::ResourceRef>),
        query: None,
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::operator_state::OperatorStateView>,
        },
        errors: &[
            ErrorCode::InvalidParameter,
            ErrorCode::NotFound,
            ErrorCode::AmbiguousResource,
            ErrorCode::Conflict,
        ],
        handler: || delete(operator_state::delete),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/cost/summary",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "get_cost_summary",
        title: "AI cost summary",
        description: "Tokens and dollars of the last `days` UTC days (1-365, default 30): totals, \
            by route, by day and by run; an unknown price stays unknown (null), never 0.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::cost::CostQuery>),
        body: None,
        response: Answer::Json {
            status: 200,
            schema: schema::<pulse_api::cost::CostSummary>,
        },
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(cost::summary),
    },
    RouteSpec {
        method: "GET",
        path: "/api/ai/cost/export",
        scopes: &[Scope::MonitoringRead],
        public: false,
        name: "export_cost_ledger",
        title: "Export the AI cost ledger",
        description: "The same window as CSV (text/csv): one row per day, run, surface and route.",
        category: Category::Settings,
        action_mode: ActionMode::Read,
        approval_policy: ApprovalPolicy::ScopeOnly,
        id: None,
        query: Some(schema::<pulse_api::cost::CostQuery>),
        body: None,
        response: Answer::Csv,
        errors: &[ErrorCode::InvalidParameter],
        handler: || get(cost::export),
    },
];

/// The router: one route per path of [`API_ROUTES`], each path's entries merged.
pub fn router(state: AppState) -> Router {
    let limit = state.max_body_bytes;
    let mut paths: Vec<&'static str> = Vec::new();
    for spec in all_routes() {
        if !paths.contains(&spec.path) {
            paths.push(spec.path);
        }
    }
    let mut router = Router::new();
    for path in paths {
        let method_router = all_routes()
            .filter(|spec| spec.path == path)
            .fold(MethodRouter::new(), |acc, spec| acc.merge((spec.handler)()));
        router = router.route(path, method_router);
    }
    // The web UI's pages and forms beside the API (not API capabilities), and Pulse MCP over
    // streamable HTTP (a protocol endpoint projecting the capabilities above).
    router
        .merge(crate::web::routes())
        .route(
            "/mcp",
            post(crate::mcp::post)
                .get(crate::mcp::not_offered)
                .delete(crate::mcp::not_offered),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        // Outside authentication, so even a refused caller can read its answer.
        .layer(middleware::from_fn_with_state(
            limit,
            body_limit::reject_oversized,
        ))
        .layer(middleware::from_fn_with_state(
            state.http_metrics.clone(),
            observe::observe,
        ))
        // Outermost: sees every error answer, whichever layer made it.
        .layer(middleware::from_fn_with_state(
            state.http_metrics.clone(),
            declared_errors::check,
        ))
        .with_state(state)
}

async fn health(State(state): State<AppState>) -> Json<HealthReport> {
    Json(state.fleet.report(Instant::now()))
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not accept that method",
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_and_method_paths_are_unique_and_well_formed() {
        let mut names = HashSet::new();
        let mut routes = HashSet::new();
        for spec in API_ROUTES {
            assert!(names.insert(spec.name), "duplicate name {}", spec.name);
            assert!(
                routes.insert((spec.method, spec.path)),
                "duplicate route {} {}",
                spec.method,
                spec.path
            );
            assert!(
                spec.name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_'),
                "{}",
                spec.name
            );
            assert!(spec.path.starts_with("/api/"), "{}", spec.path);
            assert!(
                ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&spec.method),
                "{}",
                spec.method
            );
            assert_eq!(
                spec.public,
                spec.scopes.is_empty(),
                "{}: a route is public exactly when it needs no scope",
                spec.name
            );
            assert!(!spec.title.is_empty() && !spec.description.is_empty());
            for param in spec.path_params() {
                assert_eq!(param, "id", "{}: path parameters are named id", spec.path);
            }
        }
    }

    #[test]
    fn upstream_capability_names_are_kept() {
        for (name, method, path) in [
            ("list_findings", "GET", "/api/ai/patrol/findings"),
            ("acknowledge_finding", "POST", "/api/ai/patrol/acknowledge"),
            ("snooze_finding", "POST", "/api/ai/patrol/snooze"),
            ("dismiss_finding", "POST", "/api/ai/patrol/dismiss"),
            ("resolve_finding", "POST", "/api/ai/patrol/resolve"),
            ("plan_action", "POST", "/api/actions/plan"),
            ("decide_action", "POST", "/api/actions/{id}/decision"),
            ("execute_action", "POST", "/api/actions/{id}/execute"),
            ("get_fleet_context", "GET", "/api/agent/fleet-context"),
            (
                "get_resource_context",
                "GET",
                "/api/agent/resource-context/{id}",
            ),
            (
                "list_resource_capabilities",
                "GET",
                "/api/agent/resource-capabilities/{id}",
            ),
            (
                "get_patrol_control_status",
                "GET",
                "/api/agent/patrol-control/status",
            ),
        ] {
            let spec = find(method, path).unwrap_or_else(|| panic!("{method} {path}"));
            assert_eq!(spec.name, name);
        }
    }

    #[test]
    fn declared_codes_include_the_common_ones() {
        let tokens = find("POST", "/api/tokens").expect("route");
        let codes = tokens.error_codes();
        for code in [
            ErrorCode::Unauthorized,
            ErrorCode::MissingScope,
            ErrorCode::InvalidJson,
            ErrorCode::PayloadTooLarge,
            ErrorCode::InternalError,
        ] {
            assert!(codes.contains(&code), "{code}");
            assert!(tokens.declares(code), "{code}");
        }
        assert!(!tokens.declares(ErrorCode::FindingNotFound));
        let health = find("GET", "/api/health").expect("route");
        assert!(!health.declares(ErrorCode::Unauthorized));
        assert_eq!(
            find("HEAD", "/api/resources").map(|r| r.name),
            Some("list_resources")
        );
        assert!(is_public_path("/api/openapi.json"));
        assert!(is_public_path("/api/agent/capabilities"));
        assert!(!is_public_path("/api/tokens"));
    }
}
