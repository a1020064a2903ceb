//! `pulsectl admin recover-token`: the way back in when the admin token file is lost.
//!
//! The gateway writes `<state-dir>/admin-token` only when it bootstraps an empty database, so a
//! deleted state directory (or a new one pointed at an existing database) leaves no token to
//! call the API with. Whoever can reach the stack's database as its owner (the
//! `PULSE_DATABASE_URL` every service of `pulsectl up` gets) may issue a new admin token here:
//!
//! - the token is issued for an existing admin user of one tenant (`--tenant`, default
//!   `default`, the tenant the gateway bootstraps); no user or tenant is created;
//! - nothing is revoked: every other token keeps working;
//! - the same transaction appends `token.recovered` to the tenant's audit chain
//!   (`pulse_store::bootstrap::recover_admin_token` owns all of it);
//! - the secret is printed once and written to `<state-dir>/admin-token` (mode 0600) before the
//!   transaction commits, so a secret that could not be saved is never left valid. An existing
//!   token file is kept unless `--force`.
//!
//! `pulsectl up` calls [`existing_users`] when the state directory has no token, to name this
//! command instead of waiting for a token the gateway will never write.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use pulse_config::DatabaseConfig;
use pulse_domain::TenantId;
use pulse_store::bootstrap::{self, CreateUserError, RecoveryError};
use pulse_store::users::{self, PasswordError, UserRole};
use pulse_store::{Store, StoreError};

use crate::cli::{PlatformTokenArgs, RecoverTokenArgs, UserCreateArgs};
use crate::preflight::{self, PreflightError};
use crate::stack_config::{StackConfig, StackConfigError};

/// The command that recovers the admin token of `state_dir`, as the operator types it.
pub fn recover_command(state_dir: &Path) -> String {
    format!(
        "pulsectl admin recover-token --state-dir {}",
        state_dir.display()
    )
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Config(#[from] StackConfigError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error("invalid tenant '{tenant}': {reason}")]
    Tenant { tenant: String, reason: String },
    #[error("cannot open the stack's database ({database}): {source}")]
    Database {
        database: String,
        #[source]
        source: StoreError,
    },
    #[error(
        "{} already holds an admin token; use it, or pass --force to replace the file (the \
         token in it stays valid until revoked)",
        .0.display()
    )]
    TokenFilePresent(PathBuf),
    #[error("cannot recover an admin token: {0}")]
    Recovery(#[source] RecoveryError),
    #[error("cannot create the user: {0}")]
    CreateUser(#[source] CreateUserError),
    #[error("password refused: {0}")]
    Password(#[from] PasswordError),
    #[error("cannot read the password from standard input: {0}")]
    Stdin(String),
    #[error("no platform token {0}")]
    NoPlatformToken(uuid::Uuid),
}

impl AdminError {
    /// A stable code for scripts: what was refused, or why the database could not be used.
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::Config(_) | AdminError::Tenant { .. } => "invalid_config",
            AdminError::Preflight(_) | AdminError::Database { .. } => "database_unavailable",
            AdminError::TokenFilePresent(_) => "admin_token_present",
            AdminError::Recovery(RecoveryError::NoTenant(_)) => {
                pulse_capabilities::ErrorCode::TenantNotFound.code()
            }
            AdminError::Recovery(RecoveryError::NoUsers(_)) => "no_users",
            AdminError::Recovery(RecoveryError::NoAdmin { .. }) => "no_admin_user",
            AdminError::Recovery(RecoveryError::Store(_)) => "database_unavailable",
            AdminError::CreateUser(CreateUserError::NoTenant(_)) => {
                pulse_capabilities::ErrorCode::TenantNotFound.code()
            }
            AdminError::CreateUser(CreateUserError::Exists { .. }) => "user_exists",
            AdminError::CreateUser(CreateUserError::Username(_)) => "invalid_username",
            AdminError::CreateUser(CreateUserError::Store(_)) => "database_unavailable",
            AdminError::Password(_) | AdminError::Stdin(_) => "invalid_password",
            AdminError::NoPlatformToken(_) => "platform_token_not_found",
        }
    }

    /// 2 when there is nothing to recover (or the file is kept), 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            AdminError::TokenFilePresent(_)
            | AdminError::NoPlatformToken(_)
            | AdminError::Password(_)
            | AdminError::Stdin(_)
            | AdminError::CreateUser(
                CreateUserError::NoTenant(_)
                | CreateUserError::Exists { .. }
                | CreateUserError::Username(_),
            )
            | AdminError::Recovery(
                RecoveryError::NoTenant(_)
                | RecoveryError::NoUsers(_)
                | RecoveryError::NoAdmin { .. },
            ) => 2,
            _ => 1,
        }
    }
}

