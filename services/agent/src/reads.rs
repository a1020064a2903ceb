//! Bounded live reads: the tail of a supervised service's log file or a container's output,
//! the compacted inspect projection of a container (no env values, allowlisted labels), and the
//! host reads of `pulse_read`: files, tails and finds ([`crate::host_files`]) and read-only
//! commands ([`crate::read_exec`], only with `--allow-read-exec`).

use std::io::SeekFrom;
use std::path::{Path, PathBuf};

use pulse_domain::agent_protocol::{
    LogLine, LogSource, MAX_LOG_BYTES, MAX_LOG_LINES, ReadOutput, ReadRefusalCode, ReadRequest,
    bounded_text,
};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::docker::logs::MAX_LINE_BYTES;
use crate::docker::{DockerClient, LogStream, LogTailRequest};
use crate::host_files::HostFiles;
use crate::read_exec::ReadExec;
use crate::supervisor::SupervisorView;

pub struct Reader {
    /// Where supervised services write their output (`<state>/logs/<name>.log`).
    pub log_dir: PathBuf,
    pub services: SupervisorView,
    pub docker: Option<DockerClient>,
    /// Host files (file, tail, find).
    pub files: HostFiles,
    /// Read-only commands (exec), refused unless `--allow-read-exec`.
    pub exec: ReadExec,
}

/// Why a read was not answered: the reason, and a stable code for the refusals a caller acts
/// on ([`ReadRefusalCode`], or the exec classifier's `exec_*` codes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRefused {
    pub code: Option<String>,
    pub reason: String,
}

impl ReadRefused {
    pub fn coded(code: ReadRefusalCode, reason: impl Into<String>) -> Self {
        Self {
            code: Some(code.as_str().to_owned()),
            reason: reason.into(),
        }
    }
}

impl From<String> for ReadRefused {
    fn from(reason: String) -> Self {
        Self { code: None, reason }
    }
}

/// The last `max_lines` lines within the last `max_bytes` bytes of `path`.
pub async fn tail_file(
    path: &Path,
    max_lines: usize,
    max_bytes: usize,
) -> std::io::Result<(Vec<String>, bool)> {
    let mut file = tokio::fs::File::open(path).await?;
    let len = file.metadata().await?.len();
    let start = len.saturating_sub(max_bytes as u64);
    file.seek(SeekFrom::Start(start)).await?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    file.take(max_bytes as u64).read_to_end(&mut bytes).await?;
    let mut truncated = start > 0;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0 {
        // The first line is probably cut: drop it.
        text = text
            .split_once('\n')
            .map(|(_, rest)| rest.to_owned())
            .unwrap_or_default();
    }
    let mut lines: Vec<String> = text
        .lines()
        .map(|line| bounded_text(line, MAX_LINE_BYTES).0)
        .collect();
    if lines.len() > max_lines {
        lines.drain(..lines.len() - max_lines);
        truncated = true;
    }
    Ok((lines, truncated))
}

fn stream_name(stream: LogStream) -> &'static str {
    match stream {
        LogStream::Stdin => "stdin",
        LogStream::Stdout => "stdout",
        LogStream::Stderr => "stderr",
        LogStream::Console => "console",
    }
}

impl Reader {
    fn docker(&self) -> Result<&DockerClient, String> {
        self.docker
            .as_ref()
            .ok_or_else(|| "no Docker engine is configured on this agent".to_owned())
    }

    pub async fn read(&self, request: &ReadRequest) -> Result<ReadOutput, ReadRefused> {
        match request {
            ReadRequest::Exec {
                stages,
                timeout_ms,
                max_bytes,
            } => self.exec.run(stages, *timeout_ms, *max_bytes).await,
            ReadRequest::File { path, max_bytes } => self.files.file(path, *max_bytes).await,
            ReadRequest::Tail {
                path,
                max_lines,
                max_bytes,
            } => self.files.tail(path, *max_lines, *max_bytes).await,
            ReadRequest::Find {
                path,
                name_pattern,
                max_entries,
                max_depth,
            } => {
                self.files
                    .find(path, name_pattern.as_deref(), *max_entries, *max_depth)
                    .await
            }
            other => self
                .read_container_or_service(other)
                .await
                .map_err(Into::into),
        }
    }

