//! Command-line surface.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use pulse_domain::Scope;
use pulse_domain::resource::ResourceType;

use crate::duration::parse_duration;

pub const ENV_GATEWAY_URL: &str = "PULSE_GATEWAY_URL";
pub const ENV_TOKEN: &str = "PULSE_TOKEN";
pub const ENV_STATE_DIR: &str = "PULSE_STATE_DIR";
pub const ENV_BIN_DIR: &str = "PULSE_BIN_DIR";
pub const ENV_PATROL_SCHEDULER_HEALTH: &str = "PULSE_PATROL_SCHEDULER_HEALTH_LISTEN";
pub const ENV_MODEL_RUNNER_HEALTH: &str = "PULSE_MODEL_RUNNER_HEALTH_LISTEN";
pub const ENV_ACTION_BROKER_HEALTH: &str = "PULSE_ACTION_BROKER_HEALTH_LISTEN";
pub const ENV_VERIFIER_HEALTH: &str = "PULSE_VERIFIER_HEALTH_LISTEN";
pub const ENV_CONNECTOR_HEALTH: &str = "PULSE_CONNECTOR_HEALTH_LISTEN";
pub const ENV_AGENT_HEALTH: &str = "PULSE_AGENT_HEALTH_LISTEN";
pub const ENV_DEMO_AGENT_HEALTH: &str = "PULSE_DEMO_AGENT_HEALTH_LISTEN";
pub const ENV_PROVIDER_SIM_LISTEN: &str = "PULSE_PROVIDER_SIM_LISTEN";

/// Variables read by pulsectl alone. They are removed from the services' environment: the
/// services reject `PULSE_*` names their configuration does not know.
pub const PULSECTL_ONLY_ENV: [&str; 11] = [
    ENV_GATEWAY_URL,
    ENV_TOKEN,
    ENV_BIN_DIR,
    ENV_PATROL_SCHEDULER_HEALTH,
    ENV_MODEL_RUNNER_HEALTH,
    ENV_ACTION_BROKER_HEALTH,
    ENV_VERIFIER_HEALTH,
    ENV_CONNECTOR_HEALTH,
    ENV_AGENT_HEALTH,
    ENV_DEMO_AGENT_HEALTH,
    ENV_PROVIDER_SIM_LISTEN,
];

#[derive(Debug, Parser)]
#[command(
    name = "pulsectl",
    version,
    about = "Operate Pulse Intelligence: run a local stack, manage API tokens, run Patrol"
)]
pub struct Cli {
    /// Gateway base URL for API commands.
    #[arg(
        long,
        global = true,
        env = ENV_GATEWAY_URL,
        default_value = "http://127.0.0.1:7655",
        value_name = "URL"
    )]
    pub gateway: String,

    /// API token for API commands. Default: the admin token in <state-dir>/admin-token.
    #[arg(long, global = true, env = ENV_TOKEN, hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,

    /// Local state: logs, pid file, admin token, private dependencies.
    #[arg(
        long,
        global = true,
        env = ENV_STATE_DIR,
        default_value = ".pulse",
        value_name = "DIR"
    )]
    pub state_dir: PathBuf,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the whole stack (seven services and a host agent) on this machine.
    Up(UpArgs),
    /// Stop the stack `pulsectl up` runs for this state directory.
    Down(DownArgs),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Request Patrol runs and read the Patrol status and run history.
    #[command(subcommand)]
    Patrol(PatrolCommand),
    /// List the models of each provider the tenant uses; test a provider and model.
    #[command(subcommand)]
    Models(ModelsCommand),
    /// List, show and triage Patrol findings: acknowledge, dismiss, suppress.
    #[command(subcommand)]
    Findings(FindingsCommand),
    /// List actions waiting for a human decision; approve or reject them.
    #[command(subcommand)]
    Approvals(ApprovalsCommand),
    /// Check the tenant's hash-chained audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Proxmox VE clusters Pulse reads: add (checked first), test,
    /// list, check again, remove.
    #[command(subcommand)]
    Connections(ConnectionsCommand),
    /// Administration that needs the stack's database rather than an API token.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Web UI users (needs the stack's database).
    #[command(subcommand)]
    User(UserCommand),
    /// Tenants of a hosted installation, over the platform API (needs a platform token:
    /// `pulsectl admin platform-token`, then --token or PULSE_TOKEN).
    #[command(subcommand)]
    Tenant(crate::tenant::TenantCommand),
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user who signs in to the web UI.
    ///
    /// Connects to the stack's database (PULSE_DATABASE_URL, resolved as `pulsectl up` does),
    /// creates the user in the tenant with an argon2id password hash, records `user.created` in
    /// the tenant's audit log and prints the password once on stdout. Without
    /// --password-stdin a random 24-character password is generated. Exits 2 when the tenant
    /// does not exist, the user exists or the password is refused; 1 when the database is
    /// unavailable.
    Create(UserCreateArgs),
}

