//! `pulse_read` file, tail and find on the host: read-only by construction, so they need no
//! flag, but every path passes the secret-path rule first (as asked and canonical), files are
//! opened without following a final symlink, only regular files are read, text holding a
//! private key is refused, and what is returned is redacted.

use std::collections::VecDeque;
use std::path::PathBuf;

use nix::fcntl::OFlag;
use pulse_capabilities::read_redaction::redact;
use pulse_domain::agent_protocol::{
    FoundEntry, MAX_FIND_DEPTH, MAX_FIND_ENTRIES, MAX_LOG_LINES, MAX_PATH_BYTES, MAX_READ_BYTES,
    ReadOutput, ReadRefusalCode,
};
use tokio::io::AsyncReadExt;

use crate::reads::{ReadRefused, tail_file};
use crate::secret_paths::{self, PRIVATE_KEY_MARKER, PathRefusal};

/// Directory entries a find looks at, per entry it may return, before it gives up.
const FIND_VISITS_PER_ENTRY: usize = 50;

fn invalid(reason: impl Into<String>) -> ReadRefused {
    ReadRefused::coded(ReadRefusalCode::InvalidRead, reason)
}

fn bounded(name: &str, value: u32, max: u32) -> Result<usize, ReadRefused> {
    if value == 0 || value > max {
        return Err(invalid(format!("{name} must be 1 to {max}")));
    }
    Ok(value as usize)
}

/// The host-file reads of one agent.
#[derive(Debug, Clone, Default)]
pub struct HostFiles {
    /// Paths never read (the agent's token file).
    pub own_secrets: Vec<PathBuf>,
}

impl HostFiles {
    async fn resolve(&self, path: &str) -> Result<PathBuf, ReadRefused> {
        if path.len() > MAX_PATH_BYTES {
            return Err(invalid(format!(
                "paths are limited to {MAX_PATH_BYTES} bytes"
            )));
        }
        secret_paths::check(path, &self.own_secrets)
            .await
            .map_err(|refusal| match refusal {
                PathRefusal::Secret(reason) => {
                    ReadRefused::coded(ReadRefusalCode::SecretPath, reason)
                }
                PathRefusal::Invalid(reason) => invalid(reason),
            })
    }

    /// The canonical path of a regular file.
    async fn regular_file(&self, path: &str) -> Result<PathBuf, ReadRefused> {
        let canonical = self.resolve(path).await?;
        let metadata = tokio::fs::metadata(&canonical)
            .await
            .map_err(|e| invalid(format!("cannot read {path}: {e}")))?;
        if metadata.is_dir() {
            return Err(invalid(format!(
                "{path} is a directory; list it with action find"
            )));
        }
        if !metadata.is_file() {
            return Err(invalid(format!(
                "{path} is not a regular file (devices, sockets and pipes are not read)"
            )));
        }
        Ok(canonical)
    }