/// The database as a message may name it: host and database, never the password.
fn describe_database(url: &str) -> String {
    let name = url
        .parse::<tokio_postgres::Config>()
        .ok()
        .and_then(|config| config.get_dbname().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned());
    let target = preflight::postgres_targets(url)
        .ok()
        .and_then(|targets| targets.first().map(ToString::to_string))
        .unwrap_or_else(|| "?".to_owned());
    format!("database '{name}' on {target}")
}

/// Reachability first, so an unreachable server gets the same advice as in `pulsectl up`.
async fn open_store(database: &DatabaseConfig) -> Result<Store, AdminError> {
    if let Some(unreachable) = preflight::check_postgres(&database.url).await? {
        return Err(PreflightError::Unreachable(vec![unreachable]).into());
    }
    // `connect` applies pending migrations, as every service does when it starts.
    Store::connect(database)
        .await
        .map_err(|source| AdminError::Database {
            database: describe_database(&database.url),
            source,
        })
}

/// How many users the default tenant has: when it has any, the gateway will not bootstrap and
/// no admin token will be written.
pub async fn existing_users(config: &StackConfig) -> Result<usize, AdminError> {
    let database = config.database_config()?;
    let store = open_store(&database).await?;
    bootstrap::user_count(&store, &TenantId::default_tenant())
        .await
        .map_err(|source| AdminError::Database {
            database: describe_database(&database.url),
            source,
        })
}

/// Writes `secret` to `path` with mode 0600: a temporary file, synced, then renamed.
pub fn write_token_file(path: &Path, secret: &str) -> Result<(), String> {
    let partial = path.with_extension("partial");
    let write = || -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)?;
        writeln!(file, "{secret}")?;
        file.sync_all()?;
        std::fs::rename(&partial, path)
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn token_file_present(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| !text.trim().is_empty())
}

/// Applies pending migrations to the stack's database (`pulsectl admin migrate`).
pub async fn migrate(state_dir: &Path) -> Result<(), AdminError> {
    let env = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let database = StackConfig::resolve(state_dir, env)?.database_config()?;
    open_store(&database).await?;
    eprintln!(
        "schema migrations are current on {}",
        describe_database(&database.url)
    );
    Ok(())
}

pub async fn recover_token(state_dir: &Path, args: &RecoverTokenArgs) -> Result<(), AdminError> {
    let tenant = TenantId::new(args.tenant.clone()).map_err(|err| AdminError::Tenant {
        tenant: args.tenant.clone(),
        reason: err.to_string(),
    })?;
    // Variables that are not UTF-8 cannot be PULSE_ settings; skip them rather than panic.
    let env = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let config = StackConfig::resolve(state_dir, env)?;
    let path = config.admin_token_path();
    if !args.force && token_file_present(&path) {
        return Err(AdminError::TokenFilePresent(path));
    }
    let database = config.database_config()?;
    let store = open_store(&database).await?;
    let recovered = bootstrap::recover_admin_token(&store, &tenant, |issued| {
        write_token_file(&path, issued.secret.expose())
    })
    .await
    .map_err(AdminError::Recovery)?;
    // Details to stderr, the bare secret to stdout, as `pulsectl token create` does.
    eprintln!(
        "issued admin token '{}' (id {}) for user '{}' of tenant '{}'; no other token was \
         revoked\n  saved to {} (mode 0600)\n  recorded in the audit log as token.recovered \
         (seq {})",
        recovered.issued.token.name,
        recovered.issued.token.id,
        recovered.admin.username,
        tenant,
        path.display(),
        recovered.audit_seq,
    );
    println!("{}", recovered.issued.secret.expose());
    eprintln!(
        "warning: this secret is shown only once; revoke tokens you no longer trust with `pulsectl token revoke`"
    );
    Ok(())
}

