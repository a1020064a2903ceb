//! The structural execution-intent classifier of `pulse_read action="exec"`: the mandatory second
//! gate before a command reaches a host. It fails closed.
//!
//! A command is admitted only when every part of it is read-only by construction, or proven
//! read-only by an inspector of its arguments; everything else is refused with a reason the model
//! can act on. There is no shell: the admitted command comes back as argv lists ([`ExecPlan`]),
//! one per pipeline stage, which the agent runs directly.
//!
//! - Text: printable ASCII only (no control characters, no Unicode look-alikes), at most
//!   [`MAX_COMMAND_CHARS`]. Single quotes are literal; double quotes are literal but may hold no
//!   `$`, backtick or backslash. Outside quotes every shell operator is refused (`;`, `&`, `>`,
//!   `<`, `$`, backticks, `(`, `)`, `{`, `}`, `\`, `#`, `!`, `~`, globs, `=` assignments before the
//!   command); the one operator understood is `|` between stages.
//! - Commands: a fixed set read-only by construction (`df`, `ps`, `cat`, `grep`, ...); inspected
//!   ones (`find` without actions that write or run, `curl` without bodies, mutation methods,
//!   config, cookie jars, uploads or output files, `wget --spider`, `systemctl` and `docker` read
//!   verbs, `ip` show forms, `journalctl` and `dmesg` without maintenance flags, `sysctl` without
//!   writes, `sort`/`uniq` without output files, `tail`/`journalctl` without following); `timeout`
//!   only around a command that is itself admitted. Never: shells, interpreters (`python`,
//!   `perl`, `node`, `ruby`, ...), `awk` and `sed`, `env`, `xargs`, privilege changes, editors,
//!   package managers, network relays, and any command not listed.
//! - A command may be named by path only under the system binary directories.

use std::fmt;

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

/// Read-only by construction, whatever their arguments.
const READ_ONLY: &[&str] = &[
    "df",
    "du",
    "free",
    "uptime",
    "uname",
    "hostname",
    "whoami",
    "id",
    "date",
    "ls",
    "cat",
    "head",
    "wc",
    "stat",
    "file",
    "lsblk",
    "findmnt",
    "ps",
    "pgrep",
    "vmstat",
    "iostat",
    "mpstat",
    "ss",
    "netstat",
    "ping",
    "dig",
    "nslookup",
    "host",
    "getent",
    "lscpu",
    "lsmod",
    "lsof",
    "grep",
    "egrep",
    "fgrep",
    "zgrep",
    "cut",
    "tr",
    "column",
    "nl",
    "tac",
    "rev",
    "zcat",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "readlink",
    "realpath",
    "basename",
    "dirname",
    "which",
    "whereis",
    "echo",
    "last",
    "w",
    "who",
    "nproc",
    "arch",
    "getconf",
    "lspci",
    "lsusb",
    "sensors",
    "pvs",
    "vgs",
    "lvs",
    "pidof",
    "tracepath",
    "traceroute",
    "mtr",
    "cksum",
    "od",
    "hexdump",
    "strings",
    "diff",
    "cmp",
    "comm",
    "join",
    "paste",
    "fold",
    "fmt",
    "expand",
    "unexpand",
    "seq",
    "true",
    "false",
    "test",
    "blkid",
    "ulimit",
    "lsns",
    "lsipc",
    "lslocks",
    "losetup",
    "dmidecode",
    "numactl",
    "chronyc",
    "ntpq",
    "pstree",
];

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

fn write_argument(program: &str, why: impl Into<String>) -> ExecRefusal {
    refuse(
        ExecRefusalCode::WriteArgument,
        format!("{program}: {}", why.into()),
    )
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
    if READ_ONLY.contains(&name) {
        return Ok(());
    }
    match name {
        "timeout" => inspect_timeout(args),
        "find" => inspect_find(args),
        "curl" => inspect_curl(args),
        "wget" => inspect_wget(args),
        "tail" => no_follow("tail", args),
        "journalctl" => inspect_journalctl(args),
        "dmesg" => inspect_dmesg(args),
        "systemctl" => inspect_verb(
            "systemctl",
            args,
            &[
                "status",
                "show",
                "is-active",
                "is-enabled",
                "is-failed",
                "list-units",
                "list-unit-files",
                "list-timers",
                "list-sockets",
                "list-dependencies",
                "cat",
            ],
        ),
        "docker" => inspect_docker(args),
        "ip" => inspect_ip(args),
        "sysctl" => inspect_sysctl(args),
        "sort" => inspect_sort(args),
        "uniq" => inspect_uniq(args),
        "loginctl" => inspect_verb(
            "loginctl",
            args,
            &[
                "list-sessions",
                "list-users",
                "list-seats",
                "show-session",
                "show-user",
                "session-status",
                "user-status",
            ],
        ),
        "resolvectl" => inspect_verb(
            "resolvectl",
            args,
            &["status", "query", "statistics", "dns", "domain"],
        ),
        "smartctl" => inspect_smartctl(args),
        "zpool" => inspect_verb("zpool", args, &["status", "list", "iostat"]),
        "zfs" => inspect_verb("zfs", args, &["list", "get"]),
        other => Err(refuse(
            ExecRefusalCode::UnknownCommand,
            format!(
                "{other} is not a known read-only command; unknown commands are never run \
                 (use df, ps, ss, cat, tail, journalctl, systemctl status, docker ps, ...)"
            ),
        )),
    }
}

