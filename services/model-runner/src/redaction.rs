//! The provider-bound redactor of one model call, built from its route connection: a local
//! model server stays inside the trust boundary, every other route class leaves it, and the
//! route's own API key is a configured secret. What counts as a secret is owned by
//! `pulse-redaction`.

use pulse_redaction::{Destination, MIN_CONFIGURED_LEN, RedactionConfig, Redactor};

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
