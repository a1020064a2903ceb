//! The providers' own model lists, as pure code: the `GET` request each protocol's list
//! endpoint takes and how its answer becomes [`ListedModel`]s.
//!
//! | protocol | request | answer |
//! |---|---|---|
//! | OpenAI-compatible | `GET {base}/models`, bearer key | `{"object":"list","data":[{"id","owned_by",..}]}` |
//! | Ollama | `GET {base}/api/tags` | `{"models":[{"name","model","details":{..}}]}` |
//! | Anthropic | `GET {base}/v1/models?limit=1000`, `x-api-key`, `anthropic-version` | `{"data":[{"id","display_name"}],"has_more","last_id"}` |
//! | Gemini | `GET {base}/models?pageSize=1000`, `x-goog-api-key` | `{"models":[{"name":"models/..","displayName","inputTokenLimit","supportedGenerationMethods"}],"nextPageToken"}` |
//!
//! A list that goes on over several pages names the next one ([`ListPage::next`]); the caller
//! bounds how many it follows. Gemini lists embedding and other models too: only those that
//! generate content are kept, since nothing else can serve a route.

use serde_json::Value;

use crate::{Protocol, ProviderConfig, ProviderFailure, bearer};

/// The most models one page may hold; the rest of an oversized answer is dropped.
pub const MAX_MODELS_PER_PAGE: usize = 2000;

/// One model a provider lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedModel {
    /// What a route names after `provider:`.
    pub id: String,
    /// The provider's own name for it, when it gives one.
    pub display_name: Option<String>,
    /// Input tokens the model takes, when the provider says.
    pub context_window: Option<u64>,
    /// Who publishes it (OpenAI-compatible `owned_by`).
    pub owned_by: Option<String>,
    /// A short description of what it is (Ollama: family, size, quantization).
    pub details: Option<String>,
}

/// The `GET` a list endpoint takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
}

/// One page of a provider's list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListPage {
    pub models: Vec<ListedModel>,
    /// The cursor of the next page, when the provider says there is one.
    pub next: Option<String>,
}

/// The request for the page after `cursor` (the first page without one).
pub fn list_request(config: &ProviderConfig, cursor: Option<&str>) -> ListRequest {
    let base = &config.base_url;
    let key = config.api_key.as_ref().filter(|k| !k.is_empty());
    match config.protocol {
        Protocol::OpenAiCompatible => ListRequest {
            url: format!("{base}/models"),
            headers: bearer(config).into_iter().collect(),
        },
        Protocol::Ollama => ListRequest {
            url: format!("{base}/api/tags"),
            headers: bearer(config).into_iter().collect(),
        },
        Protocol::Anthropic => {
            let mut url = format!("{base}/v1/models?limit=1000");
            if let Some(after) = cursor {
                url.push_str("&after_id=");
                url.push_str(&encode(after));
            }
            let mut headers = vec![("anthropic-version", config.anthropic_version.clone())];
            if let Some(key) = key {
                headers.push(("x-api-key", key.clone()));
            }
            ListRequest { url, headers }
        }
        Protocol::Gemini => {
            let mut url = format!("{base}/models?pageSize=1000");
            if let Some(token) = cursor {
                url.push_str("&pageToken=");
                url.push_str(&encode(token));
            }
            ListRequest {
                url,
                headers: key
                    .map(|k| ("x-goog-api-key", k.clone()))
                    .into_iter()
                    .collect(),
            }
        }
    }
}

fn not_a_list(what: &str) -> ProviderFailure {
    ProviderFailure::malformed(format!("the provider's model list is not {what}"))
}