/// The first argument that is not an option.
fn verb(args: &[String]) -> Option<&str> {
    args.iter()
        .map(String::as_str)
        .find(|a| !a.starts_with('-'))
}

fn inspect_verb(program: &str, args: &[String], allowed: &[&str]) -> Result<(), ExecRefusal> {
    match verb(args) {
        Some(v) if allowed.contains(&v) => Ok(()),
        Some(v) => Err(write_argument(
            program,
            format!(
                "`{v}` is not a read-only verb (allowed: {})",
                allowed.join(", ")
            ),
        )),
        None if program == "systemctl" => Ok(()),
        None => Err(write_argument(
            program,
            format!("name a read-only verb ({})", allowed.join(", ")),
        )),
    }
}

fn no_follow(program: &str, args: &[String]) -> Result<(), ExecRefusal> {
    let follows = args.iter().any(|a| {
        a == "--follow"
            || a.starts_with("--follow=")
            || a == "-F"
            || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains(['f', 'F']))
    });
    if follows {
        return Err(write_argument(
            program,
            "following never ends; read the last lines instead (-n 100)",
        ));
    }
    Ok(())
}

fn inspect_timeout(args: &[String]) -> Result<(), ExecRefusal> {
    let mut rest = args.iter().map(String::as_str).peekable();
    // Options, then the duration, then the command.
    while let Some(arg) = rest.peek().copied() {
        match arg {
            "--preserve-status" | "--foreground" | "-v" | "--verbose" => {
                rest.next();
            }
            "-s" | "--signal" | "-k" | "--kill-after" => {
                rest.next();
                rest.next();
            }
            a if a.starts_with("--signal=") || a.starts_with("--kill-after=") => {
                rest.next();
            }
            a if a.starts_with('-') => {
                return Err(write_argument("timeout", format!("unknown option {a}")));
            }
            _ => break,
        }
    }
    let duration = rest
        .next()
        .ok_or_else(|| write_argument("timeout", "a duration and a command are needed"))?;
    if !duration
        .trim_end_matches(['s', 'm', 'h', 'd'])
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.')
        || duration.is_empty()
    {
        return Err(write_argument(
            "timeout",
            format!("{duration} is not a duration"),
        ));
    }
    let inner: Vec<String> = rest.map(str::to_owned).collect();
    if inner.is_empty() {
        return Err(write_argument("timeout", "no command to time"));
    }
    // The wrapped command must stand on its own.
    check_stage(&inner)
}

fn inspect_find(args: &[String]) -> Result<(), ExecRefusal> {
    const ACTIONS: &[&str] = &[
        "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
    ];
    match args.iter().find(|a| ACTIONS.contains(&a.as_str())) {
        Some(action) => Err(write_argument(
            "find",
            format!("{action} writes or runs commands; list the matches and read them instead"),
        )),
        None => Ok(()),
    }
}

