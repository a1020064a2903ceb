//! When two reports are the same problem.
//!
//! Two findings on the same resource are *equivalent siblings* (FIND-15) when they have the same
//! category and describe the same symptom. The key's wording decides first ([`wording`]); where
//! the wording cannot decide, the deterministic evidence both reports cite does
//! ([`shared_signal`]); [`same_problem`] combines the two and is what the report rules use.
//!
//! # Wording
//!
//! A key is read as words (`-` separated). Multi-word phrases fold first (`health-check-failing`,
//! `not-responding`, `crash-loop`, `out-of-memory`, `response-time` ...), then single words fold
//! onto a *concept* (`mem`/`ram` -> `memory`, `disk`/`filesystem`/`volume` -> `storage`,
//! `unhealthy`/`down`/`exited`/`restarting`/`oom` -> `unavailable`, `slow`/`lag` -> `latency`,
//! ...), and qualifiers drop (`high`, `pressure`, `usage`, `full`, `risk`, resource-type words,
//! ...). What is left and is not a concept is a *name* (`nginx`, `web`, `steal`). Then, on one
//! resource and category:
//!
//! 1. a key with no word left at all (`capacity-risk`) is a generic report: the same problem as
//!    any sibling of its category;
//! 2. both keys name concepts and the concept sets differ: **different problems** (`cpu` vs
//!    `memory`, `pool` vs `storage`, `storage` vs `storage`+`errors`, `certificate`+`expiry` vs
//!    `unavailable`, `latency` vs `unavailable`); the one exception is a bare `failed` (systemd's
//!    `failed` state, `service-failed`), which is `unavailable` when it names nothing else and
//!    undecided when it names something (`nginx-failed`, `pbs-job-failed`);
//! 3. the concept sets are equal (or both empty) and one key's names are contained in the
//!    other's: **the same problem** (`service-unhealthy` / `health-check-failing`,
//!    `nginx-unhealthy` / `down`);
//! 4. otherwise (names that differ, `nginx-down` vs `php-down`; or one key with names only,
//!    `web-503` vs `service-unhealthy`): **undecided**.
//!
//! The availability family is one concept on purpose: on one resource, an unhealthy health
//! check, a process that is down, not responding, unreachable, exited, not running, crash- or
//! restart-looping or OOM-killed are the same fault seen through different signals (the probe,
//! the supervisor, the exit status, the kernel); a restart loop fails the health check and an
//! OOM kill is how the process exits. One finding, one fix, one verification. `oom` therefore
//! merges with `restart-loop`, and its `memory` word is dropped (the OOM kill already names
//! memory as the cause); it stays apart from `memory-high`, which is pressure, not loss of
//! service. `high-latency` (slow but answering) stays apart from `not-responding`.
//!
//! # Evidence
//!
//! An undecided pair is the same problem when both reports cite the same deterministic signal
//! that holds for the resource in the reporting run ([`ResourceSignals`]): one of its triage flags
//! (`health_check_failing`, `not_running`, `repeated_restarts`, ...) or an alert firing on it,
//! cited by any of its spellings (`alert_restart_loop` or its key `<resource_id>:restart_loop`).
//! Prose that merely sounds alike never merges; a signal that no longer holds never merges
//! either. Evidence never overrides a decided wording: `certificate-expiring` and
//! `service-down` stay apart even when both mention the failing health check.
//!
//! Title overlap (FIND-18) decides whether a same-id re-detection is a rephrasing (no event) or a
//! different issue reusing the identity (`content_replaced`).

use std::collections::BTreeSet;

use super::Category;
use super::id::FindingKey;

/// A same-id re-detection whose title keyword overlap is at or below this records
/// `content_replaced` (upstream `findingIdentityShiftMaxTitleOverlap`).
pub const MAX_IDENTITY_SHIFT_TITLE_OVERLAP: f64 = 0.2;

/// The concept every availability symptom folds onto.
pub const UNAVAILABLE: &str = "unavailable";
/// The vague `failed` concept: a state, not a subject (see the module documentation).
const FAILED: &str = "failed";
/// The vague `degraded` concept.
const DEGRADED: &str = "degraded";
const VAGUE: &[&str] = &[FAILED, DEGRADED];
/// An OOM kill: folds onto [`UNAVAILABLE`] and drops the key's `memory` word.
const OOM: &str = "oom";
const LATENCY: &str = "latency";

