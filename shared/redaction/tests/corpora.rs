//! The sanitizer against corpora of real-looking text (`tests/corpus/`).
//!
//! - Every secret of every secret-bearing case is gone from the HTTP body each of the four
//!   protocols would send, wherever the case sits in the request: the system prompt, the seed
//!   message, a `pulse_read` `logs` result (the shape the Watch tool serializes), the arguments
//!   of an earlier tool call, and a structured log line (JSON inside a JSON string inside the
//!   tool result). The words around the secrets survive. Read-time redaction of the case's
//!   text ([`redact_read`], what the agent applies to a host read) removes every secret too.
//! - Ordinary lines come back unchanged in every position and from read-time redaction; the
//!   false-positive rate (ordinary lines changed anywhere) is printed and bounded by
//!   [`MAX_FALSE_POSITIVE_RATE`].

#[path = "corpus/corpus.rs"]
mod corpus;

use std::collections::BTreeMap;

use pulse_providers::{
    ChatRequest, Message, Protocol, ProviderConfig, Tool, ToolCall, ToolChoice, ToolResult,
};
use pulse_redaction::{Destination, RedactionConfig, RedactionReport, Redactor, redact_read};
use pulse_test_support::json_text::decoded_strings;
use serde_json::{Value, json};

/// At most 2 ordinary lines in 100 may be changed anywhere. A changed ordinary line costs the
/// model one value of evidence, never a secret, so a small rate is tolerable; above it the
/// sanitizer would be eating the logs it exists to pass on. The corpus deliberately holds the
/// lookalikes (`token bucket`, `PWD=/home/..`, `token_type=Bearer`, secret names, ARNs).
const MAX_FALSE_POSITIVE_RATE: f64 = 0.02;
const SERVICE: &str = "service:web01:shop-api";

/// Where in a request a case is put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    SystemPrompt,
    SeedMessage,
    LogsResult,
    ToolCallArguments,
    StructuredLogLine,
}

const POSITIONS: [Position; 5] = [
    Position::SystemPrompt,
    Position::SeedMessage,
    Position::LogsResult,
    Position::ToolCallArguments,
    Position::StructuredLogLine,
];

/// The content of a `pulse_read` `logs` result, as `watch/tools/read.rs` serializes it.
fn logs_result(lines: &[&str]) -> String {
    let lines: Vec<Value> = lines
        .iter()
        .map(|l| json!({"stream": "file", "text": l}))
        .collect();
    json!({
        "resource_id": SERVICE,
        "read_at": "2024-05-02T10:30:00Z",
        "truncated": false,
        "lines": lines,
    })
    .to_string()
}

/// A Watch-shaped request with `text` at `position`: system prompt, seed, an assistant turn
/// calling `pulse_read` `logs`, its result, and the tool offer.
fn request(position: Position, text: &str) -> ChatRequest {
    let mut system = "You are Pulse Patrol. Read-only tools.".to_owned();
    let mut seed = "Check the fleet. shop-api restarted twice in the last hour.".to_owned();
    let mut arguments = json!({"action": "logs", "resource_id": SERVICE, "lines": 50});
    let mut result = logs_result(&["listening on :8080", "GET /healthz 200"]);
    match position {
        Position::SystemPrompt => system = format!("{system}\n{text}"),
        Position::SeedMessage => seed = format!("{seed}\n{text}"),
        Position::LogsResult => result = logs_result(&text.split('\n').collect::<Vec<_>>()),
        Position::ToolCallArguments => arguments["grep"] = json!(text),
        Position::StructuredLogLine => {
            let line = json!({"level": "error", "logger": "shop.api", "msg": text}).to_string();
            result = logs_result(&[&line]);
        }
    }
    ChatRequest {
        model: "gpt-4o".into(),
        messages: vec![
            Message::system(system),
            Message::user(seed),
            Message::Assistant {
                content: "Reading the logs of shop-api.".into(),
                tool_calls: vec![ToolCall::new("call_1", "pulse_read", arguments)],
                reasoning_content: None,
            },
            Message::Tool(ToolResult::ok("call_1", result)),
        ],
        tools: vec![Tool {
            name: "pulse_read".into(),
            description: "Read the recent log lines of a service.".into(),
            parameters: json!({"type": "object", "properties": {
                "action": {"type": "string"}, "resource_id": {"type": "string"},
                "grep": {"type": "string"}, "lines": {"type": "integer"}}}),
        }],
        tool_choice: ToolChoice::Auto,
        ..ChatRequest::default()
    }
}

/// The route configuration of each protocol; its wire request is built by the same code the
/// model runner's transport sends.
fn providers() -> Vec<(&'static str, ProviderConfig)> {
    [
        ("openai", Protocol::OpenAiCompatible),
        ("anthropic", Protocol::Anthropic),
        ("gemini", Protocol::Gemini),
        ("ollama", Protocol::Ollama),
    ]
    .into_iter()
    .map(|(name, protocol)| {
        let config = ProviderConfig::new(protocol, "http://127.0.0.1:9").with_api_key("sk-x");
        (name, config)
    })
    .collect()
}

fn redactor() -> Redactor {
    Redactor::new(
        Destination::external("openai:gpt-4o"),
        &RedactionConfig::default(),
    )
    .expect("empty config is valid")
}

/// The secret is in the wire body: verbatim, or in any (decoded) string of it.
fn leaks(body: &Value, secret: &str) -> bool {
    if body.to_string().contains(secret) {
        return true;
    }
    decoded_strings(body).iter().any(|s| s.contains(secret))
}

