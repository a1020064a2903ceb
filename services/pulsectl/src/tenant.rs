//! `pulsectl tenant create | list | show | suspend | resume | delete | quota | user-create` over
//! the gateway's platform API, with a platform-operator token (`--token` / `PULSE_TOKEN`, minted
//! by `pulsectl admin platform-token`; the admin token of <state-dir> is a tenant token and is
//! refused there).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::gateway_client::{ApiError, GatewayClient};

#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Create a tenant with its first admin user; prints the admin password and admin token once.
    Create(TenantCreateArgs),
    /// List every tenant with its standing.
    List {
        /// Print the API's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Show one tenant with its standing and quotas (JSON).
    Show { id: String },
    /// Suspend a tenant: its tokens, agents and Patrol runs are refused with the reason.
    Suspend {
        id: String,
        /// Shown to the tenant's callers and agents.
        #[arg(long)]
        reason: String,
    },
    /// Lift a suspension.
    Resume { id: String },
    /// Erase a tenant: every row in every tenant table and its stream messages. Irreversible.
    Delete {
        id: String,
        /// Required: confirms the erasure.
        #[arg(long)]
        yes: bool,
    },
    /// Show or replace a tenant's quotas.
    Quota(TenantQuotaArgs),
    /// Create a user in a tenant; prints the generated password once.
    UserCreate {
        id: String,
        username: String,
        #[arg(long, default_value = "operator", value_parser = ["admin", "operator", "viewer"])]
        role: String,
    },
    /// List a tenant's users (JSON).
    Users { id: String },
}

/// Quota flags: each sets one limit; `none` clears it.
#[derive(Debug, Clone, Default, Args)]
pub struct QuotaFlags {
    /// Patrol runs accepted per rolling hour.
    #[arg(long, value_name = "N|none")]
    pub patrol_runs_per_hour: Option<String>,
    /// Model tokens per UTC day.
    #[arg(long, value_name = "N|none")]
    pub tokens_per_day: Option<String>,
    /// Model spend per UTC day in US dollars (e.g. 2.50).
    #[arg(long, value_name = "USD|none")]
    pub usd_per_day: Option<String>,
    /// Registered agents.
    #[arg(long, value_name = "N|none")]
    pub agents: Option<String>,
    /// Inventory resources.
    #[arg(long, value_name = "N|none")]
    pub resources: Option<String>,
    /// Open findings.
    #[arg(long, value_name = "N|none")]
    pub findings: Option<String>,
    /// API requests per second (per gateway replica).
    #[arg(long, value_name = "N|none")]
    pub api_requests_per_sec: Option<String>,
}

#[derive(Debug, Args)]
pub struct TenantCreateArgs {
    /// The tenant id: lowercase letters, digits, `-` and `_` (at most 63).
    pub id: String,
    /// The organization's display name.
    #[arg(long)]
    pub name: String,
    /// The first admin user's name.
    #[arg(long, default_value = "admin")]
    pub admin_username: String,
    #[command(flatten)]
    pub quotas: QuotaFlags,
    /// Print the API's JSON answer (with the secrets) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TenantQuotaArgs {
    pub id: String,
    /// Replace the quotas with the flags given (others keep their value); without flags, show.
    #[command(flatten)]
    pub quotas: QuotaFlags,
}

fn invalid(message: String) -> ApiError {
    ApiError::Api {
        status: 0,
        code: "invalid_argument".to_owned(),
        message,
    }
}

/// One flag's value: a whole number, or `none` (null: no quota).
fn whole(flag: &str, raw: &str) -> Result<Value, ApiError> {
    if raw.eq_ignore_ascii_case("none") {
        return Ok(Value::Null);
    }
    raw.trim().parse::<u64>().map(Value::from).map_err(|_| {
        invalid(format!(
            "--{flag}: expected a whole number or none, got '{raw}'"
        ))
    })
}

/// Dollars to whole micro-dollars, exactly (at most six decimals).
fn micros(raw: &str) -> Result<Value, ApiError> {
    if raw.eq_ignore_ascii_case("none") {
        return Ok(Value::Null);
    }
    let bad = || {
        invalid(format!(
            "--usd-per-day: expected dollars like 2.50 or none, got '{raw}'"
        ))
    };
    let (whole_part, fraction) = raw.trim().split_once('.').unwrap_or((raw.trim(), ""));
    if fraction.len() > 6 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let dollars: u64 = whole_part.parse().map_err(|_| bad())?;
    let fraction: u64 = format!("{fraction:0<6}").parse().map_err(|_| bad())?;
    dollars
        .checked_mul(1_000_000)
        .and_then(|m| m.checked_add(fraction))
        .map(Value::from)
        .ok_or_else(bad)
}