const FAIL_WORDS: &[&str] = &["fail", "fails", "failing", "failed", "failure", "failures"];
const CHECK_WORDS: &[&str] = &["check", "checks", "probe", "probes"];

/// Multi-word phrases, longest first; each element lists the words it accepts.
const PHRASES: &[(&[&[&str]], &str)] = &[
    (&[&["crash"], &["loop"], &["backoff"]], UNAVAILABLE),
    (&[&["out"], &["of"], &["memory"]], OOM),
    (&[&["non"], &["zero"], &["exit"]], UNAVAILABLE),
    (&[&["health"], CHECK_WORDS, FAIL_WORDS], UNAVAILABLE),
    (&[FAIL_WORDS, &["health"], CHECK_WORDS], UNAVAILABLE),
    (
        &[&["liveness", "readiness"], CHECK_WORDS, FAIL_WORDS],
        UNAVAILABLE,
    ),
    (&[&["healthcheck", "healthchecks"], FAIL_WORDS], UNAVAILABLE),
    (&[FAIL_WORDS, &["healthcheck", "healthchecks"]], UNAVAILABLE),
    (&[&["health"], FAIL_WORDS], UNAVAILABLE),
    (&[&["health"], CHECK_WORDS], UNAVAILABLE),
    (&[&["liveness", "readiness"], CHECK_WORDS], UNAVAILABLE),
    (
        &[
            &["not", "no"],
            &[
                "responding",
                "response",
                "responsive",
                "reachable",
                "available",
                "running",
                "started",
                "serving",
                "up",
                "healthy",
                "listening",
                "heartbeat",
            ],
        ],
        UNAVAILABLE,
    ),
    (
        &[&["restart", "crash", "boot"], &["loop", "loops", "looping"]],
        UNAVAILABLE,
    ),
    (&[&["oom"], &["killed", "kill", "kills", "killer"]], OOM),
    (
        &[
            &["connection", "connections"],
            &["refused", "reset", "failed", "failing", "failures"],
        ],
        UNAVAILABLE,
    ),
    (&[&["nonzero"], &["exit"]], UNAVAILABLE),
    (&[&["healthcheck", "healthchecks"]], UNAVAILABLE),
    (&[&["response"], &["time", "times"]], LATENCY),
    (
        &[&["slow"], &["response", "responses", "requests", "queries"]],
        LATENCY,
    ),
];

/// Single words and the concept they name.
const CONCEPTS: &[(&str, &[&str])] = &[
    ("cpu", &["cpu", "cpus", "processor", "load"]),
    ("memory", &["memory", "mem", "ram"]),
    ("swap", &["swap", "swapping"]),
    (
        "storage",
        &[
            "storage",
            "disk",
            "disks",
            "filesystem",
            "filesystems",
            "fs",
            "volume",
            "volumes",
            "mount",
            "mountpoint",
            "partition",
        ],
    ),
    ("inode", &["inode", "inodes"]),
    ("io", &["io", "iops", "iowait"]),
    (
        "network",
        &[
            "network",
            "net",
            "nic",
            "interface",
            "packet",
            "packets",
            "bandwidth",
        ],
    ),
    ("dns", &["dns", "resolver"]),
    (
        "certificate",
        &["certificate", "certificates", "cert", "certs", "tls", "ssl"],
    ),
    (
        "expiry",
        &[
            "expiry",
            "expiring",
            "expired",
            "expires",
            "expire",
            "expiration",
        ],
    ),
    ("backup", &["backup", "backups"]),
    ("pool", &["pool", "pools", "zpool", "raid", "array"]),
    ("smart", &["smart"]),
    (
        "errors",
        &["error", "errors", "err", "exception", "exceptions", "5xx"],
    ),
    (
        LATENCY,
        &["latency", "slow", "slowness", "lag", "lagging", "sluggish"],
    ),
    ("stale", &["stale", "outdated", "overdue", "missed"]),
    (
        "temperature",
        &["temperature", "temp", "thermal", "overheating", "overheat"],
    ),
    ("clock", &["clock", "ntp", "drift", "skew"]),
    ("replication", &["replication", "replica"]),
    (
        "vulnerability",
        &["vulnerability", "vulnerabilities", "cve", "cves"],
    ),
    (OOM, &["oom", "oomkilled", "oomkill", "oomkills"]),
    (FAILED, FAIL_WORDS),
    (DEGRADED, &["degraded", "degradation"]),
    (
        UNAVAILABLE,
        &[
            "unavailable",
            "unhealthy",
            "down",
            "unresponsive",
            "unreachable",
            "offline",
            "dead",
            "outage",
            "exited",
            "exit",
            "exits",
            "exiting",
            "stopped",
            "crash",
            "crashes",
            "crashed",
            "crashing",
            "crashloop",
            "crashloopbackoff",
            "crashlooping",
            "restart",
            "restarts",
            "restarting",
            "restarted",
            "flapping",
            "hung",
            "hang",
            "hanging",
            "frozen",
            "killed",
            "terminated",
        ],
    ),
];

