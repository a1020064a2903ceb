//! The option grammar of an admitted program, as an allowlist, and the parser that holds an
//! argument list to it.
//!
//! The parser reads arguments the way GNU `getopt_long` does, so that what it admits is what
//! the program will see: options anywhere (not only before the operands) until `--`; combined
//! short flags (`-sSL`); a short option's value attached (`-n5`, `-p/etc/x`) or in the next word;
//! a long option's value after `=` or in the next word; `-` alone is an operand. Anything not in
//! the allowlist is refused, and so is a separate value word that looks like an option (the
//! program and the parser could disagree about which word it is).

use super::{ExecRefusal, write_argument};

/// How many operands (non-option arguments) a program is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operands {
    None,
    AtMost(usize),
    Any,
}

/// The admitted options of one program (or of one verb of it).
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// Short flags without a value, as one string of letters (`"ahT"`).
    pub flags: &'static str,
    /// Short options that take a value (`-n 5`, `-n5`).
    pub values: &'static str,
    /// Short options whose value is optional: attached, or the next word when that word is not
    /// an option (`lsof -i :80`, `journalctl -b -1`).
    pub optional: &'static str,
    /// Long options without a value (`--all`).
    pub long_flags: &'static [&'static str],
    /// Long options that take a value (`--lines 5`, `--lines=5`).
    pub long_values: &'static [&'static str],
    /// Long options whose value is optional and only ever attached (`--color`, `--color=never`).
    pub long_optional: &'static [&'static str],
    /// Whole words admitted as they are (`wget -nv`, `ip -br`).
    pub words: &'static [&'static str],
    /// `-NUM` is admitted (`head -20`).
    pub numeric: bool,
    pub operands: Operands,
}

impl Spec {
    pub const EMPTY: Spec = Spec {
        flags: "",
        values: "",
        optional: "",
        long_flags: &[],
        long_values: &[],
        long_optional: &[],
        words: &[],
        numeric: false,
        operands: Operands::None,
    };

    /// The admitted options as text, for the documentation.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        let short = |letters: &str, suffix: &str| {
            letters
                .chars()
                .map(|c| format!("`-{c}{suffix}`"))
                .collect::<Vec<_>>()
        };
        let mut options = short(self.flags, "");
        options.extend(short(self.values, " V"));
        options.extend(short(self.optional, "[V]"));
        options.extend(self.words.iter().map(|w| format!("`{w}`")));
        options.extend(self.long_flags.iter().map(|o| format!("`{o}`")));
        options.extend(self.long_values.iter().map(|o| format!("`{o}=V`")));
        options.extend(self.long_optional.iter().map(|o| format!("`{o}[=V]`")));
        if self.numeric {
            options.push("`-NUM`".to_owned());
        }
        if options.is_empty() {
            parts.push("no options".to_owned());
        } else {
            parts.push(options.join(" "));
        }
        parts.push(match self.operands {
            Operands::None => "no operands".to_owned(),
            Operands::AtMost(1) => "at most one operand".to_owned(),
            Operands::AtMost(n) => format!("at most {n} operands"),
            Operands::Any => "operands".to_owned(),
        });
        parts.join("; ")
    }
}

/// One option as given: its name (`-n`, `--lines`, or an admitted whole word) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opt<'a> {
    pub name: String,
    pub value: Option<&'a str>,
}

/// An argument list held to a [`Spec`].
#[derive(Debug, Default)]
pub struct Parsed<'a> {
    pub options: Vec<Opt<'a>>,
    pub operands: Vec<&'a str>,
}

impl Parsed<'_> {
    /// Whether any option is one of `names`.
    pub fn has(&self, names: &[&str]) -> bool {
        self.options
            .iter()
            .any(|o| names.contains(&o.name.as_str()))
    }

    /// The values of the options named `names`.
    pub fn values<'s>(&'s self, names: &'s [&str]) -> impl Iterator<Item = &'s str> + 's {
        self.options
            .iter()
            .filter(|o| names.contains(&o.name.as_str()))
            .filter_map(|o| o.value)
    }
}

