//! `GET /api/openapi.json` (public): the API as an OpenAPI 3.1 document, projected from the
//! route table ([`crate::routes::all_routes`], handed to [`build`]).
//!
//! - One operation per entry; `operationId` is the capability name, the tag its category.
//! - Security: the bearer scheme (and the upstream `X-API-Token` header) with the required
//!   scopes in `x-pulse-scopes`; public routes have `security: []`.
//! - Path parameters from the template, query parameters from the handler's query type, the
//!   request body and the success answer from the handler's own types (JSON Schema 2020-12,
//!   derived with `schemars`; request types with the deserialize contract, answers with the
//!   serialize one).
//! - Every declared error code ([`RouteSpec::error_codes`]) under its HTTP status,
//!   each status answering the error envelope with `error` restricted to that status's codes.
//!
//! The document is built once per process, at start ([`crate::state::ApiDocuments`]).

use std::collections::BTreeMap;

use pulse_api::system::{Category, ErrorEnvelope};
use pulse_capabilities::ErrorCode;
use schemars::SchemaGenerator;
use schemars::generate::{Contract, SchemaSettings};
use serde_json::{Map, Value, json};

use crate::route::{Answer, RouteSpec};

const COMPONENTS: &str = "/components/schemas";

fn generator(definitions_path: &'static str, contract: Contract) -> SchemaGenerator {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = definitions_path.into();
    settings.contract = contract;
    settings.meta_schema = None;
    settings.into_generator()
}

/// The definition a `$ref` (or an inline schema) stands for.
pub(crate) fn resolve<'a>(schema: &'a Value, definitions: &'a Map<String, Value>) -> &'a Value {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.rsplit('/').next())
        .and_then(|name| definitions.get(name))
        .unwrap_or(schema)
}

/// The query parameters of a route: one per property of its query type.
fn query_parameters(schema: &Value, definitions: &Map<String, Value>) -> Vec<Value> {
    let resolved = resolve(schema, definitions);
    let required: Vec<&str> = resolved["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = resolved["properties"].as_object() else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut parameter = json!({
                "name": name,
                "in": "query",
                "required": required.contains(&name.as_str()),
                "schema": property,
            });
            if let Some(description) = property.get("description") {
                parameter["description"] = description.clone();
            }
            parameter
        })
        .collect()
}

/// The path parameters; `{id}` with the schema of what the handler accepts.
fn path_parameters(spec: &RouteSpec, requests: &mut SchemaGenerator) -> Vec<Value> {
    spec.path_params()
        .into_iter()
        .map(|name| {
            let schema = match spec.id {
                Some(id) => id(requests).to_value(),
                None => json!({"type": "string"}),
            };
            json!({
                "name": name,
                "in": "path",
                "required": true,
                "schema": schema,
            })
        })
        .collect()
}

/// One Server-Sent Event as a client parses it: its name (one of `events`, any when empty),
/// its id and its `data`, a JSON document.
fn event_schema(events: &[&str]) -> Value {
    let mut event = json!({"type": "string"});
    if !events.is_empty() {
        event["enum"] = json!(events);
    }
    json!({
        "type": "object",
        "properties": {
            "event": event,
            "id": {"type": "string"},
            "data": {"type": "string", "contentMediaType": "application/json"},
            "retry": {"type": "integer"},
        },
        "required": ["event", "data"],
    })
}

/// The declared codes by HTTP status.
fn errors_by_status(spec: &RouteSpec) -> BTreeMap<u16, Vec<ErrorCode>> {
    let mut by_status: BTreeMap<u16, Vec<ErrorCode>> = BTreeMap::new();
    for code in spec.error_codes() {
        by_status.entry(code.http_status()).or_default().push(code);
    }
    by_status
}

fn status_text(status: u16) -> &'static str {
    axum::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

