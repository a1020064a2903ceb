//! Classification of provider failures into causes an operator can act on.
//!
//! A provider's raw error body never reaches an operator as is: HTML pages are replaced by a
//! status summary, and JSON error messages are cut short and stripped of control characters.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a provider call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCause {
    Auth,
    Quota,
    RateLimit,
    ContextWindow,
    ModelNotFound,
    NoToolSupport,
    ToolChoiceRejected,
    Connectivity,
    Timeout,
    MalformedResponse,
    /// Any other error status the provider returned (server errors, unexplained bad requests).
    ProviderError,
}

impl FailureCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::Quota => "quota",
            Self::RateLimit => "rate_limit",
            Self::ContextWindow => "context_window",
            Self::ModelNotFound => "model_not_found",
            Self::NoToolSupport => "no_tool_support",
            Self::ToolChoiceRejected => "tool_choice_rejected",
            Self::Connectivity => "connectivity",
            Self::Timeout => "timeout",
            Self::MalformedResponse => "malformed_response",
            Self::ProviderError => "provider_error",
        }
    }

    /// One line for the operator: what happened.
    pub fn summary(self) -> &'static str {
        match self {
            Self::Auth => "the provider rejected the API key",
            Self::Quota => "the provider account has no remaining quota or credit",
            Self::RateLimit => "the provider is rate limiting requests",
            Self::ContextWindow => "the request is larger than the model's context window",
            Self::ModelNotFound => "the provider does not know the selected model",
            Self::NoToolSupport => "the selected model or endpoint does not support tool calls",
            Self::ToolChoiceRejected => "the provider rejected the requested tool choice",
            Self::Connectivity => "the provider could not be reached",
            Self::Timeout => "the provider did not answer in time",
            Self::MalformedResponse => "the provider sent a response that could not be read",
            Self::ProviderError => "the provider returned an error",
        }
    }

    /// One line for the operator: what to do about it.
    pub fn recommendation(self) -> &'static str {
        match self {
            Self::Auth => "check the API key configured for this provider",
            Self::Quota => "add credit or raise the quota on the provider account",
            Self::RateLimit => "wait for the rate limit to reset or lower the Patrol frequency",
            Self::ContextWindow => {
                "choose a model with a larger context window or raise num_ctx for local models"
            }
            Self::ModelNotFound => "check the model name, or pull the model on a local server",
            Self::NoToolSupport => "choose a model that supports tool calling",
            Self::ToolChoiceRejected => "choose a model whose endpoint accepts tool_choice",
            Self::Connectivity => "check the provider base URL and network reachability",
            Self::Timeout => "check the provider's health or raise the provider request timeout",
            Self::MalformedResponse => "retry later; if it persists choose another model",
            Self::ProviderError => "retry later; if it persists check the provider's status page",
        }
    }
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified provider failure, safe to show an operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{cause}: {message}")]
pub struct ProviderFailure {
    pub cause: FailureCause,
    /// HTTP status, when the provider answered with one.
    pub status: Option<u16>,
    /// A short, sanitized detail (never raw HTML).
    pub message: String,
    /// How long the provider asked us to wait, when it said.
    pub retry_after_ms: Option<u64>,
}

const MAX_DETAIL_CHARS: usize = 300;

/// The longest `retry-after` a rate-limited call is retried after.
pub const MAX_RATE_LIMIT_RETRY_WAIT_MS: u64 = 5_000;

impl ProviderFailure {
    pub fn new(cause: FailureCause, message: impl Into<String>) -> Self {
        Self {
            cause,
            status: None,
            message: sanitize(&message.into()),
            retry_after_ms: None,
        }
    }

    pub fn timeout(what: impl Into<String>) -> Self {
        Self::new(FailureCause::Timeout, what)
    }

    pub fn malformed(what: impl Into<String>) -> Self {
        Self::new(FailureCause::MalformedResponse, what)
    }

    pub fn summary(&self) -> &'static str {
        self.cause.summary()
    }

    pub fn recommendation(&self) -> &'static str {
        self.cause.recommendation()
    }

    /// Worth one same-route retry when nothing was shown yet. A rate limit is, when the provider
    /// asks for a short wait (or says nothing); a longer wait fails now with its `retry_after_ms`
    /// rather than holding the run.
    pub fn is_transient(&self) -> bool {
        match self.cause {
            FailureCause::Connectivity | FailureCause::Timeout => true,
            FailureCause::RateLimit => self
                .retry_after_ms
                .is_none_or(|ms| ms <= MAX_RATE_LIMIT_RETRY_WAIT_MS),
            FailureCause::ProviderError => {
                matches!(self.status, Some(500 | 502 | 503 | 504 | 529))
            }
            _ => false,
        }
    }

    /// Classifies an error status and its body.
    pub fn from_status(status: u16, body: &str, retry_after_ms: Option<u64>) -> Self {
        if looks_like_html(body) {
            let cause = match status {
                401 | 403 => FailureCause::Auth,
                429 => FailureCause::RateLimit,
                502..=504 => FailureCause::Connectivity,
                _ => FailureCause::ProviderError,
            };
            return Self {
                cause,
                status: Some(status),
                message: format!("provider returned an HTML error page (HTTP {status})"),
                retry_after_ms,
            };
        }
        let detail = error_detail(body);
        let lower = detail.to_lowercase();
        let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
        let cause = if has(&[
            "context length",
            "context window",
            "context_length",
            "maximum context",
            "prompt is too long",
            "too many tokens",
            "exceeds the context",
            "input is too long",
        ]) {
            FailureCause::ContextWindow
        } else if has(&["tool_choice", "tool choice"]) && (400..500).contains(&status) {
            FailureCause::ToolChoiceRejected
        } else if has(&[
            "does not support tools",
            "tools are not supported",
            "no endpoints found that support tool",
            "does not support tool",
            "function calling is not",
            "tool use is not supported",
        ]) {
            FailureCause::NoToolSupport
        } else if status == 400
            && has(&[
                "api key not valid",
                "invalid api key",
                "api_key_invalid",
                "invalid x-api-key",
            ])
        {
            // Gemini reports a bad key as 400 INVALID_ARGUMENT.
            FailureCause::Auth
        } else {
            match status {
                401 | 403 => FailureCause::Auth,
                402 => FailureCause::Quota,
                429 if has(&["quota", "billing", "credit", "insufficient"]) => FailureCause::Quota,
                429 => FailureCause::RateLimit,
                404 if has(&["model"]) => FailureCause::ModelNotFound,
                404 => FailureCause::Connectivity,
                400 if has(&["model"])
                    && has(&["not found", "does not exist", "unknown model"]) =>
                {
                    FailureCause::ModelNotFound
                }
                502..=504 => FailureCause::Connectivity,
                _ => FailureCause::ProviderError,
            }
        };
        let message = if detail.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {}", sanitize(&detail))
        };
        Self {
            cause,
            status: Some(status),
            message,
            retry_after_ms,
        }
    }
}

