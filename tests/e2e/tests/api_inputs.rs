//! Bad input never yields a 5xx or a panic: every route of the gateway's route table, through the
//! real binary, with malformed JSON, wrong types, unknown fields, odd content types and tokens.
//! And every error it provokes has a code its route declares: the registry entry the request
//! matched (or, when it matched none, the router's own codes), as the test reads the table, and
//! as the gateway's declared-codes check saw it (no `x-pulse-undeclared-error` header).

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use pulse_capabilities::ErrorCode;
use pulse_gateway::routes::UNROUTED;
use pulse_gateway::{API_ROUTES, RouteSpec};
use pulse_test_support::service::TestGateway;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
enum Body {
    None,
    Bytes(Vec<u8>),
    Json(Value),
}

#[derive(Debug, Clone)]
struct Case {
    method: &'static str,
    path: String,
    token: usize,
    content_type: Option<&'static str>,
    body: Body,
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        Just(json!("monitoring:read")),
        Just(json!("admin")),
        Just(json!("2099-01-01T00:00:00Z")),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_owned()),
                    Just("scopes".to_owned()),
                    Just("expires_at".to_owned()),
                    "[a-z_]{1,12}"
                ],
                inner,
                0..5
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        Just(Body::None),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(Body::Bytes),
        json_value().prop_map(Body::Json),
        // A valid body with one field replaced by anything.
        (
            json_value(),
            prop_oneof![
                Just("name"),
                Just("scopes"),
                Just("expires_at"),
                Just("extra")
            ]
        )
            .prop_map(|(v, field)| {
                let mut body = json!({"name": "p", "scopes": ["monitoring:read"]});
                body[field] = v;
                Body::Json(body)
            }),
        Just(Body::Json(
            json!({"name": "ok", "scopes": ["monitoring:read"]})
        )),
    ]
}

fn path() -> impl Strategy<Value = String> {
    let templated: Vec<&'static str> = API_ROUTES.iter().map(|r| r.path).collect();
    let query_keys = vec![
        "type",
        "status",
        "limit",
        "include_resolved",
        "metric",
        "window_hours",
        "state",
        "resource_id",
        "last_event_id",
        "unknown",
    ];
    let query = prop::option::of((prop::sample::select(query_keys), "[a-z0-9:._-]{0,8}"));
    prop_oneof![
        (
            prop::sample::select(templated),
            "[a-zA-Z0-9%._~-]{0,40}",
            query
        )
            .prop_map(|(p, id, query)| {
                let path = p.replace("{id}", &id);
                match query {
                    Some((key, value)) => format!("{path}?{key}={value}"),
                    None => path,
                }
            }),
        "/api/[a-z/]{0,20}".prop_map(|p| p),
        Just("/api".to_owned()),
        Just("/healthz".to_owned()),
        Just("/nope".to_owned()),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec!["GET", "POST", "PUT", "PATCH", "DELETE"]),
        path(),
        0..4_usize,
        prop::sample::select(vec![
            None,
            Some("application/json"),
            Some("application/json; charset=utf-8"),
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ]),
        body(),
    )
        .prop_map(|(method, path, token, content_type, body)| Case {
            method,
            path,
            token,
            content_type,
            body,
        })
}

struct Reply {
    status: StatusCode,
    text: String,
    /// The code the gateway flagged as undeclared for the route, if any.
    undeclared: Option<String>,
}

async fn send(gw: &TestGateway, tokens: &[Option<String>], case: &Case) -> anyhow::Result<Reply> {
    let method = reqwest::Method::from_bytes(case.method.as_bytes())?;
    let mut request = gw.http.request(method, gw.url(&case.path));
    if let Some(token) = &tokens[case.token] {
        request = request.bearer_auth(token);
    }
    if let Some(ct) = case.content_type {
        request = request.header("content-type", ct);
    }
    request = match &case.body {
        Body::None => request,
        Body::Bytes(bytes) => request.body(bytes.clone()),
        Body::Json(value) => request.body(value.to_string()),
    };
    let response = request.send().await?;
    let status = response.status();
    let undeclared = response
        .headers()
        .get("x-pulse-undeclared-error")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // An accepted event stream never ends; its status is the answer.
    let is_event_stream = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let text = if is_event_stream {
        String::new()
    } else {
        response.text().await?
    };
    Ok(Reply {
        status,
        text,
        undeclared,
    })
}

