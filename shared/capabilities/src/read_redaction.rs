//! The first redaction of host read output (`pulse_read` exec, file and tail), applied on the
//! agent before the text leaves the host, and by the relay to the command it records in the
//! audit. It masks what is shaped like a credential: PEM private keys, secret-named assignments
//! (`DB_PASSWORD=x`, `password: x`, `"token": "x"`), bearer and basic credentials, passwords in
//! URLs, password hashes (`$6$...`) and well-known token formats.
//!
//! It is deliberately small and errs on the side of masking. It is not the last line: the
//! model-runner's provider-bound `Redactor` sanitises every request again before it leaves for
//! a model provider.

use std::sync::LazyLock;

use regex::Regex;

/// What replaces a masked value.
pub const MARK: &str = "[REDACTED]";

struct Rule {
    regex: Regex,
    /// The replacement, with `$name` groups kept around the masked value.
    with: &'static str,
}

fn rule(pattern: &str, with: &'static str) -> Rule {
    Rule {
        // The patterns are constants, compiled by the unit tests.
        regex: Regex::new(pattern).unwrap_or_else(|e| panic!("bad redaction pattern: {e}")),
        with,
    }
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    vec![
        // A whole private key, or what is left of one in cut output.
        rule(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
            "[REDACTED:private_key]",
        ),
        // scheme://user:password@host
        rule(
            r#"(?i)(?P<head>\b[a-z][a-z0-9+.-]{1,15}://[^\s/@:"'<>]*:)[^\s/@"'<>]+@"#,
            "${head}[REDACTED]@",
        ),
        // Authorization: Bearer x / Basic x
        rule(
            r"(?i)(?P<head>\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{8,}",
            "${head}[REDACTED]",
        ),
        // A secret-named key, its `=` or `:`, and its value (quoted or one word).
        rule(
            r#"(?i)(?P<head>\b[A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential|auth)[A-Za-z0-9_.-]*["']?\s*[=:]\s*)(?:"[^"\n]*"|'[^'\n]*'|[^\s,;"']+)"#,
            "${head}[REDACTED]",
        ),
        // crypt(3) password hashes (shadow files, htpasswd).
        rule(r"\$(?:1|2[aby]?|5|6|y|gy|7)\$[^\s:]+", "[REDACTED]"),
        // Token formats: Pulse, GitHub, GitLab, Slack, OpenAI/Anthropic-style, AWS key ids, JWTs.
        rule(
            r"\b(?:pulse_[0-9a-f]{64}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)",
            "[REDACTED]",
        ),
    ]
});

/// `text` with every credential-shaped part masked.
pub fn redact(text: &str) -> String {
    let mut text = text.to_owned();
    for rule in RULES.iter() {
        if let std::borrow::Cow::Owned(changed) = rule.regex.replace_all(&text, rule.with) {
            text = changed;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let masked = redact(input);
            assert!(!masked.contains(secret), "{input:?} -> {masked:?}");
            assert!(masked.contains("[REDACTED"), "{input:?} -> {masked:?}");
        }
        let key =
            redact("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\nafter");
        assert_eq!(key, "[REDACTED:private_key]\nafter");

        let df = "Filesystem      Size  Used Avail Use% Mounted on\n/dev/sda1        20G  5.1G   14G  27% /\n";
        assert_eq!(redact(df), df);
        let ps = "root         1  0.0  0.1 167744 11404 ?        Ss   Nov28   0:04 /sbin/init";
        assert_eq!(redact(ps), ps);
        assert_eq!(redact("https://example.com/a:b"), "https://example.com/a:b");
    }

    #[test]
    fn redaction_is_idempotent() {
        let once = redact("PASSWORD=x TOKEN=\"y z\" Bearer abcdefghijk");
        assert_eq!(redact(&once), once);
    }
}