fn operation(
    spec: &RouteSpec,
    requests: &mut SchemaGenerator,
    answers: &mut SchemaGenerator,
    envelope: &Value,
) -> Value {
    let mut parameters = path_parameters(spec, requests);
    if let Some(query) = spec.query {
        let schema = query(requests).to_value();
        parameters.extend(query_parameters(&schema, requests.definitions()));
    }
    let mut op = json!({
        "operationId": spec.name,
        "summary": spec.title,
        "description": spec.description,
        "tags": [spec.category.as_str()],
        "x-pulse-scopes": spec.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "x-pulse-action-mode": spec.action_mode.as_str(),
        "x-pulse-approval-policy": spec.approval_policy.as_str(),
    });
    op["security"] = if spec.public {
        json!([])
    } else if spec.category == Category::Platform {
        json!([{"platformToken": []}])
    } else {
        let scopes: Vec<&str> = spec.scopes.iter().map(|s| s.as_str()).collect();
        json!([{"bearer": scopes}, {"apiToken": scopes}])
    };
    if !parameters.is_empty() {
        op["parameters"] = Value::Array(parameters);
    }
    if let Some(body) = spec.body {
        op["requestBody"] = json!({
            "required": body.required,
            "content": {"application/json": {"schema": (body.schema)(requests).to_value()}},
        });
    }
    let mut responses = Map::new();
    let json_answer = |status: u16, schema: Value| {
        json!({
            "description": status_text(status),
            "content": {"application/json": {"schema": schema}},
        })
    };
    let successes = match spec.response {
        Answer::Json { status, schema } => {
            vec![(status, json_answer(status, schema(answers).to_value()))]
        }
        Answer::JsonEither { status, or, schema } => {
            let schema = schema(answers).to_value();
            vec![
                (status, json_answer(status, schema.clone())),
                (or, json_answer(or, schema)),
            ]
        }
        Answer::Empty { status } => vec![(status, json!({"description": status_text(status)}))],
        Answer::EventStream { events } => vec![(
            200,
            json!({
                "description": "Server-Sent Events",
                "content": {"text/event-stream": {"schema": event_schema(events)}},
            }),
        )],
        Answer::Csv => vec![(
            200,
            json!({
                "description": "CSV (RFC 4180)",
                "content": {"text/csv": {"schema": {"type": "string"}}},
            }),
        )],
    };
    for (status, answer) in successes {
        responses.insert(status.to_string(), answer);
    }
    for (status, codes) in errors_by_status(spec) {
        let names: Vec<&str> = codes.iter().map(|c| c.code()).collect();
        let description = format!("{}: {}", status_text(status), names.join(", "));
        responses.insert(
            status.to_string(),
            json!({
                "description": description,
                "content": {"application/json": {"schema": {
                    "allOf": [envelope],
                    "properties": {"error": {"enum": names}},
                }}},
            }),
        );
    }
    op["responses"] = Value::Object(responses);
    op
}

/// Builds the document from every route the gateway serves.
pub fn build<'a>(routes: impl IntoIterator<Item = &'a RouteSpec>) -> Value {
    let mut requests = generator(COMPONENTS, Contract::Deserialize);
    let mut answers = generator(COMPONENTS, Contract::Serialize);
    let envelope = answers.subschema_for::<ErrorEnvelope>().to_value();
    let mut paths = Map::new();
    for spec in routes {
        let op = operation(spec, &mut requests, &mut answers, &envelope);
        let item = paths
            .entry(spec.path.to_owned())
            .or_insert_with(|| json!({}));
        item[spec.method.to_ascii_lowercase()] = op;
    }
    let (mut schemas, renames) = merge_definitions(
        &mut answers.take_definitions(true),
        requests.take_definitions(true),
    );
    // The request side's references follow its renamed definitions.
    for item in paths.values_mut() {
        for op in item
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            for part in ["requestBody", "parameters"] {
                if let Some(value) = op.get_mut(part) {
                    rename_refs(value, &renames);
                }
            }
        }
    }
    schemas.sort_keys();
    let tags: Vec<Value> = Category::ALL
        .iter()
        .chain([Category::Platform].iter())
        .map(|c| json!({"name": c.as_str(), "description": c.description()}))
        .collect();
    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "Pulse Intelligence API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Generated from the gateway's route registry. Every error answers \
                {\"error\": \"<code>\", \"message\": \"...\"}; the codes a route can answer are \
                listed under its responses. Every JSON request body is an object, and no string in \
                it may contain U+0000.",
        },
        "tags": tags,
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <API token>"},
                "apiToken": {"type": "apiKey", "in": "header", "name": "X-API-Token"},
                "platformToken": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <platform-operator token> (pulsectl admin platform-token); only /api/platform/ routes"},
            },
        },
    })
}

/// The answer and request definitions under one namespace. A request definition whose name an
/// answer definition of another form already has (two types of one name, or one type whose
/// request form differs) is kept as `<name>Input`; the renames are returned for the request
/// side's references.
fn merge_definitions(
    answers: &mut Map<String, Value>,
    mut requests: Map<String, Value>,
) -> (Map<String, Value>, BTreeMap<String, String>) {
    let mut renames = BTreeMap::new();
    for (name, schema) in &requests {
        if answers.get(name).is_some_and(|answer| answer != schema) {
            let mut renamed = format!("{name}Input");
            while answers.contains_key(&renamed) || requests.contains_key(&renamed) {
                renamed.push('_');
            }
            renames.insert(name.clone(), renamed);
        }
    }
    let mut schemas = std::mem::take(answers);
    for (name, mut schema) in std::mem::take(&mut requests) {
        rename_refs(&mut schema, &renames);
        let name = renames.get(&name).cloned().unwrap_or(name);
        schemas.entry(name).or_insert(schema);
    }
    (schemas, renames)
}

