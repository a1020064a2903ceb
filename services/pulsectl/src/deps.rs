//! `--spawn-deps`: a private Postgres cluster and NATS server under `<state-dir>/deps`, started
//! and stopped with the stack.
//!
//! Neither gets a port chosen in advance (it could be taken by the time the server binds it):
//! Postgres listens on its private socket directory only, and NATS binds a port the OS picks,
//! which is read from its log and kept for its restarts.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::child::{ChildSpec, open_log, tail};
use crate::supervisor::{Event, SpawnError, Supervisor};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DepsError {
    #[error(
        "--spawn-deps needs {0}, which is not installed\n  install it (Debian/Ubuntu: \
         `apt-get install postgresql nats-server`) or drop --spawn-deps and use running servers"
    )]
    Missing(&'static str),
    #[error(
        "Postgres refuses to run as root and there is no `postgres` user to run it as; \
         run pulsectl as an ordinary user"
    )]
    NoPostgresUser,
    #[error(
        "the postgres user cannot reach {dir}: {blocked} is not searchable by it\n  \
         use a --state-dir the postgres user can enter (e.g. under /var/tmp)"
    )]
    NotTraversable { dir: PathBuf, blocked: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("initdb failed ({status}):\n{log}")]
    InitDb { status: String, log: String },
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("{name} did not start: {why}\n{log}")]
    NotReady {
        name: &'static str,
        why: String,
        log: String,
    },
}

/// Where the private servers listen.
#[derive(Debug, Clone)]
pub struct PrivateDeps {
    pub database_url: String,
    pub nats_url: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tools {
    pub initdb: PathBuf,
    pub postgres: PathBuf,
    pub nats_server: PathBuf,
}

/// `name` in the directories of `path_var` (a `PATH` value).
pub fn find_on_path(name: &str, path_var: Option<&OsString>) -> Option<PathBuf> {
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `/usr/lib/postgresql/<major>/bin`, newest first.
fn versioned_postgres_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.is_dir())
        .collect();
    dirs.sort_by_key(|(major, _)| std::cmp::Reverse(*major));
    dirs.into_iter().map(|(_, dir)| dir).collect()
}

/// initdb and postgres from one installation (PATH first, then `/usr/lib/postgresql/*/bin`,
/// where Debian keeps them off PATH), and nats-server from PATH.
pub fn find_tools(path_var: Option<&OsString>, postgres_root: &Path) -> Result<Tools, DepsError> {
    let mut pg_dirs: Vec<PathBuf> = Vec::new();
    if let Some(initdb) = find_on_path("initdb", path_var) {
        // A PATH entry is often a symlink into the real bin directory, where postgres lives.
        let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
        pg_dirs.extend(real.parent().map(Path::to_path_buf));
    }
    pg_dirs.extend(versioned_postgres_dirs(postgres_root));
    let (initdb, postgres) = pg_dirs
        .iter()
        .map(|dir| (dir.join("initdb"), dir.join("postgres")))
        .find(|(initdb, postgres)| initdb.is_file() && postgres.is_file())
        .ok_or(DepsError::Missing("Postgres (initdb and postgres)"))?;
    let nats_server =
        find_on_path("nats-server", path_var).ok_or(DepsError::Missing("nats-server"))?;
    Ok(Tools {
        initdb,
        postgres,
        nats_server,
    })
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DepsError {
    let what = what.into();
    move |source| DepsError::Io { what, source }
}

/// Postgres will not run as root: as root, run it as the `postgres` user.
fn postgres_user() -> Result<Option<(u32, u32)>, DepsError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .ok_or(DepsError::NoPostgresUser)?;
    Ok(Some((user.uid.as_raw(), user.gid.as_raw())))
}

/// The first ancestor of `dir` that `uid`/`gid` may not search, if any.
fn blocked_ancestor(dir: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    dir.ancestors().skip(1).find_map(|ancestor| {
        let meta = std::fs::metadata(ancestor).ok()?;
        let mode = meta.mode();
        let searchable = if meta.uid() == uid {
            mode & 0o100 != 0
        } else if meta.gid() == gid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        (!searchable).then(|| ancestor.to_path_buf())
    })
}

/// Starts both servers under `supervisor` and waits until they accept connections.
pub async fn start(
    supervisor: &mut Supervisor,
    state_dir: &Path,
    logs_dir: &Path,
) -> Result<PrivateDeps, DepsError> {
    let path_var = std::env::var_os("PATH");
    let tools = find_tools(path_var.as_ref(), Path::new("/usr/lib/postgresql"))?;
    let database_url = start_postgres(supervisor, &tools, state_dir, logs_dir).await?;
    let nats_url = start_nats(supervisor, &tools, state_dir, logs_dir).await?;
    Ok(PrivateDeps {
        database_url,
        nats_url,
    })
}

