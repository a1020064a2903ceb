//! No admin lockout: when the admin token file is lost (state directory deleted, or a new one
//! pointed at an existing database), `pulsectl up` names `pulsectl admin recover-token`, and
//! that command, given the stack's database, issues a new admin token for the existing admin
//! user, revokes nothing, records `token.recovered` in the audit chain and writes the token to
//! the state directory (mode 0600). Against a database without users it fails with a clear
//! error and writes nothing. Real `pulsectl` binary and real gateway.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use anyhow::{Context as _, ensure};
use pulse_domain::TenantId;
use pulse_store::{audit, bootstrap, tenants};
use pulse_test_support::cli::{describe, stderr, stdout};
use pulse_test_support::db::TestDb;
use pulse_test_support::service::{TestGateway, binary, scratch_dir};
use pulse_test_support::stack::{
    PulsectlUp, StackOptions, file_mode, require_stack_binaries, wait_until,
};

const RUN_WITHIN: Duration = Duration::from_secs(60);

/// `pulsectl --state-dir <state_dir> admin recover-token <extra>` with the database URL as the
/// only Pulse setting, as an operator with database access would run it.
async fn recover_token(
    database_url: &str,
    state_dir: &Path,
    extra: &[&str],
) -> anyhow::Result<Output> {
    let mut command = tokio::process::Command::new(binary("pulsectl")?);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PULSE_DATABASE_URL", database_url)
        .arg("--state-dir")
        .arg(state_dir)
        .args(["admin", "recover-token"])
        .args(extra)
        .kill_on_drop(true);
    Ok(tokio::time::timeout(RUN_WITHIN, command.output())
        .await
        .context("pulsectl admin recover-token did not finish")??)
}

async fn audit_rows(db: &TestDb) -> anyhow::Result<Vec<audit::AuditRecord>> {
    let tx = db.store().tenant_tx(&TenantId::default_tenant()).await?;
    let rows = audit::list(&tx, 0, 10_000).await?;
    tx.rollback().await?;
    Ok(rows)
}

#[tokio::test]
async fn recover_token_issues_a_working_admin_token_and_revokes_nothing() -> anyhow::Result<()> {
    let gw = TestGateway::start().await?;
    let result = async {
        let reader = gw.create_token("reader", &["monitoring:read"]).await?;
        // A new state directory pointed at the existing database: no token file in it.
        let state_dir = scratch_dir("recovered-state")?;
        let output = recover_token(gw.db.owner_url(), &state_dir, &[]).await?;
        ensure!(output.status.success(), "{}", describe(&output));
        let token = stdout(&output).trim().to_owned();
        ensure!(
            token.starts_with("pulse_") && !token.contains('\n'),
            "stdout is not just the token: {}",
            describe(&output)
        );
        let notes = stderr(&output);
        ensure!(
            notes.contains("for user 'admin' of tenant 'default'")
                && notes.contains("no other token was revoked")
                && notes.contains("token.recovered"),
            "{notes}"
        );
        ensure!(
            !notes.contains(&token),
            "the secret leaked to stderr: {notes}"
        );

        // Written once, private, and the same secret.
        let path = state_dir.join("admin-token");
        ensure!(file_mode(&path)? == 0o600, "mode {:o}", file_mode(&path)?);
        ensure!(std::fs::read_to_string(&path)?.trim() == token);

        // It is an admin token: the token list is admin-only.
        let (status, listed) = gw.get_json(&token, "/api/tokens").await?;
        ensure!(
            status == 200,
            "GET /api/tokens with the recovered token: {status} {listed}"
        );
        let tokens = listed["tokens"].as_array().context("tokens")?;
        let recovered = tokens
            .iter()
            .find(|t| t["name"] == bootstrap::RECOVERED_TOKEN_NAME)
            .with_context(|| format!("no recovered token in {listed}"))?;
        ensure!(
            recovered["scopes"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s == "admin"))
        );
        // Nothing was revoked: every token is still active and still works.
        ensure!(
            tokens.iter().all(|t| t["revoked_at"].is_null()),
            "a token was revoked: {listed}"
        );
        let (status, body) = gw.get_json(&reader, "/api/resources").await?;
        ensure!(status == 200, "old reader token: {status} {body}");
        let (status, body) = gw.get_json(&gw.admin_token, "/api/tokens").await?;
        ensure!(status == 200, "old admin token: {status} {body}");

        // The audit row: who (the recovery, not a token), what, for which admin user.
        let rows = audit_rows(&gw.db).await?;
        let row = rows
            .iter()
            .find(|r| r.kind == "token.recovered")
            .with_context(|| format!("no token.recovered row among {rows:?}"))?;
        ensure!(row.actor == bootstrap::RECOVERY_ACTOR, "{row:?}");
        ensure!(
            row.subject == recovered["id"].as_str().unwrap_or_default(),
            "{row:?}"
        );
        ensure!(row.payload["admin_username"] == "admin", "{row:?}");
        let (status, verified) = gw.get_json(&token, "/api/audit/verify").await?;
        ensure!(status == 200, "{verified}");
        ensure!(verified["ok"] == true, "chain broken: {verified}");

        // A second run keeps the token file unless told otherwise.
        let again = recover_token(gw.db.owner_url(), &state_dir, &[]).await?;
        ensure!(again.status.code() == Some(2), "{}", describe(&again));
        ensure!(
            stderr(&again).contains("admin_token_present") && stderr(&again).contains("--force"),
            "{}",
            describe(&again)
        );
        ensure!(std::fs::read_to_string(&path)?.trim() == token);
        let forced = recover_token(gw.db.owner_url(), &state_dir, &["--force"]).await?;
        ensure!(forced.status.success(), "{}", describe(&forced));
        let replaced = stdout(&forced).trim().to_owned();
        ensure!(replaced != token && std::fs::read_to_string(&path)?.trim() == replaced);
        // The first recovered token stays valid: recovery never revokes.
        let (status, _) = gw.get_json(&token, "/api/tokens").await?;
        ensure!(
            status == 200,
            "the first recovered token stopped working: {status}"
        );
        let _ = std::fs::remove_dir_all(&state_dir);
        Ok(())
    }
    .await;
    gw.stop().await?;
    result
}

