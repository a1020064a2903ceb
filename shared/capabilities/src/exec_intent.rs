//! The structural execution-intent classifier of `pulse_read action="exec"`: the mandatory second
//! gate before a command reaches a host. It fails closed.
//!
//! A command is admitted only when every stage of it is a listed program used within its
//! allowlist; everything else is refused with a reason the model can act on. There is no shell: the admitted command comes back as argv lists ([`ExecPlan`]),
//! one per pipeline stage, which the agent runs directly.
//!
//! - Text: printable ASCII only (no control characters, no Unicode look-alikes), at most
//!   [`MAX_COMMAND_CHARS`]. Single quotes are literal; double quotes are literal but may hold no
//!   `$`, backtick or backslash. Outside quotes every shell operator is refused (`;`, `&`, `>`,
//!   `<`, `$`, backticks, `(`, `)`, `{`, `}`, `\`, `#`, `!`, `~`, globs, `=` assignments before the
//!   command); the one operator understood is `|` between stages.
//! - Programs: only those listed in `exec_intent/programs.rs`, each with an allowlist of its own: the exact
//!   short options (alone, combined as `-sSL`, with a value attached as `-n5` or in the next
//!   word), long options (`--opt` or `--opt=value`) and operand forms known to be read-only.
//!   Anything else, an unknown option, an attached value that selects a write (`sysctl -p/etc/x`),
//!   an operand that sets state (`hostname NAME`, `date MMDDhhmm`, `uniq IN OUT`), is refused with
//!   `exec_write_argument`; a program not listed with `exec_unknown_command`. The list says what
//!   is known to be read-only, never what is known to be harmful. `curl` and `wget` fetch only
//!   `http`/`https` URLs, never link-local or metadata addresses in any spelling ([`url`]), and
//!   no option value names a file to send (`@file`, `<file`); `ps` never prints environments.
//!   `timeout` only around a command that is itself admitted. Never: shells, interpreters
//!   (`python`, `perl`, `node`, `ruby`, ...), `awk` and `sed`, `env`, `xargs`, privilege
//!   changes, editors, package managers, network relays.
//! - Secrets: an argument naming a secret file ([`crate::secret_paths`], the rule the agent
//!   applies to every path it opens) is refused here already, with the agent's code
//!   `read_secret_path`, so such a command never travels.
//! - A command may be named by path only under the system binary directories.

use std::fmt;

use pulse_domain::agent_protocol::ReadRefusalCode;

use crate::secret_paths;

mod options;
mod programs;
pub mod url;

/// Longest command text classified.
pub const MAX_COMMAND_CHARS: usize = 1024;
/// Most pipeline stages.
pub const MAX_STAGES: usize = 4;

/// An admitted command: the argv of each pipeline stage, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecPlan {
    pub stages: Vec<Vec<String>>,
}

/// Why a command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecRefusalCode {
    /// Nothing to run.
    Empty,
    /// Longer than [`MAX_COMMAND_CHARS`] or more than [`MAX_STAGES`] stages.
    TooLong,
    /// A character outside printable ASCII.
    NonAscii,
    /// A shell operator, substitution, redirection, glob or assignment.
    ShellSyntax,
    /// A shell or an interpreter.
    Interpreter,
    /// A command that writes, runs others or changes state.
    WriteCommand,
    /// An admitted command with an argument that would write, run or follow.
    WriteArgument,
    /// A command the classifier does not know: refused, never trusted.
    UnknownCommand,
    /// An argument names a secret file (the shared secret-path rule; the agent's code for it).
    SecretPath,
}

impl ExecRefusalCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecRefusalCode::Empty => "exec_empty",
            ExecRefusalCode::TooLong => "exec_too_long",
            ExecRefusalCode::NonAscii => "exec_non_ascii",
            ExecRefusalCode::ShellSyntax => "exec_shell_syntax",
            ExecRefusalCode::Interpreter => "exec_interpreter",
            ExecRefusalCode::WriteCommand => "exec_write_command",
            ExecRefusalCode::WriteArgument => "exec_write_argument",
            ExecRefusalCode::UnknownCommand => "exec_unknown_command",
            ExecRefusalCode::SecretPath => ReadRefusalCode::SecretPath.as_str(),
        }
    }
}

/// A refusal: its code and what the model should do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRefusal {
    pub code: ExecRefusalCode,
    pub reason: String,
}

impl fmt::Display for ExecRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.reason)
    }
}

impl std::error::Error for ExecRefusal {}

fn refuse(code: ExecRefusalCode, reason: impl Into<String>) -> ExecRefusal {
    ExecRefusal {
        code,
        reason: reason.into(),
    }
}