    /// The first `max_bytes` of a regular file.
    pub async fn file(&self, path: &str, max_bytes: u32) -> Result<ReadOutput, ReadRefused> {
        let max_bytes = bounded("max_bytes", max_bytes, MAX_READ_BYTES)?;
        let canonical = self.regular_file(path).await?;
        let mut file = tokio::fs::OpenOptions::new()
            .read(true)
            // The canonical path has no symlink left; one swapped in since is not followed.
            .custom_flags(OFlag::O_NOFOLLOW.bits())
            .open(&canonical)
            .await
            .map_err(|e| failed(path, e))?;
        let size = file.metadata().await.map_err(|e| failed(path, e))?.len();
        let mut bytes = Vec::new();
        let read = (&mut file)
            .take(max_bytes as u64 + 1)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| failed(path, e))?;
        let truncated = read > max_bytes;
        bytes.truncate(max_bytes);
        let text = String::from_utf8_lossy(&bytes);
        refuse_private_key(path, &text)?;
        Ok(ReadOutput::File {
            path: canonical.display().to_string(),
            text: redact(&text),
            size,
            truncated,
        })
    }

    /// The last `max_lines` lines within the last `max_bytes` of a regular file.
    pub async fn tail(
        &self,
        path: &str,
        max_lines: u32,
        max_bytes: u32,
    ) -> Result<ReadOutput, ReadRefused> {
        let max_lines = bounded("max_lines", max_lines, MAX_LOG_LINES)?;
        let max_bytes = bounded("max_bytes", max_bytes, MAX_READ_BYTES)?;
        let canonical = self.regular_file(path).await?;
        let (lines, truncated) = tail_file(&canonical, max_lines, max_bytes)
            .await
            .map_err(|e| failed(path, e))?;
        for line in &lines {
            refuse_private_key(path, line)?;
        }
        Ok(ReadOutput::Tail {
            path: canonical.display().to_string(),
            lines: lines.iter().map(|line| redact(line)).collect(),
            truncated,
        })
    }

    /// Entries under a directory, breadth first, sorted by name within a directory; symlinks
    /// are listed, never followed; secret directories are listed, never entered.
    pub async fn find(
        &self,
        path: &str,
        name_pattern: Option<&str>,
        max_entries: u32,
        max_depth: u32,
    ) -> Result<ReadOutput, ReadRefused> {
        let max_entries = bounded("max_entries", max_entries, MAX_FIND_ENTRIES)?;
        let max_depth = bounded("max_depth", max_depth, MAX_FIND_DEPTH)?;
        if name_pattern.is_some_and(|p| p.len() > MAX_PATH_BYTES) {
            return Err(invalid("the name pattern is too long"));
        }
        let root = self.resolve(path).await?;
        if !tokio::fs::metadata(&root)
            .await
            .map_err(|e| invalid(format!("cannot read {path}: {e}")))?
            .is_dir()
        {
            return Err(invalid(format!(
                "{path} is not a directory; read it with action file"
            )));
        }
        let mut entries = Vec::new();
        let mut truncated = false;
        let mut visits = 0usize;
        let mut queue = VecDeque::from([(root.clone(), 1usize)]);
        'walk: while let Some((dir, depth)) = queue.pop_front() {
            let Ok(mut listing) = tokio::fs::read_dir(&dir).await else {
                continue;
            };
            let mut children = Vec::new();
            while let Ok(Some(entry)) = listing.next_entry().await {
                children.push(entry);
            }
            children.sort_by_key(|entry| entry.file_name());
            for entry in children {
                visits += 1;
                if visits > max_entries * FIND_VISITS_PER_ENTRY {
                    truncated = true;
                    break 'walk;
                }
                let Ok(kind) = entry.file_type().await else {
                    continue;
                };
                let child = entry.path();
                let name = entry.file_name();
                let matches =
                    name_pattern.is_none_or(|pattern| glob_match(pattern, &name.to_string_lossy()));
                if matches {
                    if entries.len() == max_entries {
                        truncated = true;
                        break 'walk;
                    }
                    let size = entry.metadata().await.map(|m| m.len()).unwrap_or(0);
                    entries.push(FoundEntry {
                        path: child.display().to_string(),
                        kind: if kind.is_dir() {
                            "dir"
                        } else if kind.is_symlink() {
                            "symlink"
                        } else if kind.is_file() {
                            "file"
                        } else {
                            "other"
                        }
                        .to_owned(),
                        size,
                    });
                }
                if kind.is_dir() {
                    if depth >= max_depth {
                        truncated = true;
                    } else if secret_paths::secret_reason(&child, &self.own_secrets).is_none() {
                        queue.push_back((child, depth + 1));
                    }
                }
            }
        }
        Ok(ReadOutput::Find {
            path: root.display().to_string(),
            entries,
            truncated,
        })
    }
}

fn failed(path: &str, error: std::io::Error) -> ReadRefused {
    ReadRefused::coded(
        ReadRefusalCode::ReadFailed,
        format!("cannot read {path}: {error}"),
    )
}

fn refuse_private_key(path: &str, text: &str) -> Result<(), ReadRefused> {
    if text.contains(PRIVATE_KEY_MARKER) {
        return Err(ReadRefused::coded(
            ReadRefusalCode::SecretPath,
            format!("{path} is refused: it holds a private key"),
        ));
    }
    Ok(())
}

/// Whether `name` matches `pattern`, where `*` is any run of characters and `?` one.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (pattern, name): (Vec<char>, Vec<char>) =
        (pattern.chars().collect(), name.chars().collect());
    let (mut p, mut n) = (0, 0);
    // Where the last `*` was, and the name position it currently stands for.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        for (pattern, name, expected) in [
            ("*.log", "syslog.log", true),
            ("*.log", "syslog.log.1", false),
            ("*.log*", "syslog.log.1", true),
            ("sys?og", "syslog", true),
            ("*", "", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("nginx", "nginx", true),
            ("nginx", "nginx.conf", false),
        ] {
            assert_eq!(glob_match(pattern, name), expected, "{pattern} {name}");
        }
    }
}
