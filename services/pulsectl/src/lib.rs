//! pulsectl: the operator CLI. `up` runs a local stack (seven services and a host agent) as
//! supervised child processes; `down` stops it; `token` manages API tokens and `patrol` requests
//! and reads Patrol runs over the gateway; `findings` lists and triages Patrol findings;
//! `models` lists each provider's models and tests one; `connections` adds, tests, lists and
//! removes Proxmox VE and PBS connections;
//! `approvals` lists and decides actions waiting for a human; `audit verify` checks the audit
//! chain; `admin recover-token` issues a new admin token through the database when the token
//! file is lost.

pub mod admin;
pub mod agent_token;
pub mod approvals;
pub mod audit;
pub mod binaries;
pub mod child;
pub mod cli;
pub mod connections;
pub mod demo;
pub mod deps;
pub mod detach;
pub mod down;
pub mod duration;
pub mod findings;
pub mod gateway_client;
pub mod health;
pub mod models;
pub mod patrol;
pub mod pidfile;
pub mod preflight;
pub mod service;
pub mod signals;
pub mod stack_config;
pub mod supervisor;
pub mod tenant;
pub mod text;
pub mod token;
pub mod up;

use pulse_api::actions::DecisionOutcome;

use cli::{
    AdminCommand, ApprovalsCommand, AuditCommand, Cli, Command, ConnectionsCommand,
    FindingsCommand, ModelsCommand, OnOff, PatrolCommand, TokenCommand, UserCommand,
};
use gateway_client::{ApiError, GatewayClient, resolve_token};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Up(#[from] up::UpError),
    #[error(transparent)]
    Down(#[from] down::DownError),
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A Patrol command's error; its exit code tells refused input from unavailability.
    #[error(transparent)]
    Patrol(ApiError),
    /// A findings command's error; exit codes as for Patrol commands.
    #[error(transparent)]
    Findings(ApiError),
    /// An approvals command's error; exit codes as for Patrol commands.
    #[error(transparent)]
    Approvals(ApiError),
    /// `audit verify`: 1 for a broken chain.
    #[error(transparent)]
    Audit(audit::AuditError),
    /// An `admin` command's error, prefixed with its stable code.
    #[error("{code}: {err}", code = .0.code(), err = .0)]
    Admin(admin::AdminError),
}

impl Error {
    /// 2 when the API refused a request, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Api(err) => err.exit_code(),
            Error::Patrol(err) | Error::Findings(err) | Error::Approvals(err) => {
                patrol::exit_code(err)
            }
            Error::Audit(err) => err.exit_code(),
            Error::Admin(err) => err.exit_code(),
            Error::Up(err) => err.exit_code(),
            Error::Down(_) => 1,
        }
    }
}

/// Runs one command. Must run on a current-thread runtime on the main thread: children are
/// tied to the thread that spawns them (see `child::set_exec_hooks`).
pub async fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Up(args) => up::run(&cli.state_dir, &args).await?,
        Command::Down(args) => down::run(&cli.state_dir, args.timeout).await?,
        Command::Token(command) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            match command {
                TokenCommand::Create(args) => token::create(&client, &args).await?,
                TokenCommand::List => token::list(&client).await?,
                TokenCommand::Revoke { id } => token::revoke(&client, &id).await?,
            }
        }
        Command::Patrol(command) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            let result = match command {
                PatrolCommand::Run(args) => patrol::run(&client, &args).await,
                PatrolCommand::Status { json } => patrol::status(&client, json).await,
                PatrolCommand::Runs(args) => patrol::runs(&client, &args).await,
            };
            result.map_err(Error::Patrol)?;
        }
        Command::Models(command) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            let result = match command {
                ModelsCommand::List { json } => models::list(&client, json).await,
                ModelsCommand::Test {
                    provider,
                    model,
                    json,
                } => models::test(&client, &provider, &model, json).await,
            };
            result.map_err(Error::Patrol)?;
        }
        Command::Connections(command) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            let result = match command {
                ConnectionsCommand::Add(args) => connections::add(&client, &args).await,
                ConnectionsCommand::Test(args) => connections::test(&client, &args).await,
                ConnectionsCommand::List { json } => connections::list(&client, json).await,
                ConnectionsCommand::Check { id, json } => {
                    connections::check(&client, &id, json).await
                }
                ConnectionsCommand::GuestActions { id, state, json } => {
                    connections::guest_actions(&client, &id, state == OnOff::On, json).await
                }
                ConnectionsCommand::Remove { id } => connections::remove(&client, &id).await,
            };
            result.map_err(Error::Patrol)?;
        }
        Command::Findings(command) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            let result = match command {
                FindingsCommand::List(args) => findings::list(&client, &args).await,
                FindingsCommand::Show { id, json } => findings::show(&client, &id, json).await,
                FindingsCommand::Ack { id, json } => findings::ack(&client, &id, json).await,
                FindingsCommand::Dismiss(args) => findings::dismiss(&client, &args).await,
                FindingsCommand::Suppress(args) => findings::suppress(&client, &args).await,
            };
            result.map_err(Error::Findings)?;
        }
        Command::Approvals(command) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            let result = match command {
                ApprovalsCommand::List(args) => approvals::list(&client, &args).await,
                ApprovalsCommand::Approve(args) => {
                    approvals::decide(&client, DecisionOutcome::Approved, &args).await
                }
                ApprovalsCommand::Reject(args) => {
                    approvals::decide(&client, DecisionOutcome::Rejected, &args).await
                }
            };
            result.map_err(Error::Approvals)?;
        }
        Command::Audit(AuditCommand::Verify { json }) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            audit::verify(&client, json).await.map_err(Error::Audit)?;
        }
        Command::Admin(AdminCommand::Migrate) => {
            admin::migrate(&cli.state_dir).await.map_err(Error::Admin)?;
        }
        Command::Admin(AdminCommand::RecoverToken(args)) => {
            admin::recover_token(&cli.state_dir, &args)
                .await
                .map_err(Error::Admin)?;
        }
        Command::Admin(AdminCommand::PlatformToken(args)) => {
            admin::platform_token(&cli.state_dir, &args)
                .await
                .map_err(Error::Admin)?;
        }
        Command::Tenant(command) => {
            let token = resolve_token(cli.token.as_deref(), &cli.state_dir)?;
            let client = GatewayClient::new(&cli.gateway, token)?;
            tenant::run(&client, command).await?;
        }
        Command::User(UserCommand::Create(args)) => {
            admin::create_user(&cli.state_dir, &args)
                .await
                .map_err(Error::Admin)?;
        }
    }
    Ok(())
}
