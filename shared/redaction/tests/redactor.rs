//! The provider-bound sanitizer: canaries of every kind never reach the serialized request,
//! harmless lookalikes survive, sanitizing is idempotent and total.

use proptest::prelude::*;
use pulse_providers::{ChatRequest, Message, Tool, ToolCall, ToolResult};
use pulse_redaction::{
    Destination, LocalOnlyResource, RedactionConfig, RedactionConfigError, RedactionKind,
    RedactionReport, Redactor,
};
use serde_json::json;

const PULSE_TOKEN: &str = "pulse_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const AWS_KEY: &str = "AKIAIOSFODNN7CANARY1";
const GITHUB_TOKEN: &str = "ghp_CanaryToken0123456789abcdefghijklmnop";
const GITHUB_PAT: &str = "github_pat_11CANARY0123456789abcdef_ghijklmnopqrstuvwxyz";
const SLACK_TOKEN: &str = "xoxb-1234567890-canary-slacktoken";
const OPENAI_KEY: &str = "sk-proj-Canary0123456789abcdefghij";
const ANTHROPIC_KEY: &str = "sk-ant-api03-Canary0123456789abcdefghij";
const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.c2lnbmF0dXJlY2FuYXJ5";
const BEARER: &str = "Zm9vYmFyY2FuYXJ5dG9rZW4xMjM";
const BASIC: &str = "dXNlcjpjYW5hcnlwYXNz";
const URL_PASSWORD: &str = "urlpass-canary";
const DB_PASSWORD: &str = "hunter2-canary";
const YAML_SECRET: &str = "yaml-secret-canary";
const JSON_TOKEN: &str = "json-token-canary";
const ARG_API_KEY: &str = "arg-apikey-canary";
const CONFIGURED: &str = "configured-canary-value";
const PEM_BODY: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCanaryPemBody";
const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYCANARYKEY1";
const GOOGLE_KEY: &str = "AIzaSyCanary0123456789abcdefghijklmnopq";
const GOOGLE_OAUTH: &str = "ya29.a0CanaryAccessToken0123456789abcdef";
const STRIPE_KEY: &str = "sk_live_51CanaryStripeKey0123456789";
const GITLAB_TOKEN: &str = "glpat-Canary0123456789abcd";
const NPM_TOKEN: &str = "npm_Canary0123456789abcdefghijklmnopqrst";
const HF_TOKEN: &str = "hf_CanaryHuggingFaceTokenabcdefghijkl";
const SENDGRID_KEY: &str =
    "SG.Canary0123456789abcdef.ghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNO";
const AZURE_KEY: &str =
    "Canary0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefgh==";
const VENDOR_TOKEN: &str =
    "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const CLI_PASSWORD: &str = "cli-canary-pass";
const COOKIE: &str = "cookie-canary-value";
const PASSWORD_HASH: &str = "$6$canarysalt$Qm9vYmFyY2FuYXJ5aGFzaDEyMw";
const LOCAL_ID: &str = "vm-payroll-01";
const LOCAL_NAME: &str = "payroll-db.internal";

const CANARIES: &[&str] = &[
    PULSE_TOKEN,
    AWS_KEY,
    GITHUB_TOKEN,
    GITHUB_PAT,
    SLACK_TOKEN,
    OPENAI_KEY,
    ANTHROPIC_KEY,
    JWT,
    BEARER,
    BASIC,
    URL_PASSWORD,
    DB_PASSWORD,
    YAML_SECRET,
    JSON_TOKEN,
    ARG_API_KEY,
    CONFIGURED,
    PEM_BODY,
    AWS_SECRET,
    GOOGLE_KEY,
    GOOGLE_OAUTH,
    STRIPE_KEY,
    GITLAB_TOKEN,
    NPM_TOKEN,
    HF_TOKEN,
    SENDGRID_KEY,
    AZURE_KEY,
    VENDOR_TOKEN,
    CLI_PASSWORD,
    COOKIE,
    PASSWORD_HASH,
    LOCAL_ID,
    LOCAL_NAME,
];

const HARMLESS: &[&str] = &[
    "the token bucket refills every second",
    "see the password policy documentation",
    "bearer authentication is configured upstream",
    "the author: Jane wrote max_tokens=4096 and input_tokens: 120",
    "sk-learn-is-a-python-library-for-models",
    "disk usage at 91% on /var/lib/postgresql",
];

fn config() -> RedactionConfig {
    RedactionConfig {
        secrets: vec![CONFIGURED.to_owned()],
        local_only: vec![LocalOnlyResource {
            identifiers: vec![LOCAL_ID.to_owned(), LOCAL_NAME.to_owned()],
        }],
    }
}

