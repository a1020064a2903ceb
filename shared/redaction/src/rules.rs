//! The built-in rules: known token formats, credentials in URLs, headers, cookies and command
//! lines, private key blocks, password hashes and secret-named assignments, compiled once with
//! the set of literal triggers that picks the rules a string can match.

use std::sync::LazyLock;

use regex::{Captures, Regex, RegexSet};
use serde_json::Value;

use crate::kind::{MARKER_PREFIX, RedactionKind, is_marker};
use crate::redactor::RedactionReport;
use crate::secret_words::{
    AUTH_SCHEMES, KeyClass, eq_any, field_replacement, has_digit, is_path, is_placeholder,
    key_class, looks_encoded, looks_random,
};

/// Strings shorter than this cannot hold a credential the built-in rules recognise (`pwd=x`).
pub(crate) const MIN_RULE_LEN: usize = 5;

/// What a rule does with one match.
pub(crate) enum Action {
    /// Replace capture group `secret` with the kind's marker, keep the rest of the match;
    /// `accept` rejects lookalikes.
    Group {
        kind: RedactionKind,
        secret: usize,
        accept: fn(&str) -> bool,
    },
    /// A match with several secrets: the replacement of the whole match, counting what it
    /// redacted; `None` keeps the match.
    Custom(fn(&Captures<'_>, &mut RedactionReport) -> Option<String>),
}

pub(crate) struct Rule {
    regex: &'static str,
    /// Lowercase literals, one of which any match contains: a string holding none of them
    /// skips the rule without running its regex.
    triggers: &'static [&'static str],
    pub(crate) action: Action,
}

fn any(_: &str) -> bool {
    true
}

fn not_marker(s: &str) -> bool {
    !is_marker(s)
}

pub(crate) fn not_path_or_placeholder(s: &str) -> bool {
    let inner = s.trim_matches(|c| c == '"' || c == '\'');
    !inner.is_empty() && !is_path(inner) && !is_placeholder(inner)
}

/// An openssl `-passin` argument that is the password itself, not `env:VAR` or `file:path`.
fn literal_pass_argument(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    not_path_or_placeholder(s)
        && !["env:", "file:", "fd:", "stdin"]
            .iter()
            .any(|p| lower.starts_with(p))
}

const fn group(kind: RedactionKind, secret: usize, accept: fn(&str) -> bool) -> Action {
    Action::Group {
        kind,
        secret,
        accept,
    }
}

/// The rules in the order they run: specific formats before the generic ones that would also
/// see them (a GitHub token after `--token` is counted as a GitHub token).
pub(crate) static RULES: &[Rule] = {
    use RedactionKind as K;
    &[
        // scheme://user:password@host, an empty user too (redis://:pw@host).
        Rule {
            regex: r#"(?i)(?-u:\b)[a-z][a-z0-9+.-]{1,15}://([^\s/@:"'<>\[\]\\]*:[^\s/"'<>\[\]\\]+)@"#,
            triggers: &["://"],
            action: group(K::UrlCredentials, 1, not_marker),
        },
        Rule {
            regex: r"(?-u:\b)(pulse_[0-9a-f]{64})(?-u:\b)",
            triggers: &["pulse_"],
            action: group(K::PulseToken, 1, any),
        },
        // An access key id, and the 40-character secret key written right after it (CSV,
        // `aws configure` echoes).
        Rule {
            regex: r#"(?-u:\b)((?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})(?-u:\b)(?:([\s,;:|"'=]{1,8})([A-Za-z0-9/+]{40})([^A-Za-z0-9/+=]|$))?"#,
            triggers: &["akia", "asia", "abia", "acca"],
            action: Action::Custom(aws_key_pair),
        },
        Rule {
            regex: r#"(?i)(?:secret_?access_?key|aws_?secret_?(?:access_?)?key)\\*["']?\s*[:=]\s*\\*["']?([A-Za-z0-9/+]{40})(?:[^A-Za-z0-9/+=]|$)"#,
            triggers: &["secret"],
            action: group(K::AwsSecretKey, 1, looks_random),
        },
        Rule {
            regex: r"(?-u:\b)(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
            triggers: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
            action: group(K::GithubToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(gl(?:pat|dt|rt|ptt|cbt|imt|oas|soat|ft|agent|ffct)-[0-9A-Za-z_-]{20,}|GR1348941[0-9A-Za-z_-]{20,})",
            triggers: &[
                "glpat-",
                "gldt-",
                "glrt-",
                "glptt-",
                "glcbt-",
                "glimt-",
                "gloas-",
                "glsoat-",
                "glft-",
                "glagent-",
                "glffct-",
                "gr1348941",
            ],
            action: group(K::GitlabToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(xox[abposre]-[A-Za-z0-9-]{10,})",
            triggers: &["xox"],
            action: group(K::SlackToken, 1, any),
        },
        Rule {
            regex: r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{20,})",
            triggers: &["hooks.slack.com"],
            action: group(K::SlackToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(sk-ant-[A-Za-z0-9_-]{20,})",
            triggers: &["sk-ant-"],
            action: group(K::AnthropicKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)((?:sk|rk)_(?:live|test)_[0-9A-Za-z]{10,}|whsec_[0-9A-Za-z]{20,})",
            triggers: &["sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"],
            action: group(K::StripeKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(sk-[A-Za-z0-9_-]{20,})",
            triggers: &["sk-"],
            action: group(K::OpenaiKey, 1, has_digit),
        },
        Rule {
            regex: r"(?-u:\b)(AIza[0-9A-Za-z_-]{35})",
            triggers: &["aiza"],
            action: group(K::GoogleApiKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(ya29\.[0-9A-Za-z_-]{20,}|GOCSPX-[0-9A-Za-z_-]{20,}|1//0[0-9A-Za-z_-]{30,})",
            triggers: &["ya29.", "gocspx-", "1//0"],
            action: group(K::GoogleOauth, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(npm_[A-Za-z0-9]{36})(?-u:\b)",
            triggers: &["npm_"],
            action: group(K::NpmToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(hf_[A-Za-z0-9]{30,})(?-u:\b)",
            triggers: &["hf_"],
            action: group(K::HuggingfaceToken, 1, looks_random),
        },
        Rule {
            regex: r"(?-u:\b)(SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,})",
            triggers: &["sg."],
            action: group(K::SendgridKey, 1, any),
        },
        Rule {
            regex: r#"(?i)(?:AccountKey|SharedAccessKey|account_key|storage_?(?:account_?)?key)\\*["']?\s*[:=]\s*\\*["']?([A-Za-z0-9+/]{20,}={0,2})"#,
            triggers: &["accountkey", "sharedaccesskey", "account_key", "storage"],
            action: group(K::AzureStorageKey, 1, looks_random),
        },
        // The signature of a shared access signature URL.
        Rule {
            regex: r"[?&]sig=([A-Za-z0-9%+/=]{16,})",
            triggers: &["sig="],
            action: group(K::AzureStorageKey, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(dop_v1_[a-f0-9]{64}|pypi-AgE[A-Za-z0-9_-]{40,}|hv[sb]\.[A-Za-z0-9_-]{24,}|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}|dapi[a-f0-9]{32}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|PMAK-[a-f0-9]{24}-[a-f0-9]{34}|lin_api_[A-Za-z0-9]{40})",
            triggers: &[
                "dop_v1_", "pypi-", "hvs.", "hvb.", "shpat_", "shpss_", "shpca_", "shppa_", "dapi",
                "glsa_", "pmak-", "lin_api_",
            ],
            action: group(K::VendorToken, 1, any),
        },
        Rule {
            regex: r"discord(?:app)?\.com/api/webhooks/[0-9]+/([A-Za-z0-9_-]{40,})",
            triggers: &["discord"],
            action: group(K::VendorToken, 1, any),
        },
        Rule {
            regex: r"(?-u:\b)(eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*)",
            triggers: &["eyj"],
            action: group(K::Jwt, 1, any),
        },
        // --password x, --db-password=x, --token x, --api-key x, --client-secret x.
        Rule {
            regex: r#"(?i)(?:^|[\s"'=])--(?:[a-z0-9]+[-_])*(?:password|passwd|pass|passphrase|token|secret|api-?key|access-?key|secret-?key|private-?key|account-?key|client-?secret|credentials?|requirepass|masterauth)(?:\s+|\s*=\s*|\\*"\s*,\s*\\*")("[^"\n]*"|'[^'\n]*'|[^\s"'\-\\][^\s"'\\]*)"#,
            triggers: &["--"],
            action: group(K::CommandLineSecret, 1, not_path_or_placeholder),
        },
        // mysql -pSECRET / -p SECRET, sshpass -p, docker login -p.
        Rule {
            regex: r#"(?-u:\b)(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlsh|mysqlpump|mariadb|mariadb-dump|mariadb-admin|sshpass|docker\s+login|podman\s+login|nerdctl\s+login|buildah\s+login|skopeo\s+login|helm\s+registry\s+login|az\s+login)(?-u:\b)[^\n]*?\s-p[ \t]*('[^'\n]*'|"[^"\n]*"|[^\s'"\-\\][^\s"'\\]*)"#,
            triggers: &["mysql", "mariadb", "sshpass", "login"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        Rule {
            regex: r#"(?-u:\b)redis-cli(?-u:\b)[^\n]*?\s-a[ \t]+('[^'\n]*'|"[^"\n]*"|[^\s'"\-\\][^\s"'\\]*)"#,
            triggers: &["redis-cli"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        Rule {
            regex: r#"(?-u:\b)(?:curl|wget)(?-u:\b)[^\n]*?\s(?:-u|--user|-U|--proxy-user)[ \t]*['"]?[^\s:'"]*:([^\s'"\\]+)"#,
            triggers: &["curl", "wget"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        // htpasswd -b file user password.
        Rule {
            regex: r"(?-u:\b)htpasswd\s+-[A-Za-z]*b[A-Za-z]*\s+(?:-\S+\s+)*\S+\s+\S+\s+(\S+)",
            triggers: &["htpasswd"],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        // keytool -storepass x, openssl -passin pass:x.
        Rule {
            regex: r"(?i)\s-(?:src|dest|new)?(?:store|key)?pass(?:in|out|word)?[ \t]+(?:pass:)?([^\s\-\\][^\s\\]*)",
            triggers: &["pass"],
            action: group(K::CommandLineSecret, 1, literal_pass_argument),
        },
        // redis.conf: `requirepass x`, `masterauth x`.
        Rule {
            regex: r#"(?im)^[ \t]*(?:requirepass|masterauth|masteruser-password)[ \t]+("[^"\n]*"|\S+)"#,
            triggers: &["requirepass", "masterauth", "masteruser"],
            action: group(K::SecretAssignment, 1, not_marker),
        },
        // Redis MONITOR: "AUTH" "password" or "AUTH" "user" "password".
        Rule {
            regex: r#"(?i)"auth"(?:\s+"[^"\n]*")?\s+"([^"\n]+)""#,
            triggers: &["\"auth\""],
            action: group(K::CommandLineSecret, 1, not_marker),
        },
        // SQL: ALTER USER .. PASSWORD 'x', IDENTIFIED [WITH plugin] BY 'x'.
        Rule {
            regex: r"(?i)(?-u:\b)(?:identified\s+(?:with\s+\S+\s+)?by|password)\s+'([^'\n]+)'",
            triggers: &["identified", "password"],
            action: group(K::SecretAssignment, 1, not_marker),
        },
        Rule {
            regex: r#"(?i)(?:^|[^a-z0-9])(?:set-)?cookie2?\\*"?\s*[:=]\s*\\*"?([^\r\n"\\]+)"#,
            triggers: &["cookie"],
            action: Action::Custom(cookie_values),
        },
        Rule {
            regex: r#"(?i)(?-u:\b)authorization\s*[:=]\s*"?basic\s+([A-Za-z0-9+/=]{6,})"#,
            triggers: &["basic"],
            action: group(K::BasicAuth, 1, any),
        },
        // `Basic <base64>` outside an Authorization header (a curl trace, a proxy log).
        Rule {
            regex: r"(?i)(?:^|[^/A-Za-z0-9_.-])basic\s+([A-Za-z0-9+/]{8,}={0,2})(?:[^A-Za-z0-9+/=]|$)",
            triggers: &["basic"],
            action: group(K::BasicAuth, 1, looks_encoded),
        },
        // crypt(3) password hashes (shadow files, htpasswd): `$id$[params$]salt$hash`.
        Rule {
            regex: r"(\$(?:1|2[aby]?|5|6|7|y|gy)\$[A-Za-z0-9./=,+-]*\$[A-Za-z0-9./$+=-]{8,})",
            triggers: &[
                "$1$", "$2$", "$2a$", "$2b$", "$2y$", "$5$", "$6$", "$7$", "$y$", "$gy$",
            ],
            action: group(K::PasswordHash, 1, not_marker),
        },
        // RFC 6750 b64token after the scheme word; `POST /oauth/token HTTP/1.1` is no header.
        Rule {
            regex: r"(?i)(?:^|[^/A-Za-z0-9_.-])bearer\s+([A-Za-z0-9._~+/-]{8,}=*)",
            triggers: &["bearer"],
            action: group(K::BearerToken, 1, looks_random),
        },
        Rule {
            regex: r"(?i)(?:^|[^/A-Za-z0-9_.-])token\s+([A-Za-z0-9._~+/-]{16,}=*)",
            triggers: &["token"],
            action: group(K::BearerToken, 1, looks_random),
        },
    ]
};

fn aws_key_pair(caps: &Captures<'_>, report: &mut RedactionReport) -> Option<String> {
    let part = |i: usize| caps.get(i).map_or("", |m| m.as_str());
    let mut out = RedactionKind::AwsAccessKey.marker();
    report.add(RedactionKind::AwsAccessKey, 1);
    if caps.get(3).is_some() {
        out.push_str(part(2));
        if looks_random(part(3)) {
            out.push_str(&RedactionKind::AwsSecretKey.marker());
            report.add(RedactionKind::AwsSecretKey, 1);
        } else {
            out.push_str(part(3));
        }
        out.push_str(part(4));
    }
    Some(out)
}

/// Cookie attributes of `Set-Cookie`, kept with their values.
const COOKIE_ATTRIBUTES: &[&str] = &[
    "path",
    "domain",
    "expires",
    "max-age",
    "samesite",
    "secure",
    "httponly",
    "priority",
    "partitioned",
    "version",
    "comment",
];

/// `Cookie: a=1; b=2`, `Set-Cookie: s=..; Path=/`: every cookie value, attributes kept.
fn cookie_values(caps: &Captures<'_>, report: &mut RedactionReport) -> Option<String> {
    let whole = caps.get(0)?;
    let value = caps.get(1)?;
    let marker = RedactionKind::Cookie.marker();
    let mut out = String::with_capacity(whole.as_str().len());
    out.push_str(&whole.as_str()[..value.start() - whole.start()]);
    let mut n = 0u64;
    for (i, part) in value.as_str().split(';').enumerate() {
        if i > 0 {
            out.push(';');
        }
        match part.split_once('=') {
            Some((name, v))
                if !eq_any(name.trim(), COOKIE_ATTRIBUTES)
                    && !v.trim().is_empty()
                    && !is_marker(v.trim()) =>
            {
                out.push_str(name);
                out.push('=');
                out.push_str(&marker);
                n += 1;
            }
            None if i == 0 && part.trim().len() >= 8 && !is_marker(part.trim()) => {
                out.push(' ');
                out.push_str(&marker);
                n += 1;
            }
            _ => out.push_str(part),
        }
    }
    if n == 0 {
        return None;
    }
    report.add(RedactionKind::Cookie, n);
    Some(out)
}

/// A key that may name a secret: it contains one of the stems [`key_class`] looks for.
const KEY: &str = r"(?:[A-Za-z_][A-Za-z0-9_.-]*)?(?i:pass|pwd|secret|token|key|auth|credential|sig|sess|dockercfg|dockerconfigjson)[A-Za-z0-9_.-]*";

/// `key = value` anywhere (`"key": "value"`, `\"key\":\"value\"` at any escaping depth,
/// `key=value&`), and config lines (`KEY=value with spaces`, `key: value`) whose value runs to
/// the end of the line.
static ASSIGNMENT: LazyLock<String> = LazyLock::new(|| {
    // `Authorization: Bearer <token>` inline: the scheme word and the credential after it are
    // one value.
    let schemes: Vec<String> = AUTH_SCHEMES.iter().map(|s| regex::escape(s)).collect();
    let schemes = schemes.join("|");
    format!(
        r#"(?m)^(?P<lead>[ \t]*(?:export[ \t]+|-[ \t]+)?)(?P<lkey>{KEY})(?P<lsep>[ \t]*[:=][ \t]*)(?P<lval>[^\s"'\[{{|>\\][^\r\n]*?)[ \t]*\r?$|(?P<open>\\*["']?)(?P<key>{KEY})(?P<sep>\\*["']?[ \t]*[:=][ \t]*)(?P<val>\\+"[^"\n]*?\\+"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|\$\{{[^}}\n]*\}}|(?i:{schemes})[ \t]+[^\s,;&"'<>{{}}\[\]()\\]+|[^\s,;&"'<>{{}}\[\]()\\]+)"#
    )
});

/// What a private key block or a secret-named key contains (see [`KEY`]).
const PRIVATE_KEY_TRIGGERS: &[&str] = &["private key"];
const KEY_TRIGGERS: &[&str] = &[
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "auth",
    "credential",
    "sig",
    "sess",
    "dockercfg",
    "dockerconfigjson",
];

/// The private key pattern: a PEM (or PGP) private key block, or what is left of a truncated one.
const PRIVATE_KEY: &str = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|[A-Za-z0-9+/=\s:,\\-]*)";

/// Compiled once: the private key pattern, the rules, the assignment pattern, and the set of
/// their trigger literals that tells which of them can match a string (one pass over the text;
/// a set of the full patterns would be far slower).
pub(crate) struct Compiled {
    pub(crate) set: RegexSet,
    private_key: Regex,
    pub(crate) rules: Vec<Regex>,
    assignment: Regex,
}

pub(crate) const SET_PRIVATE_KEY: usize = 0;
pub(crate) const SET_FIRST_RULE: usize = 1;

impl Compiled {
    pub(crate) fn set_assignment(&self) -> usize {
        SET_FIRST_RULE + self.rules.len()
    }
}

pub(crate) static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    // Static patterns; a unit test compiles every one of them.
    let compile = |re: &str| Regex::new(re).expect("static redaction pattern compiles");
    let literals = |triggers: &[&str]| {
        let escaped: Vec<String> = triggers.iter().map(|t| regex::escape(t)).collect();
        format!("(?i:{})", escaped.join("|"))
    };
    let mut all: Vec<String> = vec![literals(PRIVATE_KEY_TRIGGERS)];
    all.extend(RULES.iter().map(|r| literals(r.triggers)));
    all.push(literals(KEY_TRIGGERS));
    Compiled {
        set: RegexSet::new(&all).expect("static redaction triggers compile as a set"),
        private_key: compile(PRIVATE_KEY),
        rules: RULES.iter().map(|r| compile(r.regex)).collect(),
        assignment: compile(&ASSIGNMENT),
    }
});

pub(crate) fn apply_rule(
    regex: &Regex,
    action: &Action,
    text: &str,
    report: &mut RedactionReport,
) -> Option<String> {
    let mut changed = false;
    let replaced = regex.replace_all(text, |caps: &Captures<'_>| {
        let whole = caps.get(0).map_or("", |m| m.as_str());
        let start = caps.get(0).map_or(0, |m| m.start());
        match action {
            Action::Group {
                kind,
                secret,
                accept,
            } => match caps.get(*secret) {
                Some(m) if !m.as_str().is_empty() && accept(m.as_str()) => {
                    changed = true;
                    report.add(*kind, 1);
                    format!(
                        "{}{}{}",
                        &whole[..m.start() - start],
                        kind.marker(),
                        &whole[m.end() - start..]
                    )
                }
                _ => whole.to_owned(),
            },
            Action::Custom(f) => match f(caps, report) {
                Some(out) => {
                    changed = true;
                    out
                }
                None => whole.to_owned(),
            },
        }
    });
    changed.then(|| replaced.into_owned())
}

pub(crate) fn redact_private_keys(text: &str, report: &mut RedactionReport) -> Option<String> {
    let regex = &COMPILED.private_key;
    let n = regex.find_iter(text).count();
    if n == 0 {
        return None;
    }
    report.add(RedactionKind::PrivateKey, n as u64);
    Some(
        regex
            .replace_all(text, RedactionKind::PrivateKey.marker().as_str())
            .into_owned(),
    )
}

/// The inside of a quoted value and its quotes: `("\"", "abc", "\"")`.
fn unquote(value: &str) -> (&str, &str, &str) {
    let lead = value.len() - value.trim_start_matches('\\').len();
    let rest = &value[lead..];
    for q in ['"', '\''] {
        if rest.len() >= 2 && rest.starts_with(q) && rest.ends_with(q) {
            let trail_start = value.len() - 1;
            let inner_end = value[..trail_start].trim_end_matches('\\').len();
            if inner_end > lead {
                return (
                    &value[..=lead],
                    &value[lead + 1..inner_end],
                    &value[inner_end..],
                );
            }
        }
    }
    ("", value, "")
}

pub(crate) fn redact_assignments(text: &str, report: &mut RedactionReport) -> Option<String> {
    let regex = &COMPILED.assignment;
    let mut changed = false;
    let replaced = regex.replace_all(text, |caps: &Captures<'_>| {
        let whole = caps.get(0).map_or("", |m| m.as_str());
        let part = |name: &str| caps.name(name).map_or("", |m| m.as_str());
        let (lead, key, sep, value) = if caps.name("lkey").is_some() {
            (part("lead"), part("lkey"), part("lsep"), part("lval"))
        } else {
            (part("open"), part("key"), part("sep"), part("val"))
        };
        let (open_q, inner, close_q) = unquote(value);
        // `arn:aws:secretsmanager:..:secret:prod/db`: a path segment, not an assignment.
        let start = caps.get(0).map_or(0, |m| m.start());
        let end = caps.get(0).map_or(0, |m| m.end());
        if lead.is_empty() && sep == ":" && text[..start].ends_with(':') {
            return whole.to_owned();
        }
        // `token=[REDACTED:..]`: a token rule already took the value.
        if text[end..].starts_with(MARKER_PREFIX) {
            return whole.to_owned();
        }
        // `passwd:chauthtok`, `map[authorization:..]`: a bare `key:value` is a label unless the
        // value looks like a credential.
        let class = match key_class(key) {
            Some(KeyClass::Strong | KeyClass::NotPath)
                if sep == ":" && open_q.is_empty() && lead.is_empty() =>
            {
                Some(KeyClass::NeedsRandom)
            }
            class => class,
        };
        if let Some(out) = class.and_then(|class| field_replacement(class, inner)) {
            changed = true;
            report.add(RedactionKind::SecretAssignment, 1);
            return format!("{lead}{key}{sep}{open_q}{out}{close_q}");
        }
        // A kept value (`author: ...`, `auth: ok`) may still hold assignments of its own.
        if inner.len() < MIN_RULE_LEN || !inner.contains(['=', ':']) {
            return whole.to_owned();
        }
        match redact_assignments(inner, report) {
            Some(inside) => {
                changed = true;
                format!("{lead}{key}{sep}{open_q}{inside}{close_q}")
            }
            None => whole.to_owned(),
        }
    });
    changed.then(|| replaced.into_owned())
}

/// The JSON document `text` holds, when it is one (an object or an array).
pub(crate) fn json_document(text: &str) -> Option<Value> {
    let t = text.trim();
    let container =
        (t.starts_with('{') && t.ends_with('}')) || (t.starts_with('[') && t.ends_with(']'));
    if !container || t.starts_with(MARKER_PREFIX) {
        return None;
    }
    serde_json::from_str(t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_static_pattern_compiles() {
        let compiled = LazyLock::force(&COMPILED);
        assert_eq!(compiled.rules.len(), RULES.len());
        assert_eq!(compiled.set.len(), RULES.len() + 2);
    }
}