#[derive(Debug, Args)]
pub struct UserCreateArgs {
    /// The name the user signs in with.
    pub username: String,

    /// admin (everything), operator (everything but administration) or viewer (read only).
    #[arg(long, default_value = "operator", value_parser = ["admin", "operator", "viewer"])]
    pub role: String,

    /// The tenant (organization) the user belongs to.
    #[arg(long, default_value = "default", value_name = "ID")]
    pub tenant: String,

    /// Read the password from the first line of standard input instead of generating one
    /// (at least 12 characters).
    #[arg(long)]
    pub password_stdin: bool,
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Issue a new admin token when the admin token file is lost (needs the stack's database).
    ///
    /// Connects to the stack's database (PULSE_DATABASE_URL, resolved as `pulsectl up` does),
    /// issues a token with every scope for the tenant's existing admin user (the bootstrap user
    /// `admin`, else the oldest admin), revokes nothing, records `token.recovered` in the tenant's
    /// audit log, prints the token once and writes it to <state-dir>/admin-token (mode 0600).
    /// Exits 2 when there is no such tenant, user or admin, or the token file already holds a
    /// token; 1 when the database is unavailable.
    RecoverToken(RecoverTokenArgs),
    /// Apply pending schema migrations and exit (needs the stack's database).
    ///
    /// Every service also migrates when it starts; this applies them up front, as the Helm
    /// chart's migration job does on each install and upgrade. Exits 1 when the database is
    /// unavailable.
    Migrate,
    /// Mint (or revoke) a platform-operator token for the platform API (needs the stack's
    /// database as its owner).
    ///
    /// A platform token belongs to no tenant and works only on /api/platform/ routes (tenants:
    /// create, suspend, resume, delete, users, quotas); no tenant token can reach those. The
    /// secret is printed once on stdout. Exits 1 when the database is unavailable.
    PlatformToken(PlatformTokenArgs),
}

#[derive(Debug, Args)]
pub struct PlatformTokenArgs {
    /// A name for the token (who or what holds it).
    #[arg(long, default_value = "platform-operator")]
    pub name: String,

    /// Revoke the platform token with this id instead of minting one.
    #[arg(long, value_name = "ID")]
    pub revoke: Option<uuid::Uuid>,

    /// List the platform tokens (never their secrets) instead of minting one.
    #[arg(long, conflicts_with = "revoke")]
    pub list: bool,
}

#[derive(Debug, Args)]
pub struct RecoverTokenArgs {
    /// The tenant whose admin gets the token; with several tenants, name the one to recover.
    /// The default is the tenant the gateway bootstraps, whose token `pulsectl up` uses.
    #[arg(long, default_value = "default", value_name = "ID")]
    pub tenant: String,

    /// Replace <state-dir>/admin-token when it already holds a token.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Args)]
#[command(after_long_help = UP_HELP)]
pub struct UpArgs {
    /// Start a private Postgres cluster and NATS server under <state-dir>/deps for this stack.
    #[arg(long)]
    pub spawn_deps: bool,

    /// Run in the background: return once the stack is healthy (logs in <state-dir>/logs/pulsectl.log).
    #[arg(long)]
    pub detach: bool,

    /// Directory holding the service binaries. Default: the directory of pulsectl itself.
    #[arg(long, env = ENV_BIN_DIR, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,

    /// How long to wait for every service to report ready.
    #[arg(long, default_value = "120s", value_parser = parse_duration, value_name = "DURATION")]
    pub ready_timeout: Duration,

