//! The provider registry: every provider Pulse can route to, declared once as data.
//!
//! Settings validation ([`PROVIDER_IDS`], [`lookup`]), the readiness key rule, the model runner's
//! routes and transports, the cost ledger and the `/api/settings/ai` projection all read this
//! table; nothing else names provider ids, base URLs, credential rules or route classes.

use serde::Serialize;
use serde_json::{Value, json};

use crate::Protocol;

/// How a route's calls are paid for. Decides whether tokens have a dollar price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteClass {
    /// A hosted API billed per token.
    MeteredApi,
    /// A model server the operator runs (Ollama, LM Studio, llama.cpp): no per-token bill.
    LocalModelServer,
    /// A subscription plan's allowance (Z.ai coding endpoint): no per-token bill.
    CodingPlanAllowance,
}

impl RouteClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MeteredApi => "metered_api",
            Self::LocalModelServer => "local_model_server",
            Self::CodingPlanAllowance => "coding_plan_allowance",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "metered_api" => Some(Self::MeteredApi),
            "local_model_server" => Some(Self::LocalModelServer),
            "coding_plan_allowance" => Some(Self::CodingPlanAllowance),
            _ => None,
        }
    }

    /// Whether each call costs money per token.
    pub fn is_metered(self) -> bool {
        matches!(self, Self::MeteredApi)
    }
}

impl std::fmt::Display for RouteClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a provider needs an API key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiKey {
    Required,
    Optional,
}

/// One provider Pulse can route to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderEntry {
    /// The prefix of a `provider:model` route.
    pub id: &'static str,
    pub display_name: &'static str,
    pub protocol: Protocol,
    /// `None` when the operator must give one (a LiteLLM proxy has no well-known address).
    pub default_base_url: Option<&'static str>,
    /// The provider's declared fallback model, used only when no model is chosen and the live
    /// catalogue gives none; `None` where the served model is whatever the operator loaded.
    pub default_model: Option<&'static str>,
    pub api_key: ApiKey,
    /// Environment variables operators conventionally keep the key or address in (hints only).
    pub env_hints: &'static [&'static str],
    pub docs_url: &'static str,
    pub route_class: RouteClass,
}

/// The path segment that marks a Z.ai coding-plan endpoint.
const ZAI_CODING_PATH: &str = "/api/coding/paas/";

impl ProviderEntry {
    /// The route class for this provider at `base_url` (the configured override, if any).
    /// A Z.ai base URL on the coding path is the coding plan, whichever Z.ai entry was chosen.
    pub fn route_class_at(&self, base_url: Option<&str>) -> RouteClass {
        match base_url {
            Some(url) if self.id.starts_with("zai") && url.contains(ZAI_CODING_PATH) => {
                RouteClass::CodingPlanAllowance
            }
            _ => self.route_class,
        }
    }

    /// The wire protocol name, as settings and the API show it.
    pub fn protocol_name(&self) -> &'static str {
        protocol_name(self.protocol)
    }

    /// Whether calling this provider needs an API key.
    pub fn needs_key(&self) -> bool {
        self.api_key == ApiKey::Required
    }

    /// This entry as the settings API shows it.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "display_name": self.display_name,
            "protocol": self.protocol_name(),
            "default_base_url": self.default_base_url,
            "default_model": self.default_model,
            "api_key": self.api_key,
            "env_hints": self.env_hints,
            "docs_url": self.docs_url,
            "route_class": self.route_class,
        })
    }
}

pub fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenAiCompatible => "openai-compatible",
        Protocol::Anthropic => "anthropic",
        Protocol::Gemini => "gemini",
        Protocol::Ollama => "ollama",
    }
}

/// Every provider, in the order settings list them.
pub static PROVIDERS: &[ProviderEntry] = TABLE;

/// Every provider id (the route prefixes), in the table's order.
pub const PROVIDER_IDS: [&str; TABLE.len()] = {
    let mut ids = [""; TABLE.len()];
    let mut at = 0;
    while at < TABLE.len() {
        ids[at] = TABLE[at].id;
        at += 1;
    }
    ids
};