fn inspect_curl(args: &[String]) -> Result<(), ExecRefusal> {
    // Options that take a value, and are read-only.
    const WITH_VALUE: &[&str] = &[
        "-m",
        "--max-time",
        "--connect-timeout",
        "-H",
        "--header",
        "-w",
        "--write-out",
        "-A",
        "--user-agent",
        "--retry",
        "--resolve",
        "-e",
        "--referer",
        "--cacert",
        "--max-redirs",
    ];
    const FLAGS: &[&str] = &[
        "-s",
        "--silent",
        "-S",
        "--show-error",
        "-L",
        "--location",
        "-I",
        "--head",
        "-i",
        "--include",
        "-v",
        "--verbose",
        "-k",
        "--insecure",
        "-f",
        "--fail",
        "-4",
        "-6",
        "--compressed",
        "-G",
        "--get",
        "-sS",
        "-sSL",
        "-fsSL",
        "-fsS",
        "-sL",
        "-sI",
        "-sSI",
        "-kI",
        "-ksS",
        "-ks",
        "-sk",
        "-fs",
        "--http1.1",
        "--http2",
        "-N",
        "--no-buffer",
    ];
    let mut urls = 0;
    let mut iter = args.iter().map(String::as_str);
    while let Some(arg) = iter.next() {
        if arg == "-X" || arg == "--request" {
            let method = iter.next().unwrap_or("");
            if !matches!(method, "GET" | "HEAD") {
                return Err(write_argument(
                    "curl",
                    format!("method {method:?}: only GET and HEAD probes"),
                ));
            }
        } else if let Some(method) = arg.strip_prefix("--request=").or(arg.strip_prefix("-X")) {
            if !matches!(method, "GET" | "HEAD") {
                return Err(write_argument(
                    "curl",
                    format!("method {method:?}: only GET and HEAD probes"),
                ));
            }
        } else if WITH_VALUE.contains(&arg) {
            iter.next();
        } else if FLAGS.contains(&arg)
            || WITH_VALUE
                .iter()
                .any(|o| o.starts_with("--") && arg.starts_with(&format!("{o}=")))
        {
            // A read-only option with its value in the same word.
            continue;
        } else if arg.starts_with('-') {
            return Err(write_argument(
                "curl",
                format!(
                    "{arg} is not an option of a read-only probe (no bodies, uploads, forms, \
                     configs, cookie jars or output files)"
                ),
            ));
        } else if arg.starts_with("http://") || arg.starts_with("https://") {
            urls += 1;
        } else {
            return Err(write_argument(
                "curl",
                format!("{arg:?} is not an http(s) URL"),
            ));
        }
    }
    if urls == 0 {
        return Err(write_argument("curl", "name an http:// or https:// URL"));
    }
    Ok(())
}

fn inspect_wget(args: &[String]) -> Result<(), ExecRefusal> {
    const FLAGS: &[&str] = &[
        "--spider",
        "-q",
        "--quiet",
        "-S",
        "--server-response",
        "--no-check-certificate",
        "-4",
        "-6",
        "-nv",
        "--no-verbose",
    ];
    let mut spider = false;
    let mut iter = args.iter().map(String::as_str);
    while let Some(arg) = iter.next() {
        if arg == "--spider" {
            spider = true;
        } else if arg == "-T" || arg == "--timeout" || arg == "-t" || arg == "--tries" {
            iter.next();
        } else if FLAGS.contains(&arg)
            || arg.starts_with("--timeout=")
            || arg.starts_with("--tries=")
        {
            continue;
        } else if arg.starts_with('-') {
            return Err(write_argument(
                "wget",
                format!("{arg} is not an option of a spider check"),
            ));
        } else if !(arg.starts_with("http://") || arg.starts_with("https://")) {
            return Err(write_argument(
                "wget",
                format!("{arg:?} is not an http(s) URL"),
            ));
        }
    }
    if !spider {
        return Err(write_argument(
            "wget",
            "only spider checks (--spider) are read-only; wget downloads otherwise",
        ));
    }
    Ok(())
}

fn inspect_journalctl(args: &[String]) -> Result<(), ExecRefusal> {
    const MAINTENANCE: &[&str] = &[
        "--rotate",
        "--flush",
        "--sync",
        "--relinquish-var",
        "--smart-relinquish-var",
        "--setup-keys",
        "--update-catalog",
        "--vacuum-size",
        "--vacuum-time",
        "--vacuum-files",
    ];
    if let Some(arg) = args.iter().find(|a| {
        MAINTENANCE
            .iter()
            .any(|m| a.as_str() == *m || a.starts_with(&format!("{m}=")))
    }) {
        return Err(write_argument(
            "journalctl",
            format!("{arg} changes the journal"),
        ));
    }
    no_follow("journalctl", args)
}

fn inspect_dmesg(args: &[String]) -> Result<(), ExecRefusal> {
    let writes = args.iter().any(|a| {
        matches!(
            a.as_str(),
            "-c" | "--read-clear"
                | "-C"
                | "--clear"
                | "-D"
                | "--console-off"
                | "-E"
                | "--console-on"
                | "-n"
                | "--console-level"
        ) || a.starts_with("--console-level=")
    });
    if writes {
        return Err(write_argument(
            "dmesg",
            "clearing the buffer or changing the console level changes the host",
        ));
    }
    no_follow("dmesg", args)
}