/// Points every `$ref` to a renamed definition at its new name.
fn rename_refs(value: &mut Value, renames: &BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref")
                && let Some(name) = reference.strip_prefix("#/components/schemas/")
                && let Some(renamed) = renames.get(name)
            {
                *reference = format!("#/components/schemas/{renamed}");
            }
            for v in map.values_mut() {
                rename_refs(v, renames);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| rename_refs(v, renames)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routes::all_routes;

    fn build() -> Value {
        super::build(all_routes())
    }

    /// `docs/api/openapi.json` and `docs/api/capabilities.json` are the published API reference
    /// and the record every change of the wire contract shows up in: a refactoring must leave
    /// them byte-identical, and a deliberate change regenerates them in the same commit.
    #[test]
    fn the_published_documents_are_the_generated_ones() {
        let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/api");
        let generated = [
            ("openapi.json", serde_json::to_string_pretty(&build())),
            (
                "capabilities.json",
                serde_json::to_string_pretty(&crate::manifest::build(&crate::routes::API_ROUTES)),
            ),
        ];
        for (name, text) in generated {
            let text = text.expect("serializable") + "\n";
            let path = format!("{docs}/{name}");
            if std::env::var_os("PULSE_UPDATE_DOCS").is_some() {
                std::fs::write(&path, &text).unwrap();
            }
            let published = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                published == text,
                "docs/api/{name} differs from the generated document; if the API change is \
                 intended, regenerate it with `PULSE_UPDATE_DOCS=1 cargo test -p pulse-gateway \
                 the_published_documents` and list the change in the commit message"
            );
        }
    }

    #[test]
    fn the_document_has_the_openapi_shape() {
        let text = serde_json::to_string(&build()).expect("serializable");
        let doc: Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        assert!(doc["info"]["title"].is_string());
        let paths = doc["paths"].as_object().expect("paths");
        let mut operations = 0;
        for spec in all_routes() {
            let op = &paths[spec.path][spec.method.to_ascii_lowercase()];
            assert_eq!(op["operationId"], spec.name, "{}", spec.path);
            assert!(op["responses"][spec.response.status().to_string()].is_object());
            for code in spec.error_codes() {
                let listed = &op["responses"][code.http_status().to_string()]["content"]["application/json"]
                    ["schema"]["properties"]["error"]["enum"];
                assert!(
                    listed
                        .as_array()
                        .is_some_and(|l| l.contains(&json!(code.code()))),
                    "{} {}: {code}",
                    spec.method,
                    spec.path
                );
            }
            operations += 1;
        }
        assert_eq!(
            operations,
            crate::routes::API_ROUTES.len() + crate::platform::ROUTES.len()
        );
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        // Every $ref resolves within the document.
        let mut refs = Vec::new();
        collect_refs(&doc, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("ref outside components: {r}"));
            assert!(schemas.contains_key(name), "dangling {r}");
        }
        assert!(schemas.contains_key("ErrorEnvelope"));
        let tokens = &paths["/api/tokens"]["post"];
        assert_eq!(tokens["x-pulse-scopes"], json!(["admin"]));
        assert_eq!(paths["/api/health"]["get"]["security"], json!([]));
    }

    #[test]
    fn request_and_answer_types_of_one_name_keep_their_own_forms() {
        let doc = build();
        let schemas = &doc["components"]["schemas"];
        let target = |reference: &Value| {
            let name = reference["$ref"]
                .as_str()
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .unwrap_or_else(|| panic!("not a ref: {reference}"));
            schemas[name].clone()
        };
        // A plan's severity is the action severity; a finding's the four-level one.
        let plan = target(
            &doc["paths"]["/api/actions/plan"]["post"]["requestBody"]["content"]["application/json"]
                ["schema"],
        );
        assert_eq!(
            target(&plan["properties"]["severity"])["enum"],
            json!(["warning", "critical"])
        );
        let finding = &schemas["Finding"];
        assert_eq!(
            target(&finding["properties"]["severity"])["enum"],
            json!(["info", "watch", "warning", "critical"])
        );
    }

    fn collect_refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "$ref"
                        && let Some(s) = v.as_str()
                    {
                        out.push(s.to_owned());
                    }
                    collect_refs(v, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
            _ => {}
        }
    }
}