fn redactor() -> Redactor {
    Redactor::new(Destination::external("openai:gpt-4o"), &config()).unwrap()
}

fn poisoned_request() -> ChatRequest {
    let labels = format!(
        "labels: com.example.owner=ops, github={GITHUB_TOKEN}, slack={SLACK_TOKEN}, pem=none\n\
         resource {LOCAL_ID} ({LOCAL_NAME}) is local-only"
    );
    let environment = format!(
        "DB_PASSWORD={DB_PASSWORD}\nAWS_ACCESS_KEY_ID={AWS_KEY}\nOPENAI={OPENAI_KEY}\n\
         client_secret: {YAML_SECRET}\nPULSE_API={PULSE_TOKEN}"
    );
    let logs = format!(
        "GET /api/health Authorization: Bearer {BEARER}\n\
         proxy Authorization: Basic {BASIC}\n\
         connecting to postgres://app:{URL_PASSWORD}@db.local:5432/app\n\
         jwt={JWT} anthropic {ANTHROPIC_KEY} github_pat {GITHUB_PAT}\n\
         -----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\nAAAA\n-----END RSA PRIVATE KEY-----\n\
         leaked {CONFIGURED} again\n\
         aws_secret_access_key = {AWS_SECRET}\n\
         GOOGLE_API_KEY={GOOGLE_KEY} refreshed {GOOGLE_OAUTH}\n\
         stripe {STRIPE_KEY} gitlab {GITLAB_TOKEN} npm {NPM_TOKEN} hf {HF_TOKEN}\n\
         sendgrid {SENDGRID_KEY} digitalocean {VENDOR_TOKEN}\n\
         DefaultEndpointsProtocol=https;AccountName=canary;AccountKey={AZURE_KEY};\n\
         + influx setup --username admin --password {CLI_PASSWORD} --force\n\
         > Cookie: sid={COOKIE}\n\
         deploy:{PASSWORD_HASH}:19000:0:99999:7:::"
    );
    let tool_result = format!(
        r#"{{"container": "{LOCAL_ID}", "env": {{"API_TOKEN": "{JSON_TOKEN}", "PORT": "8080"}}, "note": "{}"}}"#,
        HARMLESS.join(" / ")
    );
    ChatRequest {
        model: "gpt-4o".into(),
        messages: vec![
            Message::system(format!("You watch infrastructure. {}", HARMLESS[0])),
            Message::user(format!("Check these.\n{labels}\n{environment}")),
            Message::Assistant {
                content: format!("Reading logs of {LOCAL_NAME}."),
                tool_calls: vec![ToolCall::new(
                    "call_1",
                    "pulse_read",
                    json!({
                        "action": "logs",
                        "resource_id": LOCAL_ID,
                        "grep": format!("token={JSON_TOKEN}"),
                        "headers": {"x-api-key": ARG_API_KEY, "retries": 3},
                        "nested": [{"password": 1234}, format!("use {AWS_KEY}")],
                    }),
                )],
                reasoning_content: Some(format!("the key {OPENAI_KEY} is visible")),
            },
            Message::Tool(ToolResult {
                call_id: "call_1".into(),
                content: format!("{logs}\n{tool_result}"),
                is_error: false,
            }),
        ],
        tools: vec![Tool {
            name: "pulse_read".into(),
            description: format!("Read logs. {}", HARMLESS[1]),
            parameters: json!({"type": "object", "properties": {"grep": {"type": "string", "description": format!("example {SLACK_TOKEN}")}}}),
        }],
        ..ChatRequest::default()
    }
}

#[test]
fn no_canary_survives_in_the_serialized_request() {
    let mut request = poisoned_request();
    let before = serde_json::to_string(&request).unwrap();
    for canary in CANARIES {
        assert!(before.contains(canary), "fixture lacks {canary}");
    }
    let report = redactor().sanitize(&mut request);
    let after = serde_json::to_string(&request).unwrap();
    for canary in CANARIES {
        assert!(!after.contains(canary), "{canary} leaked: {after}");
    }
    // The report never carries a redacted value either.
    let report_json = serde_json::to_string(&report).unwrap();
    for canary in CANARIES {
        assert!(!report_json.contains(canary));
    }
    for kind in RedactionKind::ALL {
        assert!(
            report.counts.get(kind).copied().unwrap_or(0) > 0,
            "no {kind:?} redaction: {report:?}"
        );
    }
    assert!(after.contains("[REDACTED:aws_access_key]"));
    assert!(after.contains("Bearer [REDACTED:bearer_token]"));
    assert!(after.contains("postgres://[REDACTED:url_credentials]@db.local"));
    assert!(after.contains("[REDACTED:local_only_resource:1]"));
    // Non-secret structure is kept.
    let Message::Assistant { tool_calls, .. } = &request.messages[2] else {
        unreachable!()
    };
    assert_eq!(tool_calls[0].arguments["action"], "logs");
    assert_eq!(tool_calls[0].arguments["headers"]["retries"], 3);
    assert_eq!(
        tool_calls[0].arguments["headers"]["x-api-key"],
        "[REDACTED:secret_assignment]"
    );
}

