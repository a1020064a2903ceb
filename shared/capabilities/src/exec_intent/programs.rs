//! Every program the classifier admits, with the options and operands admitted for it. A
//! program, an option or an operand form that is not here is refused: the list says what is
//! known to be read-only, never what is known to be harmful.
//!
//! Most programs are held to an option [`Spec`] (and sometimes a check of the parsed result);
//! those whose grammar is a language of its own (`find`, `ps`, `docker`, `ip`, `dig`,
//! `nslookup`, `timeout`) have their own reader. [`describe`] renders the list for
//! `docs/assistant.md`.

use super::options::{Operands, Parsed, Spec, parse};
use super::{ExecRefusal, check_stage, url, write_argument};

/// A check of a parsed argument list: `Err` is the reason for the model.
type Check = fn(&Parsed<'_>) -> Result<(), String>;
/// A reader of a whole argument list.
type Reader = fn(&[String]) -> Result<(), ExecRefusal>;

pub enum Rule {
    Spec(Spec, Option<Check>),
    Custom(Reader),
}

/// One admitted program (or a family sharing one grammar).
pub struct Program {
    pub names: &'static [&'static str],
    pub rule: Rule,
    /// What is admitted beyond the options, or why something common is not, for the docs.
    pub note: &'static str,
}

impl Program {
    pub fn check(&self, name: &str, args: &[String]) -> Result<(), ExecRefusal> {
        match &self.rule {
            Rule::Spec(spec, check) => {
                let parsed = parse(name, spec, args)?;
                match check {
                    Some(check) => check(&parsed).map_err(|why| write_argument(name, why)),
                    None => Ok(()),
                }
            }
            Rule::Custom(reader) => reader(args),
        }
    }
}

/// The admitted program named `name`.
pub fn find(name: &str) -> Option<&'static Program> {
    PROGRAMS.iter().find(|p| p.names.contains(&name))
}

/// The names of every admitted program.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROGRAMS.iter().flat_map(|p| p.names.iter().copied())
}

/// The admitted programs as a Markdown table (generated into `docs/assistant.md`).
pub fn describe() -> String {
    let mut out = String::from("| program | admitted |\n|---|---|\n");
    for program in PROGRAMS {
        let names = program
            .names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut text = match &program.rule {
            Rule::Spec(spec, _) => spec.describe(),
            Rule::Custom(_) => String::new(),
        };
        if !program.note.is_empty() {
            if !text.is_empty() {
                text.push_str("; ");
            }
            text.push_str(program.note);
        }
        out.push_str(&format!("| {names} | {} |\n", text.replace('|', "\\|")));
    }
    out
}

const S: Spec = Spec::EMPTY;
const ANY: Operands = Operands::Any;
const NONE: Operands = Operands::None;
const fn at_most(n: usize) -> Operands {
    Operands::AtMost(n)
}

const fn spec(spec: Spec) -> Rule {
    Rule::Spec(spec, None)
}
const fn checked(spec: Spec, check: Check) -> Rule {
    Rule::Spec(spec, Some(check))
}

const GREP: Spec = Spec {
    flags: "ivcnlLhHoqswxEFGPzZaIbTyU",
    values: "emABCD",
    long_flags: &[
        "--ignore-case",
        "--no-ignore-case",
        "--invert-match",
        "--count",
        "--line-number",
        "--files-with-matches",
        "--files-without-match",
        "--no-filename",
        "--with-filename",
        "--only-matching",
        "--quiet",
        "--silent",
        "--no-messages",
        "--word-regexp",
        "--line-regexp",
        "--extended-regexp",
        "--fixed-strings",
        "--basic-regexp",
        "--perl-regexp",
        "--null-data",
        "--null",
        "--text",
        "--byte-offset",
        "--initial-tab",
        "--line-buffered",
    ],
    long_values: &[
        "--regexp",
        "--max-count",
        "--after-context",
        "--before-context",
        "--context",
        "--label",
        "--binary-files",
        "--devices",
    ],
    long_optional: &["--color", "--colour"],
    numeric: true,
    operands: ANY,
    ..S
};

const HEAD_TAIL: Spec = Spec {
    flags: "qvz",
    values: "nc",
    long_flags: &["--quiet", "--silent", "--verbose", "--zero-terminated"],
    long_values: &["--lines", "--bytes"],
    numeric: true,
    operands: ANY,
    ..S
};

const CHECKSUM: Spec = Spec {
    flags: "btz",
    values: "a",
    long_flags: &["--binary", "--text", "--tag", "--untagged", "--zero"],
    long_values: &["--algorithm"],
    operands: ANY,
    ..S
};

const LVM_REPORT: Spec = Spec {
    flags: "av",
    values: "oOS",
    long_flags: &[
        "--all",
        "--noheadings",
        "--nosuffix",
        "--unbuffered",
        "--aligned",
        "--readonly",
    ],
    long_values: &[
        "--options",
        "--sort",
        "--select",
        "--units",
        "--separator",
        "--reportformat",
    ],
    operands: ANY,
    ..S
};

