//! Which paths a host read never opens: credentials and key material. This is the one owner of
//! the rule: the exec classifier applies it to every argument of a command (so the model-runner
//! and the relay refuse a command naming a secret before it travels), and the agent applies it
//! again to every path it opens, as asked AND in canonical form (symlinks and `..` resolved), so
//! neither a link named `notes.txt` pointing at `/etc/shadow` nor a key behind
//! `/tmp/../root/.ssh` gets through, and a link that merely carries a secret's name is refused
//! too. What is here is purely lexical; resolving links is the agent's part.
//!
//! Secret by location:
//! - `/etc/shadow`, `/etc/gshadow` (and their `-` backups), `/etc/security/opasswd`,
//!   `/etc/ssl/private/...`, the host's SSH keys `/etc/ssh/ssh_host_*_key`;
//! - `/proc/kcore`, a process's `environ` and `mem` under `/proc`;
//! - anything in a `.ssh` directory (and the directory itself) except `known_hosts`,
//!   `authorized_keys`, `config` and public keys (`*.pub`);
//! - anything under `.gnupg`, `.password-store`, `.aws`, `.config/gcloud`, and the files
//!   `.docker/config.json` and `.kube/config`;
//! - the agent's own token file.
//!
//! Secret by name: `.env`, `.env.*` and `*.env`, `.netrc`, `.pgpass`, `.git-credentials`,
//! `.my.cnf`, private keys by their usual names (`id_rsa`, `id_dsa`, `id_ecdsa`, `id_ed25519`
//! and their `_sk` forms), and `*.key`, `*.kdbx`, `*.keytab`, `*.p12`, `*.pfx`, `*.jks`,
//! `*.keystore`.
//!
//! Secret by content: a file read (`file`, `tail`) whose text holds a PEM private key is
//! refused whatever its name (`*.pem` bundles, keys under unusual names).

use std::path::{Component, Path, PathBuf};

/// Marker of a PEM private key in text.
pub const PRIVATE_KEY_MARKER: &str = "PRIVATE KEY-----";

const SECRET_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/proc/kcore",
];
const SECRET_DIRS: &[&str] = &["/etc/ssl/private"];
/// Directories whose every entry is secret, wherever they are.
const SECRET_DIR_NAMES: &[&str] = &[".gnupg", ".password-store", ".aws"];
const SECRET_NAMES: &[&str] = &[
    ".env",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    ".my.cnf",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
];
const SECRET_EXTENSIONS: &[&str] = &[
    "env", "key", "kdbx", "keytab", "p12", "pfx", "jks", "keystore",
];
/// What may be read inside a `.ssh` directory.
const SSH_PUBLIC: &[&str] = &[
    "known_hosts",
    "known_hosts.old",
    "authorized_keys",
    "authorized_keys2",
    "config",
];

/// The normal components of `path` (`.` dropped; `..` kept: the canonical form settles it).
fn names(path: &Path) -> Vec<&str> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => name.to_str(),
            Component::ParentDir => Some(".."),
            _ => None,
        })
        .collect()
}

/// Why `path`, as written, names a secret; `None` when it does not. Purely lexical: callers
/// also check the canonical path ([`check`]).
pub fn secret_reason(path: &Path, own_secrets: &[PathBuf]) -> Option<String> {
    let text = path.to_string_lossy();
    if own_secrets.iter().any(|own| own == path) {
        return Some("it is the agent's own token".to_owned());
    }
    if let Some(inner) = through_proc_root(path) {
        return secret_reason(&inner, own_secrets);
    }
    if SECRET_FILES.contains(&text.as_ref())
        || SECRET_DIRS
            .iter()
            .any(|dir| text == *dir || text.starts_with(&format!("{dir}/")))
    {
        return Some(format!("{text} holds credentials"));
    }
    let names = names(path);
    if path.starts_with("/proc")
        && names
            .last()
            .is_some_and(|last| matches!(*last, "environ" | "mem"))
    {
        return Some("a process's environment and memory are never read".to_owned());
    }
    if path.starts_with("/etc/ssh")
        && names
            .last()
            .is_some_and(|last| last.starts_with("ssh_host_") && last.ends_with("_key"))
    {
        return Some("it is a host private key".to_owned());
    }
    for (i, name) in names.iter().enumerate() {
        let rest = &names[i + 1..];
        if *name == ".ssh" {
            let public = match rest {
                [file] => SSH_PUBLIC.contains(file) || file.ends_with(".pub"),
                _ => false,
            };
            if !public {
                return Some(
                    "only known_hosts, authorized_keys, config and *.pub are read in .ssh"
                        .to_owned(),
                );
            }
        }
        if SECRET_DIR_NAMES.contains(name) {
            return Some(format!("{name} holds credentials"));
        }
        if (*name == ".docker" && rest == ["config.json"])
            || (*name == ".kube" && rest == ["config"])
            || (*name == ".config" && rest.first() == Some(&"gcloud"))
        {
            return Some("it holds registry or cluster credentials".to_owned());
        }
    }
    let file = names.last()?;
    let extension = file.rsplit_once('.').map(|(_, ext)| ext);
    if SECRET_NAMES.contains(file)
        || file.starts_with(".env.")
        || extension.is_some_and(|ext| SECRET_EXTENSIONS.contains(&ext))
    {
        return Some(format!("{file} is a secret file by its name"));
    }
    None
}

