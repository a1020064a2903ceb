//! `pulsectl tenant create | list | show | suspend | resume | delete | quota | user-create` over
//! the gateway's platform API, with a platform-operator token (`--token` / `PULSE_TOKEN`, minted
//! by `pulsectl admin platform-token`; the admin token of <state-dir> is a tenant token and is
//! refused there).

use std::str::FromStr;

use clap::{Args, Subcommand};
use pulse_api::platform::{CreateTenantRequest, CreateUserRequest, Standing, SuspendRequest};
use pulse_domain::tenant::TenantQuotas;

use crate::gateway_client::{ApiError, GatewayClient, print_json};

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

/// One flag's value: a whole number, or `none` (no quota).
fn whole<T: FromStr>(flag: &str, raw: &str) -> Result<Option<T>, ApiError> {
    if raw.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    raw.trim().parse::<T>().map(Some).map_err(|_| {
        invalid(format!(
            "--{flag}: expected a whole number or none, got '{raw}'"
        ))
    })
}

/// Dollars to whole micro-dollars, exactly (at most six decimals).
fn micros(raw: &str) -> Result<Option<u64>, ApiError> {
    if raw.eq_ignore_ascii_case("none") {
        return Ok(None);
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
        .map(Some)
        .ok_or_else(bad)
}

/// Sets `field` to the value of `flag` when it was given; whether it was.
fn set<T: FromStr>(
    field: &mut Option<T>,
    flag: &str,
    raw: &Option<String>,
) -> Result<bool, ApiError> {
    let Some(raw) = raw else {
        return Ok(false);
    };
    *field = whole(flag, raw)?;
    Ok(true)
}

/// The quotas the flags set, over `base`; whether any flag was given.
fn apply_flags(base: &mut TenantQuotas, flags: &QuotaFlags) -> Result<bool, ApiError> {
    let mut changed = false;
    changed |= set(
        &mut base.patrol_runs_per_hour,
        "patrol-runs-per-hour",
        &flags.patrol_runs_per_hour,
    )?;
    changed |= set(
        &mut base.tokens_per_day,
        "tokens-per-day",
        &flags.tokens_per_day,
    )?;
    changed |= set(&mut base.agents, "agents", &flags.agents)?;
    changed |= set(&mut base.resources, "resources", &flags.resources)?;
    changed |= set(&mut base.findings, "findings", &flags.findings)?;
    changed |= set(
        &mut base.api_requests_per_sec,
        "api-requests-per-sec",
        &flags.api_requests_per_sec,
    )?;
    if let Some(raw) = &flags.usd_per_day {
        base.usd_micros_per_day = micros(raw)?;
        changed = true;
    }
    Ok(changed)
}

fn standing_text(standing: &Standing) -> String {
    match standing {
        Standing::Suspended { reason, .. } => format!("suspended ({reason})"),
        Standing::Active => "active".to_owned(),
    }
}

pub async fn run(client: &GatewayClient, command: TenantCommand) -> Result<(), ApiError> {
    let api = client.api();
    match command {
        TenantCommand::Create(args) => {
            let mut quotas = TenantQuotas::default();
            let with_quotas = apply_flags(&mut quotas, &args.quotas)?;
            let request = CreateTenantRequest {
                id: args.id,
                name: args.name,
                admin_username: Some(args.admin_username),
                quotas: with_quotas.then_some(quotas),
            };
            let created = api.create_tenant(&request).await?;
            if args.json {
                print_json(&created);
                return Ok(());
            }
            eprintln!(
                "created tenant '{}' ({}) with admin user '{}'",
                created.tenant.id, created.tenant.name, created.admin.username,
            );
            println!("admin_password: {}", created.admin.password);
            println!("admin_token: {}", created.admin_token.token);
            eprintln!("warning: the password and the token are shown only once");
        }
        TenantCommand::List { json } => {
            let listed = api.tenants().await?;
            if json {
                print_json(&listed);
                return Ok(());
            }
            for tenant in &listed.tenants {
                println!(
                    "{}\t{}\t{}",
                    tenant.id,
                    standing_text(&tenant.standing),
                    tenant.name,
                );
            }
        }
        TenantCommand::Show { id } => print_json(&api.tenant(&id).await?),
        TenantCommand::Suspend { id, reason } => {
            let tenant = api.suspend_tenant(&id, &SuspendRequest { reason }).await?;
            eprintln!("tenant '{id}' is {}", standing_text(&tenant.standing));
        }
        TenantCommand::Resume { id } => {
            let tenant = api.resume_tenant(&id).await?;
            eprintln!("tenant '{id}' is {}", standing_text(&tenant.standing));
        }
        TenantCommand::Delete { id, yes } => {
            if !yes {
                return Err(invalid(format!(
                    "deleting tenant '{id}' erases all its data; pass --yes to confirm"
                )));
            }
            let erased = api.erase_tenant(&id).await?;
            let rows: u64 = erased.rows.values().sum();
            eprintln!(
                "deleted tenant '{id}': {rows} row(s), {} stream message(s)",
                erased.stream_messages
            );
        }
        TenantCommand::Quota(args) => {
            let mut quotas = api.tenant_quotas(&args.id).await?;
            if apply_flags(&mut quotas, &args.quotas)? {
                print_json(&api.set_tenant_quotas(&args.id, &quotas).await?);
            } else {
                print_json(&quotas);
            }
        }
        TenantCommand::UserCreate { id, username, role } => {
            let request = CreateUserRequest {
                username,
                role: Some(role.clone()),
            };
            let created = api.create_tenant_user(&id, &request).await?;
            eprintln!(
                "created {role} user '{}' in tenant '{id}'",
                created.user.username
            );
            println!("{}", created.password);
        }
        TenantCommand::Users { id } => print_json(&api.tenant_users(&id).await?),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_become_exact_micros_and_none_clears() {
        assert_eq!(micros("2.5").unwrap(), Some(2_500_000));
        assert_eq!(micros("0.000001").unwrap(), Some(1));
        assert_eq!(micros("3").unwrap(), Some(3_000_000));
        assert_eq!(micros("none").unwrap(), None);
        assert!(micros("1.0000001").is_err());
        assert!(micros("-1").is_err());
        assert!(whole::<u32>("agents", "x").is_err());
        let mut base = TenantQuotas {
            findings: Some(10),
            resources: Some(5),
            ..TenantQuotas::default()
        };
        let flags = QuotaFlags {
            agents: Some("3".to_owned()),
            findings: Some("none".to_owned()),
            ..QuotaFlags::default()
        };
        assert!(apply_flags(&mut base, &flags).unwrap());
        assert_eq!(
            base,
            TenantQuotas {
                agents: Some(3),
                resources: Some(5),
                ..TenantQuotas::default()
            }
        );
        assert!(!apply_flags(&mut base, &QuotaFlags::default()).unwrap());
    }
}