pub static PROGRAMS: &[Program] = &[
    // System identity and load.
    Program {
        names: &["hostname"],
        rule: spec(Spec {
            flags: "sfdiIAa",
            long_flags: &[
                "--short",
                "--fqdn",
                "--long",
                "--domain",
                "--ip-address",
                "--all-ip-addresses",
                "--all-fqdns",
                "--alias",
            ],
            operands: NONE,
            ..S
        }),
        note: "never a name to set (`hostname NAME`, `-F FILE`, `-b` change the host name)",
    },
    Program {
        names: &["date"],
        rule: checked(
            Spec {
                flags: "uR",
                values: "dr",
                optional: "I",
                long_flags: &["--utc", "--universal", "--rfc-email", "--debug"],
                long_values: &["--date", "--reference", "--rfc-3339"],
                long_optional: &["--iso-8601"],
                operands: at_most(1),
                ..S
            },
            date_operand,
        ),
        note: "one operand, only `+FORMAT`; never `-s`/`--set`, a date operand (`MMDDhhmm`) or `-f FILE`",
    },
    Program {
        names: &["uptime"],
        rule: spec(Spec {
            flags: "ps",
            long_flags: &["--pretty", "--since"],
            operands: NONE,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["uname"],
        rule: spec(Spec {
            flags: "asnrvmpio",
            long_flags: &[
                "--all",
                "--kernel-name",
                "--nodename",
                "--kernel-release",
                "--kernel-version",
                "--machine",
                "--processor",
                "--hardware-platform",
                "--operating-system",
            ],
            operands: NONE,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["whoami", "arch", "lsmod"],
        rule: spec(S),
        note: "",
    },
    Program {
        names: &["id"],
        rule: spec(Spec {
            flags: "ugGnrzZa",
            long_flags: &[
                "--user",
                "--group",
                "--groups",
                "--name",
                "--real",
                "--zero",
                "--context",
            ],
            operands: at_most(1),
            ..S
        }),
        note: "a user name",
    },
    Program {
        names: &["nproc"],
        rule: spec(Spec {
            long_flags: &["--all"],
            long_values: &["--ignore"],
            operands: NONE,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["getconf"],
        rule: spec(Spec {
            flags: "a",
            values: "v",
            operands: at_most(2),
            ..S
        }),
        note: "a variable and a path",
    },
    Program {
        names: &["free"],
        rule: spec(Spec {
            flags: "bkmghltwL",
            values: "sc",
            long_flags: &[
                "--bytes",
                "--kilo",
                "--mega",
                "--giga",
                "--tera",
                "--peta",
                "--kibi",
                "--mebi",
                "--gibi",
                "--tebi",
                "--pebi",
                "--human",
                "--si",
                "--lohi",
                "--total",
                "--wide",
                "--committed",
            ],
            long_values: &["--seconds", "--count"],
            operands: NONE,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["vmstat"],
        rule: spec(Spec {
            flags: "afmnsdDtwy",
            values: "Sp",
            long_flags: &[
                "--active",
                "--forks",
                "--slabs",
                "--one-header",
                "--stats",
                "--disk",
                "--disk-sum",
                "--timestamp",
                "--wide",
                "--no-first",
            ],
            long_values: &["--partition", "--unit"],
            operands: at_most(2),
            ..S
        }),
        note: "a delay and a count",
    },
    Program {
        names: &["iostat"],
        rule: spec(Spec {
            flags: "cdhkmNtxyzsH",
            values: "jgo",
            optional: "p",
            long_flags: &["--human", "--compact", "--pretty"],
            long_values: &["--dec"],
            operands: ANY,
            ..S
        }),
        note: "devices, a delay and a count",
    },
    Program {
        names: &["mpstat"],
        rule: spec(Spec {
            flags: "AunTH",
            values: "PIo",
            long_values: &["--dec"],
            operands: at_most(2),
            ..S
        }),
        note: "a delay and a count",
    },
    Program {
        names: &["lscpu"],
        rule: spec(Spec {
            flags: "abcxyJB",
            optional: "epC",
            long_flags: &[
                "--all",
                "--online",
                "--offline",
                "--hex",
                "--physical",
                "--json",
                "--bytes",
            ],
            long_optional: &["--extended", "--parse", "--caches"],
            operands: NONE,
            ..S
        }),
        note: "never `-s DIR`",
    },
    Program {
        names: &["numactl"],
        rule: spec(Spec {
            flags: "Hs",
            long_flags: &["--hardware", "--show"],
            operands: NONE,
            ..S
        }),
        note: "only the read forms: numactl otherwise runs a command under a policy",
    },
    Program {
        names: &["lspci"],
        rule: spec(Spec {
            flags: "vknxtbDPMQm",
            values: "sd",
            operands: NONE,
            ..S
        }),
        note: "never `-F`, `-O`, `-A`, `-H`, `-i`, `-p`",
    },
    Program {
        names: &["lsusb"],
        rule: spec(Spec {
            flags: "vt",
            values: "sd",
            operands: NONE,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["sensors"],
        rule: spec(Spec {
            flags: "Aujf",
            operands: ANY,
            ..S
        }),
        note: "chip names; never `-s` (sets limits) or `-c FILE`",
    },
    Program {
        names: &["dmidecode"],
        rule: spec(Spec {
            flags: "qu",
            values: "ts",
            long_flags: &["--quiet", "--dump"],
            long_values: &["--type", "--string"],
            operands: NONE,
            ..S
        }),
        note: "never `--dump-bin FILE` (writes a file) or `--from-dump`",
    },
    // Processes, users and sessions.
    Program {
        names: &["ps"],
        rule: Rule::Custom(ps),
        note: "UNIX options `-AadeFfHjLlMNTwyZc`, with a value (separate word) `-o -O -p -C -u -U -g -G -t -s -q`; BSD options `auxfwcjlsvrThHmnSLXyZg`, with a value last `o O p t U k q`; long `--forest --no-headers --headers --cumulative --deselect`, with a value `--format --sort --pid --ppid --user --User --group --Group --cols --columns --width --tty --sid`; process ids. Never the BSD `e` modifier (`ps auxe`, `ps eww`), which prints every process's environment",
    },
    Program {
        names: &["pgrep"],
        rule: spec(Spec {
            flags: "lafxcinovwA",
            values: "dgGPstuUr",
            long_flags: &[
                "--list-name",
                "--list-full",
                "--full",
                "--exact",
                "--count",
                "--ignore-case",
                "--newest",
                "--oldest",
                "--inverse",
                "--lightweight",
                "--ignore-ancestors",
            ],
            long_values: &[
                "--delimiter",
                "--pgroup",
                "--group",
                "--parent",
                "--session",
                "--terminal",
                "--euid",
                "--uid",
                "--runstates",
                "--ns",
                "--nslist",
                "--older",
            ],
            operands: at_most(1),
            ..S
        }),
        note: "one pattern; never `-F FILE`",
    },
    Program {
        names: &["pidof"],
        rule: spec(Spec {
            flags: "scxqwz",
            values: "o",
            operands: ANY,
            ..S
        }),
        note: "program names",
    },
    Program {
        names: &["pstree"],
        rule: spec(Spec {
            flags: "achglnpsASTuUZ",
            operands: at_most(1),
            ..S
        }),
        note: "a pid or a user",
    },
    Program {
        names: &["w"],
        rule: spec(Spec {
            flags: "hsfiuop",
            operands: at_most(1),
            ..S
        }),
        note: "a user",
    },
    Program {
        names: &["who"],
        rule: checked(
            Spec {
                flags: "abdHlmpqrstTuw",
                operands: at_most(2),
                ..S
            },
            who_operands,
        ),
        note: "only `am i` as operands (a file operand is read as a login record)",
    },
    Program {
        names: &["last"],
        rule: spec(Spec {
            flags: "adFiwxR",
            values: "nstp",
            long_flags: &[
                "--dns",
                "--fulltimes",
                "--ip",
                "--fullnames",
                "--system",
                "--nohostname",
            ],
            long_values: &[
                "--limit",
                "--since",
                "--until",
                "--present",
                "--time-format",
            ],
            numeric: true,
            operands: ANY,
            ..S
        }),
        note: "users and terminals; never `-f FILE`",
    },
    // Files: listing and reading (each path held to the secret-path rule).
    Program {
        names: &["ls"],
        rule: spec(Spec {
            flags: "aAbBcCdfFgGhHiklLmnNopqQrRsStuUvxXZ1",
            values: "ITw",
            long_flags: &[
                "--all",
                "--almost-all",
                "--human-readable",
                "--si",
                "--inode",
                "--numeric-uid-gid",
                "--recursive",
                "--reverse",
                "--size",
                "--directory",
                "--dereference",
                "--full-time",
                "--group-directories-first",
                "--no-group",
                "--literal",
                "--context",
                "--author",
            ],
            long_values: &[
                "--sort",
                "--time",
                "--time-style",
                "--block-size",
                "--ignore",
                "--width",
                "--format",
                "--indicator-style",
                "--quoting-style",
                "--hide",
                "--tabsize",
            ],
            long_optional: &["--color", "--classify"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["du"],
        rule: spec(Spec {
            flags: "ahcsxkmbLHDlPS0",
            values: "dtB",
            long_flags: &[
                "--all",
                "--apparent-size",
                "--bytes",
                "--total",
                "--dereference",
                "--count-links",
                "--one-file-system",
                "--summarize",
                "--human-readable",
                "--si",
                "--separate-dirs",
                "--null",
                "--inodes",
                "--no-dereference",
            ],
            long_values: &[
                "--max-depth",
                "--threshold",
                "--block-size",
                "--exclude",
                "--time-style",
            ],
            long_optional: &["--time"],
            operands: ANY,
            ..S
        }),
        note: "never `--files0-from` or `-X FILE`",
    },
    Program {
        names: &["df"],
        rule: spec(Spec {
            flags: "ahHiklPT",
            values: "txB",
            long_flags: &[
                "--all",
                "--human-readable",
                "--si",
                "--inodes",
                "--local",
                "--portability",
                "--print-type",
                "--total",
                "--no-sync",
            ],
            long_values: &["--type", "--exclude-type", "--block-size"],
            long_optional: &["--output"],
            operands: ANY,
            ..S
        }),
        note: "never `--sync`",
    },
    Program {
        names: &["cat"],
        rule: spec(Spec {
            flags: "AbeEnstTuv",
            long_flags: &[
                "--show-all",
                "--number-nonblank",
                "--number",
                "--squeeze-blank",
                "--show-ends",
                "--show-tabs",
                "--show-nonprinting",
            ],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["head"],
        rule: spec(HEAD_TAIL),
        note: "",
    },
    Program {
        names: &["tail"],
        rule: spec(HEAD_TAIL),
        note: "never following (`-f`, `-F`, `--follow`, `--retry`, `--pid`, `-s`): read the last lines instead",
    },
    Program {
        names: &["wc"],
        rule: spec(Spec {
            flags: "lwcmL",
            long_flags: &[
                "--lines",
                "--words",
                "--bytes",
                "--chars",
                "--max-line-length",
            ],
            long_values: &["--total"],
            operands: ANY,
            ..S
        }),
        note: "never `--files0-from`",
    },
    Program {
        names: &["stat"],
        rule: spec(Spec {
            flags: "LftZ",
            values: "c",
            long_flags: &["--dereference", "--file-system", "--terse"],
            long_values: &["--format", "--printf", "--cached"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["file"],
        rule: spec(Spec {
            flags: "bihLkNEr0",
            long_flags: &[
                "--brief",
                "--mime",
                "--mime-type",
                "--mime-encoding",
                "--dereference",
                "--no-dereference",
                "--keep-going",
                "--no-pad",
                "--raw",
                "--print0",
                "--extension",
                "--apple",
            ],
            operands: ANY,
            ..S
        }),
        note: "never `-C` (compiles a magic file), `-m`, `-f`, `-p` or `-S`",
    },
    Program {
        names: &["readlink"],
        rule: spec(Spec {
            flags: "femnqsvz",
            long_flags: &[
                "--canonicalize",
                "--canonicalize-existing",
                "--canonicalize-missing",
                "--no-newline",
                "--quiet",
                "--silent",
                "--verbose",
                "--zero",
            ],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["realpath"],
        rule: spec(Spec {
            flags: "emLPqsz",
            long_flags: &[
                "--canonicalize-existing",
                "--canonicalize-missing",
                "--logical",
                "--physical",
                "--quiet",
                "--strip",
                "--no-symlinks",
                "--zero",
            ],
            long_values: &["--relative-to", "--relative-base"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["basename"],
        rule: spec(Spec {
            flags: "az",
            values: "s",
            long_flags: &["--multiple", "--zero"],
            long_values: &["--suffix"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["dirname"],
        rule: spec(Spec {
            flags: "z",
            long_flags: &["--zero"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["which"],
        rule: spec(Spec {
            flags: "a",
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["whereis"],
        rule: spec(Spec {
            flags: "bmsul",
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["find"],
        rule: Rule::Custom(find_expression),
        note: "starting points, then tests (`-name -iname -path -ipath -wholename -iwholename -regex -iregex -regextype -type -xtype -size -mtime -mmin -atime -amin -ctime -cmin -used -newer -anewer -cnewer -newerXY -user -group -uid -gid -perm -links -inum -samefile -lname -ilname -fstype -maxdepth -mindepth`, `-empty -readable -writable -executable -nouser -nogroup -xdev -mount -depth -follow -noleaf -daystart`), operators and the printing actions `-print -print0 -printf -ls -prune -quit`; never `-exec`, `-execdir`, `-ok`, `-okdir`, `-delete`, `-fprint*`, `-fls` or `-files0-from`",
    },
    Program {
        names: &["lsblk"],
        rule: spec(Spec {
            flags: "abdDfJlmnOpPrSstzAM",
            values: "eIoxQ",
            long_flags: &[
                "--all",
                "--bytes",
                "--nodeps",
                "--discard",
                "--fs",
                "--json",
                "--list",
                "--perms",
                "--noheadings",
                "--output-all",
                "--paths",
                "--pairs",
                "--raw",
                "--scsi",
                "--inverse",
                "--topology",
                "--zoned",
                "--merge",
            ],
            long_values: &["--exclude", "--include", "--output", "--sort"],
            operands: ANY,
            ..S
        }),
        note: "devices",
    },
    Program {
        names: &["findmnt"],
        rule: spec(Spec {
            flags: "AabcDefiJklmnPrRsuUvx",
            values: "tOSTMoN",
            long_flags: &[
                "--all",
                "--ascii",
                "--bytes",
                "--canonicalize",
                "--df",
                "--evaluate",
                "--first-only",
                "--invert",
                "--json",
                "--list",
                "--kernel",
                "--mtab",
                "--fstab",
                "--noheadings",
                "--notruncate",
                "--nofsroot",
                "--pairs",
                "--raw",
                "--submounts",
                "--uniq",
                "--verify",
                "--real",
                "--pseudo",
            ],
            long_values: &[
                "--types",
                "--options",
                "--source",
                "--target",
                "--mountpoint",
                "--output",
                "--task",
            ],
            operands: at_most(2),
            ..S
        }),
        note: "never `--poll` or `-F FILE`",
    },
    Program {
        names: &["blkid"],
        rule: spec(Spec {
            flags: "lpid",
            values: "osLUtnu",
            operands: ANY,
            ..S
        }),
        note: "devices; never `-c FILE`, `-g` or `-w` (the cache file)",
    },
    Program {
        names: &["losetup"],
        rule: spec(Spec {
            flags: "alJn",
            values: "O",
            long_flags: &["--all", "--list", "--json", "--noheadings", "--raw"],
            long_values: &["--output"],
            operands: NONE,
            ..S
        }),
        note: "listing only: an operand attaches or detaches a loop device",
    },
    Program {
        names: &["pvs", "vgs", "lvs"],
        rule: spec(LVM_REPORT),
        note: "volume names; never `--config`",
    },
    Program {
        names: &["lsof"],
        rule: spec(Spec {
            flags: "nPtlwRUVNaXbE",
            values: "pugcd",
            optional: "isTK",
            operands: ANY,
            ..S
        }),
        note: "files; never `-k`, `-m` or `-r`",
    },
    Program {
        names: &["lsns"],
        rule: spec(Spec {
            flags: "Jlnur",
            values: "tpo",
            operands: at_most(1),
            ..S
        }),
        note: "",
    },
    Program {
        names: &["lsipc"],
        rule: spec(Spec {
            flags: "qmsgbceJlnrt",
            values: "io",
            operands: NONE,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["lslocks"],
        rule: spec(Spec {
            flags: "Jnrbiu",
            values: "op",
            operands: NONE,
            ..S
        }),
        note: "",
    },
    // Text: read from files or the previous stage, written to stdout only.
    Program {
        names: &["grep", "egrep", "fgrep", "zgrep"],
        rule: spec(GREP),
        note: "patterns and files; never recursive (`-r`, `-R`, `-d recurse`: name the files) or `-f FILE`",
    },
    Program {
        names: &["cut"],
        rule: spec(Spec {
            flags: "snz",
            values: "bcdf",
            long_flags: &["--only-delimited", "--zero-terminated", "--complement"],
            long_values: &[
                "--bytes",
                "--characters",
                "--delimiter",
                "--fields",
                "--output-delimiter",
            ],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["tr"],
        rule: spec(Spec {
            flags: "cCdst",
            long_flags: &[
                "--complement",
                "--delete",
                "--squeeze-repeats",
                "--truncate-set1",
            ],
            operands: at_most(2),
            ..S
        }),
        note: "two sets",
    },
    Program {
        names: &["column"],
        rule: spec(Spec {
            flags: "txneJL",
            values: "scoNRHWOE",
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["nl"],
        rule: spec(Spec {
            flags: "p",
            values: "bdfhinsvw",
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["tac"],
        rule: spec(Spec {
            flags: "br",
            values: "s",
            long_flags: &["--before", "--regex"],
            long_values: &["--separator"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["rev"],
        rule: spec(Spec { operands: ANY, ..S }),
        note: "",
    },
    Program {
        names: &["zcat"],
        rule: spec(Spec {
            flags: "fqvltc",
            long_flags: &[
                "--force",
                "--quiet",
                "--verbose",
                "--list",
                "--test",
                "--stdout",
            ],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &[
            "md5sum",
            "sha1sum",
            "sha224sum",
            "sha256sum",
            "sha384sum",
            "sha512sum",
            "b2sum",
            "cksum",
        ],
        rule: spec(CHECKSUM),
        note: "never `-c`/`--check` (which reads a list of files from a file)",
    },
    Program {
        names: &["od"],
        rule: spec(Spec {
            flags: "abcdfhilosvx",
            values: "AjNtS",
            optional: "w",
            long_flags: &["--output-duplicates", "--traditional"],
            long_values: &[
                "--address-radix",
                "--skip-bytes",
                "--read-bytes",
                "--format",
                "--endian",
            ],
            long_optional: &["--width", "--strings"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["hexdump"],
        rule: spec(Spec {
            flags: "bcCdoxv",
            values: "nse",
            long_flags: &[
                "--canonical",
                "--no-squeezing",
                "--one-byte-octal",
                "--one-byte-char",
                "--two-bytes-decimal",
                "--two-bytes-octal",
                "--two-bytes-hex",
            ],
            long_values: &["--length", "--skip", "--format"],
            operands: ANY,
            ..S
        }),
        note: "never `-f FILE`",
    },
    Program {
        names: &["strings"],
        rule: spec(Spec {
            flags: "afwd",
            values: "ntesT",
            numeric: true,
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["diff"],
        rule: spec(Spec {
            flags: "qsyuciwbBEZTtaNpd",
            values: "UCWFI",
            long_flags: &[
                "--brief",
                "--report-identical-files",
                "--side-by-side",
                "--ignore-case",
                "--ignore-tab-expansion",
                "--ignore-trailing-space",
                "--ignore-space-change",
                "--ignore-all-space",
                "--ignore-blank-lines",
                "--text",
                "--strip-trailing-cr",
                "--expand-tabs",
                "--initial-tab",
                "--suppress-common-lines",
                "--minimal",
                "--speed-large-files",
                "--new-file",
                "--show-c-function",
            ],
            long_values: &[
                "--width",
                "--label",
                "--ignore-matching-lines",
                "--show-function-line",
                "--tabsize",
            ],
            long_optional: &["--unified", "--context", "--color"],
            operands: at_most(2),
            ..S
        }),
        note: "two files; never recursive (`-r`): name the files",
    },
    Program {
        names: &["cmp"],
        rule: spec(Spec {
            flags: "bls",
            values: "in",
            long_flags: &["--print-bytes", "--verbose", "--quiet", "--silent"],
            long_values: &["--ignore-initial", "--bytes"],
            operands: at_most(4),
            ..S
        }),
        note: "",
    },
    Program {
        names: &["comm"],
        rule: spec(Spec {
            flags: "123z",
            long_flags: &[
                "--check-order",
                "--nocheck-order",
                "--total",
                "--zero-terminated",
            ],
            long_values: &["--output-delimiter"],
            operands: at_most(2),
            ..S
        }),
        note: "",
    },
    Program {
        names: &["join"],
        rule: spec(Spec {
            flags: "iz",
            values: "aeojtv12",
            long_flags: &[
                "--ignore-case",
                "--check-order",
                "--nocheck-order",
                "--header",
                "--zero-terminated",
            ],
            operands: at_most(2),
            ..S
        }),
        note: "",
    },
    Program {
        names: &["paste"],
        rule: spec(Spec {
            flags: "sz",
            values: "d",
            long_flags: &["--serial", "--zero-terminated"],
            long_values: &["--delimiters"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["fold"],
        rule: spec(Spec {
            flags: "bs",
            values: "w",
            long_flags: &["--bytes", "--spaces"],
            long_values: &["--width"],
            numeric: true,
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["fmt"],
        rule: spec(Spec {
            flags: "cstu",
            values: "wpg",
            long_flags: &[
                "--crown-margin",
                "--split-only",
                "--tagged-paragraph",
                "--uniform-spacing",
            ],
            long_values: &["--width", "--prefix", "--goal"],
            numeric: true,
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["expand"],
        rule: spec(Spec {
            flags: "i",
            values: "t",
            long_flags: &["--initial"],
            long_values: &["--tabs"],
            numeric: true,
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["unexpand"],
        rule: spec(Spec {
            flags: "a",
            values: "t",
            long_flags: &["--all", "--first-only"],
            long_values: &["--tabs"],
            operands: ANY,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["sort"],
        rule: spec(Spec {
            flags: "bdfghiMnRrVCmsuz",
            values: "ktS",
            long_flags: &[
                "--ignore-leading-blanks",
                "--dictionary-order",
                "--ignore-case",
                "--general-numeric-sort",
                "--human-numeric-sort",
                "--ignore-nonprinting",
                "--month-sort",
                "--numeric-sort",
                "--random-sort",
                "--reverse",
                "--version-sort",
                "--merge",
                "--stable",
                "--unique",
                "--zero-terminated",
                "--debug",
            ],
            long_values: &[
                "--key",
                "--field-separator",
                "--buffer-size",
                "--sort",
                "--parallel",
            ],
            long_optional: &["--check"],
            operands: ANY,
            ..S
        }),
        note: "files; never `-o`/`--output` (writes a file), `-T`, `--compress-program` (runs a program), `--files0-from` or `--random-source`",
    },
    Program {
        names: &["uniq"],
        rule: spec(Spec {
            flags: "cdDiuz",
            values: "fsw",
            long_flags: &[
                "--count",
                "--repeated",
                "--unique",
                "--ignore-case",
                "--zero-terminated",
            ],
            long_values: &["--skip-fields", "--skip-chars", "--check-chars"],
            long_optional: &["--all-repeated", "--group"],
            operands: at_most(1),
            ..S
        }),
        note: "one input file (a second operand is written to)",
    },
    Program {
        names: &["seq"],
        rule: spec(Spec {
            flags: "w",
            values: "fs",
            long_flags: &["--equal-width"],
            long_values: &["--format", "--separator"],
            operands: at_most(3),
            ..S
        }),
        note: "",
    },
    Program {
        names: &["echo", "test", "true", "false"],
        rule: Rule::Custom(any_words),
        note: "any words (they print or test, nothing else)",
    },
    // Network.
    Program {
        names: &["ss"],
        rule: spec(Spec {
            flags: "atulnpsxw46eimorHOZzbM0Sd",
            values: "fAN",
            long_flags: &[
                "--tcp",
                "--udp",
                "--listening",
                "--numeric",
                "--processes",
                "--all",
                "--summary",
                "--unix",
                "--raw",
                "--extended",
                "--info",
                "--memory",
                "--options",
                "--resolve",
                "--no-header",
                "--oneline",
                "--ipv4",
                "--ipv6",
                "--packet",
                "--sctp",
                "--dccp",
                "--mptcp",
                "--context",
                "--contexts",
                "--cgroup",
            ],
            long_values: &["--family", "--query", "--socket", "--net"],
            operands: ANY,
            ..S
        }),
        note: "a filter (`state established`, `dport = :443`); never `-K`/`--kill` (kills sockets), `-D`/`--diag FILE` or `-F FILE`",
    },
    Program {
        names: &["netstat"],
        rule: spec(Spec {
            flags: "tulnpaeorisgWxvwMNCFZ46c",
            long_flags: &[
                "--tcp",
                "--udp",
                "--listening",
                "--numeric",
                "--program",
                "--all",
                "--extend",
                "--timers",
                "--route",
                "--interfaces",
                "--statistics",
                "--groups",
                "--wide",
                "--unix",
                "--verbose",
                "--raw",
            ],
            operands: NONE,
            ..S
        }),
        note: "",
    },
    Program {
        names: &["ip"],
        rule: Rule::Custom(ip),
        note: "options `-4 -6 -br -brief -s -stats -statistics -d -details -j -json -p -pretty -c -color -o -oneline -r -resolve -h -human`, `-n NETNS`; objects `addr link route neigh rule netns maddr tunnel netconf ntable nexthop` (and their short forms) with `show`, `list`, `lst`, `ls`, `sh`, or (route, neigh) `get`; never `-b`/`-batch FILE`, `-force` or a verb that changes (`add`, `del`, `set`, `flush`, `exec`, ...)",
    },
    Program {
        names: &["ping"],
        rule: spec(Spec {
            flags: "qnv46DOaAbBdLRrU",
            values: "ciWwstIM",
            operands: at_most(1),
            ..S
        }),
        note: "one host; never `-f` (flood) or `-p`",
    },
    Program {
        names: &["traceroute"],
        rule: spec(Spec {
            flags: "46IUTnrAFe",
            values: "fimNpqwszt",
            operands: at_most(2),
            ..S
        }),
        note: "",
    },
    Program {
        names: &["tracepath"],
        rule: spec(Spec {
            flags: "46nb",
            values: "lmp",
            operands: at_most(1),
            ..S
        }),
        note: "",
    },
    Program {
        names: &["mtr"],
        rule: spec(Spec {
            flags: "rnbwjz46TuCxl",
            values: "ciPsmfo",
            long_flags: &[
                "--report",
                "--no-dns",
                "--show-ips",
                "--report-wide",
                "--json",
                "--aslookup",
                "--tcp",
                "--udp",
                "--csv",
                "--xml",
                "--raw",
            ],
            long_values: &[
                "--report-cycles",
                "--interval",
                "--port",
                "--psize",
                "--max-ttl",
                "--first-ttl",
                "--order",
                "--gracetime",
                "--timeout",
            ],
            operands: at_most(1),
            ..S
        }),
        note: "one host; never `-F FILE` (sends a file's lines as host names)",
    },
    Program {
        names: &["dig"],
        rule: Rule::Custom(dig),
        note: "`@server`, `+query-options`, `-4 -6 -r -u -m`, with a value `-t -c -x -p -q`, names and types; never `-f FILE` (sends a file's lines as queries), `-k` or `-y`",
    },
    Program {
        names: &["nslookup"],
        rule: Rule::Custom(nslookup),
        note: "`-type= -query= -class= -timeout= -retry= -port= -domain=`, `-debug -nodebug -vc -recurse -norecurse`, a name and a server",
    },
    Program {
        names: &["host"],
        rule: spec(Spec {
            flags: "aACdilrsTUv46",
            values: "ctNRW",
            operands: at_most(2),
            ..S
        }),
        note: "a name and a server",
    },
    Program {
        names: &["getent"],
        rule: checked(
            Spec {
                flags: "i",
                long_flags: &["--no-idn"],
                operands: ANY,
                ..S
            },
            getent_database,
        ),
        note: "the databases `hosts ahosts ahostsv4 ahostsv6 passwd group services protocols networks netgroup rpc ethers initgroups`; never `shadow` or `gshadow`",
    },
    Program {
        names: &["curl"],
        rule: checked(
            Spec {
                flags: "sSIikfv46GNq",
                values: "mHwAeX",
                long_flags: &[
                    "--silent",
                    "--show-error",
                    "--head",
                    "--include",
                    "--insecure",
                    "--fail",
                    "--verbose",
                    "--compressed",
                    "--get",
                    "--http1.1",
                    "--http2",
                    "--no-buffer",
                    "--ipv4",
                    "--ipv6",
                ],
                long_values: &[
                    "--max-time",
                    "--connect-timeout",
                    "--header",
                    "--write-out",
                    "--user-agent",
                    "--retry",
                    "--referer",
                    "--max-redirs",
                    "--request",
                ],
                operands: ANY,
                ..S
            },
            curl_request,
        ),
        note: "`-X`/`--request` only `GET` or `HEAD`; values never `@file` or `<file`, `-w` never `%output{}`; `http://` and `https://` URLs only, never a link-local or metadata address (169.254.0.0/16, `fd00:ec2::254`, `fe80::/10`, `metadata.google.internal`, 100.100.100.200, in any spelling: decimal, hex, octal, IPv4-mapped IPv6), never globs. Not admitted: bodies and forms (`-d`, `--json`, `-F`), uploads (`-T`), output files (`-o`, `-O`, `-D`), configs (`-K`), cookies (`-b`, `-c`), proxies (`-x`, `--proxy`, `--socks5`, ...), `--resolve`/`--connect-to`, `--unix-socket` and following redirects (`-L`: a redirect could lead to an address that is refused). The agent runs commands with only `PATH` and `LANG` in the environment, so no proxy variable reaches curl",
    },
    Program {
        names: &["wget"],
        rule: checked(
            Spec {
                flags: "qS46",
                values: "Tt",
                words: &["-nv"],
                long_flags: &[
                    "--spider",
                    "--quiet",
                    "--server-response",
                    "--no-check-certificate",
                    "--no-verbose",
                    "--inet4-only",
                    "--inet6-only",
                ],
                long_values: &["--timeout", "--tries"],
                operands: ANY,
                ..S
            },
            wget_spider,
        ),
        note: "only `--spider` checks of `http://` and `https://` URLs, with the same address rule as curl; never `-O`, `-e`, `--post-*`, `-i FILE` or a proxy option",
    },
    // Services, logs and the kernel.
    Program {
        names: &["systemctl"],
        rule: checked(
            Spec {
                flags: "alqr",
                values: "ptno",
                long_flags: &[
                    "--all",
                    "--full",
                    "--no-pager",
                    "--no-legend",
                    "--plain",
                    "--failed",
                    "--value",
                    "--quiet",
                    "--recursive",
                    "--reverse",
                    "--after",
                    "--before",
                    "--system",
                    "--show-types",
                    "--no-ask-password",
                ],
                long_values: &["--property", "--type", "--state", "--lines", "--output"],
                operands: ANY,
                ..S
            },
            systemctl_verb,
        ),
        note: "no verb, or `status show is-active is-enabled is-failed is-system-running list-units list-unit-files list-timers list-sockets list-dependencies cat` with units; never `-H`/`--host` or `-M` (another machine), never a verb that changes",
    },
    Program {
        names: &["journalctl"],
        rule: spec(Spec {
            flags: "kraxqlmeN",
            values: "cpSUtTugoF",
            optional: "nb",
            long_flags: &[
                "--no-pager",
                "--dmesg",
                "--reverse",
                "--all",
                "--catalog",
                "--quiet",
                "--full",
                "--no-full",
                "--merge",
                "--pager-end",
                "--utc",
                "--no-hostname",
                "--disk-usage",
                "--list-boots",
                "--system",
                "--user",
                "--fields",
                "--header",
                "--no-tail",
                "--show-cursor",
            ],
            long_values: &[
                "--unit",
                "--user-unit",
                "--priority",
                "--since",
                "--until",
                "--identifier",
                "--exclude-identifier",
                "--grep",
                "--output",
                "--field",
                "--cursor",
                "--after-cursor",
                "--facility",
                "--output-fields",
            ],
            long_optional: &["--lines", "--boot", "--case-sensitive"],
            operands: ANY,
            ..S
        }),
        note: "matches; never following (`-f`), maintenance (`--rotate`, `--flush`, `--sync`, `--vacuum-*`, `--setup-keys`, `--update-catalog`, `--relinquish-var`), `--cursor-file` (writes), other journals (`-D`, `--file`, `--root`, `-M`)",
    },
    Program {
        names: &["dmesg"],
        rule: spec(Spec {
            flags: "TkxtrSueJdP",
            values: "lfs",
            long_flags: &[
                "--ctime",
                "--kernel",
                "--decode",
                "--notime",
                "--raw",
                "--syslog",
                "--userspace",
                "--reltime",
                "--nopager",
                "--json",
                "--show-delta",
            ],
            long_values: &[
                "--level",
                "--facility",
                "--buffer-size",
                "--time-format",
                "--since",
                "--until",
            ],
            long_optional: &["--color"],
            operands: NONE,
            ..S
        }),
        note: "never clearing (`-c`, `-C`), the console level (`-n`, `-D`, `-E`), following (`-w`, `-W`) or another file (`-F`, `-K`)",
    },
    Program {
        names: &["sysctl"],
        rule: checked(
            Spec {
                flags: "anNeAXb",
                values: "r",
                long_flags: &["--all", "--values", "--names", "--ignore", "--binary"],
                long_values: &["--pattern"],
                operands: ANY,
                ..S
            },
            sysctl_keys,
        ),
        note: "keys to read; never `key=value`, `-w`, `-p[FILE]`/`--load`, `-f` or `--system`",
    },
    Program {
        names: &["loginctl"],
        rule: checked(
            Spec {
                flags: "al",
                values: "pno",
                long_flags: &["--all", "--full", "--no-pager", "--no-legend", "--value"],
                long_values: &["--property", "--lines", "--output"],
                operands: ANY,
                ..S
            },
            loginctl_verb,
        ),
        note: "`list-sessions list-users list-seats show-session show-user session-status user-status`",
    },
    Program {
        names: &["resolvectl"],
        rule: checked(
            Spec {
                flags: "46",
                values: "itcp",
                long_flags: &["--no-pager"],
                long_values: &["--interface", "--type", "--class", "--protocol", "--legend"],
                operands: ANY,
                ..S
            },
            resolvectl_verb,
        ),
        note: "`status query statistics`, and `dns`/`domain` with at most a link (with servers or domains they set them)",
    },
    Program {
        names: &["chronyc"],
        rule: checked(
            Spec {
                flags: "nc46v",
                operands: at_most(2),
                ..S
            },
            chronyc_verb,
        ),
        note: "`tracking sources sourcestats activity serverstats ntpdata selectdata authdata rtcdata smoothing`; never `-h` (another host), `-m` or a verb that changes (`makestep`, `settime`, `burst`, ...)",
    },
    Program {
        names: &["ntpq"],
        rule: spec(Spec {
            flags: "pnw46",
            operands: at_most(1),
            ..S
        }),
        note: "never `-c`/`-i` (commands, among them `:config`)",
    },
    Program {
        names: &["smartctl"],
        rule: checked(
            Spec {
                flags: "aHiAxcj",
                values: "ldn",
                long_flags: &[
                    "--all",
                    "--health",
                    "--info",
                    "--attributes",
                    "--xall",
                    "--capabilities",
                ],
                long_values: &["--log", "--device", "--nocheck"],
                long_optional: &["--json"],
                operands: at_most(1),
                ..S
            },
            smartctl_logs,
        ),
        note: "one device; `-l` logs to print, never `scterc,R,W` or `scttempint,N` (they set); never tests (`-t`, `-X`), settings (`-s`, `-o`, `-S`) or `--set`",
    },
    Program {
        names: &["zpool"],
        rule: checked(
            Spec {
                flags: "vxpHPLgDtyqrwl",
                values: "oT",
                operands: ANY,
                ..S
            },
            zpool_verb,
        ),
        note: "`status list iostat get history` with pools",
    },
    Program {
        names: &["zfs"],
        rule: checked(
            Spec {
                flags: "rHp",
                values: "otsSd",
                operands: ANY,
                ..S
            },
            zfs_verb,
        ),
        note: "`list get` with datasets",
    },
    Program {
        names: &["docker"],
        rule: Rule::Custom(docker),
        note: "`ps`/`container ls` (`-a -q -n -l -s --no-trunc --filter --format`), `images`/`image ls`, `logs` (`--tail -n --since --until -t --details`, one container), `stats --no-stream`, `top` (one container, no ps options), `port`, `diff`, `history`, `version`, `info`, `system df`, `network ls/inspect`, `volume ls/inspect`; never global options (`-H`, `--context`, `--config`), never `inspect` of a container or an image (it prints the environment: use `pulse_read action=inspect`), never a verb that changes",
    },
    Program {
        names: &["timeout"],
        rule: Rule::Custom(timeout),
        note: "`--preserve-status --foreground -v`, `-s`/`--signal`, `-k`/`--kill-after`, a duration, then a command that is itself admitted",
    },
];

fn date_operand(parsed: &Parsed<'_>) -> Result<(), String> {
    match parsed.operands.first() {
        Some(operand) if !operand.starts_with('+') => Err(format!(
            "{operand:?} is not +FORMAT, and date sets the clock from such an operand; only +FORMAT is read"
        )),
        _ => Ok(()),
    }
}

fn who_operands(parsed: &Parsed<'_>) -> Result<(), String> {
    match parsed.operands.as_slice() {
        [] | ["am", "i" | "I"] => Ok(()),
        _ => Err(
            "only `who am i` takes operands (a file operand is read as a login record)".to_owned(),
        ),
    }
}

fn getent_database(parsed: &Parsed<'_>) -> Result<(), String> {
    const DATABASES: &[&str] = &[
        "hosts",
        "ahosts",
        "ahostsv4",
        "ahostsv6",
        "passwd",
        "group",
        "services",
        "protocols",
        "networks",
        "netgroup",
        "rpc",
        "ethers",
        "initgroups",
    ];
    match parsed.operands.first() {
        Some(db) if DATABASES.contains(db) => Ok(()),
        Some(db) => Err(format!(
            "the database {db:?} is not admitted (allowed: {}; shadow databases hold password hashes)",
            DATABASES.join(", ")
        )),
        None => Err("name a database (hosts, passwd, group, ...)".to_owned()),
    }
}

fn sysctl_keys(parsed: &Parsed<'_>) -> Result<(), String> {
    match parsed.operands.iter().find(|o| o.contains('=')) {
        Some(assignment) => Err(format!(
            "{assignment} sets a kernel parameter; name the key alone to read it"
        )),
        None => Ok(()),
    }
}

/// The first operand as a verb from `allowed`; `required` when there must be one.
fn verb_in(parsed: &Parsed<'_>, allowed: &[&str], required: bool) -> Result<(), String> {
    match parsed.operands.first() {
        Some(verb) if allowed.contains(verb) => Ok(()),
        Some(verb) => Err(format!(
            "`{verb}` is not a read-only verb (allowed: {})",
            allowed.join(", ")
        )),
        None if required => Err(format!("name a read-only verb ({})", allowed.join(", "))),
        None => Ok(()),
    }
}

fn systemctl_verb(parsed: &Parsed<'_>) -> Result<(), String> {
    verb_in(
        parsed,
        &[
            "status",
            "show",
            "is-active",
            "is-enabled",
            "is-failed",
            "is-system-running",
            "list-units",
            "list-unit-files",
            "list-timers",
            "list-sockets",
            "list-dependencies",
            "cat",
        ],
        false,
    )
}

fn loginctl_verb(parsed: &Parsed<'_>) -> Result<(), String> {
    verb_in(
        parsed,
        &[
            "list-sessions",
            "list-users",
            "list-seats",
            "show-session",
            "show-user",
            "session-status",
            "user-status",
        ],
        true,
    )
}

fn resolvectl_verb(parsed: &Parsed<'_>) -> Result<(), String> {
    verb_in(
        parsed,
        &["status", "query", "statistics", "dns", "domain"],
        false,
    )?;
    match parsed.operands.as_slice() {
        [verb @ ("dns" | "domain"), _, value, ..] => Err(format!(
            "`{verb}` with {value:?} sets the link's {verb}; name at most the link to read it"
        )),
        _ => Ok(()),
    }
}

fn chronyc_verb(parsed: &Parsed<'_>) -> Result<(), String> {
    verb_in(
        parsed,
        &[
            "tracking",
            "sources",
            "sourcestats",
            "activity",
            "serverstats",
            "ntpdata",
            "selectdata",
            "authdata",
            "rtcdata",
            "smoothing",
        ],
        true,
    )
}

fn smartctl_logs(parsed: &Parsed<'_>) -> Result<(), String> {
    match parsed.values(&["-l", "--log"]).find(|log| {
        log.starts_with("scttempint") || (log.starts_with("scterc") && log.contains(','))
    }) {
        Some(log) => Err(format!(
            "-l {log} sets the drive's parameters; name the log alone to read it"
        )),
        None => Ok(()),
    }
}

fn zpool_verb(parsed: &Parsed<'_>) -> Result<(), String> {
    verb_in(
        parsed,
        &["status", "list", "iostat", "get", "history"],
        true,
    )
}

fn zfs_verb(parsed: &Parsed<'_>) -> Result<(), String> {
    verb_in(parsed, &["list", "get"], true)
}

/// Option values of curl and wget that would make them read a file.
fn reads_a_file(value: &str) -> bool {
    value.starts_with('@') || value.starts_with('<')
}

fn curl_request(parsed: &Parsed<'_>) -> Result<(), String> {
    for option in &parsed.options {
        let Some(value) = option.value else { continue };
        if reads_a_file(value) {
            return Err(format!(
                "{} {value}: `@file` and `<file` read a local file and send it; give the value itself",
                option.name
            ));
        }
    }
    if let Some(method) = parsed
        .values(&["-X", "--request"])
        .find(|m| !matches!(*m, "GET" | "HEAD"))
    {
        return Err(format!("method {method:?}: only GET and HEAD probes"));
    }
    if let Some(format) = parsed
        .values(&["-w", "--write-out"])
        .find(|f| f.to_ascii_lowercase().contains("%output{"))
    {
        return Err(format!("-w {format:?}: %output{{}} writes a file"));
    }
    urls(parsed)
}

fn wget_spider(parsed: &Parsed<'_>) -> Result<(), String> {
    if !parsed.has(&["--spider"]) {
        return Err(
            "only spider checks (--spider) are read-only; wget downloads otherwise".to_owned(),
        );
    }
    urls(parsed)
}

fn urls(parsed: &Parsed<'_>) -> Result<(), String> {
    if parsed.operands.is_empty() {
        return Err("name an http:// or https:// URL".to_owned());
    }
    match parsed.operands.iter().find_map(|u| url::refusal(u)) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

fn any_words(_: &[String]) -> Result<(), ExecRefusal> {
    Ok(())
}

fn timeout(args: &[String]) -> Result<(), ExecRefusal> {
    let mut rest = args.iter().map(String::as_str).peekable();
    // Options, then the duration, then the command.
    while let Some(arg) = rest.peek().copied() {
        match arg {
            "--preserve-status" | "--foreground" | "-v" | "--verbose" => {
                rest.next();
            }
            "-s" | "--signal" | "-k" | "--kill-after" => {
                rest.next();
                if rest.next().is_none_or(|value| value.starts_with('-')) {
                    return Err(write_argument("timeout", format!("{arg} needs a value")));
                }
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
    if duration.is_empty()
        || !duration
            .trim_end_matches(['s', 'm', 'h', 'd'])
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.')
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

fn find_expression(args: &[String]) -> Result<(), ExecRefusal> {
    const NO_ARG: &[&str] = &[
        "-print",
        "-print0",
        "-ls",
        "-prune",
        "-quit",
        "-true",
        "-false",
        "-empty",
        "-readable",
        "-writable",
        "-executable",
        "-nouser",
        "-nogroup",
        "-xdev",
        "-mount",
        "-depth",
        "-d",
        "-follow",
        "-noleaf",
        "-daystart",
        "-ignore_readdir_race",
        "-noignore_readdir_race",
        "-warn",
        "-nowarn",
        "-not",
        "-a",
        "-and",
        "-o",
        "-or",
        "(",
        ")",
        "!",
        ",",
    ];
    const ONE_ARG: &[&str] = &[
        "-name",
        "-iname",
        "-path",
        "-ipath",
        "-wholename",
        "-iwholename",
        "-regex",
        "-iregex",
        "-regextype",
        "-type",
        "-xtype",
        "-size",
        "-mtime",
        "-mmin",
        "-atime",
        "-amin",
        "-ctime",
        "-cmin",
        "-used",
        "-newer",
        "-anewer",
        "-cnewer",
        "-user",
        "-group",
        "-uid",
        "-gid",
        "-perm",
        "-links",
        "-inum",
        "-samefile",
        "-maxdepth",
        "-mindepth",
        "-printf",
        "-lname",
        "-ilname",
        "-fstype",
        "-context",
    ];
    let mut words = args.iter().map(String::as_str).peekable();
    // Leading options, then the starting points.
    while words
        .next_if(|w| matches!(*w, "-H" | "-L" | "-P"))
        .is_some()
    {}
    while words
        .next_if(|w| !w.starts_with('-') && !matches!(*w, "(" | ")" | "!" | ","))
        .is_some()
    {}
    while let Some(word) = words.next() {
        let newer_xy = word.len() == 8 && word.starts_with("-newer");
        if NO_ARG.contains(&word) {
            continue;
        }
        if ONE_ARG.contains(&word) || newer_xy {
            if words.next().is_none() {
                return Err(write_argument("find", format!("{word} needs a value")));
            }
            continue;
        }
        return Err(write_argument(
            "find",
            match word {
                "-exec" | "-execdir" | "-ok" | "-okdir" | "-delete" | "-fprint" | "-fprint0"
                | "-fprintf" | "-fls" => format!(
                    "{word} writes or runs commands; list the matches and read them instead"
                ),
                _ => format!(
                    "{word} is not a test, operator or printing action admitted as read-only"
                ),
            },
        ));
    }
    Ok(())
}

fn ps(args: &[String]) -> Result<(), ExecRefusal> {
    const UNIX_FLAGS: &str = "AadeFfHjLlMNTwyZc";
    const UNIX_VALUES: &str = "oOpCuUgGtsq";
    const BSD_FLAGS: &str = "auxfwcjlsvrThHmnSLXyZg";
    const BSD_VALUES: &str = "oOptUkq";
    const LONG_FLAGS: &[&str] = &[
        "--forest",
        "--no-headers",
        "--no-heading",
        "--headers",
        "--cumulative",
        "--deselect",
    ];
    const LONG_VALUES: &[&str] = &[
        "--format",
        "--sort",
        "--pid",
        "--ppid",
        "--user",
        "--User",
        "--group",
        "--Group",
        "--cols",
        "--columns",
        "--width",
        "--tty",
        "--sid",
    ];
    let mut words = args.iter().map(String::as_str);
    // ps takes the next word as the value whatever it looks like (`--sort -rss`).
    let value = |option: &str, next: Option<&str>| match next {
        Some(_) => Ok(()),
        None => Err(write_argument(
            "ps",
            format!("{option} needs a value in the next word"),
        )),
    };
    while let Some(word) = words.next() {
        if let Some(long) = word.strip_prefix("--") {
            let name = format!("--{}", long.split('=').next().unwrap_or(""));
            if LONG_FLAGS.contains(&name.as_str()) && !long.contains('=') {
                continue;
            }
            if LONG_VALUES.contains(&name.as_str()) {
                if !long.contains('=') {
                    value(&name, words.next())?;
                }
                continue;
            }
            return Err(write_argument(
                "ps",
                format!("{name} is not an option admitted as read-only"),
            ));
        }
        if word.chars().all(|c| c.is_ascii_digit()) && !word.is_empty() {
            continue;
        }
        let (letters, flags, values, style) = match word.strip_prefix('-') {
            Some(letters) => (letters, UNIX_FLAGS, UNIX_VALUES, "UNIX"),
            None => (word, BSD_FLAGS, BSD_VALUES, "BSD"),
        };
        if letters.is_empty() {
            return Err(write_argument("ps", "`-` alone is not an option"));
        }
        for (at, c) in letters.char_indices() {
            if flags.contains(c) {
                continue;
            }
            if style == "BSD" && c == 'e' {
                return Err(write_argument(
                    "ps",
                    format!(
                        "the BSD modifier `e` (in {word}) prints every process's environment, \
                         where services keep their secrets; leave it out"
                    ),
                ));
            }
            if values.contains(c) {
                if at + 1 != letters.len() {
                    return Err(write_argument(
                        "ps",
                        format!(
                            "{c} (in {word}) takes a value: put it last and give the value as the next word"
                        ),
                    ));
                }
                value(&format!("{c} (in {word})"), words.next())?;
                break;
            }
            return Err(write_argument(
                "ps",
                format!("{c} (in {word}) is not a {style} option admitted as read-only"),
            ));
        }
    }
    Ok(())
}

fn dig(args: &[String]) -> Result<(), ExecRefusal> {
    const SPEC: Spec = Spec {
        flags: "46rum",
        values: "tcxpq",
        operands: ANY,
        ..S
    };
    let rest: Vec<String> = args
        .iter()
        .filter(|a| !(a.starts_with('@') || a.starts_with('+')))
        .cloned()
        .collect();
    parse("dig", &SPEC, &rest).map(drop)
}

fn nslookup(args: &[String]) -> Result<(), ExecRefusal> {
    const WITH_VALUE: &[&str] = &[
        "-type", "-query", "-q", "-class", "-timeout", "-retry", "-port", "-domain",
    ];
    const FLAGS: &[&str] = &[
        "-debug",
        "-nodebug",
        "-vc",
        "-novc",
        "-recurse",
        "-norecurse",
    ];
    let mut operands = 0;
    for arg in args {
        if let Some(name) = arg
            .strip_prefix('-')
            .map(|_| arg.split('=').next().unwrap_or(""))
        {
            let admitted = if arg.contains('=') {
                WITH_VALUE.contains(&name)
            } else {
                FLAGS.contains(&name)
            };
            if !admitted {
                return Err(write_argument(
                    "nslookup",
                    format!("{arg} is not an option admitted as read-only"),
                ));
            }
        } else {
            operands += 1;
        }
    }
    if operands > 2 {
        return Err(write_argument(
            "nslookup",
            "give a name and at most a server",
        ));
    }
    Ok(())
}

fn ip(args: &[String]) -> Result<(), ExecRefusal> {
    const OPTIONS: &[&str] = &[
        "-4",
        "-6",
        "-br",
        "-brief",
        "-s",
        "-stats",
        "-statistics",
        "-d",
        "-details",
        "-j",
        "-json",
        "-p",
        "-pretty",
        "-c",
        "-color",
        "-o",
        "-oneline",
        "-r",
        "-resolve",
        "-h",
        "-human",
    ];
    const OBJECTS: &[&str] = &[
        "a",
        "ad",
        "addr",
        "address",
        "l",
        "li",
        "link",
        "r",
        "ro",
        "route",
        "n",
        "neigh",
        "neighbor",
        "neighbour",
        "ru",
        "rule",
        "netns",
        "maddr",
        "maddress",
        "tunnel",
        "netconf",
        "ntable",
        "nexthop",
    ];
    const SHOW: &[&str] = &["show", "list", "lst", "ls", "sh"];
    let mut words = args.iter().map(String::as_str);
    let object = loop {
        match words.next() {
            None => return Ok(()),
            Some("-n" | "-netns") => {
                if words.next().is_none_or(|v| v.starts_with('-')) {
                    return Err(write_argument("ip", "-n needs a namespace name"));
                }
            }
            Some(option) if OPTIONS.contains(&option) => {}
            Some(option) if option.starts_with('-') => {
                return Err(write_argument(
                    "ip",
                    format!(
                        "{option} is not an option admitted as read-only (-b/-batch runs \
                         commands from a file, -force ignores errors)"
                    ),
                ));
            }
            Some(object) => break object,
        }
    };
    if !OBJECTS.contains(&object) {
        return Err(write_argument(
            "ip",
            format!("`{object}` is not an object ip can show"),
        ));
    }
    let can_get = matches!(
        object,
        "r" | "ro" | "route" | "n" | "neigh" | "neighbor" | "neighbour"
    );
    match words.next() {
        None => Ok(()),
        Some(verb) if SHOW.contains(&verb) || (can_get && verb == "get") => Ok(()),
        Some(verb) => Err(write_argument(
            "ip",
            format!(
                "`{verb}` is not show or list{}: spell the verb out (a short form like `s` can \
                 mean set)",
                if can_get { " or get" } else { "" }
            ),
        )),
    }
}

fn docker(args: &[String]) -> Result<(), ExecRefusal> {
    const LIST: Spec = Spec {
        flags: "aqls",
        values: "nf",
        long_flags: &[
            "--all",
            "--quiet",
            "--latest",
            "--size",
            "--no-trunc",
            "--digests",
        ],
        long_values: &["--last", "--filter", "--format"],
        operands: NONE,
        ..S
    };
    const LOGS: Spec = Spec {
        flags: "t",
        values: "n",
        long_flags: &["--timestamps", "--details"],
        long_values: &["--tail", "--since", "--until"],
        operands: at_most(1),
        ..S
    };
    const STATS: Spec = Spec {
        flags: "a",
        long_flags: &["--no-stream", "--all", "--no-trunc"],
        long_values: &["--format"],
        operands: ANY,
        ..S
    };
    const FORMAT: Spec = Spec {
        values: "f",
        long_values: &["--format"],
        operands: NONE,
        ..S
    };
    const ONE: Spec = Spec {
        operands: at_most(1),
        ..S
    };
    const PORT: Spec = Spec {
        operands: at_most(2),
        ..S
    };
    const HISTORY: Spec = Spec {
        flags: "qH",
        long_flags: &["--no-trunc", "--quiet"],
        long_values: &["--format"],
        // A boolean: its value only ever attached (`--human=false`).
        long_optional: &["--human"],
        operands: at_most(1),
        ..S
    };
    const DF: Spec = Spec {
        flags: "v",
        long_flags: &["--verbose"],
        long_values: &["--format"],
        operands: NONE,
        ..S
    };
    const INSPECT: Spec = Spec {
        values: "f",
        long_values: &["--format"],
        operands: ANY,
        ..S
    };
    let Some(first) = args.first().map(String::as_str) else {
        return Err(write_argument(
            "docker",
            "name a read-only command (ps, logs, stats --no-stream, ...)",
        ));
    };
    if first.starts_with('-') {
        return Err(write_argument(
            "docker",
            format!(
                "{first}: global options (-H, --context, --config, ...) are not admitted; the \
                 local engine is read"
            ),
        ));
    }
    let group = matches!(
        first,
        "container" | "image" | "network" | "volume" | "system"
    );
    let (command, rest) = if group {
        match args.get(1).map(String::as_str) {
            Some(sub) => ((first, sub), &args[2..]),
            None => {
                return Err(write_argument(
                    "docker",
                    format!("name what to do with `{first}`"),
                ));
            }
        }
    } else {
        (("", first), &args[1..])
    };
    let spec = match command {
        ("" | "container", "ps") | ("container", "ls" | "list") => LIST,
        ("", "images") | ("image", "ls" | "list") => LIST,
        ("network" | "volume", "ls" | "list") => LIST,
        ("" | "container", "logs") => LOGS,
        ("" | "container", "stats") => STATS,
        ("" | "container", "top" | "diff") => ONE,
        ("" | "container", "port") => PORT,
        ("" | "image", "history") => HISTORY,
        ("", "version" | "info") | ("system", "info") => FORMAT,
        ("system", "df") => DF,
        ("network" | "volume", "inspect") => INSPECT,
        ("" | "container" | "image", "inspect") => {
            return Err(write_argument(
                "docker",
                "inspect of a container or an image prints its environment, where secrets \
                 live; use pulse_read action=inspect (the same facts without env values)",
            ));
        }
        (_, verb) => {
            return Err(write_argument(
                "docker",
                format!(
                    "`{verb}` is not read-only (allowed: ps, images, logs, stats --no-stream, \
                     top, port, diff, history, version, info, system df, network and volume \
                     ls/inspect)"
                ),
            ));
        }
    };
    let name = "docker";
    let parsed = parse(name, &spec, rest)?;
    if command.1 == "stats" && !parsed.has(&["--no-stream"]) {
        return Err(write_argument(name, "stats needs --no-stream"));
    }
    Ok(())
}