/// The quota fields the flags set, over `base`.
fn apply_flags(
    base: &mut serde_json::Map<String, Value>,
    flags: &QuotaFlags,
) -> Result<bool, ApiError> {
    let mut changed = false;
    let whole_flags = [
        ("patrol_runs_per_hour", &flags.patrol_runs_per_hour),
        ("tokens_per_day", &flags.tokens_per_day),
        ("agents", &flags.agents),
        ("resources", &flags.resources),
        ("findings", &flags.findings),
        ("api_requests_per_sec", &flags.api_requests_per_sec),
    ];
    for (field, value) in whole_flags {
        if let Some(raw) = value {
            base.insert(field.to_owned(), whole(&field.replace('_', "-"), raw)?);
            changed = true;
        }
    }
    if let Some(raw) = &flags.usd_per_day {
        base.insert("usd_micros_per_day".to_owned(), micros(raw)?);
        changed = true;
    }
    Ok(changed)
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

fn standing_text(tenant: &Value) -> String {
    match tenant["standing"]["state"].as_str() {
        Some("suspended") => format!(
            "suspended ({})",
            tenant["standing"]["reason"].as_str().unwrap_or_default()
        ),
        Some(state) => state.to_owned(),
        None => "?".to_owned(),
    }
}

pub async fn run(client: &GatewayClient, command: TenantCommand) -> Result<(), ApiError> {
    match command {
        TenantCommand::Create(args) => {
            let mut quotas = serde_json::Map::new();
            let with_quotas = apply_flags(&mut quotas, &args.quotas)?;
            let mut body = json!({
                "id": args.id,
                "name": args.name,
                "admin_username": args.admin_username,
            });
            if with_quotas {
                body["quotas"] = Value::Object(quotas);
            }
            let created: Value = client
                .json(Method::POST, &["api", "platform", "tenants"], Some(&body))
                .await?;
            if args.json {
                print_json(&created);
                return Ok(());
            }
            eprintln!(
                "created tenant '{}' ({}) with admin user '{}'",
                created["tenant"]["id"].as_str().unwrap_or_default(),
                created["tenant"]["name"].as_str().unwrap_or_default(),
                created["admin"]["username"].as_str().unwrap_or_default(),
            );
            println!(
                "admin_password: {}",
                created["admin"]["password"].as_str().unwrap_or_default()
            );
            println!(
                "admin_token: {}",
                created["admin_token"]["token"].as_str().unwrap_or_default()
            );
            eprintln!("warning: the password and the token are shown only once");
        }
        TenantCommand::List { json } => {
            let listed: Value = client
                .json(Method::GET, &["api", "platform", "tenants"], None)
                .await?;
            if json {
                print_json(&listed);
                return Ok(());
            }
            for tenant in listed["tenants"].as_array().into_iter().flatten() {
                println!(
                    "{}\t{}\t{}",
                    tenant["id"].as_str().unwrap_or_default(),
                    standing_text(tenant),
                    tenant["name"].as_str().unwrap_or_default(),
                );
            }
        }
        TenantCommand::Show { id } => {
            let shown: Value = client
                .json(Method::GET, &["api", "platform", "tenants", &id], None)
                .await?;
            print_json(&shown);
        }
        TenantCommand::Suspend { id, reason } => {
            let tenant: Value = client
                .json(
                    Method::POST,
                    &["api", "platform", "tenants", &id, "suspend"],
                    Some(&json!({"reason": reason})),
                )
                .await?;
            eprintln!("tenant '{id}' is {}", standing_text(&tenant));
        }
        TenantCommand::Resume { id } => {
            let tenant: Value = client
                .json(
                    Method::POST,
                    &["api", "platform", "tenants", &id, "resume"],
                    None,
                )
                .await?;
            eprintln!("tenant '{id}' is {}", standing_text(&tenant));
        }
        TenantCommand::Delete { id, yes } => {
            if !yes {
                return Err(invalid(format!(
                    "deleting tenant '{id}' erases all its data; pass --yes to confirm"
                )));
            }
            let erased: Value = client
                .json(Method::DELETE, &["api", "platform", "tenants", &id], None)
                .await?;
            let rows: u64 = erased["rows"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, n)| n.as_u64())
                .sum();
            eprintln!(
                "deleted tenant '{id}': {rows} row(s), {} stream message(s)",
                erased["stream_messages"].as_u64().unwrap_or(0)
            );
        }
        TenantCommand::Quota(args) => {
            let path = ["api", "platform", "tenants", args.id.as_str(), "quotas"];
            let current: Value = client.json(Method::GET, &path, None).await?;
            let mut quotas = current.as_object().cloned().unwrap_or_default();
            if apply_flags(&mut quotas, &args.quotas)? {
                let set: Value = client
                    .json(Method::PUT, &path, Some(&Value::Object(quotas)))
                    .await?;
                print_json(&set);
            } else {
                print_json(&current);
            }
        }
        TenantCommand::UserCreate { id, username, role } => {
            let created: Value = client
                .json(
                    Method::POST,
                    &["api", "platform", "tenants", &id, "users"],
                    Some(&json!({"username": username, "role": role})),
                )
                .await?;
            eprintln!(
                "created {role} user '{}' in tenant '{id}'",
                created["user"]["username"].as_str().unwrap_or_default()
            );
            println!("{}", created["password"].as_str().unwrap_or_default());
        }
        TenantCommand::Users { id } => {
            let users: Value = client
                .json(
                    Method::GET,
                    &["api", "platform", "tenants", &id, "users"],
                    None,
                )
                .await?;
            print_json(&users);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_become_exact_micros_and_none_clears() {
        assert_eq!(micros("2.5").unwrap(), json!(2_500_000));
        assert_eq!(micros("0.000001").unwrap(), json!(1));
        assert_eq!(micros("3").unwrap(), json!(3_000_000));
        assert_eq!(micros("none").unwrap(), Value::Null);
        assert!(micros("1.0000001").is_err());
        assert!(micros("-1").is_err());
        assert!(whole("agents", "x").is_err());
        let mut base = serde_json::Map::new();
        let flags = QuotaFlags {
            agents: Some("3".to_owned()),
            findings: Some("none".to_owned()),
            ..QuotaFlags::default()
        };
        assert!(apply_flags(&mut base, &flags).unwrap());
        assert_eq!(Value::Object(base), json!({"agents": 3, "findings": null}));
    }
}