/// What the router does with `method` on `path`, as the registry says: `Some(Some(entry))` for a
/// declared route, `Some(None)` for no entry (a path or method no route has), `None` when the
/// test cannot tell (a dot segment or a percent escape the client or router may rewrite).
fn registry_route(method: &str, path: &str) -> Option<Option<&'static RouteSpec>> {
    let path = path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    if path.contains('%') || segments.iter().any(|s| *s == "." || *s == "..") {
        return None;
    }
    let matches = |template: &str| {
        let parts: Vec<&str> = template.split('/').collect();
        parts.len() == segments.len()
            && parts.iter().zip(&segments).enumerate().all(|(i, (t, s))| {
                // As in the router: a parameter takes any segment, even an empty one, except
                // the last (a trailing slash matches nothing).
                if t.starts_with('{') {
                    i + 1 < parts.len() || !s.is_empty()
                } else {
                    t == s
                }
            })
    };
    let literals = |template: &str| template.split('/').filter(|t| !t.starts_with('{')).count();
    // A literal segment wins over a parameter, as in the router.
    let best = API_ROUTES
        .iter()
        .filter(|r| matches(r.path))
        .map(|r| (literals(r.path), r.path))
        .max();
    Some(best.and_then(|(_, template)| {
        API_ROUTES
            .iter()
            .find(|r| r.path == template && r.method == method)
    }))
}

fn check(case: &Case, reply: &Reply) -> Result<(), TestCaseError> {
    let (status, text) = (reply.status, reply.text.as_str());
    prop_assert!(
        reply.undeclared.is_none(),
        "{case:?} -> {status}: the gateway flagged code {:?} as undeclared for its route: {text}",
        reply.undeclared
    );
    // This gateway runs without a patrol-scheduler or model-runner on purpose: a well-formed run,
    // preflight, model list or provider test request then meets an unavailable dependency, which is a 503 with its own
    // code, not a fault of the input.
    let path = case.path.split('?').next().unwrap_or_default();
    let scheduler_missing = (path == "/api/ai/patrol/run"
        && status == StatusCode::SERVICE_UNAVAILABLE
        && text.contains("\"patrol_scheduler_unavailable\""))
        || (path == "/api/ai/patrol/preflight"
            && status == StatusCode::SERVICE_UNAVAILABLE
            && text.contains("\"patrol_runner_unavailable\""))
        || ((path == "/api/ai/models" || path.starts_with("/api/ai/test/"))
            && status == StatusCode::SERVICE_UNAVAILABLE
            && text.contains("\"model_runner_unavailable\""));
    prop_assert!(
        status.as_u16() < 500 || scheduler_missing,
        "{case:?} -> {status} {text}"
    );
    let is_api = case.path == "/api" || case.path.starts_with("/api/") || case.path == "/nope";
    if status.as_u16() >= 400 && is_api {
        let body: Value = serde_json::from_str(text).map_err(|e| {
            TestCaseError::fail(format!("{case:?} -> {status}: not JSON ({e}): {text}"))
        })?;
        let code = body["error"].as_str().unwrap_or_default();
        let known = ErrorCode::ALL.iter().find(|c| c.code() == code);
        prop_assert!(known.is_some(), "{case:?} -> undocumented code {code:?}");
        prop_assert_eq!(
            known.map(|c| c.http_status()),
            Some(status.as_u16()),
            "{:?}",
            case
        );
        prop_assert!(body["message"].is_string());
        if let (Some(code), Some(route)) = (known, registry_route(case.method, &case.path)) {
            let declared = match route {
                Some(spec) => spec.declares(*code),
                None => UNROUTED.contains(code),
            };
            prop_assert!(
                declared,
                "{case:?} -> {code} is not declared by {}",
                route.map_or("the router".to_owned(), |r| format!(
                    "{} {}",
                    r.method, r.path
                ))
            );
        }
    }
    Ok(())
}

