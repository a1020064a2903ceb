//! `pulsectl token create | list | revoke` over the gateway's token API.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use pulse_api::tokens::{ApiToken, CreateTokenRequest, CreatedToken, RequestedScope};
use pulse_domain::Scope;

use crate::cli::TokenCreateArgs;
use crate::gateway_client::{ApiError, GatewayClient};
use crate::text::{self, show_time};

/// The request body of `POST /api/tokens`.
pub fn create_body(args: &TokenCreateArgs, now: DateTime<Utc>) -> CreateTokenRequest {
    CreateTokenRequest {
        name: args.name.clone(),
        scopes: args
            .scopes
            .iter()
            .map(|scope| RequestedScope::Tenant(*scope))
            .collect(),
        expires_at: args
            .expires_in
            .and_then(|lifetime| expiry(now, lifetime))
            .map(|at| at.trunc_subsecs(0)),
    }
}

fn expiry(now: DateTime<Utc>, lifetime: Duration) -> Option<DateTime<Utc>> {
    now.checked_add_signed(chrono::TimeDelta::from_std(lifetime).ok()?)
}

pub async fn create(client: &GatewayClient, args: &TokenCreateArgs) -> Result<(), ApiError> {
    let body = create_body(args, Utc::now());
    let created = client.api().create_token(&body).await?;
    // Details go to stderr and the bare secret to stdout, so `$(pulsectl token create ...)`
    // captures just the secret while the warning still reaches the terminal.
    eprintln!("{}", describe_created(&created));
    println!("{}", created.token);
    eprintln!("warning: this secret is shown only once and cannot be shown again; store it now");
    Ok(())
}

pub fn describe_created(created: &CreatedToken) -> String {
    format!(
        "created token '{}' (id {})\n  scopes   {}\n  created  {}\n  expires  {}",
        created.name,
        created.id,
        scope_list(&created.scopes, ", "),
        show_time(Some(created.created_at), "-"),
        show_time(created.expires_at, "never"),
    )
}

pub async fn list(client: &GatewayClient) -> Result<(), ApiError> {
    let list = client.api().tokens().await?;
    if list.tokens.is_empty() {
        println!("no tokens");
    } else {
        print!("{}", render_table(&list.tokens, Utc::now()));
    }
    Ok(())
}

pub async fn revoke(client: &GatewayClient, id: &str) -> Result<(), ApiError> {
    client.api().revoke_token(id).await?;
    println!("revoked token {id}");
    Ok(())
}

/// The scopes' names, `separator` apart.
fn scope_list<'a>(scopes: impl IntoIterator<Item = &'a Scope>, separator: &str) -> String {
    scopes
        .into_iter()
        .map(|scope| scope.as_str())
        .collect::<Vec<_>>()
        .join(separator)
}

pub fn status(token: &ApiToken, now: DateTime<Utc>) -> &'static str {
    if token.revoked_at.is_some() {
        "revoked"
    } else if token.expires_at.is_some_and(|expires| expires <= now) {
        "expired"
    } else {
        "active"
    }
}

/// A plain-text table, one token per line, columns padded to their widest cell.
pub fn render_table(tokens: &[ApiToken], now: DateTime<Utc>) -> String {
    // Scopes last: the list can be long and would push every other column aside.
    let header = [
        "ID",
        "NAME",
        "STATUS",
        "CREATED",
        "EXPIRES",
        "LAST USED",
        "SCOPES",
    ]
    .map(str::to_owned);
    let mut rows = vec![header.to_vec()];
    for token in tokens {
        rows.push(vec![
            token.id.to_string(),
            token.name.clone(),
            status(token, now).to_owned(),
            show_time(Some(token.created_at), "-"),
            show_time(token.expires_at, "never"),
            show_time(token.last_used_at, "never"),
            scope_list(&token.scopes, ","),
        ]);
    }
    text::render_table(&rows)
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::text::parse_time;

    fn now() -> DateTime<Utc> {
        parse_time("2026-11-29T12:00:00Z").unwrap()
    }

    fn summary(id: u128, expires: Option<&str>, revoked: Option<&str>) -> ApiToken {
        ApiToken {
            id: Uuid::from_u128(id),
            name: format!("name-{id}"),
            scopes: [Scope::MonitoringRead, Scope::AiChat].into(),
            created_by: None,
            created_at: parse_time("2026-11-01T08:30:00Z").unwrap(),
            expires_at: expires.and_then(parse_time),
            revoked_at: revoked.and_then(parse_time),
            last_used_at: None,
        }
    }

    #[test]
    fn create_body_carries_scopes_and_an_absolute_expiry() {
        let args = TokenCreateArgs {
            name: "ci".into(),
            scopes: vec![Scope::MonitoringRead, Scope::Admin],
            expires_in: Some(Duration::from_secs(30 * 86_400)),
        };
        let body = |args: &TokenCreateArgs| serde_json::to_value(create_body(args, now())).unwrap();
        assert_eq!(
            body(&args),
            serde_json::json!({
                "name": "ci",
                "scopes": ["monitoring:read", "admin"],
                "expires_at": "2026-12-29T12:00:00Z",
            })
        );
        let forever = TokenCreateArgs {
            expires_in: None,
            ..args
        };
        assert_eq!(body(&forever)["expires_at"], serde_json::Value::Null);
    }

    #[test]
    fn status_reflects_revocation_and_expiry() {
        assert_eq!(status(&summary(1, None, None), now()), "active");
        assert_eq!(
            status(&summary(2, Some("2026-11-29T11:59:59Z"), None), now()),
            "expired"
        );
        assert_eq!(
            status(&summary(3, Some("2027-01-01T00:00:00Z"), None), now()),
            "active"
        );
        assert_eq!(
            status(&summary(4, None, Some("2026-11-02T00:00:00Z")), now()),
            "revoked"
        );
    }

    #[test]
    fn table_aligns_columns() {
        let table = render_table(
            &[
                summary(1, None, None),
                summary(22, Some("2026-11-29T11:00:00Z"), None),
            ],
            now(),
        );
        let expected = "\
ID                                    NAME     STATUS   CREATED              EXPIRES              LAST USED  SCOPES
00000000-0000-0000-0000-000000000001  name-1   active   2026-11-01 08:30:00  never                never      monitoring:read,ai:chat
00000000-0000-0000-0000-000000000016  name-22  expired  2026-11-01 08:30:00  2026-11-29 11:00:00  never      monitoring:read,ai:chat
";
        assert_eq!(table, expected);
    }

    #[test]
    fn created_token_description_has_no_secret() {
        let created = CreatedToken {
            id: Uuid::from_u128(1),
            name: "ci".into(),
            scopes: [Scope::Admin].into(),
            token: "pulse_secret_value".into(),
            created_at: now(),
            expires_at: None,
        };
        let text = describe_created(&created);
        assert!(!text.contains("pulse_secret_value"));
        assert!(text.contains("expires  never"), "{text}");
    }
}