/// Words that qualify a symptom without naming one; dropped.
const QUALIFIERS: &[&str] = &[
    "high",
    "low",
    "elevated",
    "excessive",
    "sustained",
    "critical",
    "warning",
    "pressure",
    "usage",
    "used",
    "utilization",
    "util",
    "saturation",
    "saturated",
    "exhaustion",
    "exhausted",
    "full",
    "nearly",
    "almost",
    "risk",
    "issue",
    "issues",
    "problem",
    "problems",
    "growth",
    "growing",
    "trend",
    "spike",
    "spikes",
    "rising",
    "increase",
    "increasing",
    "alert",
    "capacity",
    "space",
    "percent",
    "pct",
    "detected",
    "level",
    "loop",
    "looping",
    "repeated",
    "repeatedly",
    "frequent",
    "persistent",
    "unexpected",
    "unexpectedly",
    "state",
    "status",
    "not",
    "no",
    "host",
    "node",
    "container",
    "service",
    "process",
    "daemon",
    "unit",
    "instance",
    "pod",
    "vm",
    "guest",
    "lxc",
    "app",
    "system",
];

/// What a key says, after folding (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Symptom {
    /// Concepts that name a subject or a specific condition (`cpu`, `storage`, `errors`,
    /// [`UNAVAILABLE`], ...).
    pub specific: BTreeSet<&'static str>,
    /// Vague states (`failed`, `degraded`): they say something is wrong, not what.
    pub vague: BTreeSet<&'static str>,
    /// Remaining words that are no concept (`nginx`, `web`, `steal`).
    pub names: BTreeSet<String>,
}

impl Symptom {
    /// The symptom of `key`.
    pub fn of(key: &FindingKey) -> Self {
        let words: Vec<&str> = key.as_str().split('-').filter(|w| !w.is_empty()).collect();
        let mut symptom = Symptom::default();
        let mut oom = false;
        let mut at = 0;
        while at < words.len() {
            if let Some((len, concept)) = phrase_at(&words[at..]) {
                oom |= concept == OOM;
                symptom.add_concept(concept);
                at += len;
                continue;
            }
            let word = words[at];
            at += 1;
            if QUALIFIERS.contains(&word) {
                continue;
            }
            match concept_of(word) {
                Some(concept) => {
                    oom |= concept == OOM;
                    symptom.add_concept(concept);
                }
                None => {
                    symptom.names.insert(word.to_owned());
                }
            }
        }
        if oom {
            // The OOM kill already names memory as the cause of the loss of service.
            symptom.specific.remove("memory");
        }
        symptom
    }

    fn add_concept(&mut self, concept: &'static str) {
        let concept = if concept == OOM { UNAVAILABLE } else { concept };
        if VAGUE.contains(&concept) {
            self.vague.insert(concept);
        } else {
            self.specific.insert(concept);
        }
    }

    /// No word left at all: a generic report of its category (`capacity-risk`).
    pub fn is_generic(&self) -> bool {
        self.specific.is_empty() && self.vague.is_empty() && self.names.is_empty()
    }

    fn names_nest(&self, other: &Symptom) -> bool {
        self.names.is_subset(&other.names) || other.names.is_subset(&self.names)
    }
}

fn phrase_at(words: &[&str]) -> Option<(usize, &'static str)> {
    PHRASES.iter().find_map(|(phrase, concept)| {
        (phrase.len() <= words.len()
            && phrase
                .iter()
                .zip(words)
                .all(|(accepted, word)| accepted.contains(word)))
        .then_some((phrase.len(), *concept))
    })
}