#[test]
fn no_input_produces_a_5xx() -> anyhow::Result<()> {
    let rt = Arc::new(tokio::runtime::Runtime::new()?);
    let gw = rt.block_on(TestGateway::start())?;
    let reader = rt.block_on(async {
        let response = gw
            .http
            .post(gw.url("/api/tokens"))
            .bearer_auth(&gw.admin_token)
            .json(&json!({"name": "reader", "scopes": ["monitoring:read"]}))
            .send()
            .await?;
        let body: Value = response.json().await?;
        anyhow::Ok(body["token"].as_str().unwrap_or_default().to_owned())
    })?;
    let tokens = vec![
        None,
        Some(gw.admin_token.clone()),
        Some(reader),
        Some("pulse_garbage".to_owned()),
    ];
    let cases: u32 = std::env::var("PULSE_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |case| {
        let reply = rt
            .block_on(send(&gw, &tokens, &case))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        check(&case, &reply)
    });
    let stopped = rt.block_on(gw.stop());
    result.map_err(|e| anyhow::anyhow!("{e}"))?;
    stopped
}

#[tokio::test]
async fn each_kind_of_bad_body_gets_its_documented_code() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let post = |body: &'static str, content_type: Option<&'static str>| {
        let mut request = gw
            .http
            .post(gw.url("/api/tokens"))
            .bearer_auth(&gw.admin_token)
            .body(body);
        if let Some(ct) = content_type {
            request = request.header("content-type", ct);
        }
        async move {
            let response = request.send().await?;
            let status = response.status();
            let body: Value = response.json().await?;
            anyhow::Ok((
                status.as_u16(),
                body["error"].as_str().unwrap_or_default().to_owned(),
                body["message"].as_str().unwrap_or_default().to_owned(),
            ))
        }
    };
    let json = Some("application/json");
    let (status, code, _) = post("{\"name\": ", json).await?;
    assert_eq!((status, code.as_str()), (400, "invalid_json"));
    let (status, code, message) = post("{\"name\": 5, \"scopes\": [\"admin\"]}", json).await?;
    assert_eq!((status, code.as_str()), (422, "invalid_request"));
    assert!(message.contains("name"), "{message}");
    let (status, code, message) = post(
        "{\"name\": \"x\", \"scopes\": [\"admin\"], \"owner\": \"me\"}",
        json,
    )
    .await?;
    assert_eq!((status, code.as_str()), (422, "invalid_request"));
    assert!(message.contains("owner"), "{message}");
    let (status, code, message) = post("{\"name\": \"x\", \"scopes\": [\"root\"]}", json).await?;
    assert_eq!((status, code.as_str()), (422, "invalid_request"));
    assert!(message.contains("root"), "{message}");
    let (status, code, _) = post("{\"name\": \"x\", \"scopes\": [\"admin\"]}", None).await?;
    assert_eq!((status, code.as_str()), (415, "unsupported_media_type"));
    let (status, code, _) = post("", json).await?;
    assert_eq!((status, code.as_str()), (400, "invalid_json"));
    let big = Box::leak(
        format!(
            "{{\"name\": \"{}\", \"scopes\": [\"admin\"]}}",
            "x".repeat(2 * 1024 * 1024)
        )
        .into_boxed_str(),
    );
    let (status, code, _) = post(big, json).await?;
    assert_eq!((status, code.as_str()), (413, "payload_too_large"));
    let response = gw
        .http
        .put(gw.url("/api/tokens"))
        .bearer_auth(&gw.admin_token)
        .send()
        .await?;
    assert_eq!(response.status().as_u16(), 405);
    let body: Value = response.json().await?;
    assert_eq!(body["error"], "method_not_allowed");
    gw.stop().await
}
