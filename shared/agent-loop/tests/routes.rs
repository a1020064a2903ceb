//! `provider:model` routes and per-surface route chains.

use pulse_agent_loop::registry::RouteClass;
use pulse_agent_loop::route::{
    ResolveError, Route, RouteError, RouteSetting, RouteSettings, Surface,
};

#[test]
fn routes_keep_colons_and_slashes_in_the_model() {
    let r = Route::parse("ollama:llama3.1:8b").expect("ollama route");
    assert_eq!(r.provider_id(), "ollama");
    assert_eq!(r.model(), "llama3.1:8b");
    assert_eq!(r.to_string(), "ollama:llama3.1:8b");

    let r: Route = "openrouter:meta-llama/llama-3-70b"
        .parse()
        .expect("openrouter");
    assert_eq!(r.provider_id(), "openrouter");
    assert_eq!(r.model(), "meta-llama/llama-3-70b");
    assert_eq!(r.route_class(), RouteClass::MeteredApi);

    let r = Route::parse("  zai-coding:glm-5.2 ").expect("trimmed");
    assert_eq!(r.to_string(), "zai-coding:glm-5.2");
}

#[test]
fn bad_routes_say_what_is_wrong() {
    assert_eq!(Route::parse(""), Err(RouteError::Empty));
    assert_eq!(Route::parse("   "), Err(RouteError::Empty));
    assert_eq!(
        Route::parse("gpt-4o"),
        Err(RouteError::MissingProvider {
            input: "gpt-4o".into()
        })
    );
    assert_eq!(
        Route::parse(":gpt-4o"),
        Err(RouteError::MissingProvider {
            input: ":gpt-4o".into()
        })
    );
    assert_eq!(
        Route::parse("quickstart:minimax-2.5m"),
        Err(RouteError::UnknownProvider {
            provider: "quickstart".into()
        })
    );
    assert_eq!(
        Route::parse("openai:"),
        Err(RouteError::EmptyModel {
            provider: "openai".into()
        })
    );
    assert_eq!(
        Route::parse("openai:  ").map_err(|e| e.to_string()),
        Err("model route for provider \"openai\" names no model".to_owned())
    );
}

fn settings(
    model: Option<&str>,
    chat: Option<&str>,
    patrol: Option<&str>,
    auto_fix: Option<&str>,
) -> RouteSettings {
    RouteSettings {
        model: model.map(Into::into),
        chat_model: chat.map(Into::into),
        patrol_model: patrol.map(Into::into),
        auto_fix_model: auto_fix.map(Into::into),
    }
}

fn resolved(s: &RouteSettings, surface: Surface) -> (RouteSetting, String) {
    let r = s.resolve(surface).expect("resolves");
    (r.setting, r.route.to_string())
}

#[test]
fn surfaces_walk_their_chains() {
    let only_default = settings(Some("openai:gpt-4o"), None, None, None);
    for surface in [Surface::Chat, Surface::Patrol, Surface::AutoFix] {
        assert_eq!(
            resolved(&only_default, surface),
            (RouteSetting::Model, "openai:gpt-4o".into())
        );
    }

    let all = settings(
        Some("openai:gpt-4o"),
        Some("anthropic:claude-sonnet-4-20250514"),
        Some("ollama:qwen3:8b"),
        Some("deepseek:deepseek-v4-pro"),
    );
    assert_eq!(
        resolved(&all, Surface::Chat),
        (
            RouteSetting::ChatModel,
            "anthropic:claude-sonnet-4-20250514".into()
        )
    );
    assert_eq!(
        resolved(&all, Surface::Patrol),
        (RouteSetting::PatrolModel, "ollama:qwen3:8b".into())
    );
    assert_eq!(
        resolved(&all, Surface::AutoFix),
        (
            RouteSetting::AutoFixModel,
            "deepseek:deepseek-v4-pro".into()
        )
    );

    // Auto-fix falls to the Patrol route before the shared default; chat does not.
    let patrol_set = settings(
        Some("openai:gpt-4o"),
        None,
        Some("ollama:qwen3:8b"),
        Some("  "),
    );
    assert_eq!(
        resolved(&patrol_set, Surface::AutoFix),
        (RouteSetting::PatrolModel, "ollama:qwen3:8b".into())
    );
    assert_eq!(
        resolved(&patrol_set, Surface::Chat),
        (RouteSetting::Model, "openai:gpt-4o".into())
    );
}

#[test]
fn a_configured_route_is_never_substituted() {
    // The Patrol route is set but unusable: resolution fails on it, it does not go on to the
    // perfectly good default.
    let s = settings(Some("openai:gpt-4o"), None, Some("quickstart:x"), None);
    assert_eq!(
        s.resolve(Surface::Patrol),
        Err(ResolveError::Invalid {
            surface: "patrol",
            setting: "patrol_model",
            source: RouteError::UnknownProvider {
                provider: "quickstart".into()
            }
        })
    );
    assert!(matches!(
        s.resolve(Surface::AutoFix),
        Err(ResolveError::Invalid {
            setting: "patrol_model",
            ..
        })
    ));
    let s = settings(Some("openai:gpt-4o"), Some("ollama:"), None, None);
    assert!(matches!(
        s.resolve(Surface::Chat),
        Err(ResolveError::Invalid {
            setting: "chat_model",
            source: RouteError::EmptyModel { .. },
            ..
        })
    ));
    assert_eq!(
        RouteSettings::default().resolve(Surface::Chat),
        Err(ResolveError::NotConfigured { surface: "chat" })
    );
}