impl ProviderFailure {
    /// Whether the server answered a streamed request with an error that names streaming
    /// (llama-cpp-python: "Automatic streaming tool choice is not supported"; other servers:
    /// "streaming is not supported with tools"): the same request unstreamed may work.
    pub fn refuses_streaming(&self) -> bool {
        self.status.is_some_and(|s| s >= 400) && self.message.to_lowercase().contains("stream")
    }
}

/// True when a body is an HTML document rather than an API error.
pub fn looks_like_html(body: &str) -> bool {
    let head: String = body.trim_start().chars().take(256).collect();
    let head = head.to_lowercase();
    head.starts_with("<!doctype")
        || head.starts_with("<html")
        || head.starts_with("<head")
        || head.starts_with("<body")
        || (head.starts_with('<') && head.contains("<title"))
}

/// The provider's own error message from the shapes OpenAI, Anthropic, Gemini and Ollama use.
fn error_detail(body: &str) -> String {
    let Ok(json) = serde_json::from_str::<Value>(body) else {
        return body.trim().to_owned();
    };
    let json = match &json {
        Value::Array(items) => items.first().cloned().unwrap_or(Value::Null),
        other => other.clone(),
    };
    let pick = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => {
                let msg = o.get("message").and_then(Value::as_str).unwrap_or_default();
                let code = ["code", "type", "status"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .unwrap_or_default();
                match (code.is_empty(), msg.is_empty()) {
                    (true, true) => None,
                    (false, true) => Some(code.to_owned()),
                    (true, false) => Some(msg.to_owned()),
                    (false, false) => Some(format!("{code}: {msg}")),
                }
            }
            _ => None,
        }
    };
    json.get("error")
        .and_then(pick)
        .or_else(|| json.get("message").and_then(pick))
        .unwrap_or_default()
}

/// Removes control characters and cuts the text to a bounded length.
fn sanitize(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    if clean.chars().count() <= MAX_DETAIL_CHARS {
        clean.to_owned()
    } else {
        let cut: String = clean.chars().take(MAX_DETAIL_CHARS).collect();
        format!("{cut}...")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_pages_are_summarised_by_status() {
        let page = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx secret-host</body></html>";
        let f = ProviderFailure::from_status(502, page, None);
        assert_eq!(f.cause, FailureCause::Connectivity);
        assert!(!f.message.contains('<'));
        assert!(!f.message.contains("nginx"));
    }

    #[test]
    fn statuses_and_messages_map_to_causes() {
        let cases = [
            (
                401,
                r#"{"error":{"message":"bad key"}}"#,
                FailureCause::Auth,
            ),
            (
                429,
                r#"{"error":{"message":"slow down"}}"#,
                FailureCause::RateLimit,
            ),
            (
                429,
                r#"{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}"#,
                FailureCause::Quota,
            ),
            (
                404,
                r#"{"error":"model 'x' not found"}"#,
                FailureCause::ModelNotFound,
            ),
            (
                400,
                r#"{"error":{"message":"This model's maximum context length is 8192 tokens"}}"#,
                FailureCause::ContextWindow,
            ),
            (
                400,
                r#"{"error":{"message":"tool_choice is not supported"}}"#,
                FailureCause::ToolChoiceRejected,
            ),
            (
                400,
                r#"{"error":"registry/qwen does not support tools"}"#,
                FailureCause::NoToolSupport,
            ),
            (500, "oops", FailureCause::ProviderError),
            (
                400,
                r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}"#,
                FailureCause::Auth,
            ),
            (
                402,
                r#"{"error":{"message":"Insufficient credits"}}"#,
                FailureCause::Quota,
            ),
        ];
        for (status, body, cause) in cases {
            assert_eq!(
                ProviderFailure::from_status(status, body, None).cause,
                cause,
                "{body}"
            );
        }
    }

    #[test]
    fn long_details_are_cut() {
        let body = format!(r#"{{"error":{{"message":"{}"}}}}"#, "x".repeat(5000));
        assert!(ProviderFailure::from_status(400, &body, None).message.len() < 400);
    }
}