    /// Health listener of pulse-patrol-scheduler.
    #[arg(long, env = ENV_PATROL_SCHEDULER_HEALTH, default_value = "127.0.0.1:7661", value_name = "ADDR")]
    pub patrol_scheduler_health_listen: SocketAddr,

    /// Health listener of pulse-model-runner.
    #[arg(long, env = ENV_MODEL_RUNNER_HEALTH, default_value = "127.0.0.1:7662", value_name = "ADDR")]
    pub model_runner_health_listen: SocketAddr,

    /// Health listener of pulse-action-broker.
    #[arg(long, env = ENV_ACTION_BROKER_HEALTH, default_value = "127.0.0.1:7663", value_name = "ADDR")]
    pub action_broker_health_listen: SocketAddr,

    /// Health listener of pulse-verifier.
    #[arg(long, env = ENV_VERIFIER_HEALTH, default_value = "127.0.0.1:7664", value_name = "ADDR")]
    pub verifier_health_listen: SocketAddr,

    /// Health listener of pulse-connector.
    #[arg(long, env = ENV_CONNECTOR_HEALTH, default_value = "127.0.0.1:7668", value_name = "ADDR")]
    pub connector_health_listen: SocketAddr,

    /// Health listener of the host agent (pulse-agent).
    #[arg(long, env = ENV_AGENT_HEALTH, default_value = "127.0.0.1:7665", value_name = "ADDR")]
    pub agent_health_listen: SocketAddr,

    /// Instances of each of the seven services (the host agent and the demo processes stay one).
    /// Replicas share the work over NATS; the gateway's and the relay's replicas share one port
    /// (`PULSE_HTTP__REUSE_PORT`), and the others' health listeners get ports from the OS.
    /// Each replica gets 1/N of the database pool (`PULSE_DATABASE__POOL_SIZE`; at least 8, at most the whole).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8), value_name = "N")]
    pub replicas: u8,

    /// The newcomer's first run: also start the provider simulator (unless a real provider is
    /// configured), a demo agent supervising three demo services, inject one fault and request
    /// a Patrol run in `approval` mode.
    #[arg(long)]
    pub demo: bool,

    /// Health listener of the demo agent (with --demo).
    #[arg(long, env = ENV_DEMO_AGENT_HEALTH, default_value = "127.0.0.1:7666", value_name = "ADDR")]
    pub demo_agent_health_listen: SocketAddr,