fn concept_of(word: &str) -> Option<&'static str> {
    CONCEPTS
        .iter()
        .find(|(_, words)| words.contains(&word))
        .map(|(concept, _)| *concept)
}

/// What the wording of two keys says about whether they are one problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wording {
    /// The same symptom.
    Same,
    /// Different problems, whatever the evidence says.
    Apart,
    /// The words cannot tell; shared deterministic evidence decides ([`shared_signal`]).
    Undecided,
}

/// The wording decision for a report under (`category`, `key`) and a sibling under
/// (`other_category`, `other_key`) on the same resource (rules in the module documentation).
pub fn wording(
    category: Category,
    key: &FindingKey,
    other_category: Category,
    other_key: &FindingKey,
) -> Wording {
    if category != other_category {
        return Wording::Apart;
    }
    let (a, b) = (Symptom::of(key), Symptom::of(other_key));
    if a.is_generic() || b.is_generic() {
        return Wording::Same;
    }
    let by_names = |a: &Symptom, b: &Symptom| {
        if a.names_nest(b) {
            Wording::Same
        } else {
            Wording::Undecided
        }
    };
    match (a.specific.is_empty(), b.specific.is_empty()) {
        (false, false) if a.specific != b.specific => Wording::Apart,
        (false, false) => by_names(&a, &b),
        (true, true) => {
            if a.vague == b.vague || a.vague.is_empty() || b.vague.is_empty() {
                by_names(&a, &b)
            } else {
                Wording::Undecided
            }
        }
        (true, false) => bare_failed(&a, &b),
        (false, true) => bare_failed(&b, &a),
    }
}

/// `vague` names no specific concept, `specific` does: a bare `failed` (`service-failed`, the
/// systemd state) is the loss of service; anything else cannot be told from the words.
fn bare_failed(vague: &Symptom, specific: &Symptom) -> Wording {
    let bare = vague.names.is_empty() && vague.vague.iter().eq([FAILED].iter());
    if bare && specific.specific.iter().eq([UNAVAILABLE].iter()) {
        Wording::Same
    } else {
        Wording::Undecided
    }
}

/// Whether the wording alone makes a report under (`category`, `key`) and an existing finding
/// under (`other_category`, `other_key`) on the same resource the same problem.
pub fn equivalent(
    category: Category,
    key: &FindingKey,
    other_category: Category,
    other_key: &FindingKey,
) -> bool {
    wording(category, key, other_category, other_key) == Wording::Same
}

/// The deterministic signals that hold for one resource in the reporting run: its triage flags
/// and the alerts firing on it, each with the spellings a report may cite it by (an alert by its
/// signal name or its key). Empty outside a run (nothing merges by evidence then).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceSignals {
    /// Signal name -> its normalized spellings (the name's included).
    signals: std::collections::BTreeMap<String, BTreeSet<String>>,
}

/// Signals shorter than this (after normalization) are never matched: too easy to hit by chance.
const MIN_SIGNAL_CHARS: usize = 3;

impl ResourceSignals {
    /// Signals each cited by its own name only.
    pub fn new<S: AsRef<str>>(signals: impl IntoIterator<Item = S>) -> Self {
        signals.into_iter().fold(Self::default(), |acc, s| {
            acc.with_spelling(s.as_ref(), s.as_ref())
        })
    }

    /// Adds `signal` (if new) and `spelling` as one more way to cite it. Spellings too short to
    /// be told from chance are ignored.
    pub fn with_spelling(mut self, signal: &str, spelling: &str) -> Self {
        let (name, spelling) = (signal.trim(), normalize(spelling));
        if normalize(name).chars().count() < MIN_SIGNAL_CHARS {
            return self;
        }
        let spellings = self.signals.entry(name.to_owned()).or_default();
        spellings.insert(normalize(name));
        if spelling.chars().count() >= MIN_SIGNAL_CHARS {
            spellings.insert(spelling);
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.signals.is_empty()
    }

    /// The signal names.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.signals.keys().map(String::as_str)
    }
}

/// Lowercase, with `_`, `-` and whitespace runs as one space: `health_check_failing`,
/// `health-check-failing` and `health check failing` cite the same flag.
fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '_' || c == '-' || c.is_whitespace() {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out.trim().to_owned()
}