#[test]
fn harmless_lookalikes_are_left_intact() {
    let mut request = poisoned_request();
    redactor().sanitize(&mut request);
    let after = serde_json::to_string(&request).unwrap();
    for text in HARMLESS {
        assert!(after.contains(text), "{text} was altered: {after}");
    }
    let mut plain = ChatRequest {
        messages: vec![Message::user(HARMLESS.join("\n"))],
        ..ChatRequest::default()
    };
    let original = plain.clone();
    let report = redactor().sanitize(&mut plain);
    assert_eq!(plain, original);
    assert_eq!(report.total, 0);
}

#[test]
fn sanitizing_is_idempotent() {
    let mut request = poisoned_request();
    let r = redactor();
    r.sanitize(&mut request);
    let once = request.clone();
    let second = r.sanitize(&mut request);
    assert_eq!(request, once);
    assert_eq!(second.total, 0, "{second:?}");
}

#[test]
fn local_routes_keep_local_only_identifiers_but_never_credentials() {
    let local = Redactor::new(Destination::local("ollama:llama3"), &config()).unwrap();
    let mut request = poisoned_request();
    let report = local.sanitize(&mut request);
    let after = serde_json::to_string(&request).unwrap();
    assert!(after.contains(LOCAL_ID));
    assert!(!report.local_only_withheld);
    for canary in CANARIES
        .iter()
        .filter(|c| ![LOCAL_ID, LOCAL_NAME].contains(c))
    {
        assert!(
            !after.contains(canary),
            "{canary} leaked to the local route"
        );
    }
}

#[test]
fn configuration_that_would_shred_text_is_refused() {
    let short = RedactionConfig {
        secrets: vec!["abc".into()],
        ..RedactionConfig::default()
    };
    assert_eq!(
        Redactor::new(Destination::external("x:y"), &short).unwrap_err(),
        RedactionConfigError::SecretTooShort { index: 0 }
    );
    let marker = RedactionConfig {
        secrets: vec!["REDACTED".into()],
        ..RedactionConfig::default()
    };
    assert!(matches!(
        Redactor::new(Destination::external("x:y"), &marker),
        Err(RedactionConfigError::CollidesWithMarker { .. })
    ));
    let id = RedactionConfig {
        local_only: vec![LocalOnlyResource {
            identifiers: vec!["db".into()],
        }],
        ..RedactionConfig::default()
    };
    assert!(matches!(
        Redactor::new(Destination::external("x:y"), &id),
        Err(RedactionConfigError::IdentifierTooShort {
            resource: 0,
            identifier: 0
        })
    ));
}

#[test]
fn report_snapshot() {
    let mut request = poisoned_request();
    let report: RedactionReport = redactor().sanitize(&mut request);
    insta::assert_json_snapshot!("redaction_report", report);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_strings_never_panic_grow_boundedly_and_are_idempotent(
        text in ".{0,300}",
        seasoning in prop::sample::select(vec![
            "", "password=", "Bearer ", "AKIA", "token: ", "\"secret\": \"", "-----BEGIN PRIVATE KEY-----",
            "https://u:p@", "vm-payroll-01", "sk-ant-", "[REDACTED:", "eyJ",
        ]),
    ) {
        let r = redactor();
        let input = format!("{seasoning}{text}{seasoning}{text}");
        let mut request = ChatRequest {
            messages: vec![Message::user(input.clone())],
            tools: vec![],
            ..ChatRequest::default()
        };
        r.sanitize(&mut request);
        let once = request.clone();
        let Message::User { content } = &request.messages[0] else { unreachable!() };
        prop_assert!(content.len() <= input.len() * 8 + 64, "grew from {} to {}", input.len(), content.len());
        let report = r.sanitize(&mut request);
        prop_assert_eq!(&request, &once);
        prop_assert_eq!(report.total, 0);
    }
}