    /// Listener of the provider simulator (with --demo).
    #[arg(long, env = ENV_PROVIDER_SIM_LISTEN, default_value = "127.0.0.1:7667", value_name = "ADDR")]
    pub provider_sim_listen: SocketAddr,
}

impl UpArgs {
    /// The `PULSE_HTTP__LISTEN` pulsectl gives a service with its own health listener.
    pub fn health_listen(&self, service: &str) -> Option<SocketAddr> {
        match service {
            "patrol-scheduler" => Some(self.patrol_scheduler_health_listen),
            "model-runner" => Some(self.model_runner_health_listen),
            "action-broker" => Some(self.action_broker_health_listen),
            "verifier" => Some(self.verifier_health_listen),
            "connector" => Some(self.connector_health_listen),
            "agent" => Some(self.agent_health_listen),
            crate::demo::DEMO_AGENT => Some(self.demo_agent_health_listen),
            _ => None,
        }
    }
}

const UP_HELP: &str = "\
Configuration (environment, passed on to every service):
  PULSE_DATABASE_URL     Postgres of the stack [default: postgres://root@127.0.0.1:5432/pulse];
                         the database is created when missing
  PULSE_NATS_URL         NATS with JetStream [default: nats://127.0.0.1:4222]
  PULSE_GATEWAY__LISTEN  gateway HTTP listener [default: 127.0.0.1:7655]
  PULSE_RELAY__LISTEN    agent relay listener [default: 127.0.0.1:7656]
  PULSE_NATS__SUBJECT_PREFIX, PULSE_TELEMETRY__LOG_FORMAT, PULSE_CONFIG (a TOML file), ...:
                         see docs/configuration.md

Ports: the gateway and the relay serve their health endpoints on their main listener; every other
process gets its own PULSE_HTTP__LISTEN from the --*-health-listen options (or their
PULSE_*_HEALTH_LISTEN variables), so two stacks on one machine only need distinct values for
those, the two listeners above, the database name and the subject prefix. With --demo, the demo
agent and the provider simulator take two more (--demo-agent-health-listen,
--provider-sim-listen). Port 0 lets the OS pick a free port when the process binds; pulsectl
prints the gateway's and the relay's (`gateway listening on http://<addr>`) and keeps each for
the process's restarts.

--demo: the provider simulator (`pulse-provider-sim`, a simulated model: no real AI), a demo
agent with commands enabled supervising demo-web, demo-worker and demo-cache (state in
<state-dir>/demo), Patrol mode `approval` (the simulator as the model unless a real provider and
model are configured), a fault on demo-web and a Patrol run. Approving the proposed fix restarts
demo-web, which clears the fault; the verifier then checks it.

Files under --state-dir: admin-token (written by the gateway on first start; when it is lost and
the database already has users, `pulsectl admin recover-token` issues a new one), logs/<service>.log,
pulsectl.pid (one stack per state directory), deps/ (with --spawn-deps).

Stop with Ctrl-C (or SIGTERM, or `pulsectl down`): services get SIGTERM, then SIGKILL after 10 s.";

#[derive(Debug, Clone, Args)]
pub struct DownArgs {
    /// How long to wait for the stack to stop.
    #[arg(long, default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub enum ConnectionsCommand {
    /// Check a connection, then store it; a failed check stores nothing and says what to fix.
    Add(ConnectionArgs),
    /// Check a connection without storing it: its state, the fingerprint the server presents,
    /// the version and the cluster's quorum.
    Test(ConnectionArgs),
    /// List the connections with their state.
    List {
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check a stored connection again and record its state.
    Check {
        /// Connection id (from `pulsectl connections list`).
        id: String,
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Turn guest power actions (guest.start, .shutdown, .reboot, .stop) on or off for a
    /// Proxmox VE connection; each action still needs policy and a human approval.
    GuestActions {
        /// Connection id.
        id: String,
        #[arg(value_enum)]
        state: OnOff,
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Remove a connection and its sealed token secret.
    Remove {
        /// Connection id.
        id: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// What a connection is. The token secret is read from a file or the environment, never from
/// the command line (where other users of the machine could read it).
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// What it talks to.
    #[arg(value_enum)]
    pub kind: ConnectionKindArg,

    /// `https://host[:port]`; the port defaults to 8006 (Proxmox VE) or 8007 (PBS).
    #[arg(long)]
    pub url: String,

    /// The API token's id, `user@realm!name`.
    #[arg(long)]
    pub token_id: String,

    /// A file holding the token's secret (one line).
    #[arg(long, value_name = "PATH", conflicts_with = "token_secret_env")]
    pub token_secret_file: Option<PathBuf>,

    /// The environment variable holding the token's secret.
    #[arg(
        long,
        value_name = "VAR",
        default_value = "PULSE_CONNECTION_TOKEN_SECRET"
    )]
    pub token_secret_env: String,

    /// The SHA-256 fingerprint of the server's (self-signed) certificate.
    #[arg(long, group = "trust")]
    pub fingerprint: Option<String>,

    /// A PEM file of the CA that signed the server's certificate.
    #[arg(long, value_name = "PATH", group = "trust")]
    pub ca_file: Option<PathBuf>,

    /// Trust the platform's roots (a publicly signed certificate).
    #[arg(long, group = "trust")]
    pub public_ca: bool,

    /// How often the connector reads the cluster, in seconds (10 to 3600). Default: 30.
    #[arg(long, value_name = "SECONDS")]
    pub cadence: Option<u32>,

    /// Allow guest power actions on this cluster's guests (each with a human approval; the
    /// token needs VM.PowerMgmt). Default: off.
    #[arg(long)]
    pub guest_actions: bool,

    /// A name, unique per kind: lower-case letters, digits and '-'. Default: from the URL's host.
    #[arg(long)]
    pub name: Option<String>,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ConnectionKindArg {
    #[value(name = "proxmox-ve")]
    ProxmoxVe,
    #[value(name = "proxmox-backup")]
    ProxmoxBackup,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once.
    Create(TokenCreateArgs),
    /// List the tenant's tokens.
    List,
    /// Revoke a token by id.
    Revoke {
        /// Token id (from `pulsectl token list`).
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// A name to recognise the token by.
    #[arg(long)]
    pub name: String,

    /// A scope to grant; repeat for several. One of: monitoring:read, ai:chat, ai:execute,
    /// actions:plan, actions:approve, actions:execute, agent:report, agent:exec, admin.
    #[arg(long = "scope", required = true, value_parser = parse_scope, value_name = "SCOPE")]
    pub scopes: Vec<Scope>,

    /// Lifetime, e.g. 30d, 12h, 1d12h (units s, m, h, d, w). Default: no expiry.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub expires_in: Option<Duration>,
}

#[derive(Debug, Subcommand)]
pub enum PatrolCommand {
    /// Request a Patrol run: a full run, or one scoped to resources or resource types.
    Run(PatrolRunArgs),
    /// Show the Patrol status: state, the current run, last and next patrol, interval.
    Status {
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List recent Patrol runs, newest first; with a run id, show that run.
    Runs(PatrolRunsArgs),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("scope").multiple(true).args(["resources", "types"]))]
pub struct PatrolRunArgs {
    /// A resource to patrol (canonical id, source id, name or alias); repeat for several.
    /// Without --resource and --type the run covers every resource.
    #[arg(long = "resource", value_name = "ID")]
    pub resources: Vec<String>,

    /// A resource type to patrol; repeat for several. One of: host, app-container, service,
    /// storage.
    #[arg(long = "type", value_parser = parse_resource_type, value_name = "TYPE")]
    pub types: Vec<ResourceType>,

    /// Why the run is requested, passed on to the run (only with --resource or --type).
    #[arg(long, requires = "scope", value_name = "TEXT")]
    pub context: Option<String>,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PatrolRunsArgs {
    /// Show this run (its id from `pulsectl patrol runs` or `pulsectl patrol run`).
    #[arg(value_name = "ID")]
    pub id: Option<String>,

    /// How many runs to list, 1 to 200. Default: the gateway's (30).
    #[arg(
        long,
        conflicts_with = "id",
        value_parser = clap::value_parser!(u16).range(1..=200),
        value_name = "N"
    )]
    pub limit: Option<u16>,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// List each provider's models as routes (provider:model), or why the provider could not
    /// list them (provider_unreachable, provider_auth_failed, ...) and what to do.
    List {
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run the preflight's one model turn on a provider and model; saves nothing.
    Test {
        /// Provider id (openai, anthropic, gemini, ollama, ...).
        provider: String,
        /// Model id as the provider names it (gpt-4.1-mini, qwen3:8b, ...).
        model: String,
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum FindingsCommand {
    /// List active findings, most recently seen first; with --all, every finding.
    List(FindingsListArgs),
    /// Show one finding with its lifecycle.
    Show {
        /// Finding id (from `pulsectl findings list`).
        id: String,
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Acknowledge a finding.
    Ack {
        /// Finding id.
        id: String,
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Dismiss a finding; will_fix_later reminds after seven days.
    Dismiss(FindingsDismissArgs),
    /// Suppress findings of one category on one resource (the rule is created from an open
    /// finding in that scope).
    Suppress(FindingsSuppressArgs),
}

#[derive(Debug, Args)]
pub struct FindingsListArgs {
    /// Include resolved, dismissed and suppressed findings.
    #[arg(long)]
    pub all: bool,

    /// How many findings to list (the gateway caps this at 500). Default: the gateway's (200).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..), value_name = "N")]
    pub limit: Option<u16>,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FindingsDismissArgs {
    /// Finding id.
    pub id: String,

    /// Why the finding is dismissed.
    #[arg(
        long,
        value_parser = ["not_an_issue", "expected_behavior", "will_fix_later"],
        value_name = "REASON"
    )]
    pub reason: String,

    /// A note kept with the dismissal.
    #[arg(long, value_name = "TEXT")]
    pub note: Option<String>,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FindingsSuppressArgs {
    /// Resource id of the findings to suppress (`*` for every resource, with --allow-broad-scope).
    #[arg(long, value_name = "ID")]
    pub resource: String,

    /// Category of the findings to suppress: performance, capacity, reliability, backup,
    /// security, general (`*` for every category, with --allow-broad-scope).
    #[arg(long, value_name = "CATEGORY")]
    pub category: String,

    /// Create the rule from this finding rather than the most recently seen one in the scope.
    #[arg(long, value_name = "ID")]
    pub finding: Option<String>,

    /// Allow a rule covering every resource or every category.
    #[arg(long)]
    pub allow_broad_scope: bool,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List actions waiting for a decision: soonest expiry first, then critical first.
    List(ApprovalsListArgs),
    /// Approve a pending action, which then runs; the decider is the user behind the token.
    Approve(DecisionArgs),
    /// Reject a pending action; it never runs.
    Reject(DecisionArgs),
}

#[derive(Debug, Args)]
pub struct ApprovalsListArgs {
    /// How many actions to list, 1 to 500. Default: the gateway's (100).
    #[arg(
        long,
        value_parser = clap::value_parser!(u16).range(1..=500),
        value_name = "N"
    )]
    pub limit: Option<u16>,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DecisionArgs {
    /// Action id (from `pulsectl approvals list`).
    pub id: String,

    /// Why, kept with the decision in the audit log (1 to 1000 characters).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,

    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Recompute the tenant's audit chain; exit 1 when a row was altered, removed or inserted.
    Verify {
        /// Print the API's JSON answer instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn parse_resource_type(text: &str) -> Result<ResourceType, String> {
    text.parse::<ResourceType>().map_err(|err| err.to_string())
}

fn parse_scope(text: &str) -> Result<Scope, String> {
    text.parse::<Scope>().map_err(|err| {
        let valid: Vec<&str> = Scope::ALL.iter().map(|scope| scope.as_str()).collect();
        format!("{err}; valid scopes: {}", valid.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn token_create_parses_scopes_and_expiry() {
        let cli = Cli::try_parse_from([
            "pulsectl",
            "token",
            "create",
            "--name",
            "ci",
            "--scope",
            "monitoring:read",
            "--scope",
            "ai:chat",
            "--expires-in",
            "30d",
        ])
        .unwrap();
        let Command::Token(TokenCommand::Create(args)) = cli.command else {
            panic!("parsed {:?}", cli.command);
        };
        assert_eq!(args.scopes, vec![Scope::MonitoringRead, Scope::AiChat]);
        assert_eq!(args.expires_in, Some(Duration::from_secs(30 * 86_400)));
    }

    #[test]
    fn unknown_scope_is_refused_before_any_request() {
        let err = Cli::try_parse_from([
            "pulsectl", "token", "create", "--name", "x", "--scope", "root",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("root"), "{err}");
    }

    #[test]
    fn approval_decisions_need_an_id_and_a_reason() {
        let cli = Cli::try_parse_from([
            "pulsectl",
            "approvals",
            "reject",
            "0190",
            "--reason",
            "not now",
        ])
        .unwrap();
        let Command::Approvals(ApprovalsCommand::Reject(args)) = cli.command else {
            panic!("parsed {:?}", cli.command);
        };
        assert_eq!(
            (args.id.as_str(), args.reason.as_str()),
            ("0190", "not now")
        );
        assert!(Cli::try_parse_from(["pulsectl", "approvals", "approve", "0190"]).is_err());
    }

    #[test]
    fn recover_token_defaults_to_the_default_tenant() {
        let cli = Cli::try_parse_from(["pulsectl", "admin", "recover-token"]).unwrap();
        let Command::Admin(AdminCommand::RecoverToken(args)) = cli.command else {
            panic!("parsed {:?}", cli.command);
        };
        assert_eq!((args.tenant.as_str(), args.force), ("default", false));
    }

    #[test]
    fn state_dir_is_accepted_after_the_subcommand() {
        let cli = Cli::try_parse_from(["pulsectl", "up", "--state-dir", "/tmp/x"]).unwrap();
        assert_eq!(cli.state_dir, PathBuf::from("/tmp/x"));
    }
}
