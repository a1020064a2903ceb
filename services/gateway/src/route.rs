//! A documented API route ([`RouteSpec`]): who may call it, what it takes and answers, which
//! error codes it can answer with, and its handler. Each API module declares its routes next to
//! its handlers (`ROUTES`); [`crate::routes`] assembles them into the router, and the OpenAPI
//! document ([`crate::openapi`]) and the agent capabilities manifest ([`crate::manifest`]) are
//! projected from the same entries, so a route cannot exist without an entry. Every error
//! answer is checked against the entry's declared codes ([`crate::declared_errors`]).
//!
//! Adding a route is one entry beside its handler:
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
//!     id: Some(schema::<ThingId>),         // what the handler takes as `{id}` (ApiPath), or None
//!     query: Some(schema::<ThingQuery>),   // the handler's query type (ApiQuery), or None
//!     body: None,                          // Some(Body::required(schema::<T>)) or ::optional
//!     response: Answer::Json { status: 200, schema: schema::<Thing> },
//!     errors: &[ErrorCode::InvalidParameter, ErrorCode::NotFound],
//!     handler: || get(get_thing),
//! },
//! ```
//!
//! `errors` lists what the handler itself can answer; [`RouteSpec::error_codes`] adds what every
//! route can answer ([`ALWAYS`]; plus [`AUTHENTICATED`] for a route that needs a token). The
//! schemas are derived (`schemars`) from the `pulse_api` types the handler really extracts and
//! answers.

use std::collections::BTreeSet;

use axum::routing::MethodRouter;
use pulse_api::system::{ActionMode, ApprovalPolicy, Category};
use pulse_capabilities::ErrorCode;
use pulse_domain::Scope;
use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::state::AppState;

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

/// Body codes of a route that parses its JSON body with [`crate::extract::ApiJson`].
pub const JSON_BODY: [ErrorCode; 3] = [
    ErrorCode::InvalidJson,
    ErrorCode::UnsupportedMediaType,
    ErrorCode::InvalidRequest,
];

/// A resource reference in the path: malformed, unknown (or another tenant's), or ambiguous.
pub const RESOURCE_REF: [ErrorCode; 3] = [
    ErrorCode::InvalidParameter,
    ErrorCode::NotFound,
    ErrorCode::AmbiguousResource,
];

/// `parts` joined in order into one array of `N` codes (`N` is the sum of their lengths), at
/// compile time. [`route_errors!`] computes `N`.
pub const fn join<const N: usize>(parts: &[&[ErrorCode]]) -> [ErrorCode; N] {
    let mut out = [ErrorCode::InternalError; N];
    let mut at = 0;
    let mut part = 0;
    while part < parts.len() {
        let mut i = 0;
        while i < parts[part].len() {
            out[at] = parts[part][i];
            at += 1;
            i += 1;
        }
        part += 1;
    }
    assert!(at == N);
    out
}

/// A route's declared codes from its parts, for example its own codes and the codes of the bus
/// endpoint it calls: `route_errors!(&JSON_BODY, endpoint_errors!(PatrolRunRequest))`.
macro_rules! route_errors {
    ($($part:expr),+ $(,)?) => {{
        const PARTS: &[&[pulse_capabilities::ErrorCode]] = &[$($part),+];
        const N: usize = {
            let mut n = 0;
            let mut i = 0;
            while i < PARTS.len() {
                n += PARTS[i].len();
                i += 1;
            }
            n
        };
        const CODES: [pulse_capabilities::ErrorCode; N] = $crate::route::join(PARTS);
        &CODES
    }};
}
pub(crate) use route_errors;

/// What a route answers for a bus endpoint it calls: every code the endpoint declares
/// ([`pulse_bus::Endpoint::ERRORS`]) and the code for a service that did not answer.
macro_rules! endpoint_errors {
    ($endpoint:ty) => {
        $crate::route::route_errors!(
            <$endpoint as pulse_bus::Endpoint>::ERRORS,
            &[<$endpoint as pulse_bus::Endpoint>::UNAVAILABLE]
        )
    };
}
pub(crate) use endpoint_errors;

/// `a` then `b`, for a route's codes built from the shared groups.
pub const fn concat<const A: usize, const B: usize, const N: usize>(
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