/// `pulsectl admin platform-token`: mints, lists or revokes platform-operator tokens on the
/// owner's connection (the application role cannot write them).
pub async fn platform_token(state_dir: &Path, args: &PlatformTokenArgs) -> Result<(), AdminError> {
    let env = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let config = StackConfig::resolve(state_dir, env)?;
    let database = config.database_config()?;
    // Migrates first, so the platform table exists on a database no service started on yet.
    drop(open_store(&database).await?);
    let fail = |source| AdminError::Database {
        database: describe_database(&database.url),
        source,
    };
    let owner = pulse_store::connect_owner(&database).await.map_err(fail)?;
    if args.list {
        for token in pulse_store::platform::list(&owner).await.map_err(fail)? {
            let state = match token.revoked_at {
                Some(at) => format!("revoked {at}"),
                None => "active".to_owned(),
            };
            println!(
                "{}\t{}\t{}\t{}",
                token.id, token.name, token.created_at, state
            );
        }
        return Ok(());
    }
    if let Some(id) = args.revoke {
        if !pulse_store::platform::revoke(&owner, id)
            .await
            .map_err(fail)?
        {
            return Err(AdminError::NoPlatformToken(id));
        }
        eprintln!("revoked platform token {id}");
        return Ok(());
    }
    let issued = pulse_store::platform::issue(&owner, &args.name)
        .await
        .map_err(fail)?;
    eprintln!(
        "issued platform token '{}' (id {}); it works only on /api/platform/ routes",
        issued.token.name, issued.token.id
    );
    println!("{}", issued.secret.expose());
    eprintln!(
        "warning: this secret is shown only once; revoke it with `pulsectl admin platform-token --revoke {}`",
        issued.token.id
    );
    Ok(())
}

/// `pulsectl user create`: a web UI user with a password shown once.
pub async fn create_user(state_dir: &Path, args: &UserCreateArgs) -> Result<(), AdminError> {
    let tenant = TenantId::new(args.tenant.clone()).map_err(|err| AdminError::Tenant {
        tenant: args.tenant.clone(),
        reason: err.to_string(),
    })?;
    let role = match args.role.as_str() {
        "admin" => UserRole::Admin,
        "viewer" => UserRole::Viewer,
        _ => UserRole::Operator,
    };
    let (password, generated) = if args.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .map_err(|e| AdminError::Stdin(e.to_string()))?;
        (line.trim_end_matches(['\r', '\n']).to_owned(), false)
    } else {
        (users::generate_password(), true)
    };
    let hashed = password.clone();
    let hash = tokio::task::spawn_blocking(move || users::hash_password(&hashed))
        .await
        .map_err(|e| AdminError::Stdin(format!("password hashing did not finish: {e}")))??;
    let env = std::env::vars_os()
        .filter_map(|(key, value)| Some((key.into_string().ok()?, value.into_string().ok()?)));
    let config = StackConfig::resolve(state_dir, env)?;
    let database = config.database_config()?;
    let store = open_store(&database).await?;
    let user = bootstrap::create_user(
        &store,
        &tenant,
        &args.username,
        role,
        &hash,
        "service:pulsectl",
    )
    .await
    .map_err(AdminError::CreateUser)?;
    eprintln!(
        "created {} user '{}' (id {}) in tenant '{}'; recorded in the audit log as user.created",
        role.as_str(),
        user.username,
        user.id,
        tenant
    );
    if generated {
        // The bare secret to stdout, details to stderr, as `pulsectl token create` does.
        println!("{password}");
        eprintln!("warning: this password is shown only once");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_is_private_and_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("pulsectl-admin-{}", std::process::id()));
        let path = dir.join("admin-token");
        write_token_file(&path, "pulse_first").unwrap();
        write_token_file(&path, "pulse_second").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "pulse_second\n");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(token_file_present(&path));
        assert!(!path.with_extension("partial").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn messages_name_the_database_without_its_password() {
        let described = describe_database("postgres://root:hunter2@10.0.0.5:5433/pulse");
        assert_eq!(described, "database 'pulse' on 10.0.0.5:5433");
        assert!(recover_command(Path::new("/srv/pulse")).ends_with("--state-dir /srv/pulse"));
    }

    #[test]
    fn nothing_to_recover_is_refused_input() {
        let tenant = TenantId::default_tenant();
        let no_users = AdminError::Recovery(RecoveryError::NoUsers(tenant));
        assert_eq!((no_users.code(), no_users.exit_code()), ("no_users", 2));
        let unavailable =
            AdminError::Recovery(RecoveryError::Store(StoreError::Unavailable("down".into())));
        assert_eq!(unavailable.exit_code(), 1);
    }
}
