use std::fmt;
use std::path::PathBuf;

use super::error::DockerError;

pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
const DEFAULT_TCP_PORT: u16 = 2375;

/// Where the engine listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerEndpoint {
    Unix(PathBuf),
    /// Plain TCP (no TLS: `DOCKER_TLS_VERIFY` endpoints are not supported).
    Tcp {
        host: String,
        port: u16,
    },
}

impl Default for DockerEndpoint {
    fn default() -> Self {
        Self::Unix(PathBuf::from(DEFAULT_SOCKET))
    }
}

impl DockerEndpoint {
    /// Parses a `DOCKER_HOST` value; `None` or empty means the default unix socket.
    pub fn from_docker_host(value: Option<&str>) -> Result<Self, DockerError> {
        let Some(raw) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return Ok(Self::default());
        };
        let invalid = |reason: &str| DockerError::InvalidEndpoint {
            value: raw.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = raw.strip_prefix("unix://") {
            if path.is_empty() {
                return Err(invalid("empty socket path"));
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        let rest = raw
            .strip_prefix("tcp://")
            .or_else(|| raw.strip_prefix("http://"))
            .ok_or_else(|| invalid("only unix:// and tcp:// endpoints are supported"))?;
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(invalid("missing host"));
        }
        // [v6]:port, host:port, or host alone.
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, tail) = v6
                .split_once(']')
                .ok_or_else(|| invalid("unterminated ipv6 literal"))?;
            let port = match tail.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| invalid("invalid port"))?,
                None if tail.is_empty() => DEFAULT_TCP_PORT,
                None => return Err(invalid("invalid port")),
            };
            (host.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (
                    host.to_owned(),
                    port.parse().map_err(|_| invalid("invalid port"))?,
                ),
                None => (authority.to_owned(), DEFAULT_TCP_PORT),
            }
        };
        if host.is_empty() {
            return Err(invalid("missing host"));
        }
        Ok(Self::Tcp { host, port })
    }

    /// Reads `DOCKER_HOST` from the environment (read only).
    pub fn from_env() -> Result<Self, DockerError> {
        let value = std::env::var("DOCKER_HOST").ok();
        Self::from_docker_host(value.as_deref())
    }

    /// The `Host` header value.
    pub(crate) fn host_header(&self) -> String {
        match self {
            Self::Unix(_) => "docker".to_owned(),
            Self::Tcp { host, port } if host.contains(':') => format!("[{host}]:{port}"),
            Self::Tcp { host, port } => format!("{host}:{port}"),
        }
    }
}

impl fmt::Display for DockerEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "unix://{}", path.display()),
            Self::Tcp { .. } => write!(f, "tcp://{}", self.host_header()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_docker_host_values() {
        assert_eq!(
            DockerEndpoint::from_docker_host(None).ok(),
            Some(DockerEndpoint::Unix(PathBuf::from(DEFAULT_SOCKET)))
        );
        assert_eq!(
            DockerEndpoint::from_docker_host(Some("unix:///run/user/1000/docker.sock")).ok(),
            Some(DockerEndpoint::Unix(PathBuf::from(
                "/run/user/1000/docker.sock"
            )))
        );
        assert_eq!(
            DockerEndpoint::from_docker_host(Some("tcp://10.0.0.5:2376")).ok(),
            Some(DockerEndpoint::Tcp {
                host: "10.0.0.5".into(),
                port: 2376
            })
        );
        assert_eq!(
            DockerEndpoint::from_docker_host(Some("tcp://docker-host")).ok(),
            Some(DockerEndpoint::Tcp {
                host: "docker-host".into(),
                port: 2375
            })
        );
        assert_eq!(
            DockerEndpoint::from_docker_host(Some("tcp://[::1]:2375")).ok(),
            Some(DockerEndpoint::Tcp {
                host: "::1".into(),
                port: 2375
            })
        );
        for bad in [
            "npipe:////./pipe/docker_engine",
            "tcp://",
            "tcp://h:notaport",
            "unix://",
            "ssh://me@h",
        ] {
            assert!(
                matches!(
                    DockerEndpoint::from_docker_host(Some(bad)),
                    Err(DockerError::InvalidEndpoint { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn displays_endpoints() {
        assert_eq!(
            DockerEndpoint::default().to_string(),
            "unix:///var/run/docker.sock"
        );
        let v6 = DockerEndpoint::Tcp {
            host: "::1".into(),
            port: 2375,
        };
        assert_eq!(v6.to_string(), "tcp://[::1]:2375");
    }
}
