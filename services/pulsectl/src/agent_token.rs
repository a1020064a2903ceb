//! The host agent's token: `pulsectl up` creates one with scope `agent:report` through
//! `POST /api/tokens` (with the admin token the gateway bootstrapped) as soon as the gateway
//! answers, and writes it to `<state-dir>/agent/token`, where the agent waits for it. An
//! existing token file is kept; delete it to issue a new token.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use pulse_api::tokens::{CreateTokenRequest, RequestedScope};
use pulse_domain::Scope;

use crate::gateway_client::{ApiError, GatewayClient, resolve_token};

/// `<state-dir>/agent`: the agent's state directory under a pulsectl stack.
pub fn agent_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("agent")
}

pub fn token_path(state_dir: &Path) -> PathBuf {
    agent_dir(state_dir).join("token")
}

/// Creates `<state-dir>/agent/services.d/` (private to the owner: definitions run commands).
pub fn prepare_dirs(state_dir: &Path) -> std::io::Result<PathBuf> {
    let services = agent_dir(state_dir).join("services.d");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&services)?;
    Ok(services)
}

/// Whether the token file already holds a token.
pub fn present(state_dir: &Path) -> bool {
    present_at(&token_path(state_dir))
}

/// Whether the token file at `path` holds a token.
pub fn present_at(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| !t.trim().is_empty())
}

/// Issues the agent token and writes it (mode 0600), unless one is already there.
pub async fn ensure(state_dir: &Path, gateway_url: &str) -> Result<PathBuf, String> {
    let path = token_path(state_dir);
    if present(state_dir) {
        return Ok(path);
    }
    prepare_dirs(state_dir).map_err(|e| format!("cannot create the agent directories: {e}"))?;
    issue(
        state_dir,
        gateway_url,
        &path,
        "pulsectl host agent",
        &[Scope::AgentReport],
    )
    .await?;
    Ok(path)
}

/// Creates a token named `name` with `scopes` (with the admin token of `state_dir`) and writes
/// it to `path` (mode 0600), whose directory must exist.
pub async fn issue(
    state_dir: &Path,
    gateway_url: &str,
    path: &Path,
    name: &str,
    scopes: &[Scope],
) -> Result<(), String> {
    let admin = resolve_token(None, state_dir).map_err(|e| e.to_string())?;
    let client = GatewayClient::new(gateway_url, admin).map_err(|e| e.to_string())?;
    let request = CreateTokenRequest {
        name: name.to_owned(),
        scopes: scopes.iter().copied().map(RequestedScope::Tenant).collect(),
        expires_at: None,
    };
    let created = client
        .api()
        .create_token(&request)
        .await
        .map_err(|e| format!("cannot create the agent token: {}", ApiError::from(e)))?;
    let token = created.token.as_str();
    // Written to a temporary name and renamed, so the agent never reads half a token.
    let partial = path.with_extension("partial");
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)?;
        file.write_all(token.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&partial, path)
    };
    write().map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_under_the_state_dir() {
        let state = std::env::temp_dir().join(format!("pulsectl-agent-{}", std::process::id()));
        let services = prepare_dirs(&state).unwrap();
        assert_eq!(services, state.join("agent").join("services.d"));
        assert!(services.is_dir());
        assert!(!present(&state));
        std::fs::write(token_path(&state), "pulse_x\n").unwrap();
        assert!(present(&state));
        std::fs::remove_dir_all(&state).unwrap();
    }
}
