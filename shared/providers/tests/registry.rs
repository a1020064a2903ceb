//! The provider table: its shape as the settings API shows it, and the rules every entry keeps.

use pulse_providers::Protocol;
use pulse_providers::registry::{self, ApiKey, PROVIDER_IDS, PROVIDERS, RouteClass};

#[test]
fn registry_table_snapshot() {
    insta::assert_json_snapshot!("provider_registry", registry::to_json());
}

#[test]
fn registry_ids_are_unique_and_well_formed() {
    let mut ids: Vec<&str> = PROVIDERS.iter().map(|p| p.id).collect();
    let before = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), before, "duplicate provider ids");
    for p in PROVIDERS {
        assert!(
            p.id.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{} must be a plain route prefix without ':'",
            p.id
        );
        assert!(p.docs_url.starts_with("https://"), "{}", p.id);
        if let Some(url) = p.default_base_url {
            assert!(!url.ends_with('/'), "{url} has a trailing slash");
        }
    }
}

#[test]
fn route_classes_follow_the_spec() {
    let class = |id: &str| registry::lookup(id).map(|p| p.route_class);
    for local in ["ollama", "lmstudio", "llamacpp"] {
        assert_eq!(class(local), Some(RouteClass::LocalModelServer), "{local}");
    }
    assert_eq!(class("zai-coding"), Some(RouteClass::CodingPlanAllowance));
    for hosted in [
        "openai",
        "openrouter",
        "deepseek",
        "groq",
        "mistral",
        "together",
        "fireworks",
        "zai",
        "litellm",
        "anthropic",
        "gemini",
    ] {
        assert_eq!(class(hosted), Some(RouteClass::MeteredApi), "{hosted}");
    }
    // The standard Z.ai entry pointed at the coding path is the coding plan.
    let zai = registry::lookup("zai").expect("zai");
    assert_eq!(
        zai.route_class_at(Some("https://api.z.ai/api/coding/paas/v4")),
        RouteClass::CodingPlanAllowance
    );
    assert_eq!(zai.route_class_at(None), RouteClass::MeteredApi);
    // Another provider's URL containing the same path is not.
    let openai = registry::lookup("openai").expect("openai");
    assert_eq!(
        openai.route_class_at(Some("https://proxy.example/api/coding/paas/v4")),
        RouteClass::MeteredApi
    );
}

#[test]
fn credentials_and_protocols() {
    let p = |id: &str| registry::lookup(id).expect(id);
    assert_eq!(p("litellm").api_key, ApiKey::Optional);
    assert_eq!(p("litellm").default_base_url, None);
    assert_eq!(p("ollama").protocol, Protocol::Ollama);
    assert_eq!(p("anthropic").protocol, Protocol::Anthropic);
    assert_eq!(p("gemini").protocol, Protocol::Gemini);
    assert_eq!(p("openai").env_hints, &["OPENAI_API_KEY"]);
    assert_eq!(p("openai").api_key, ApiKey::Required);
    assert_eq!(p("deepseek").default_model, Some("deepseek-v4-flash"));
}

#[test]
fn derived_views_follow_the_table() {
    let ids: Vec<&str> = PROVIDERS.iter().map(|p| p.id).collect();
    assert_eq!(ids, PROVIDER_IDS);
    for p in PROVIDERS {
        assert_eq!(registry::lookup(p.id), Some(p));
        assert_eq!(p.needs_key(), p.api_key == ApiKey::Required, "{}", p.id);
    }
    assert_eq!(registry::lookup("quickstart"), None);
    for keyless in ["lmstudio", "llamacpp", "litellm", "ollama"] {
        assert!(
            !registry::lookup(keyless).expect(keyless).needs_key(),
            "{keyless}"
        );
    }
}