/// Reads one page of `protocol`'s list answer.
pub fn parse_list(protocol: Protocol, body: &[u8]) -> Result<ListPage, ProviderFailure> {
    let body: Value = serde_json::from_slice(body).map_err(|_| not_a_list("valid JSON"))?;
    if let Some(failure) = crate::embedded_error(&body) {
        return Err(failure);
    }
    let (key, parse): (&str, fn(&Value) -> Option<ListedModel>) = match protocol {
        Protocol::OpenAiCompatible => ("data", openai_model),
        Protocol::Ollama => ("models", ollama_model),
        Protocol::Anthropic => ("data", anthropic_model),
        Protocol::Gemini => ("models", gemini_model),
    };
    let entries = match body.get(key) {
        Some(Value::Array(entries)) => entries.as_slice(),
        // Gemini leaves the field out of an empty list.
        None if protocol == Protocol::Gemini && body.is_object() => &[],
        _ => return Err(not_a_list(&format!("an object with a \"{key}\" list"))),
    };
    let models = entries
        .iter()
        .filter_map(parse)
        .take(MAX_MODELS_PER_PAGE)
        .collect();
    let next = match protocol {
        Protocol::Anthropic if body.get("has_more").and_then(Value::as_bool) == Some(true) => {
            text(&body, "last_id")
        }
        Protocol::Gemini => text(&body, "nextPageToken"),
        _ => None,
    };
    Ok(ListPage { models, next })
}