#[tokio::test]
async fn recover_token_without_users_fails_clearly_and_writes_nothing() -> anyhow::Result<()> {
    let db = TestDb::create().await?;
    let state_dir = scratch_dir("recover-empty")?;
    let result = async {
        // A migrated database nobody has started a stack on: no tenant, no user.
        let output = recover_token(db.owner_url(), &state_dir, &[]).await?;
        ensure!(output.status.code() == Some(2), "{}", describe(&output));
        let message = stderr(&output);
        ensure!(
            message.contains(
                "error: tenant_not_found: cannot recover an admin token: tenant \
                              'default' does not exist"
            ),
            "{message}"
        );
        ensure!(stdout(&output).trim().is_empty(), "{}", describe(&output));

        // The tenant exists but has no user.
        tenants::create(
            db.store(),
            &TenantId::default_tenant(),
            "Default organization",
        )
        .await?
        .context("tenant created")?;
        let output = recover_token(db.owner_url(), &state_dir, &[]).await?;
        ensure!(output.status.code() == Some(2), "{}", describe(&output));
        let message = stderr(&output);
        ensure!(
            message.contains(
                "error: no_users: cannot recover an admin token: tenant 'default' \
                              has no users"
            ),
            "{message}"
        );
        ensure!(
            !state_dir.join("admin-token").exists(),
            "a token file was written"
        );
        ensure!(
            audit_rows(&db).await?.is_empty(),
            "an audit row was written"
        );
        Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&state_dir);
    db.cleanup().await?;
    result
}

#[tokio::test]
async fn up_names_the_recovery_command_when_the_token_file_is_gone() -> anyhow::Result<()> {
    require_stack_binaries()?;
    // A database a stack already bootstrapped, whose token file is gone: the bootstrap token
    // was never saved anywhere this state directory can see.
    let db = TestDb::create().await?;
    bootstrap::ensure_default_tenant(db.store(), |_| Ok(()))
        .await?
        .context("bootstrapped")?;
    let mut options = StackOptions::isolated("admin-recovery-up")?;
    options.database_url = db.owner_url().to_owned();
    let result = async {
        let state_dir = std::fs::canonicalize(&options.state_dir)?;
        let command = format!(
            "pulsectl admin recover-token --state-dir {}",
            state_dir.display()
        );

        // --demo cannot work without the token: it fails at once with a stable code.
        let output = options.run_pulsectl(&["up", "--demo"], RUN_WITHIN).await?;
        ensure!(output.status.code() == Some(3), "{}", describe(&output));
        let message = stderr(&output);
        ensure!(
            message.starts_with("error: admin_token_missing: there is no admin token at"),
            "{message}"
        );
        ensure!(message.contains(&command), "{message}");
        ensure!(
            message.contains("1 user(s) in tenant 'default'"),
            "{message}"
        );
        let logs = state_dir.join("logs");
        let started_any = std::fs::read_dir(&logs)
            .map(|entries| entries.flatten().count() > 0)
            .unwrap_or(false);
        ensure!(!started_any, "services were started: {}", logs.display());

        // Plain `up` runs the stack but says the same, naming the command.
        let mut up = PulsectlUp::spawn(&options, &[])?;
        let hint = "warning: admin_token_missing: there is no admin token at";
        wait_until(Duration::from_secs(60), "the recovery hint", || {
            let printed = up.stdout().contains(hint) && up.stdout().contains(&command);
            async move { printed }
        })
        .await
        .with_context(|| up.output())?;
        up.interrupt();
        let status = up
            .wait_exit(Duration::from_secs(30))
            .await
            .with_context(|| up.output())?;
        ensure!(
            status.success(),
            "pulsectl up exited {status}\n{}",
            up.output()
        );

        // The named command works on that state directory.
        let recovered = recover_token(db.owner_url(), &state_dir, &[]).await?;
        ensure!(recovered.status.success(), "{}", describe(&recovered));
        ensure!(file_mode(&options.admin_token_path())? == 0o600);
        Ok(())
    }
    .await;
    let cleanup = options.cleanup().await;
    db.cleanup().await?;
    result?;
    cleanup
}
