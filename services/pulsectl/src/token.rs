//! `pulsectl token create | list | revoke` over the gateway's token API.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde::Deserialize;

use crate::cli::TokenCreateArgs;
use crate::gateway_client::{ApiError, GatewayClient};
use crate::text::{self, display_time, parse_time};

/// `POST /api/tokens` answer; `token` is the secret and is never shown again.
#[derive(Debug, Clone, Deserialize)]
pub struct CreatedToken {
    pub id: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub token: String,
    pub created_at: String,
    pub expires_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TokenSummary {
    pub id: String,
    pub name: String,
    pub scopes: Vec<String>,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    pub last_used_at: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TokenList {
    tokens: Vec<TokenSummary>,
}

/// The request body of `POST /api/tokens`.
pub fn create_body(args: &TokenCreateArgs, now: DateTime<Utc>) -> serde_json::Value {
    let mut body = serde_json::json!({
        "name": args.name,
        "scopes": args.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
    });
    if let Some(expires_at) = args.expires_in.and_then(|lifetime| expiry(now, lifetime)) {
        body["expires_at"] = serde_json::Value::String(
            expires_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        );
    }
    body
}

fn expiry(now: DateTime<Utc>, lifetime: Duration) -> Option<DateTime<Utc>> {
    now.checked_add_signed(chrono::TimeDelta::from_std(lifetime).ok()?)
}

pub async fn create(client: &GatewayClient, args: &TokenCreateArgs) -> Result<(), ApiError> {
    let body = create_body(args, Utc::now());
    let created: CreatedToken = client
        .json(Method::POST, &["api", "tokens"], Some(&body))
        .await?;
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
        created.scopes.join(", "),
        display_time(Some(&created.created_at), "-"),
        display_time(created.expires_at.as_deref(), "never"),
    )
}

pub async fn list(client: &GatewayClient) -> Result<(), ApiError> {
    let list: TokenList = client.json(Method::GET, &["api", "tokens"], None).await?;
    if list.tokens.is_empty() {
        println!("no tokens");
    } else {
        print!("{}", render_table(&list.tokens, Utc::now()));
    }
    Ok(())
}

pub async fn revoke(client: &GatewayClient, id: &str) -> Result<(), ApiError> {
    client
        .no_content(Method::DELETE, &["api", "tokens", id])
        .await?;
    println!("revoked token {id}");
    Ok(())
}

pub fn status(token: &TokenSummary, now: DateTime<Utc>) -> &'static str {
    if token.revoked_at.is_some() {
        "revoked"
    } else if token
        .expires_at
        .as_deref()
        .and_then(parse_time)
        .is_some_and(|expires| expires <= now)
    {
        "expired"
    } else {
        "active"
    }
}

/// A plain-text table, one token per line, columns padded to their widest cell.
pub fn render_table(tokens: &[TokenSummary], now: DateTime<Utc>) -> String {
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
            token.id.clone(),
            token.name.clone(),
            status(token, now).to_owned(),
            display_time(Some(&token.created_at), "-"),
            display_time(token.expires_at.as_deref(), "never"),
            display_time(token.last_used_at.as_deref(), "never"),
            token.scopes.join(","),
        ]);
    }
    text::render_table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulse_domain::Scope;

    fn now() -> DateTime<Utc> {
        parse_time("2026-11-29T12:00:00Z").unwrap()
    }

    fn summary(id: &str, expires: Option<&str>, revoked: Option<&str>) -> TokenSummary {
        TokenSummary {
            id: id.to_owned(),
            name: format!("name-{id}"),
            scopes: vec!["monitoring:read".into(), "ai:chat".into()],
            created_at: "2026-11-01T08:30:00Z".into(),
            expires_at: expires.map(str::to_owned),
            revoked_at: revoked.map(str::to_owned),
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
        assert_eq!(
            create_body(&args, now()),
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
        assert!(create_body(&forever, now()).get("expires_at").is_none());
    }

    #[test]
    fn status_reflects_revocation_and_expiry() {
        assert_eq!(status(&summary("a", None, None), now()), "active");
        assert_eq!(
            status(&summary("b", Some("2026-11-29T11:59:59Z"), None), now()),
            "expired"
        );
        assert_eq!(
            status(&summary("c", Some("2027-01-01T00:00:00Z"), None), now()),
            "active"
        );
        assert_eq!(
            status(&summary("d", None, Some("2026-11-02T00:00:00Z")), now()),
            "revoked"
        );
    }

    #[test]
    fn table_aligns_columns() {
        let table = render_table(
            &[
                summary("tok_1", None, None),
                summary("tok_22", Some("2026-11-29T11:00:00Z"), None),
            ],
            now(),
        );
        let expected = "\
ID      NAME         STATUS   CREATED              EXPIRES              LAST USED  SCOPES
tok_1   name-tok_1   active   2026-11-01 08:30:00  never                never      monitoring:read,ai:chat
tok_22  name-tok_22  expired  2026-11-01 08:30:00  2026-11-29 11:00:00  never      monitoring:read,ai:chat
";
        assert_eq!(table, expected);
    }

    #[test]
    fn created_token_description_has_no_secret() {
        let created = CreatedToken {
            id: "tok_1".into(),
            name: "ci".into(),
            scopes: vec!["admin".into()],
            token: "pulse_secret_value".into(),
            created_at: "2026-11-29T12:00:00Z".into(),
            expires_at: None,
        };
        let text = describe_created(&created);
        assert!(!text.contains("pulse_secret_value"));
        assert!(text.contains("expires  never"), "{text}");
    }
}