/// Words (alphanumeric runs of 3 or more) of `text` in whitespace-separated tokens that hold no
/// secret and are not part of a private key block: the text around the secrets.
fn surrounding_words<'a>(text: &'a str, secrets: &[String]) -> Vec<&'a str> {
    let mut covered: Vec<(usize, usize)> = Vec::new();
    for secret in secrets {
        covered.extend(
            text.match_indices(secret.as_str())
                .map(|(i, s)| (i, i + s.len())),
        );
    }
    if let (Some(begin), Some(end)) = (text.find("-----BEGIN"), text.rfind("-----")) {
        covered.push((begin, end + 5));
    }
    let mut words = Vec::new();
    let mut offset = 0;
    for token in text.split_inclusive(char::is_whitespace) {
        let (start, end) = (offset, offset + token.len());
        offset = end;
        if covered.iter().any(|&(s, e)| s < end && start < e) {
            continue;
        }
        words.extend(
            token
                .split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| w.len() >= 3),
        );
    }
    words
}

fn sanitized_text(request: &ChatRequest, position: Position) -> String {
    match (&request.messages[1], position) {
        (Message::User { content }, Position::SeedMessage) => content.clone(),
        _ => serde_json::to_string(request).unwrap_or_default(),
    }
}

#[test]
fn no_secret_of_the_corpus_reaches_any_provider_body_in_any_position() {
    let cases = corpus::secret_cases(corpus::SECRETS).expect("secrets.txt is well formed");
    assert!(cases.len() >= 60, "only {} secret cases", cases.len());
    let redactor = redactor();
    let providers = providers();
    let mut failures: Vec<String> = Vec::new();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for case in &cases {
        let read = redact_read(&case.text);
        for secret in &case.secrets {
            if read.contains(secret.as_str()) {
                failures.push(format!(
                    "{} at read time: {secret:?} survived in {read}",
                    case.source
                ));
            }
        }
        for position in POSITIONS {
            let mut req = request(position, &case.text);
            let report: RedactionReport = redactor.sanitize(&mut req);
            if report.total == 0 {
                failures.push(format!("{} at {position:?}: nothing redacted", case.source));
            }
            for (kind, n) in &report.counts {
                *kinds.entry(kind.as_str().to_owned()).or_default() += n;
            }
            let report_json = serde_json::to_string(&report).expect("report serializes");
            for (name, provider) in &providers {
                let wire = pulse_providers::build(provider, &req).expect("request builds");
                let headers: String = wire.headers.iter().map(|(_, v)| v.as_str()).collect();
                for secret in case.secrets.iter().map(String::as_str) {
                    if leaks(&wire.body, secret)
                        || wire.url.contains(secret)
                        || headers.contains(secret)
                        || report_json.contains(secret)
                    {
                        failures.push(format!(
                            "{} at {position:?} via {name}: {secret:?} survived in {}",
                            case.source, wire.body
                        ));
                    }
                }
            }
            if position == Position::SeedMessage {
                let after = sanitized_text(&req, position);
                for word in surrounding_words(&case.text, &case.secrets) {
                    if !after.contains(word) {
                        failures.push(format!(
                            "{}: the surrounding word {word:?} was lost: {after}",
                            case.source
                        ));
                    }
                }
            }
        }
    }
    let secrets: usize = cases.iter().map(|c| c.secrets.len()).sum();
    println!(
        "redaction corpus: {} cases, {secrets} secret values, {} positions, 4 protocols; redactions by kind: {kinds:?}",
        cases.len(),
        POSITIONS.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn ordinary_lines_survive_every_position_within_the_false_positive_bound() {
    let lines = corpus::ordinary_lines(corpus::ORDINARY);
    assert!(lines.len() >= 100, "only {} ordinary lines", lines.len());
    let redactor = redactor();
    let mut changed: Vec<String> = Vec::new();
    for line in &lines {
        let mut hits = Vec::new();
        let read = redact_read(line);
        if read != *line {
            hits.push(format!("read time {read}"));
        }
        for position in POSITIONS {
            let original = request(position, line);
            let mut req = original.clone();
            let report = redactor.sanitize(&mut req);
            if req != original || report.total > 0 {
                hits.push(format!("{position:?} {:?}", report.counts));
            }
        }
        if !hits.is_empty() {
            changed.push(format!("{line}\n    {}", hits.join("; ")));
        }
    }
    let rate = changed.len() as f64 / lines.len() as f64;
    println!(
        "redaction false positives: {} of {} ordinary lines changed ({:.1}%)",
        changed.len(),
        lines.len(),
        rate * 100.0
    );
    for line in &changed {
        println!("  changed: {line}");
    }
    assert!(
        rate <= MAX_FALSE_POSITIVE_RATE,
        "false-positive rate {:.1}% above {:.1}%:\n{}",
        rate * 100.0,
        MAX_FALSE_POSITIVE_RATE * 100.0,
        changed.join("\n")
    );
}

#[test]
fn the_corpus_format_is_checked() {
    assert!(
        corpus::secret_cases("> a line\n").is_err(),
        "a case without secrets"
    );
    assert!(
        corpus::secret_cases("> a line\n= other\n").is_err(),
        "a secret not in its case"
    );
    assert!(corpus::secret_cases("| orphan\n").is_err());
    let cases = corpus::secret_cases("# src\n> a\n| b c\n= b c\n").expect("valid");
    assert_eq!(cases[0].text, "a\nb c");
    assert_eq!(cases[0].source, "src");
    assert_eq!(corpus::ordinary_lines("# c\nx\n\ny\n"), ["x", "y"]);
}