/// Whether normalized `text` contains normalized `signal` as a whole term.
fn cites(text: &str, signal: &str) -> bool {
    let mut from = 0;
    while let Some(rel) = text.get(from..).and_then(|t| t.find(signal)) {
        let start = from + rel;
        let end = start + signal.len();
        let before = text[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric());
        let after = text[end..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_alphanumeric());
        if before && after {
            return true;
        }
        from = start + signal.chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// The first signal of `signals` that both `evidence` and `other_evidence` cite (each by any
/// of its spellings): the deterministic evidence that two reports describe the same symptom.
/// Pure.
pub fn shared_signal<'s>(
    signals: &'s ResourceSignals,
    evidence: &str,
    other_evidence: &str,
) -> Option<&'s str> {
    let (a, b) = (normalize(evidence), normalize(other_evidence));
    let cited = |text: &str, spellings: &BTreeSet<String>| spellings.iter().any(|s| cites(text, s));
    signals
        .signals
        .iter()
        .find(|(_, spellings)| cited(&a, spellings) && cited(&b, spellings))
        .map(|(name, _)| name.as_str())
}

/// One side of a comparison: what a report (or a stored finding) says.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub category: Category,
    pub key: &'a FindingKey,
    pub evidence: &'a str,
}

/// Why two reports were found to be the same problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeBasis {
    /// The keys name the same symptom.
    Wording,
    /// The keys could not tell; both reports cite this deterministic signal of the resource.
    Evidence(String),
}

impl MergeBasis {
    /// The wire spelling (`merged_by` of a `duplicate_merged` event).
    pub fn as_str(&self) -> &'static str {
        match self {
            MergeBasis::Wording => "key",
            MergeBasis::Evidence(_) => "evidence",
        }
    }
}

/// Whether `report` and `sibling` (on the same resource) are the same problem, and why: the
/// wording decides; an undecided wording is settled by a signal of `signals` both cite.
pub fn same_problem(
    report: Claim<'_>,
    sibling: Claim<'_>,
    signals: &ResourceSignals,
) -> Option<MergeBasis> {
    match wording(report.category, report.key, sibling.category, sibling.key) {
        Wording::Same => Some(MergeBasis::Wording),
        Wording::Apart => None,
        Wording::Undecided => shared_signal(signals, report.evidence, sibling.evidence)
            .map(|s| MergeBasis::Evidence(s.to_owned())),
    }
}