/// Classifies `command`; only an admitted command gets a plan.
pub fn classify(command: &str) -> Result<ExecPlan, ExecRefusal> {
    let command = command.trim_matches(' ');
    if command.is_empty() {
        return Err(refuse(ExecRefusalCode::Empty, "no command given"));
    }
    if command.chars().count() > MAX_COMMAND_CHARS {
        return Err(refuse(
            ExecRefusalCode::TooLong,
            format!("commands are limited to {MAX_COMMAND_CHARS} characters"),
        ));
    }
    if let Some(c) = command.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(refuse(
            ExecRefusalCode::NonAscii,
            format!(
                "character U+{:04X} is not printable ASCII; write the command in plain ASCII",
                u32::from(c)
            ),
        ));
    }
    let stages = split(command)?;
    if stages.len() > MAX_STAGES {
        return Err(refuse(
            ExecRefusalCode::TooLong,
            format!("at most {MAX_STAGES} pipeline stages"),
        ));
    }
    for argv in &stages {
        check_stage(argv)?;
    }
    Ok(ExecPlan { stages })
}

/// The command text of `stages`: each word bare when it holds only plain characters, otherwise
/// quoted so that [`classify`] splits the text back into exactly these words. A word no quoting
/// can carry (one with both a single quote and `"`, `$`, a backtick or `\\`) is refused.
pub fn render(stages: &[Vec<String>]) -> Result<String, ExecRefusal> {
    let mut text = String::new();
    for (i, argv) in stages.iter().enumerate() {
        if i > 0 {
            text.push_str(" | ");
        }
        for (j, word) in argv.iter().enumerate() {
            if j > 0 {
                text.push(' ');
            }
            let plain = !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./:,+=@%^".contains(c));
            if plain {
                text.push_str(word);
            } else if !word.contains('\'') {
                text.push('\'');
                text.push_str(word);
                text.push('\'');
            } else if !word.contains(['"', '$', '`', '\\']) {
                text.push('"');
                text.push_str(word);
                text.push('"');
            } else {
                return Err(refuse(
                    ExecRefusalCode::ShellSyntax,
                    "an argument holds both a single quote and `\"`, `$`, a backtick or `\\`",
                ));
            }
        }
    }
    Ok(text)
}

/// Re-classifies an argv plan that arrived over the wire (the relay's and the agent's own gate:
/// neither trusts the plan it was sent). Admitted only when its [`render`]ing classifies back
/// to exactly the same stages.
pub fn check_stages(stages: &[Vec<String>]) -> Result<ExecPlan, ExecRefusal> {
    if stages.is_empty() || stages.iter().any(Vec::is_empty) {
        return Err(refuse(ExecRefusalCode::Empty, "no command given"));
    }
    let plan = classify(&render(stages)?)?;
    if plan.stages != stages {
        return Err(refuse(
            ExecRefusalCode::ShellSyntax,
            "the argument lists do not read back as the same command",
        ));
    }
    Ok(plan)
}

/// Words and stages, with quotes removed; every shell operator but `|` refused.
fn split(command: &str) -> Result<Vec<Vec<String>>, ExecRefusal> {
    let syntax = |what: &str| {
        refuse(
            ExecRefusalCode::ShellSyntax,
            format!(
                "{what} is shell syntax, and commands run without a shell: give one plain \
                 command (pipes between read-only commands are allowed)"
            ),
        )
    };
    let mut stages: Vec<Vec<String>> = Vec::new();
    let mut argv: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' => {
                if in_word {
                    argv.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(inner) => word.push(inner),
                        None => return Err(syntax("an unclosed quote")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('$' | '`' | '\\') => {
                            return Err(syntax("`$`, a backtick or `\\` inside double quotes"));
                        }
                        Some(inner) => word.push(inner),
                        None => return Err(syntax("an unclosed quote")),
                    }
                }
            }
            '|' => {
                if chars.peek() == Some(&'|') {
                    return Err(syntax("`||`"));
                }
                if in_word {
                    argv.push(std::mem::take(&mut word));
                    in_word = false;
                }
                if argv.is_empty() {
                    return Err(syntax("a pipe with no command before it"));
                }
                stages.push(std::mem::take(&mut argv));
            }
            ';' | '&' | '>' | '<' | '$' | '`' | '(' | ')' | '{' | '}' | '\\' | '#' | '!' => {
                return Err(syntax(&format!("`{c}`")));
            }
            '~' if !in_word => return Err(syntax("`~` (no home expansion)")),
            '*' | '?' | '[' | ']' => {
                return Err(syntax(&format!(
                    "the unquoted glob `{c}` (nothing expands it; quote a pattern, or name the file)"
                )));
            }
            '=' if argv.is_empty() => {
                return Err(syntax("a variable assignment before the command"));
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        argv.push(word);
    }
    if argv.is_empty() {
        return Err(if stages.is_empty() {
            refuse(ExecRefusalCode::Empty, "no command given")
        } else {
            syntax("a pipe with no command after it")
        });
    }
    stages.push(argv);
    Ok(stages)
}