    async fn read_container_or_service(&self, request: &ReadRequest) -> Result<ReadOutput, String> {
        match request {
            ReadRequest::LogTail {
                source,
                max_lines,
                max_bytes,
            } => {
                if *max_lines == 0 || *max_lines > MAX_LOG_LINES {
                    return Err(format!("max_lines must be 1 to {MAX_LOG_LINES}"));
                }
                if *max_bytes == 0 || *max_bytes > MAX_LOG_BYTES {
                    return Err(format!("max_bytes must be 1 to {MAX_LOG_BYTES}"));
                }
                let (max_lines, max_bytes) = (*max_lines as usize, *max_bytes as usize);
                match source {
                    LogSource::Service { name } => {
                        if self.services.get(name).is_none() {
                            return Err(format!("no supervised service named {name:?}"));
                        }
                        let path = self.log_dir.join(format!("{name}.log"));
                        let (lines, truncated) = match tail_file(&path, max_lines, max_bytes).await
                        {
                            Ok(tail) => tail,
                            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                                (Vec::new(), false)
                            }
                            Err(error) => {
                                return Err(format!("cannot read the log of {name}: {error}"));
                            }
                        };
                        Ok(ReadOutput::LogTail {
                            lines: lines
                                .into_iter()
                                .map(|text| LogLine {
                                    stream: "file".to_owned(),
                                    text,
                                })
                                .collect(),
                            truncated,
                        })
                    }
                    LogSource::Container { id } => {
                        let tail = self
                            .docker()?
                            .logs_tail(
                                id,
                                LogTailRequest {
                                    max_lines,
                                    max_bytes,
                                    tty: None,
                                },
                            )
                            .await
                            .map_err(|e| e.to_string())?;
                        Ok(ReadOutput::LogTail {
                            lines: tail
                                .lines
                                .into_iter()
                                .map(|line| LogLine {
                                    stream: stream_name(line.stream).to_owned(),
                                    text: line.text,
                                })
                                .collect(),
                            truncated: tail.truncated,
                        })
                    }
                }
            }
            ReadRequest::Inspect { container } => {
                let projection = self
                    .docker()?
                    .inspect_compact(container)
                    .await
                    .map_err(|e| e.to_string())?;
                let projection = serde_json::to_value(projection)
                    .map_err(|e| format!("projection not encodable: {e}"))?;
                Ok(ReadOutput::Inspect { projection })
            }
            other => Err(format!(
                "{} is not a container or service read",
                other.kind()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn file_tail_honours_lines_and_bytes() {
        let dir = std::env::temp_dir().join(format!("pulse-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("svc.log");
        let text: String = (1..=100).map(|n| format!("line {n}\n")).collect();
        std::fs::write(&path, &text).unwrap();

        let (lines, truncated) = tail_file(&path, 3, 1 << 20).await.unwrap();
        assert_eq!(lines, ["line 98", "line 99", "line 100"]);
        assert!(truncated);

        let (lines, truncated) = tail_file(&path, 1000, 1 << 20).await.unwrap();
        assert_eq!(lines.len(), 100);
        assert!(!truncated);

        // 20 bytes from the end: "ine 98\nline 99\nline 100\n" minus the cut first line.
        let (lines, truncated) = tail_file(&path, 1000, 20).await.unwrap();
        assert!(truncated);
        assert_eq!(lines.last().map(String::as_str), Some("line 100"));
        assert!(lines.iter().map(|l| l.len() + 1).sum::<usize>() <= 20);
        assert!(lines.iter().all(|l| l.starts_with("line ")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
