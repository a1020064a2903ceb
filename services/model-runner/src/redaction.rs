//! The provider-bound redactor of one model call, built from its route connection: a local
//! model server stays inside the trust boundary, every other route class leaves it, and the
//! route's own API key is a configured secret. What counts as a secret is owned by
//! `pulse-redaction`.

use pulse_domain::resource::truncate_chars;
use pulse_redaction::{
    Destination, MIN_CONFIGURED_LEN, RedactionConfig, RedactionReport, Redactor,
};

use crate::preflight::RouteConnection;
use crate::registry::RouteClass;

pub fn redactor(connection: &RouteConnection, class: RouteClass) -> Result<Redactor, String> {
    let route = connection.route.to_string();
    let destination = match class {
        RouteClass::LocalModelServer => Destination::local(route),
        RouteClass::MeteredApi | RouteClass::CodingPlanAllowance => Destination::external(route),
    };
    let secrets = connection
        .api_key
        .iter()
        .filter(|k| k.chars().count() >= MIN_CONFIGURED_LEN)
        .cloned()
        .collect();
    Redactor::new(
        destination,
        &RedactionConfig {
            secrets,
            local_only: Vec::new(),
        },
    )
    .map_err(|e| e.to_string())
}

/// Characters of the display summary kept on a run.
pub const MAX_SUMMARY_CHARS: usize = 4_000;

/// The model's answer made safe to show and store: sanitized like provider-bound text and
/// bounded.
pub fn display_summary(redactor: &Redactor, text: &str) -> String {
    let destination = redactor.destination();
    let mut scratch = RedactionReport {
        route: destination.route.clone(),
        boundary: destination.boundary,
        local_only_withheld: false,
        counts: Default::default(),
        total: 0,
    };
    let mut summary: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
        .collect();
    redactor.sanitize_string(&mut summary, &mut scratch);
    truncate_chars(&summary, MAX_SUMMARY_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_sanitized_and_bounded() {
        let connection = RouteConnection::new(
            pulse_agent_loop::route::Route::parse("openai:gpt-4o-mini").unwrap(),
        )
        .with_api_key("sk-canary-0123456789abcdef");
        let redactor = crate::redaction::redactor(&connection, RouteClass::MeteredApi).unwrap();
        let text = format!(
            "all fine \u{1b}[31m; key sk-canary-0123456789abcdef {}",
            "x".repeat(MAX_SUMMARY_CHARS)
        );
        let summary = display_summary(&redactor, &text);
        assert!(!summary.contains("sk-canary-0123456789abcdef"), "{summary}");
        assert!(!summary.contains('\u{1b}'));
        assert_eq!(summary.chars().count(), MAX_SUMMARY_CHARS);
    }
}
