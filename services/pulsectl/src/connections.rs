//! `pulsectl connections add | test | list | check | guest-actions | remove` over the gateway's
//! `/api/connections` (Proxmox VE clusters and Proxmox Backup Servers).
//!
//! The token secret comes from a file (`--token-secret-file`) or an environment variable
//! (`--token-secret-env`, default `PULSE_CONNECTION_TOKEN_SECRET`), never from the command line.
//! Human text by default; `--json` prints the API's answer.

use pulse_api::connections::{ConnectionBody, ConnectionCheck, ConnectionList, ConnectionView};
use pulse_domain::connection::ConnectionKind;

use crate::cli::{ConnectionArgs, ConnectionKindArg};
use crate::gateway_client::{ApiError, GatewayClient, print_json};
use crate::text::render_table;

fn kind(arg: ConnectionKindArg) -> ConnectionKind {
    match arg {
        ConnectionKindArg::ProxmoxVe => ConnectionKind::ProxmoxVe,
        ConnectionKindArg::ProxmoxBackup => ConnectionKind::ProxmoxBackup,
    }
}

/// The request body, with the secret and CA read from where the arguments say.
pub fn body(
    args: &ConnectionArgs,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ConnectionBody, ApiError> {
    let secret = match &args.token_secret_file {
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            ApiError::Request(format!(
                "cannot read the token secret from {}: {e}",
                path.display()
            ))
        })?,
        None => env(&args.token_secret_env).ok_or_else(|| {
            ApiError::Request(format!(
                "no token secret: set {} (or give --token-secret-file PATH); it is not taken \
                 on the command line, where other users could read it",
                args.token_secret_env
            ))
        })?,
    };
    let ca_pem = args
        .ca_file
        .as_ref()
        .map(|path| {
            std::fs::read_to_string(path).map_err(|e| {
                ApiError::Request(format!("cannot read the CA file {}: {e}", path.display()))
            })
        })
        .transpose()?;
    Ok(ConnectionBody {
        kind: kind(args.kind),
        name: args.name.clone(),
        url: args.url.clone(),
        token_id: args.token_id.clone(),
        token_secret: secret.trim().to_owned(),
        fingerprint: args.fingerprint.clone(),
        ca_pem,
        public_ca: args.public_ca,
        cadence_seconds: args.cadence,
        guest_actions: args.guest_actions,
    })
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

pub async fn add(client: &GatewayClient, args: &ConnectionArgs) -> Result<(), ApiError> {
    let created = client.api().add_connection(&body(args, env_var)?).await?;
    if args.json {
        print_json(&created);
    } else {
        print!("{}", describe(&created));
    }
    Ok(())
}

pub async fn test(client: &GatewayClient, args: &ConnectionArgs) -> Result<(), ApiError> {
    let check = client.api().test_connection(&body(args, env_var)?).await?;
    if args.json {
        print_json(&check);
    } else {
        print!("{}", describe_check(&check));
    }
    Ok(())
}

pub async fn list(client: &GatewayClient, json: bool) -> Result<(), ApiError> {
    let list = client.api().connections().await?;
    if json {
        print_json(&list);
    } else {
        print!("{}", describe_list(&list));
    }
    Ok(())
}

pub async fn check(client: &GatewayClient, id: &str, json: bool) -> Result<(), ApiError> {
    let check = client.api().retest_connection(id).await?;
    if json {
        print_json(&check);
    } else {
        print!("{}", describe_check(&check));
    }
    Ok(())
}

pub async fn guest_actions(
    client: &GatewayClient,
    id: &str,
    enabled: bool,
    json: bool,
) -> Result<(), ApiError> {
    let connection = client
        .api()
        .set_connection_guest_actions(id, enabled)
        .await?;
    if json {
        print_json(&connection);
    } else {
        print!("{}", describe(&connection));
    }
    Ok(())
}

pub async fn remove(client: &GatewayClient, id: &str) -> Result<(), ApiError> {
    client.api().delete_connection(id).await?;
    println!("removed connection {id}");
    Ok(())
}

pub fn describe(c: &ConnectionView) -> String {
    let mut out = format!(
        "{} {} ({}): {}\n  id           {}\n  url          {}\n  token        {}\n  \
         reports as   {}\n  guest actions {}\n",
        c.kind,
        c.name,
        c.version.as_deref().unwrap_or("version unknown"),
        c.state,
        c.id,
        c.url,
        c.token_id,
        c.agent_id,
        if c.guest_actions { "on" } else { "off" }
    );
    if let Some(cause) = &c.state_cause {
        out.push_str(&format!("  cause        {cause}\n"));
    }
    out
}