async fn start_postgres(
    supervisor: &mut Supervisor,
    tools: &Tools,
    state_dir: &Path,
    logs_dir: &Path,
) -> Result<String, DepsError> {
    let root = state_dir.join("deps").join("postgres");
    let data = root.join("data");
    let sockets = root.join("run");
    let log_path = logs_dir.join("postgres.log");
    std::fs::create_dir_all(&sockets).map_err(io(format!("creating {}", sockets.display())))?;
    let run_as = postgres_user()?;
    if let Some((uid, gid)) = run_as {
        if let Some(blocked) = blocked_ancestor(&root, uid, gid) {
            return Err(DepsError::NotTraversable { dir: root, blocked });
        }
        for dir in [&root, &sockets] {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid))
                .map_err(io(format!("handing {} to postgres", dir.display())))?;
        }
    }

    if !data.join("PG_VERSION").is_file() {
        println!(
            "initialising a private Postgres cluster in {}",
            data.display()
        );
        let log = append(&log_path)?;
        let mut initdb = tokio::process::Command::new(&tools.initdb);
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(io("opening postgres.log"))?)
            .stderr(log);
        if let Some((uid, gid)) = run_as {
            initdb.uid(uid).gid(gid);
        }
        let status = initdb.status().await.map_err(io("running initdb"))?;
        if !status.success() {
            return Err(DepsError::InitDb {
                status: status.to_string(),
                log: tail(&log_path, 15).join("\n"),
            });
        }
    }

    let mut args: Vec<OsString> = vec!["-D".into(), data.into_os_string()];
    args.extend(["-p".into(), "5432".into()]);
    args.extend(["-k".into(), sockets.clone().into_os_string()]);
    // No TCP listener: the socket directory is private to this stack.
    args.extend(["-c".into(), "listen_addresses=".into()]);
    supervisor.start(ChildSpec {
        name: "postgres".to_owned(),
        program: tools.postgres.clone(),
        args,
        env: Vec::new(),
        env_remove: Vec::new(),
        log_path: log_path.clone(),
        // SIGINT is Postgres's fast shutdown; SIGTERM would wait for every session to end.
        stop_signal: Signal::SIGINT,
        run_as,
    })?;

    let host = socket_host(&sockets);
    let url = format!("postgres://postgres@{host}/postgres");
    wait_ready(supervisor, "postgres", &log_path, || async {
        let mut config: tokio_postgres::Config = url.parse().ok()?;
        config.connect_timeout(Duration::from_secs(1));
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.ok()?;
        drop(client);
        let _ = connection.await;
        Some(())
    })
    .await?;
    println!("private Postgres listening in {}", sockets.display());
    Ok(format!("postgres://postgres@{host}/pulse"))
}

async fn start_nats(
    supervisor: &mut Supervisor,
    tools: &Tools,
    state_dir: &Path,
    logs_dir: &Path,
) -> Result<String, DepsError> {
    let store = state_dir.join("deps").join("nats");
    std::fs::create_dir_all(&store).map_err(io(format!("creating {}", store.display())))?;
    let log_path = logs_dir.join("nats.log");
    let from = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0);
    let mut args: Vec<OsString> = vec!["-js".into(), "-sd".into(), store.into_os_string()];
    args.extend(["-a".into(), "127.0.0.1".into()]);
    // -1: a port the OS picks.
    args.extend(["-p".into(), "-1".into()]);
    supervisor.start(ChildSpec {
        name: "nats".to_owned(),
        program: tools.nats_server.clone(),
        args,
        env: Vec::new(),
        env_remove: Vec::new(),
        log_path: log_path.clone(),
        stop_signal: Signal::SIGTERM,
        run_as: None,
    })?;
    wait_ready(supervisor, "nats", &log_path, || async {
        let addr = nats_client_addr(&log_path, from)?;
        tokio::net::TcpStream::connect(addr).await.ok().map(drop)
    })
    .await?;
    let addr = nats_client_addr(&log_path, from).ok_or_else(|| DepsError::NotReady {
        name: "nats",
        why: "its client address is not in its log".to_owned(),
        log: tail(&log_path, 15).join("\n"),
    })?;
    // A restart binds the same port: the services know this one.
    supervisor.respec("nats", |spec| {
        if let Some(port) = spec.args.iter().position(|arg| arg == "-1") {
            spec.args[port] = addr.port().to_string().into();
        }
    });
    println!("private NATS listening on {addr}");
    Ok(format!("nats://{addr}"))
}

