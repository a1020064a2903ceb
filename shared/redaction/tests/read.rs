//! The read-time entry point, and the one list both entry points share: a secret that only the
//! read-time rules or only the provider-bound rules knew before they were one table is caught by
//! both, in plain text and as a `KEY=value` inside a JSON string.

use std::collections::BTreeMap;

use pulse_providers::{ChatRequest, Message, ToolResult};
use pulse_redaction::{
    Destination, RedactionConfig, RedactionKind, RedactionReport, Redactor, redact_read,
};
use serde_json::json;

#[test]
fn secrets_are_masked_and_ordinary_output_is_kept() {
    for (input, secret) in [
        ("DB_PASSWORD=hunter2", "hunter2"),
        ("export API_KEY='abc def'", "abc def"),
        ("password: s3cr3t", "s3cr3t"),
        (r#"{"token": "t0k3n-value"}"#, "t0k3n-value"),
        ("aws_secret_access_key = wJalrXUtnFEMI", "wJalrXUtnFEMI"),
        ("Authorization: Bearer abcdefghijklmnop", "abcdefghijklmnop"),
        ("postgres://app:pw1234@db:5432/app", "pw1234"),
        (
            "root:$6$salt$hashhashhash:19000:0:99999:7:::",
            "$6$salt$hashhashhash",
        ),
        (
            "ghp_0123456789abcdefghijABCDEFGHIJ0123",
            "ghp_0123456789abcdefghijABCDEFGHIJ0123",
        ),
        ("key AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----\nafter",
            "b3BlbnNzaC1rZXktdjEAAAA",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA (cut)",
            "MIIEowIBAAKCAQEA",
        ),
    ] {
        let masked = redact_read(input);
        assert!(!masked.contains(secret), "{input:?} -> {masked:?}");
        assert!(masked.contains("[REDACTED:"), "{input:?} -> {masked:?}");
    }
    let key =
        redact_read("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\nafter");
    assert_eq!(key, "[REDACTED:private_key]\nafter");

    let df = "Filesystem      Size  Used Avail Use% Mounted on\n/dev/sda1        20G  5.1G   14G  27% /\n";
    assert_eq!(redact_read(df), df);
    let ps = "root         1  0.0  0.1 167744 11404 ?        Ss   Nov28   0:04 /sbin/init";
    assert_eq!(redact_read(ps), ps);
    assert_eq!(
        redact_read("https://example.com/a:b"),
        "https://example.com/a:b"
    );
}

#[test]
fn read_time_redaction_is_idempotent() {
    let once = redact_read("PASSWORD=x TOKEN=\"y z\" Bearer abcdefghijk");
    assert_ne!(once, "PASSWORD=x TOKEN=\"y z\" Bearer abcdefghijk");
    assert_eq!(redact_read(&once), once);
}

/// What the provider-bound sanitizer leaves of `text` when it arrives as a tool result, and how
/// many redactions it counted.
fn model_bound(text: &str) -> (String, RedactionReport) {
    let redactor = Redactor::new(
        Destination::external("openai:gpt-4o"),
        &RedactionConfig::default(),
    )
    .expect("empty config is valid");
    let mut request = ChatRequest {
        messages: vec![Message::Tool(ToolResult::ok("call_1", text))],
        ..ChatRequest::default()
    };
    let report = redactor.sanitize(&mut request);
    let sent = serde_json::to_string(&request).expect("request serializes");
    (sent, report)
}

#[test]
fn a_secret_only_one_side_knew_is_caught_by_both_entry_points() {
    // (what it is, which side knew it before, the text, the secret, the kind it is counted as)
    let cases = [
        // Only the read-time rules knew these.
        (
            "crypt(3) password hash",
            "ADMIN_HASH=$6$rounds=5000$Xy7salt$Vb3nQ9hKz2LmPq8RtW4sUe6YcJ0aF1gD",
            "$6$rounds=5000$Xy7salt$Vb3nQ9hKz2LmPq8RtW4sUe6YcJ0aF1gD",
            RedactionKind::PasswordHash,
        ),
        (
            "short GitHub token",
            "DEPLOY=ghp_0123456789abcdefghijABCDEFGHIJ0123",
            "ghp_0123456789abcdefghijABCDEFGHIJ0123",
            RedactionKind::GithubToken,
        ),
        (
            "secret word inside a longer key",
            "SECRETVALUE=x9y8z7w6v5",
            "x9y8z7w6v5",
            RedactionKind::SecretAssignment,
        ),
        (
            "basic credentials outside a header",
            "proxy sent Basic dXNlcjpwYXNzd29yZA== upstream",
            "dXNlcjpwYXNzd29yZA==",
            RedactionKind::BasicAuth,
        ),
        // Only the provider-bound rules knew these.
        (
            "a `pass` key",
            "DB_PASS=hunter2",
            "hunter2",
            RedactionKind::SecretAssignment,
        ),
        (
            "a `pwd` key",
            "MYSQL_PWD=S3cret!",
            "S3cret!",
            RedactionKind::SecretAssignment,
        ),
        (
            "Stripe key",
            "BILLING=sk_live_51CanaryStripeKey0123456789",
            "sk_live_51CanaryStripeKey0123456789",
            RedactionKind::StripeKey,
        ),
        (
            "command-line secret",
            "ARGS=--password Flag-Pw-19",
            "Flag-Pw-19",
            RedactionKind::CommandLineSecret,
        ),
    ];
    for (what, text, secret, kind) in cases {
        let in_json = json!({ "env": text }).to_string();
        for form in [text.to_owned(), in_json] {
            let read = redact_read(&form);
            assert!(!read.contains(secret), "{what}: read time kept it: {read}");
            assert!(read.contains(&kind.marker()), "{what}: {read}");

            let (sent, report) = model_bound(&form);
            assert!(
                !sent.contains(secret),
                "{what}: model-bound kept it: {sent}"
            );
            assert!(
                report.counts.get(&kind).copied().unwrap_or(0) > 0,
                "{what}: {:?}",
                report.counts
            );
            // What read time already redacted reaches the model unchanged and is not counted
            // again.
            let (again, report) = model_bound(&read);
            assert_eq!(report.counts, BTreeMap::new(), "{what}: {again}");
        }
    }
    // The `KEY=value` inside a JSON string keeps its shape.
    assert_eq!(
        redact_read(r#"{"env":"DB_PASSWORD=hunter2"}"#),
        r#"{"env":"DB_PASSWORD=[REDACTED:secret_assignment]"}"#
    );
}

#[test]
fn an_inline_authorization_header_loses_its_credential_and_keeps_its_scheme() {
    // A recorded command: the header is one argument among others.
    let command = "curl -H 'Authorization: Bearer abcdefghijklmnop' https://example.com";
    let read = redact_read(command);
    assert_eq!(
        read,
        "curl -H 'Authorization: Bearer [REDACTED:secret_assignment]' https://example.com"
    );
    let (sent, _) = model_bound(command);
    assert!(!sent.contains("abcdefghijklmnop"), "{sent}");
    // A scheme followed by auth parameters, or by a placeholder, keeps them.
    for kept in [
        r#"WWW-Authenticate: Bearer realm="api", error="invalid_token""#,
        "token_type=Bearer expires_in=3600",
        "Authorization: Bearer ${TOKEN}",
    ] {
        assert_eq!(redact_read(kept), kept);
    }
}