const TABLE: &[ProviderEntry] = &[
    ProviderEntry {
        id: "openai",
        display_name: "OpenAI",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.openai.com/v1"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["OPENAI_API_KEY"],
        docs_url: "https://platform.openai.com/docs/api-reference/chat",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "openrouter",
        display_name: "OpenRouter",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://openrouter.ai/api/v1"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["OPENROUTER_API_KEY"],
        docs_url: "https://openrouter.ai/docs",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "deepseek",
        display_name: "DeepSeek",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.deepseek.com"),
        default_model: Some("deepseek-v4-flash"),
        api_key: ApiKey::Required,
        env_hints: &["DEEPSEEK_API_KEY"],
        docs_url: "https://api-docs.deepseek.com",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "groq",
        display_name: "Groq",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.groq.com/openai/v1"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["GROQ_API_KEY"],
        docs_url: "https://console.groq.com/docs/openai",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "mistral",
        display_name: "Mistral",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.mistral.ai/v1"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["MISTRAL_API_KEY"],
        docs_url: "https://docs.mistral.ai/api",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "together",
        display_name: "Together AI",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.together.xyz/v1"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["TOGETHER_API_KEY"],
        docs_url: "https://docs.together.ai/docs/openai-api-compatibility",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "fireworks",
        display_name: "Fireworks AI",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.fireworks.ai/inference/v1"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["FIREWORKS_API_KEY"],
        docs_url: "https://docs.fireworks.ai/tools-sdks/openai-compatibility",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "zai",
        display_name: "Z.ai",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.z.ai/api/paas/v4"),
        default_model: Some("glm-5.2"),
        api_key: ApiKey::Required,
        env_hints: &["ZAI_API_KEY"],
        docs_url: "https://docs.z.ai",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "zai-coding",
        display_name: "Z.ai Coding Plan",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("https://api.z.ai/api/coding/paas/v4"),
        default_model: Some("glm-5.2"),
        api_key: ApiKey::Required,
        env_hints: &["ZAI_API_KEY"],
        docs_url: "https://docs.z.ai",
        route_class: RouteClass::CodingPlanAllowance,
    },
    ProviderEntry {
        id: "lmstudio",
        display_name: "LM Studio",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("http://localhost:1234/v1"),
        default_model: None,
        api_key: ApiKey::Optional,
        env_hints: &["LM_STUDIO_BASE_URL"],
        docs_url: "https://lmstudio.ai/docs/app/api/endpoints/openai",
        route_class: RouteClass::LocalModelServer,
    },
    ProviderEntry {
        id: "llamacpp",
        display_name: "llama.cpp server",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: Some("http://localhost:8080/v1"),
        default_model: None,
        api_key: ApiKey::Optional,
        env_hints: &["LLAMA_API_KEY"],
        docs_url: "https://github.com/ggml-org/llama.cpp/tree/master/tools/server",
        route_class: RouteClass::LocalModelServer,
    },
    // A LiteLLM proxy may front paid APIs, so it is metered: without a price row its calls are
    // unknown-cost, which budgets treat as refused rather than free.
    ProviderEntry {
        id: "litellm",
        display_name: "LiteLLM proxy",
        protocol: Protocol::OpenAiCompatible,
        default_base_url: None,
        default_model: None,
        api_key: ApiKey::Optional,
        env_hints: &["LITELLM_API_KEY", "LITELLM_BASE_URL"],
        docs_url: "https://docs.litellm.ai/docs/proxy/quick_start",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "ollama",
        display_name: "Ollama",
        protocol: Protocol::Ollama,
        default_base_url: Some("http://localhost:11434"),
        default_model: Some("qwen3:8b"),
        api_key: ApiKey::Optional,
        env_hints: &["OLLAMA_HOST"],
        docs_url: "https://github.com/ollama/ollama/blob/main/docs/api.md",
        route_class: RouteClass::LocalModelServer,
    },
    ProviderEntry {
        id: "anthropic",
        display_name: "Anthropic",
        protocol: Protocol::Anthropic,
        default_base_url: Some("https://api.anthropic.com"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["ANTHROPIC_API_KEY"],
        docs_url: "https://docs.anthropic.com/en/api/messages",
        route_class: RouteClass::MeteredApi,
    },
    ProviderEntry {
        id: "gemini",
        display_name: "Google Gemini",
        protocol: Protocol::Gemini,
        default_base_url: Some("https://generativelanguage.googleapis.com/v1beta"),
        default_model: None,
        api_key: ApiKey::Required,
        env_hints: &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        docs_url: "https://ai.google.dev/api/generate-content",
        route_class: RouteClass::MeteredApi,
    },
];

/// The provider with this route prefix.
pub fn lookup(id: &str) -> Option<&'static ProviderEntry> {
    PROVIDERS.iter().find(|p| p.id == id)
}

/// The whole table as the settings API shows it.
pub fn to_json() -> Value {
    Value::Array(PROVIDERS.iter().map(ProviderEntry::to_json).collect())
}