/// A socket directory as the host of a Postgres URL (percent-encoded, as libpq reads it).
fn socket_host(dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    dir.as_os_str()
        .as_bytes()
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The client address NATS logged once it listened (after byte `from` of its log).
fn nats_client_addr(log_path: &Path, from: u64) -> Option<std::net::SocketAddr> {
    const LISTENING: &str = "Listening for client connections on ";
    let text = std::fs::read(log_path).ok()?;
    let start = usize::try_from(from).ok()?.min(text.len());
    String::from_utf8_lossy(&text[start..])
        .lines()
        .find_map(|line| line.split_once(LISTENING)?.1.trim().parse().ok())
}

fn append(path: &Path) -> Result<std::fs::File, DepsError> {
    open_log(path).map_err(io(format!("opening {}", path.display())))
}

/// Polls `probe` until it answers, the process exits, or the deadline passes.
async fn wait_ready<F, Fut>(
    supervisor: &mut Supervisor,
    name: &'static str,
    log_path: &Path,
    probe: F,
) -> Result<(), DepsError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        for event in supervisor.poll() {
            let Event::Exited {
                name: exited,
                status,
                ..
            } = event
            else {
                continue;
            };
            if exited == name {
                return Err(DepsError::NotReady {
                    name,
                    why: format!("it exited ({status})"),
                    log: tail(log_path, 15).join("\n"),
                });
            }
        }
        if probe().await.is_some() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DepsError::NotReady {
                name,
                why: format!(
                    "not accepting connections after {} s",
                    READY_TIMEOUT.as_secs()
                ),
                log: tail(log_path, 15).join("\n"),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pulsectl-deps-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn exe(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn postgres_is_found_off_path_newest_version_first() {
        let dir = scratch("tools");
        let lib = dir.join("lib/postgresql");
        for major in ["13", "15"] {
            exe(&lib.join(major).join("bin/initdb"));
            exe(&lib.join(major).join("bin/postgres"));
        }
        exe(&dir.join("bin/nats-server"));
        let path = OsString::from(dir.join("bin"));
        let tools = find_tools(Some(&path), &lib).unwrap();
        assert_eq!(tools.initdb, lib.join("15/bin/initdb"));
        assert_eq!(tools.postgres, lib.join("15/bin/postgres"));
        assert_eq!(tools.nats_server, dir.join("bin/nats-server"));

        let empty = OsString::from(dir.join("nothing"));
        assert!(matches!(
            find_tools(Some(&empty), &lib),
            Err(DepsError::Missing("nats-server"))
        ));
        assert!(matches!(
            find_tools(Some(&path), &dir.join("none")),
            Err(DepsError::Missing(_))
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_socket_directory_is_a_url_host_postgres_understands() {
        let host = socket_host(Path::new("/srv/pulse state/deps/postgres/run"));
        assert_eq!(host, "%2Fsrv%2Fpulse%20state%2Fdeps%2Fpostgres%2Frun");
        let url = format!("postgres://postgres@{host}/pulse");
        let config: tokio_postgres::Config = url.parse().unwrap();
        assert_eq!(
            config.get_hosts(),
            [tokio_postgres::config::Host::Unix(
                "/srv/pulse state/deps/postgres/run".into()
            )]
        );
        assert_eq!(config.get_dbname(), Some("pulse"));
    }

    #[test]
    fn the_nats_port_is_read_from_this_start_of_its_log() {
        let dir = scratch("nats-log");
        let log = dir.join("nats.log");
        let old = "[1] [INF] Listening for client connections on 127.0.0.1:4000\n";
        std::fs::write(&log, old).unwrap();
        let from = old.len() as u64;
        assert_eq!(nats_client_addr(&log, from), None);
        let new = "[2] [INF] Starting nats-server\n\
                   [2] [INF] Listening for client connections on 127.0.0.1:41234\n";
        std::fs::write(&log, format!("{old}{new}")).unwrap();
        assert_eq!(nats_client_addr(&log, from), "127.0.0.1:41234".parse().ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_private_directory_blocks_other_users() {
        let dir = scratch("traverse");
        let inner = dir.join("private/deps/postgres");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::set_permissions(dir.join("private"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        let me = nix::unistd::geteuid().as_raw();
        // Some uid and gid that own nothing here.
        assert_eq!(
            blocked_ancestor(&inner, 54_321, 54_321),
            Some(dir.join("private"))
        );
        assert_eq!(
            blocked_ancestor(&inner, me, nix::unistd::getegid().as_raw()),
            None
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
