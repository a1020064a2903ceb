//! Health checks: `http` (GET, expected status), `tcp` (connect), `exec` (exit 0) and
//! `file-absent` (healthy while a path does not exist).

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthCheck {
    Http { url: String, expect_status: u16 },
    Tcp { address: String },
    Exec { command: String, args: Vec<String> },
    FileAbsent { path: PathBuf },
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckResult {
    pub at: DateTime<Utc>,
    pub healthy: bool,
    pub message: String,
}

/// Runs `check` once; never takes longer than `timeout`.
pub async fn evaluate(
    check: &HealthCheck,
    timeout: Duration,
    http: &reqwest::Client,
) -> CheckResult {
    let outcome = tokio::time::timeout(timeout, run(check, timeout, http)).await;
    let (healthy, message) = match outcome {
        Ok(result) => result,
        Err(_) => (false, format!("timed out after {} ms", timeout.as_millis())),
    };
    CheckResult {
        at: Utc::now(),
        healthy,
        message,
    }
}

async fn run(check: &HealthCheck, timeout: Duration, http: &reqwest::Client) -> (bool, String) {
    match check {
        HealthCheck::Http { url, expect_status } => {
            match http.get(url).timeout(timeout).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    (
                        status == *expect_status,
                        format!("GET {url} answered {status} (expected {expect_status})"),
                    )
                }
                Err(error) => (false, format!("GET {url} failed: {error}")),
            }
        }
        HealthCheck::Tcp { address } => match tokio::net::TcpStream::connect(address).await {
            Ok(_) => (true, format!("connected to {address}")),
            Err(error) => (false, format!("cannot connect to {address}: {error}")),
        },
        HealthCheck::Exec { command, args } => {
            let status = tokio::process::Command::new(command)
                .args(args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .status()
                .await;
            match status {
                Ok(status) if status.success() => (true, format!("{command} exited 0")),
                Ok(status) => (false, format!("{command} exited with {status}")),
                Err(error) => (false, format!("{command} could not run: {error}")),
            }
        }
        HealthCheck::FileAbsent { path } => match tokio::fs::try_exists(path).await {
            Ok(false) => (true, format!("{} is absent", path.display())),
            Ok(true) => (false, format!("{} exists", path.display())),
            Err(error) => (false, format!("cannot check {}: {error}", path.display())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn file_absent_follows_the_file() {
        let path = std::env::temp_dir().join(format!("pulse-marker-{}", std::process::id()));
        let check = HealthCheck::FileAbsent { path: path.clone() };
        assert!(
            evaluate(&check, Duration::from_secs(1), &client())
                .await
                .healthy
        );
        std::fs::write(&path, "x").unwrap();
        let result = evaluate(&check, Duration::from_secs(1), &client()).await;
        assert!(!result.healthy);
        assert!(result.message.ends_with("exists"));
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test]
    async fn exec_uses_the_exit_status_and_the_timeout() {
        let ok = HealthCheck::Exec {
            command: "true".into(),
            args: vec![],
        };
        let bad = HealthCheck::Exec {
            command: "false".into(),
            args: vec![],
        };
        let slow = HealthCheck::Exec {
            command: "sleep".into(),
            args: vec!["5".into()],
        };
        let missing = HealthCheck::Exec {
            command: "/nonexistent/x".into(),
            args: vec![],
        };
        let t = Duration::from_millis(300);
        assert!(evaluate(&ok, t, &client()).await.healthy);
        assert!(!evaluate(&bad, t, &client()).await.healthy);
        let timed_out = evaluate(&slow, t, &client()).await;
        assert!(!timed_out.healthy && timed_out.message.contains("timed out"));
        assert!(!evaluate(&missing, t, &client()).await.healthy);
    }

    #[tokio::test]
    async fn tcp_and_http_against_a_local_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0_u8; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        });
        let t = Duration::from_secs(2);
        let tcp = HealthCheck::Tcp {
            address: addr.to_string(),
        };
        assert!(evaluate(&tcp, t, &client()).await.healthy);
        let http_503 = HealthCheck::Http {
            url: format!("http://{addr}/"),
            expect_status: 503,
        };
        assert!(evaluate(&http_503, t, &client()).await.healthy);
        let http_200 = HealthCheck::Http {
            url: format!("http://{addr}/"),
            expect_status: 200,
        };
        let result = evaluate(&http_200, t, &client()).await;
        assert!(!result.healthy && result.message.contains("503"));
        let closed = HealthCheck::Tcp {
            address: "127.0.0.1:1".into(),
        };
        assert!(!evaluate(&closed, t, &client()).await.healthy);
    }
}