/// Directories a command may be named under by path.
const SYSTEM_BIN_DIRS: &[&str] = &["/bin/", "/usr/bin/", "/sbin/", "/usr/sbin/"];

/// The command's name: itself, or the basename of a path under a system binary directory.
fn program(argv0: &str) -> Result<&str, ExecRefusal> {
    if !argv0.contains('/') {
        return Ok(argv0);
    }
    SYSTEM_BIN_DIRS
        .iter()
        .find_map(|dir| argv0.strip_prefix(dir))
        .filter(|name| !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| {
            refuse(
                ExecRefusalCode::UnknownCommand,
                format!(
                    "{argv0} is not a known system command; scripts and programs outside the \
                     system binary directories are never run"
                ),
            )
        })
}

/// Never admitted: shells and interpreters.
const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "zsh",
    "dash",
    "ksh",
    "csh",
    "tcsh",
    "fish",
    "busybox",
    "python",
    "python2",
    "python3",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "bun",
    "php",
    "lua",
    "tclsh",
    "expect",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "sed",
    "jq",
    "yq",
    "osascript",
    "pwsh",
    "powershell",
];

/// Never admitted: they write, run others, change privileges or state, or relay data.
const WRITERS: &[&str] = &[
    "env",
    "xargs",
    "sudo",
    "su",
    "doas",
    "pkexec",
    "eval",
    "exec",
    "source",
    ".",
    "nohup",
    "watch",
    "nice",
    "ionice",
    "chroot",
    "setsid",
    "stdbuf",
    "unshare",
    "nsenter",
    "tee",
    "dd",
    "rm",
    "rmdir",
    "mv",
    "cp",
    "install",
    "chmod",
    "chown",
    "chgrp",
    "chattr",
    "ln",
    "mkdir",
    "mknod",
    "mkfifo",
    "touch",
    "truncate",
    "shred",
    "kill",
    "pkill",
    "killall",
    "reboot",
    "shutdown",
    "poweroff",
    "halt",
    "init",
    "telinit",
    "apt",
    "apt-get",
    "dpkg",
    "yum",
    "dnf",
    "rpm",
    "zypper",
    "apk",
    "pacman",
    "snap",
    "flatpak",
    "pip",
    "pip3",
    "npm",
    "yarn",
    "cargo",
    "gem",
    "git",
    "vi",
    "vim",
    "nvim",
    "nano",
    "emacs",
    "ed",
    "crontab",
    "at",
    "batch",
    "mkfs",
    "fdisk",
    "parted",
    "mount",
    "umount",
    "swapon",
    "swapoff",
    "iptables",
    "ip6tables",
    "nft",
    "ufw",
    "firewall-cmd",
    "nc",
    "ncat",
    "netcat",
    "socat",
    "telnet",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "ftp",
    "tar",
    "gzip",
    "gunzip",
    "bzip2",
    "xz",
    "zip",
    "unzip",
    "useradd",
    "userdel",
    "usermod",
    "passwd",
    "chpasswd",
    "groupadd",
    "visudo",
    "modprobe",
    "insmod",
    "rmmod",
    "hwclock",
    "timedatectl",
    "hostnamectl",
    "make",
    "gcc",
    "cc",
    "ld",
    "curlftpfs",
    "less",
    "more",
    "man",
    "top",
    "htop",
    "screen",
    "tmux",
    "script",
    "logger",
    "wall",
    "write",
    "printenv",
    "set",
    "export",
    "alias",
    "trap",
    "kubectl",
    "helm",
    "podman",
    "nerdctl",
    "ctr",
    "crictl",
    "service",
    "update-rc.d",
    "chkconfig",
    "tcpdump",
    "strace",
    "gdb",
    "ltrace",
    "perf",
    "bpftrace",
];

pub(crate) fn write_argument(program: &str, why: impl Into<String>) -> ExecRefusal {
    refuse(
        ExecRefusalCode::WriteArgument,
        format!("{program}: {}", why.into()),
    )
}

/// The names of every program the classifier admits (each held to its allowlist).
pub fn admitted_programs() -> impl Iterator<Item = &'static str> {
    programs::names()
}

/// The admitted programs and what is admitted of each, as a Markdown table: the block
/// `docs/assistant.md` carries.
pub fn admitted_programs_table() -> String {
    programs::describe()
}

