//! First start: create the default tenant, admin user and admin token, and hand the token and
//! the admin's web password to the operator once, in `<state-dir>/admin-token` and
//! `<state-dir>/admin-password` (mode 0600) and on stdout.

use std::io::Write as _;
use std::path::Path;

use pulse_runtime::ServiceContext;

fn write_secret(path: &Path, secret: &str) -> Result<(), String> {
    let dir = path.parent().ok_or("admin token path has no directory")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let temp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(&temp)
        .map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
    writeln!(file, "{secret}")
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
    std::fs::rename(&temp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub async fn run(ctx: &ServiceContext) -> anyhow::Result<()> {
    let path = ctx.config.admin_token_path();
    let password_path = ctx.config.admin_password_path();
    let issued = pulse_store::bootstrap::ensure_default_tenant(&ctx.store, |secrets| {
        write_secret(&password_path, &secrets.admin_password)?;
        write_secret(&path, secrets.token.secret.expose())
    })
    .await?;
    if let Some(secrets) = issued {
        tracing::info!(path = %path.display(), token_id = %secrets.token.token.id, "bootstrapped tenant 'default' with an admin token and admin user");
        println!(
            "admin token (shown once; also saved to {}): {}",
            path.display(),
            secrets.token.secret.expose()
        );
        println!(
            "web UI sign-in: organization 'default', user '{}', password (shown once; also saved to {}): {}",
            pulse_store::bootstrap::ADMIN_USERNAME,
            password_path.display(),
            secrets.admin_password
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_file_is_private() {
        let dir = std::env::temp_dir().join(format!("pulse-bootstrap-{}", uuid::Uuid::now_v7()));
        let path = dir.join("admin-token");
        write_secret(&path, "pulse_abc").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "pulse_abc\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