fn title_keywords(title: &str) -> BTreeSet<String> {
    const STOPWORDS: &[&str] = &[
        "the", "and", "for", "with", "on", "of", "in", "is", "are", "has", "was", "from", "to",
        "at", "by", "its", "this", "that", "not",
    ];
    title
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 3 && !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// Share of keywords two titles have in common, relative to the shorter title's keywords
/// (0.0 = nothing in common, 1.0 = one title's keywords are all in the other). A title with no
/// keywords gives 1.0: there is no evidence of an identity shift.
pub fn title_overlap(a: &str, b: &str) -> f64 {
    let a = title_keywords(a);
    let b = title_keywords(b);
    let smaller = a.len().min(b.len());
    if smaller == 0 {
        return 1.0;
    }
    let common = a.intersection(&b).count();
    common as f64 / smaller as f64
}

/// Whether a same-id re-detection titled `new` after `previous` is a different issue reusing the
/// identity (FIND-18) rather than a rephrasing.
pub fn is_identity_shift(previous: &str, new: &str) -> bool {
    title_overlap(previous, new) <= MAX_IDENTITY_SHIFT_TITLE_OVERLAP
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(s: &str) -> FindingKey {
        FindingKey::normalize(s).expect("valid")
    }

    /// Every pair is checked both ways round: the decision is symmetric.
    #[test]
    fn equivalence_table() {
        use Category::*;
        use Wording::*;
        let cases = [
            // Resource pressure: one dimension, however it is worded.
            (Performance, "cpu-high", Performance, "cpu-pressure", Same),
            (
                Performance,
                "high-cpu",
                Performance,
                "sustained-cpu-usage",
                Same,
            ),
            (Performance, "cpu-high", Performance, "memory-high", Apart),
            (Performance, "cpu-high", Capacity, "cpu-high", Apart),
            (
                Performance,
                "high-memory",
                Performance,
                "ram-pressure",
                Same,
            ),
            (
                Capacity,
                "disk-usage-high",
                Capacity,
                "storage-capacity-risk",
                Same,
            ),
            (
                Capacity,
                "disk-full",
                Capacity,
                "filesystem-nearly-full",
                Same,
            ),
            (
                Capacity,
                "capacity-risk",
                Capacity,
                "inode-exhaustion",
                Same,
            ),
            (Capacity, "disk-high", Capacity, "memory-high", Apart),
            (Capacity, "disk-high", Capacity, "inode-exhaustion", Apart),
            // Storage health is not storage space; a pool is not a disk.
            (Reliability, "disk-full", Reliability, "disk-errors", Apart),
            (
                Reliability,
                "pool-degraded",
                Reliability,
                "device-smart-errors",
                Apart,
            ),
            (Capacity, "zfs-pool-full", Capacity, "disk-full", Apart),
            (
                Reliability,
                "pool-degraded",
                Reliability,
                "zfs-pool-failed",
                Same,
            ),
            // Availability: one fault seen through the probe, the supervisor, the exit status.
            (
                Reliability,
                "service-unhealthy",
                Reliability,
                "health-check-failing",
                Same,
            ),
            (
                Reliability,
                "service-unhealthy",
                Reliability,
                "unhealthy-service-detected",
                Same,
            ),
            (
                Reliability,
                "container-unhealthy",
                Reliability,
                "failing-health-check",
                Same,
            ),
            (
                Reliability,
                "healthcheck-failed",
                Reliability,
                "service-down",
                Same,
            ),
            (
                Reliability,
                "service-unhealthy",
                Reliability,
                "not-responding",
                Same,
            ),
            (
                Reliability,
                "web-unreachable",
                Reliability,
                "service-unhealthy",
                Same,
            ),
            (
                Reliability,
                "service-exited",
                Reliability,
                "not-running",
                Same,
            ),
            (
                Reliability,
                "service-exited",
                Reliability,
                "service-unhealthy",
                Same,
            ),
            (
                Reliability,
                "restart-loop",
                Reliability,
                "container-crash-loop",
                Same,
            ),
            (
                Reliability,
                "restart-loop",
                Reliability,
                "container-restarting",
                Same,
            ),
            (
                Reliability,
                "crashloopbackoff",
                Reliability,
                "crash-loop-backoff",
                Same,
            ),
            (Reliability, "restart-loop", Reliability, "unhealthy", Same),
            (Reliability, "oom-killed", Reliability, "restart-loop", Same),
            (
                Reliability,
                "container-memory-oom-killed",
                Reliability,
                "crash-loop",
                Same,
            ),
            (
                Reliability,
                "out-of-memory",
                Reliability,
                "container-exited",
                Same,
            ),
            (
                Reliability,
                "service-failed",
                Reliability,
                "service-unhealthy",
                Same,
            ),
            (Reliability, "node-offline", Reliability, "host-down", Same),
            // ... but not the memory pressure that may precede an OOM kill, not slowness,
            // not another part of the resource, not another category.
            (Reliability, "oom-killed", Reliability, "memory-high", Apart),
            (
                Performance,
                "high-latency",
                Performance,
                "not-responding",
                Apart,
            ),
            (
                Reliability,
                "slow-responses",
                Reliability,
                "service-down",
                Apart,
            ),
            (
                Reliability,
                "response-time-high",
                Reliability,
                "high-latency",
                Same,
            ),
            (
                Reliability,
                "certificate-expiring",
                Reliability,
                "service-down",
                Apart,
            ),
            (
                Security,
                "tls-cert-expired",
                Security,
                "certificate-expiring",
                Same,
            ),
            (
                Reliability,
                "storage-unavailable",
                Reliability,
                "service-down",
                Apart,
            ),
            (
                Reliability,
                "network-down",
                Reliability,
                "host-unreachable",
                Apart,
            ),
            (
                Reliability,
                "http-errors",
                Reliability,
                "service-unhealthy",
                Apart,
            ),
            (
                Reliability,
                "service-unhealthy",
                Performance,
                "health-check-failing",
                Apart,
            ),
            (Performance, "cpu-high", Reliability, "cpu-high", Apart),
            (Backup, "backup-failed", Backup, "backup-stale", Apart),
            (Backup, "backup-failed", Backup, "backup-job-failing", Same),
            // The words cannot tell: evidence decides.
            (
                Reliability,
                "nginx-down",
                Reliability,
                "php-fpm-down",
                Undecided,
            ),
            (
                Reliability,
                "web-503",
                Reliability,
                "service-unhealthy",
                Undecided,
            ),
            (
                Reliability,
                "request-timeouts",
                Reliability,
                "health-check-failing",
                Undecided,
            ),
            (
                Reliability,
                "nginx-failed",
                Reliability,
                "service-unhealthy",
                Undecided,
            ),
            (
                Reliability,
                "service-degraded",
                Reliability,
                "service-unhealthy",
                Undecided,
            ),
            (
                Reliability,
                "pbs-job-failed",
                Reliability,
                "service-down",
                Undecided,
            ),
        ];
        assert!(cases.len() >= 30);
        for (c1, k1, c2, k2, want) in cases {
            assert_eq!(
                wording(c1, &key(k1), c2, &key(k2)),
                want,
                "{c1}/{k1} vs {c2}/{k2}"
            );
            assert_eq!(
                wording(c2, &key(k2), c1, &key(k1)),
                want,
                "{c2}/{k2} vs {c1}/{k1}"
            );
            assert_eq!(equivalent(c1, &key(k1), c2, &key(k2)), want == Same);
        }
    }

    #[test]
    fn symptoms_fold_phrases_synonyms_and_qualifiers() {
        let s = Symptom::of(&key("container-memory-oom-killed"));
        assert_eq!(s.specific, BTreeSet::from([UNAVAILABLE]));
        assert!(s.names.is_empty());
        let s = Symptom::of(&key("nginx-health-check-failing"));
        assert_eq!(s.specific, BTreeSet::from([UNAVAILABLE]));
        assert_eq!(s.names, BTreeSet::from(["nginx".to_owned()]));
        assert!(Symptom::of(&key("capacity-risk")).is_generic());
        let s = Symptom::of(&key("zfs-pool-degraded"));
        assert_eq!(s.specific, BTreeSet::from(["pool"]));
        assert_eq!(s.vague, BTreeSet::from([DEGRADED]));
    }

    fn claim<'a>(key: &'a FindingKey, evidence: &'a str) -> Claim<'a> {
        Claim {
            category: Category::Reliability,
            key,
            evidence,
        }
    }

    #[test]
    fn shared_deterministic_evidence_decides_what_the_words_cannot() {
        let live = ResourceSignals::new([
            "health_check_failing",
            "service:h1:web:unhealthy",
            "7b1c5a52-0c1e-4a43-9a60-3f1c2b0d9e11",
        ])
        .with_spelling("alert_restart_loop", "service:h1:web:restart_loop");
        let (timeouts, unhealthy) = (key("request-timeouts"), key("service-unhealthy"));
        assert_eq!(
            wording(
                Category::Reliability,
                &timeouts,
                Category::Reliability,
                &unhealthy
            ),
            Wording::Undecided
        );

        // Both cite the same triage flag, in any spelling: one problem.
        let flag = same_problem(
            claim(&timeouts, "requests time out; triage: health_check_failing"),
            claim(
                &unhealthy,
                "the inventory shows Health-Check-Failing for web",
            ),
            &live,
        );
        assert_eq!(
            flag,
            Some(MergeBasis::Evidence("health_check_failing".to_owned()))
        );
        // Both cite the same firing alert, by key or by id.
        let alert = same_problem(
            claim(&timeouts, "alert service:h1:web:unhealthy is firing"),
            claim(&unhealthy, "firing: service:h1:web:unhealthy."),
            &live,
        );
        assert_eq!(
            alert,
            Some(MergeBasis::Evidence("service:h1:web:unhealthy".to_owned()))
        );
        let by_id = same_problem(
            claim(&timeouts, "alert 7b1c5a52-0c1e-4a43-9a60-3f1c2b0d9e11"),
            claim(&unhealthy, "(7B1C5A52-0C1E-4A43-9A60-3F1C2B0D9E11)"),
            &live,
        );
        assert_eq!(by_id.as_ref().map(MergeBasis::as_str), Some("evidence"));
        // One alert cited by its signal name on one side and by its key on the other.
        let spelled = same_problem(
            claim(&timeouts, "alert_restart_loop is firing"),
            claim(
                &unhealthy,
                "firing since 08:00: service:h1:web:restart_loop",
            ),
            &live,
        );
        assert_eq!(
            spelled,
            Some(MergeBasis::Evidence("alert_restart_loop".to_owned()))
        );

        // Only one side cites it, or they cite different signals: apart.
        assert_eq!(
            same_problem(
                claim(&timeouts, "p99 at 30 s"),
                claim(&unhealthy, "health_check_failing"),
                &live
            ),
            None
        );
        assert_eq!(
            same_problem(
                claim(&timeouts, "health_check_failing"),
                claim(&unhealthy, "service:h1:web:unhealthy"),
                &live
            ),
            None
        );
        // A signal that does not hold for the resource in this run is no evidence.
        let other = ResourceSignals::new(["not_running"]);
        assert_eq!(
            same_problem(
                claim(&timeouts, "health_check_failing"),
                claim(&unhealthy, "health_check_failing"),
                &other
            ),
            None
        );
        assert_eq!(
            same_problem(
                claim(&timeouts, "health_check_failing"),
                claim(&unhealthy, "health_check_failing"),
                &ResourceSignals::default()
            ),
            None
        );
        // A signal must be a whole term: a longer alert key is another alert.
        assert_eq!(
            same_problem(
                claim(&timeouts, "service:h1:web:unhealthy2"),
                claim(&unhealthy, "service:h1:web:unhealthy2"),
                &live
            ),
            None
        );

        // Evidence never overrides a decided wording.
        let (cert, down) = (key("certificate-expiring"), key("service-down"));
        assert_eq!(
            same_problem(
                claim(&cert, "health_check_failing"),
                claim(&down, "health_check_failing"),
                &live
            ),
            None
        );
        assert_eq!(
            same_problem(claim(&down, "-"), claim(&unhealthy, "-"), &live),
            Some(MergeBasis::Wording)
        );
        let mut other_category = claim(&timeouts, "health_check_failing");
        other_category.category = Category::Performance;
        assert_eq!(
            same_problem(
                other_category,
                claim(&unhealthy, "health_check_failing"),
                &live
            ),
            None
        );
    }

    #[test]
    fn title_overlap_separates_rephrasings_from_identity_shifts() {
        assert!(!is_identity_shift(
            "High CPU usage on web",
            "Web container CPU saturated"
        ));
        assert!(!is_identity_shift("Disk almost full", "Disk almost full"));
        assert!(is_identity_shift(
            "Backup failed for db",
            "Disk almost full"
        ));
        assert!(!is_identity_shift("", "Anything at all"));
        assert_eq!(title_overlap("a b c", "x y z"), 1.0, "no keywords");
    }

    proptest! {
        #[test]
        fn equivalence_is_symmetric_and_reflexive(a in "[a-z]{1,8}(-[a-z]{1,8}){0,3}", b in "[a-z]{1,8}(-[a-z]{1,8}){0,3}") {
            let (ka, kb) = (key(&a), key(&b));
            prop_assert!(equivalent(Category::General, &ka, Category::General, &ka));
            prop_assert_eq!(
                wording(Category::General, &ka, Category::General, &kb),
                wording(Category::General, &kb, Category::General, &ka)
            );
            prop_assert!(!equivalent(Category::General, &ka, Category::Backup, &ka));
        }

        #[test]
        fn evidence_is_symmetric_and_needs_a_live_signal(a in "[a-z_ ]{0,40}", b in "[a-z_ ]{0,40}", flag in "[a-z]{3,8}(_[a-z]{3,8}){0,2}") {
            let live = ResourceSignals::new([flag.as_str()]);
            prop_assert_eq!(shared_signal(&live, &a, &b), shared_signal(&live, &b, &a));
            let none = ResourceSignals::default();
            prop_assert_eq!(shared_signal(&none, &a, &b), None);
            let cited = format!("{a} {flag} {b}");
            prop_assert_eq!(shared_signal(&live, &cited, &cited), Some(flag.as_str()));
        }

        #[test]
        fn overlap_is_a_fraction_and_identical_titles_never_shift(a in "[A-Za-z ]{0,60}", b in "[A-Za-z ]{0,60}") {
            let o = title_overlap(&a, &b);
            prop_assert!((0.0..=1.0).contains(&o));
            prop_assert!(!is_identity_shift(&a, &a));
        }
    }
}