fn check_stage(argv: &[String]) -> Result<(), ExecRefusal> {
    let Some(first) = argv.first() else {
        return Err(refuse(ExecRefusalCode::Empty, "an empty pipeline stage"));
    };
    let name = program(first)?;
    let args = &argv[1..];
    if INTERPRETERS.contains(&name) {
        return Err(refuse(
            ExecRefusalCode::Interpreter,
            format!(
                "{name} is a shell or an interpreter, which can do anything; use the read-only \
                 command that answers the question (awk and sed are refused too: use grep, cut, \
                 head or tail)"
            ),
        ));
    }
    if WRITERS.contains(&name) {
        return Err(refuse(
            ExecRefusalCode::WriteCommand,
            format!(
                "{name} can change the host or run other commands; read-only diagnostics only \
                 (a change is proposed with pulse_control and approved by a human)"
            ),
        ));
    }
    let Some(admitted) = programs::find(name) else {
        return Err(refuse(
            ExecRefusalCode::UnknownCommand,
            format!(
                "{name} is not a known read-only command; unknown commands are never run \
                 (use df, ps, ss, cat, tail, journalctl, systemctl status, docker ps, ...)"
            ),
        ));
    };
    admitted.check(name, args)?;
    // A wrapped command had its own arguments checked as a stage of its own.
    if name == "timeout" {
        return Ok(());
    }
    match args
        .iter()
        .find_map(|word| secret_paths::argument_secret(word, &[]))
    {
        Some(reason) => Err(refuse(ExecRefusalCode::SecretPath, reason)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admitted_command_comes_back_as_argv_per_stage() {
        let plan = classify("ps aux | grep 'nginx: worker' | head -n 5").unwrap();
        assert_eq!(
            plan.stages,
            vec![
                vec!["ps".to_owned(), "aux".to_owned()],
                vec!["grep".to_owned(), "nginx: worker".to_owned()],
                vec!["head".to_owned(), "-n".to_owned(), "5".to_owned()],
            ]
        );
    }

    #[test]
    fn a_plan_renders_to_text_that_classifies_back_to_it() {
        let plan = classify("ps aux | grep 'nginx: worker' | grep \"it's\" | head -n 5").unwrap();
        let text = render(&plan.stages).unwrap();
        assert_eq!(
            text,
            "ps aux | grep 'nginx: worker' | grep \"it's\" | head -n 5"
        );
        assert_eq!(check_stages(&plan.stages).unwrap(), plan);
        // Words that would be operators bare come back quoted, and stay one word.
        let stages = vec![vec!["grep".to_owned(), "a;b".to_owned(), String::new()]];
        assert_eq!(render(&stages).unwrap(), "grep 'a;b' ''");
        assert_eq!(check_stages(&stages).unwrap().stages, stages);
    }

    #[test]
    fn a_wire_plan_is_held_to_the_classifier() {
        let argv = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
        for (stages, code) in [
            (
                vec![argv(&["rm", "-rf", "/tmp/x"])],
                ExecRefusalCode::WriteCommand,
            ),
            (
                vec![argv(&["sh", "-c", "touch x"])],
                ExecRefusalCode::Interpreter,
            ),
            (
                vec![argv(&["find", ".", "-delete"])],
                ExecRefusalCode::WriteArgument,
            ),
            (
                vec![argv(&["df"]), argv(&["sed", "s/a/b/"])],
                ExecRefusalCode::Interpreter,
            ),
            (
                vec![argv(&["grep", "it's $HOME"])],
                ExecRefusalCode::ShellSyntax,
            ),
            (vec![], ExecRefusalCode::Empty),
            (vec![argv(&["df"]), vec![]], ExecRefusalCode::Empty),
        ] {
            assert_eq!(check_stages(&stages).unwrap_err().code, code, "{stages:?}");
        }
        // An assignment word in command position is still an assignment.
        assert_eq!(
            check_stages(&[argv(&["A=1", "df"])]).unwrap_err().code,
            ExecRefusalCode::ShellSyntax
        );
    }

    #[test]
    fn refusals_name_their_code() {
        let refused = classify("rm -rf /tmp/x").unwrap_err();
        assert_eq!(refused.code, ExecRefusalCode::WriteCommand);
        assert!(refused.to_string().starts_with("exec_write_command: rm"));
        assert_eq!(
            classify("sh -c 'df -h'").unwrap_err().code,
            ExecRefusalCode::Interpreter
        );
        assert_eq!(
            classify("df -h; rm x").unwrap_err().code,
            ExecRefusalCode::ShellSyntax
        );
        assert_eq!(classify("   ").unwrap_err().code, ExecRefusalCode::Empty);
    }
}