/// A word that reads as an option (and not as a negative number).
fn looks_like_option(word: &str) -> bool {
    word.len() > 1
        && word.starts_with('-')
        && !word[1..]
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '%')
}

/// Holds `args` to `spec`.
pub fn parse<'a>(
    program: &str,
    spec: &Spec,
    args: &'a [String],
) -> Result<Parsed<'a>, ExecRefusal> {
    let mut parsed = Parsed::default();
    let mut words = args.iter().map(String::as_str).peekable();
    let separate_value = |name: &str, next: Option<&'a str>| match next {
        Some(value) if !looks_like_option(value) => Ok(value),
        Some(value) => Err(write_argument(
            program,
            format!(
                "{value} after {name} reads as an option, not as its value; attach it ({name}=VALUE)"
            ),
        )),
        None => Err(write_argument(program, format!("{name} needs a value"))),
    };
    while let Some(word) = words.next() {
        if word == "--" {
            parsed.operands.extend(words.by_ref());
            break;
        }
        if spec.words.contains(&word) {
            parsed.options.push(Opt {
                name: word.to_owned(),
                value: None,
            });
        } else if let Some(long) = word.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((name, value)) => (format!("--{name}"), Some(value)),
                None => (word.to_owned(), None),
            };
            let value = if spec.long_flags.contains(&name.as_str()) {
                if attached.is_some() {
                    return Err(write_argument(program, format!("{name} takes no value")));
                }
                None
            } else if spec.long_values.contains(&name.as_str()) {
                match attached {
                    Some(value) => Some(value),
                    None => Some(separate_value(&name, words.next())?),
                }
            } else if spec.long_optional.contains(&name.as_str()) {
                attached
            } else {
                return Err(not_admitted(program, &name));
            };
            parsed.options.push(Opt { name, value });
        } else if word.len() > 1 && word.starts_with('-') {
            let letters = &word[1..];
            if spec.numeric && letters.chars().all(|c| c.is_ascii_digit()) {
                parsed.options.push(Opt {
                    name: "-NUM".to_owned(),
                    value: Some(letters),
                });
                continue;
            }
            for (at, c) in letters.char_indices() {
                let name = format!("-{c}");
                let rest = &letters[at + c.len_utf8()..];
                if spec.flags.contains(c) {
                    parsed.options.push(Opt { name, value: None });
                } else if spec.values.contains(c) {
                    let value = if rest.is_empty() {
                        separate_value(&name, words.next())?
                    } else {
                        rest
                    };
                    parsed.options.push(Opt {
                        name,
                        value: Some(value),
                    });
                    break;
                } else if spec.optional.contains(c) {
                    let value = if rest.is_empty() {
                        words.next_if(|next| !looks_like_option(next))
                    } else {
                        Some(rest)
                    };
                    parsed.options.push(Opt { name, value });
                    break;
                } else {
                    let shown = if letters.len() > 1 {
                        format!("{name} (in {word})")
                    } else {
                        name
                    };
                    return Err(not_admitted(program, &shown));
                }
            }
        } else {
            parsed.operands.push(word);
        }
    }
    let allowed = match spec.operands {
        Operands::None => 0,
        Operands::AtMost(n) => n,
        Operands::Any => usize::MAX,
    };
    if parsed.operands.len() > allowed {
        return Err(write_argument(
            program,
            match allowed {
                0 => format!(
                    "takes no operand here, and {:?} is one (operands can change the host)",
                    parsed.operands[0]
                ),
                n => format!(
                    "takes at most {n} operand(s) here, and {:?} is one too many",
                    parsed.operands[n]
                ),
            },
        ));
    }
    Ok(parsed)
}

fn not_admitted(program: &str, option: &str) -> ExecRefusal {
    write_argument(
        program,
        format!(
            "{option} is not one of the options admitted as read-only (unknown options are \
             refused; see the admitted list in docs/assistant.md)"
        ),
    )
}