/// The path a `/proc/<pid>/root/...` or `/proc/<pid>/cwd/...` path (also under `task/<tid>`)
/// reaches, read as absolute: a process's root is `/` for every process on the host, and the
/// working directory of the commands the agent runs is `/` as well.
fn through_proc_root(path: &Path) -> Option<PathBuf> {
    let names = names(path);
    if !path.is_absolute() || names.first() != Some(&"proc") {
        return None;
    }
    let at = match names.get(2..) {
        Some(["root" | "cwd", ..]) => 3,
        Some(["task", _, "root" | "cwd", ..]) => 5,
        _ => return None,
    };
    Some(Path::new("/").join(names[at..].join("/")))
}

/// `path` with `.` and `..` resolved lexically (no filesystem access; `..` at the root stays
/// at the root, as the kernel does).
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The paths a command argument may name, each as written (relative ones against `/`, the
/// commands' working directory): the word itself, the value of `--opt=value`, and the path a
/// word carries after its first `/` (an option's attached value `-f/etc/x`, `@/etc/x`,
/// `file:///etc/x`). Callers that can resolve links check these too.
pub fn argument_paths(word: &str) -> Vec<PathBuf> {
    let root = Path::new("/");
    let mut paths = vec![root.join(word)];
    if let Some((_, value)) = word.split_once('=') {
        paths.push(root.join(value));
    }
    if let Some(at) = word.find('/').filter(|at| *at > 0) {
        paths.push(PathBuf::from(&word[at..]));
    }
    paths
}

/// Why the command argument `word` names a secret; `None` when none of its
/// [`argument_paths`], as written or lexically resolved, is one.
pub fn argument_secret(word: &str, own_secrets: &[PathBuf]) -> Option<String> {
    if let Some(reason) = secret_reason(Path::new(word), own_secrets) {
        return Some(format!("{word} is refused: {reason}"));
    }
    argument_paths(word).iter().find_map(|path| {
        secret_reason(path, own_secrets)
            .or_else(|| secret_reason(&lexical(path), own_secrets))
            .map(|reason| format!("{word} is refused: {reason}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_named_and_ordinary_files_are_not() {
        let token = PathBuf::from("/var/lib/pulse/agent/token");
        let own = std::slice::from_ref(&token);
        for secret in [
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/ssl/private/site.key",
            "/etc/ssh/ssh_host_ed25519_key",
            "/root/.ssh/id_rsa",
            "/root/.ssh",
            "/home/a/.ssh/backup/key",
            "/home/a/.ssh/deploy",
            "/home/a/.gnupg/pubring.kbx",
            "/home/a/.aws/credentials",
            "/home/a/.docker/config.json",
            "/home/a/.kube/config",
            "/srv/app/.env",
            "/srv/app/.env.production",
            "/srv/app/prod.env",
            "/srv/app/tls/server.key",
            "/home/a/vault.kdbx",
            "/home/a/.pgpass",
            "/proc/1/environ",
            "/proc/self/task/7/mem",
            "/tmp/id_ed25519",
            "/var/lib/pulse/agent/token",
        ] {
            assert!(
                secret_reason(Path::new(secret), own).is_some(),
                "{secret} should be secret"
            );
        }
        for ordinary in [
            "/etc/passwd",
            "/etc/nginx/nginx.conf",
            "/var/log/syslog",
            "/root/.ssh/known_hosts",
            "/root/.ssh/authorized_keys",
            "/root/.ssh/id_rsa.pub",
            "/etc/ssh/ssh_host_ed25519_key.pub",
            "/etc/ssh/sshd_config",
            "/srv/app/environment.txt",
            "/srv/app/keys.txt",
            "/proc/meminfo",
            "/var/lib/pulse/agent/logs/web.log",
        ] {
            assert_eq!(
                secret_reason(Path::new(ordinary), own),
                None,
                "{ordinary} should be readable"
            );
        }
    }

    #[test]
    fn arguments_name_secrets_in_every_spelling() {
        for word in [
            "/etc/shadow",
            "etc/shadow",
            "/tmp/../etc/shadow",
            "/etc//./shadow",
            "--file=/etc/shadow",
            "-f/etc/shadow",
            "@/etc/shadow",
            "file=@/etc/shadow",
            "file:///etc/shadow",
            "/proc/1/environ",
            "/proc/*/environ",
            "id_rsa",
            ".ssh",
            "/root/.ssh/../.ssh/id_ed25519",
            "/proc/1/root/etc/shadow",
            "/proc/self/cwd/etc/shadow",
            "/proc/self/task/1/root/root/.ssh/id_rsa",
            "/proc/1/root/proc/1/environ",
        ] {
            assert!(
                argument_secret(word, &[]).is_some(),
                "{word} should be secret"
            );
        }
        for word in [
            "-h",
            "/etc/passwd",
            "--sort=-%mem",
            "pid,comm,%mem",
            "+%Y/%m/%d",
            "http://localhost:8080/health",
            "/var/log/../log/syslog",
            "/proc/1/root/etc/hosts",
            "/proc/self/status",
        ] {
            assert_eq!(
                argument_secret(word, &[]),
                None,
                "{word} should be readable"
            );
        }
    }
}