pub fn describe_check(check: &ConnectionCheck) -> String {
    let mut out = format!("state: {}\n", check.state);
    if let Some(code) = &check.code {
        out.push_str(&format!("code: {code}\n"));
    }
    if let Some(cause) = &check.cause {
        out.push_str(&format!("cause: {cause}\n"));
    }
    if let Some(fp) = &check.presented_fingerprint {
        out.push_str(&format!("presented fingerprint: {fp}\n"));
    }
    if let Some(version) = &check.version {
        out.push_str(&format!("version: {version}\n"));
    }
    if let Some(cluster) = &check.cluster {
        let quorum = match cluster.quorate {
            Some(true) => "quorate",
            Some(false) => "NO QUORUM",
            None => "stand-alone node",
        };
        out.push_str(&format!(
            "cluster: {} ({quorum}), nodes: {}\n",
            cluster.name.as_deref().unwrap_or("-"),
            cluster
                .nodes
                .iter()
                .map(|n| format!("{} {}", n.name, if n.online { "online" } else { "offline" }))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}

pub fn describe_list(list: &ConnectionList) -> String {
    if list.connections.is_empty() {
        return "no connections: add one with `pulsectl connections add proxmox-ve --url ... \
                --token-id ... --fingerprint ...`\n"
            .to_owned();
    }
    let mut rows = vec![vec![
        "ID".to_owned(),
        "KIND".to_owned(),
        "NAME".to_owned(),
        "STATE".to_owned(),
        "URL".to_owned(),
        "EVERY".to_owned(),
        "CHECKED".to_owned(),
    ]];
    for c in &list.connections {
        rows.push(vec![
            c.id.to_string(),
            c.kind.to_string(),
            c.name.clone(),
            c.state.to_string(),
            c.url.clone(),
            format!("{}s", c.cadence_seconds),
            c.checked_at.map_or_else(
                || "-".to_owned(),
                |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
            ),
        ]);
    }
    render_table(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    use crate::cli::{Cli, Command, ConnectionsCommand};

    fn args(extra: &[&str]) -> ConnectionArgs {
        let mut argv = vec![
            "pulsectl",
            "connections",
            "add",
            "proxmox-ve",
            "--url",
            "https://pve.lan",
            "--token-id",
            "pulse@pve!reader",
        ];
        argv.extend_from_slice(extra);
        let cli = Cli::try_parse_from(argv).unwrap();
        let Command::Connections(ConnectionsCommand::Add(args)) = cli.command else {
            panic!("parsed {:?}", cli.command);
        };
        args
    }

    #[test]
    fn the_secret_comes_from_the_environment_or_a_file_never_the_command_line() {
        let a = args(&["--fingerprint", "AB"]);
        let b = body(&a, |name| {
            (name == "PULSE_CONNECTION_TOKEN_SECRET").then(|| "s3cret\n".to_owned())
        })
        .unwrap();
        assert_eq!(b.token_secret, "s3cret");
        assert_eq!(b.fingerprint.as_deref(), Some("AB"));
        let err = body(&a, |_| None).unwrap_err().to_string();
        assert!(err.contains("PULSE_CONNECTION_TOKEN_SECRET"), "{err}");
        let parsed = Cli::try_parse_from([
            "pulsectl",
            "connections",
            "add",
            "proxmox-ve",
            "--url",
            "https://pve.lan",
            "--token-id",
            "x@pve!y",
            "--token-secret",
            "s3cret",
        ]);
        assert!(parsed.is_err(), "a secret on the command line is refused");
        let both = Cli::try_parse_from([
            "pulsectl",
            "connections",
            "add",
            "proxmox-ve",
            "--url",
            "https://pve.lan",
            "--token-id",
            "x@pve!y",
            "--fingerprint",
            "AB",
            "--public-ca",
        ]);
        assert!(both.is_err(), "one way of trusting the certificate");
    }

    #[test]
    fn guest_actions_are_off_unless_asked_for_and_switched_by_id() {
        let env = |_: &str| Some("s".to_owned());
        assert!(!body(&args(&["--public-ca"]), env).unwrap().guest_actions);
        assert!(
            body(&args(&["--public-ca", "--guest-actions"]), env)
                .unwrap()
                .guest_actions
        );
        let cli =
            Cli::try_parse_from(["pulsectl", "connections", "guest-actions", "abc", "on"]).unwrap();
        let Command::Connections(ConnectionsCommand::GuestActions { id, state, json }) =
            cli.command
        else {
            panic!("parsed {:?}", cli.command);
        };
        assert_eq!(
            (id.as_str(), state, json),
            ("abc", crate::cli::OnOff::On, false)
        );
        assert!(
            Cli::try_parse_from(["pulsectl", "connections", "guest-actions", "abc", "maybe"])
                .is_err()
        );
    }
}
