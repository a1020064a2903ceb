//! `pulsectl models list | test` over the gateway: `GET /api/ai/models` (each provider the
//! tenant uses with the models it lists, or its classified error) and
//! `POST /api/ai/test/{provider}` (the preflight's model turn on one provider and model; nothing
//! is saved).
//!
//! Human text by default; `--json` prints the answer as JSON. `models list` exits 0 when the
//! gateway answered, whatever each provider said: a failing provider is a line of the answer.

use pulse_api::models::{ModelCatalogue, ProviderCatalogue, ProviderTestAnswer};

use crate::gateway_client::{ApiError, GatewayClient, print_json};
use crate::text::{render_table, wire_name};

pub async fn list(client: &GatewayClient, json: bool) -> Result<(), ApiError> {
    let catalogue = client.api().ai_models().await?;
    if json {
        print_json(&catalogue);
    } else {
        print!("{}", describe_catalogue(&catalogue));
    }
    Ok(())
}

pub async fn test(
    client: &GatewayClient,
    provider: &str,
    model: &str,
    json: bool,
) -> Result<(), ApiError> {
    let answer = client.api().test_provider(provider, model).await?;
    if json {
        print_json(&answer);
    } else {
        print!("{}", describe_test(&answer));
    }
    Ok(())
}

fn describe_provider(provider: &ProviderCatalogue) -> String {
    let mut out = format!("{} ({})", provider.provider, provider.display_name);
    match &provider.error {
        Some(error) => {
            out.push_str(&format!(
                ": {}: {}\n  {}\n",
                error.code, error.message, error.remedy
            ));
        }
        None if provider.models.is_empty() => out.push_str(": no models listed\n"),
        None => {
            out.push_str(&format!(": {} model(s)\n", provider.models.len()));
            let mut rows = vec![vec![
                "  ROUTE".to_owned(),
                "NAME".to_owned(),
                "CONTEXT".to_owned(),
            ]];
            for model in &provider.models {
                rows.push(vec![
                    format!("  {}", model.route),
                    model.display_name.clone().unwrap_or_else(|| "-".to_owned()),
                    model
                        .context_window
                        .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                ]);
            }
            out.push_str(&render_table(&rows));
        }
    }
    out
}

/// One block per provider: its models as routes, or its error and what to do.
pub fn describe_catalogue(catalogue: &ModelCatalogue) -> String {
    if catalogue.providers.is_empty() {
        return "no provider is set up: set a provider's API key or base URL in the settings\n"
            .to_owned();
    }
    catalogue
        .providers
        .iter()
        .map(describe_provider)
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn describe_test(answer: &ProviderTestAnswer) -> String {
    let outcome = &answer.outcome;
    let mut out = format!(
        "{}:{}: {}\n  {}\n",
        answer.provider,
        answer.model,
        wire_name(&answer.state),
        outcome.summary
    );
    if let Some(cause) = &outcome.cause {
        out.push_str(&format!("  cause: {cause}\n"));
    }
    if let Some(recommendation) = &outcome.recommendation {
        out.push_str(&format!("  what to do: {recommendation}\n"));
    }
    if outcome.tool_calls_recovered > 0 {
        out.push_str("  tool calls recovered from text\n");
    }
    if let Some(transport) = outcome.transport {
        out.push_str(&format!("  answer came: {}\n", transport.as_str()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_api::models::{CatalogueError, CatalogueErrorCode, CatalogueModel};

    #[test]
    fn a_failing_provider_is_shown_with_its_code_beside_one_that_lists() {
        let catalogue = ModelCatalogue {
            providers: vec![
                ProviderCatalogue {
                    provider: "ollama".to_owned(),
                    display_name: "Ollama".to_owned(),
                    protocol: "ollama".to_owned(),
                    ok: true,
                    models: vec![CatalogueModel {
                        id: "qwen3:8b".to_owned(),
                        route: "ollama:qwen3:8b".to_owned(),
                        display_name: None,
                        context_window: None,
                        owned_by: None,
                        details: None,
                    }],
                    error: None,
                    elapsed_ms: 3,
                },
                ProviderCatalogue {
                    provider: "openai".to_owned(),
                    display_name: "OpenAI".to_owned(),
                    protocol: "openai-compatible".to_owned(),
                    ok: false,
                    models: vec![],
                    error: Some(CatalogueError::new(
                        CatalogueErrorCode::ProviderUnreachable,
                        "the provider could not be reached",
                    )),
                    elapsed_ms: 1,
                },
            ],
            listed_at: chrono::Utc::now(),
        };
        let text = describe_catalogue(&catalogue);
        assert!(text.contains("ollama:qwen3:8b"), "{text}");
        assert!(
            text.contains("openai (OpenAI): provider_unreachable"),
            "{text}"
        );
        assert!(text.contains("check the provider's base URL"), "{text}");
    }
}