fn inspect_docker(args: &[String]) -> Result<(), ExecRefusal> {
    const READ: &[&str] = &[
        "ps", "images", "inspect", "logs", "stats", "version", "info", "top", "port", "diff",
        "history",
    ];
    let Some(first) = verb(args) else {
        return Err(write_argument(
            "docker",
            "name a read-only command (ps, inspect, logs, ...)",
        ));
    };
    let (command, rest): (&str, Vec<&str>) = match first {
        "container" | "image" | "network" | "volume" | "system" => {
            let position = args.iter().position(|a| a == first).unwrap_or(0);
            let sub = verb(&args[position + 1..]).unwrap_or("");
            let sub = match (first, sub) {
                ("container" | "image" | "network" | "volume", "ls" | "list") => "ps",
                ("system", "df") => "info",
                (_, "inspect") => "inspect",
                ("container", other) => other,
                _ => "",
            };
            (
                sub,
                args[position + 1..].iter().map(String::as_str).collect(),
            )
        }
        other => (other, args.iter().map(String::as_str).collect()),
    };
    if !READ.contains(&command) {
        return Err(write_argument(
            "docker",
            format!("`{first}` is not read-only (allowed: {})", READ.join(", ")),
        ));
    }
    if command == "logs"
        && rest.iter().any(|a| {
            *a == "-f"
                || *a == "--follow"
                || (a.starts_with('-') && !a.starts_with("--") && a.contains('f'))
        })
    {
        return Err(write_argument(
            "docker",
            "logs --follow never ends; use --tail 100",
        ));
    }
    if command == "stats" && !rest.contains(&"--no-stream") {
        return Err(write_argument("docker", "stats needs --no-stream"));
    }
    Ok(())
}

fn inspect_ip(args: &[String]) -> Result<(), ExecRefusal> {
    const OBJECTS: &[&str] = &[
        "addr",
        "address",
        "a",
        "link",
        "l",
        "route",
        "r",
        "ro",
        "neigh",
        "neighbour",
        "n",
        "rule",
        "ru",
        "netns",
        "maddr",
        "tunnel",
        "-br",
        "-brief",
        "-s",
        "-4",
        "-6",
        "-j",
        "-c",
        "-d",
    ];
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let Some(object) = words.first() else {
        return Ok(());
    };
    if !OBJECTS.contains(object) {
        return Err(write_argument(
            "ip",
            format!("`{object}` is not an object ip can show"),
        ));
    }
    match words.get(1) {
        None | Some(&("show" | "list" | "ls" | "s" | "sh" | "get")) => Ok(()),
        Some(other) if *object == "route" || *object == "r" || *object == "ro" => {
            // `ip route show table main`, `ip route get 1.1.1.1`: the second word is the verb.
            Err(write_argument(
                "ip",
                format!("`{other}` is not show, list or get"),
            ))
        }
        // `ip addr show dev eth0` is covered above; `ip link eth0` is not a command.
        Some(other) => Err(write_argument(
            "ip",
            format!("`{other}` is not show or list"),
        )),
    }
}

fn inspect_sysctl(args: &[String]) -> Result<(), ExecRefusal> {
    let writes = args.iter().any(|a| {
        a.contains('=')
            || matches!(a.as_str(), "-w" | "--write" | "-p" | "--load" | "--system")
            || a.starts_with("--load=")
    });
    if writes {
        return Err(write_argument(
            "sysctl",
            "setting or loading values changes the kernel",
        ));
    }
    Ok(())
}

fn inspect_sort(args: &[String]) -> Result<(), ExecRefusal> {
    let writes = args.iter().any(|a| {
        a == "-o"
            || a.starts_with("--output")
            || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains('o'))
            || a.starts_with("--compress-program")
    });
    if writes {
        return Err(write_argument(
            "sort",
            "-o writes a file; read the sorted output instead",
        ));
    }
    Ok(())
}

fn inspect_uniq(args: &[String]) -> Result<(), ExecRefusal> {
    let operands = args.iter().filter(|a| !a.starts_with('-')).count();
    if operands > 1 {
        return Err(write_argument(
            "uniq",
            "a second file operand is written to",
        ));
    }
    Ok(())
}

fn inspect_smartctl(args: &[String]) -> Result<(), ExecRefusal> {
    const READ: &[&str] = &[
        "-a",
        "--all",
        "-H",
        "--health",
        "-i",
        "--info",
        "-A",
        "--attributes",
        "-x",
        "--xall",
        "-l",
        "--log",
        "-c",
        "--capabilities",
        "-j",
        "--json",
        "-d",
        "--device",
    ];
    for arg in args.iter().filter(|a| a.starts_with('-')) {
        let name = arg.split('=').next().unwrap_or("");
        if !READ.contains(&name) {
            return Err(write_argument(
                "smartctl",
                format!(
                    "{arg} is not a read-only option (tests, settings and offline data change the disk)"
                ),
            ));
        }
    }
    Ok(())
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