fn text(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn openai_model(entry: &Value) -> Option<ListedModel> {
    Some(ListedModel {
        id: text(entry, "id")?,
        // OpenRouter and some proxies add a name and a context length.
        display_name: text(entry, "name"),
        context_window: entry.get("context_length").and_then(Value::as_u64),
        owned_by: text(entry, "owned_by"),
        details: None,
    })
}

fn ollama_model(entry: &Value) -> Option<ListedModel> {
    let details = entry.get("details").map(|d| {
        ["family", "parameter_size", "quantization_level"]
            .iter()
            .filter_map(|k| text(d, k))
            .collect::<Vec<_>>()
            .join(" ")
    });
    Some(ListedModel {
        id: text(entry, "name").or_else(|| text(entry, "model"))?,
        display_name: None,
        context_window: None,
        owned_by: None,
        details: details.filter(|d| !d.is_empty()),
    })
}

fn anthropic_model(entry: &Value) -> Option<ListedModel> {
    Some(ListedModel {
        id: text(entry, "id")?,
        display_name: text(entry, "display_name"),
        context_window: entry.get("max_input_tokens").and_then(Value::as_u64),
        owned_by: None,
        details: None,
    })
}

fn gemini_model(entry: &Value) -> Option<ListedModel> {
    let generates = entry
        .get("supportedGenerationMethods")
        .and_then(Value::as_array)
        .is_none_or(|methods| {
            methods
                .iter()
                .any(|m| m.as_str() == Some("generateContent"))
        });
    if !generates {
        return None;
    }
    let name = text(entry, "name")?;
    let id = name.strip_prefix("models/").unwrap_or(&name).to_owned();
    Some(ListedModel {
        id,
        display_name: text(entry, "displayName"),
        context_window: entry.get("inputTokenLimit").and_then(Value::as_u64),
        owned_by: None,
        details: text(entry, "description"),
    })
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FailureCause;

    fn config(protocol: Protocol, base: &str) -> ProviderConfig {
        ProviderConfig::new(protocol, base).with_api_key("k-1")
    }

    #[test]
    fn each_protocol_asks_its_own_list_endpoint_with_its_own_credential() {
        let openai = list_request(&config(Protocol::OpenAiCompatible, "http://h/v1"), None);
        assert_eq!(openai.url, "http://h/v1/models");
        assert_eq!(
            openai.headers,
            vec![("authorization", "Bearer k-1".to_owned())]
        );
        let ollama = list_request(&config(Protocol::Ollama, "http://h:11434"), None);
        assert_eq!(ollama.url, "http://h:11434/api/tags");
        let anthropic = list_request(&config(Protocol::Anthropic, "http://h"), Some("m 1"));
        assert_eq!(
            anthropic.url,
            "http://h/v1/models?limit=1000&after_id=m%201"
        );
        assert!(anthropic.headers.contains(&("x-api-key", "k-1".to_owned())));
        assert!(
            anthropic
                .headers
                .iter()
                .any(|(name, _)| *name == "anthropic-version")
        );
        let gemini = list_request(&config(Protocol::Gemini, "http://h/v1beta"), Some("a+b="));
        assert_eq!(
            gemini.url,
            "http://h/v1beta/models?pageSize=1000&pageToken=a%2Bb%3D"
        );
        assert_eq!(gemini.headers, vec![("x-goog-api-key", "k-1".to_owned())]);
        // A keyless local server gets no credential header at all.
        let keyless = ProviderConfig::new(Protocol::Ollama, "http://h:11434");
        assert!(list_request(&keyless, None).headers.is_empty());
    }

    #[test]
    fn each_protocol_list_shape_is_read() {
        let openai = br#"{"object":"list","data":[{"id":"gpt-4.1-mini","object":"model","created":1686935002,"owned_by":"openai"},{"object":"model"}]}"#;
        let page = parse_list(Protocol::OpenAiCompatible, openai).unwrap();
        assert_eq!(page.models.len(), 1, "an entry without an id is skipped");
        assert_eq!(page.models[0].id, "gpt-4.1-mini");
        assert_eq!(page.models[0].owned_by.as_deref(), Some("openai"));

        let ollama = br#"{"models":[{"name":"qwen3:8b","model":"qwen3:8b","modified_at":"2026-10-03T23:34:03Z","size":5225388164,"digest":"500a1f","details":{"format":"gguf","family":"qwen3","families":["qwen3"],"parameter_size":"8.2B","quantization_level":"Q4_K_M"}}]}"#;
        let page = parse_list(Protocol::Ollama, ollama).unwrap();
        assert_eq!(page.models[0].id, "qwen3:8b");
        assert_eq!(page.models[0].details.as_deref(), Some("qwen3 8.2B Q4_K_M"));

        let anthropic = br#"{"data":[{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5","created_at":"2026-09-29T00:00:00Z"}],"has_more":true,"first_id":"claude-sonnet-4-5","last_id":"claude-sonnet-4-5"}"#;
        let page = parse_list(Protocol::Anthropic, anthropic).unwrap();
        assert_eq!(
            page.models[0].display_name.as_deref(),
            Some("Claude Sonnet 4.5")
        );
        assert_eq!(page.next.as_deref(), Some("claude-sonnet-4-5"));

        let gemini = br#"{"models":[{"name":"models/gemini-2.5-flash","displayName":"Gemini 2.5 Flash","inputTokenLimit":1048576,"supportedGenerationMethods":["generateContent","countTokens"]},{"name":"models/text-embedding-004","supportedGenerationMethods":["embedContent"]}],"nextPageToken":"p2"}"#;
        let page = parse_list(Protocol::Gemini, gemini).unwrap();
        assert_eq!(
            page.models.len(),
            1,
            "an embedding model cannot serve a route"
        );
        assert_eq!(page.models[0].id, "gemini-2.5-flash");
        assert_eq!(page.models[0].context_window, Some(1_048_576));
        assert_eq!(page.next.as_deref(), Some("p2"));
        assert_eq!(parse_list(Protocol::Gemini, b"{}").unwrap().models, vec![]);
    }

    #[test]
    fn an_answer_that_is_not_the_list_is_a_bad_response() {
        for (protocol, body) in [
            (Protocol::OpenAiCompatible, &b"<html>"[..]),
            (Protocol::OpenAiCompatible, br#"{"models":[]}"#),
            (Protocol::Ollama, br#"{"data":[]}"#),
            (Protocol::Anthropic, br#"[1,2]"#),
        ] {
            let failure = parse_list(protocol, body).unwrap_err();
            assert_eq!(
                failure.cause,
                FailureCause::MalformedResponse,
                "{protocol:?}"
            );
        }
        let embedded = br#"{"error":{"code":401,"message":"bad key"}}"#;
        assert_eq!(
            parse_list(Protocol::OpenAiCompatible, embedded)
                .unwrap_err()
                .cause,
            FailureCause::Auth
        );
    }
}
