//! A handler cannot answer a code its route does not declare.
//!
//! Every error answer carries its [`ErrorCode`] as a response extension (set by
//! [`crate::ApiError`]). This layer, outermost in the router, looks the request's method and
//! matched route template up in the route table ([`crate::routes::find`]) and checks the code is
//! one the entry declares ([`RouteSpec::declares`]); a request that matched no entry may answer
//! only [`UNROUTED`] codes. An error answer without a code (something
//! other than `ApiError` answered) counts as undeclared too.
//!
//! Routes of the web UI (outside `/api/`) answer HTML pages and are not checked.
//!
//! An undeclared answer is not altered (the client still gets it) but is logged at error level
//! and counted in `pulse_http_undeclared_errors_total{method,route,code}`; debug builds also
//! name it in the `x-pulse-undeclared-error` response header, so a test can pin the request.

use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use pulse_capabilities::ErrorCode;

use crate::observe::{HttpMetrics, UndeclaredLabels};
use crate::route::{RouteSpec, UNROUTED};

/// Names the undeclared code of an answer (debug builds only).
pub const UNDECLARED_HEADER: &str = "x-pulse-undeclared-error";

/// The route table's entry for a method and a matched route template.
pub type FindRoute = fn(&str, &str) -> Option<&'static RouteSpec>;

/// What the check needs: the metrics it counts in, and the route table to look entries up in.
#[derive(Clone)]
pub struct DeclaredErrors {
    pub metrics: HttpMetrics,
    pub find: FindRoute,
}

/// Whether an error answer with `code` is declared for `method` on the route template `route`.
pub fn is_declared(
    find: FindRoute,
    method: &str,
    route: Option<&str>,
    code: Option<ErrorCode>,
) -> bool {
    let Some(code) = code else {
        return false;
    };
    match route.and_then(|route| find(method, route)) {
        Some(spec) => spec.declares(code),
        None => UNROUTED.contains(&code),
    }
}

pub async fn check(State(declared): State<DeclaredErrors>, req: Request, next: Next) -> Response {
    let metrics = declared.metrics;
    let method = req.method().as_str().to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let mut response = next.run(req).await;
    if response.status().as_u16() < 400 {
        return response;
    }
    // The web UI's pages answer people, in HTML, not API codes (a refused sign-in is a 401
    // page); the registry describes `/api/` only.
    if route.as_deref().is_some_and(|r| !r.starts_with("/api")) {
        return response;
    }
    let code = response.extensions().get::<ErrorCode>().copied();
    if is_declared(declared.find, &method, route.as_deref(), code) {
        return response;
    }
    let code_name = code.map_or("none", ErrorCode::code);
    let route = route.unwrap_or_else(|| "unmatched".to_owned());
    tracing::error!(
        %method,
        %route,
        code = code_name,
        status = response.status().as_u16(),
        "error answer with a code the route does not declare"
    );
    metrics
        .undeclared_errors
        .get_or_create(&UndeclaredLabels {
            method,
            route,
            code: code_name.to_owned(),
        })
        .inc();
    if cfg!(debug_assertions) {
        response
            .headers_mut()
            .insert(UNDECLARED_HEADER, HeaderValue::from_static(code_name));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_checked_against_the_matched_entry() {
        assert!(is_declared(
            crate::routes::find,
            "POST",
            Some("/api/tokens"),
            Some(ErrorCode::InvalidJson)
        ));
        assert!(!is_declared(
            crate::routes::find,
            "POST",
            Some("/api/tokens"),
            Some(ErrorCode::FindingNotFound)
        ));
        assert!(!is_declared(
            crate::routes::find,
            "POST",
            Some("/api/tokens"),
            None
        ));
        // A method the path does not take: only the router's own codes.
        assert!(is_declared(
            crate::routes::find,
            "PATCH",
            Some("/api/tokens"),
            Some(ErrorCode::MethodNotAllowed)
        ));
        assert!(is_declared(
            crate::routes::find,
            "GET",
            None,
            Some(ErrorCode::NotFound)
        ));
        assert!(!is_declared(
            crate::routes::find,
            "GET",
            None,
            Some(ErrorCode::ActionNotFound)
        ));
    }
}
