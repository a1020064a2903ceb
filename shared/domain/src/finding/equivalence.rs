//! When two reports are the same problem.
//!
//! Two findings on the same resource are *equivalent siblings* (FIND-15) when they have the same
//! category and their keys name the same symptom. A key's symptom is its set of subject words:
//! the key's words with synonyms folded (`mem`/`ram` -> `memory`, `disk`/`filesystem`/`volume`
//! -> `storage`, `crash`/`restarts` -> `restart`, ...) and qualifiers dropped (`high`, `pressure`,
//! `usage`, `risk`, `capacity`, resource-type words, ...). Symptoms are equivalent when one
//! subject set contains the other; a key with no subject word at all (`capacity-risk`) is a
//! generic report and is equivalent to any sibling of its category. So `cpu-high` and
//! `cpu-pressure` merge, `disk-usage-high` and `storage-capacity-risk` merge, while `cpu-high`
//! and `memory-high` (FIND-17), or `pool-degraded` and `device-smart-errors`, stay separate.
//!
//! Title overlap (FIND-18) decides whether a same-id re-detection is a rephrasing (no event) or a
//! different issue reusing the identity (`content_replaced`).

use std::collections::BTreeSet;

use super::Category;
use super::id::FindingKey;

/// A same-id re-detection whose title keyword overlap is at or below this records
/// `content_replaced` (upstream `findingIdentityShiftMaxTitleOverlap`).
pub const MAX_IDENTITY_SHIFT_TITLE_OVERLAP: f64 = 0.2;

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
    "host",
    "node",
    "container",
    "service",
    "vm",
    "guest",
    "lxc",
    "app",
    "system",
];

const SYNONYMS: &[(&str, &str)] = &[
    ("processor", "cpu"),
    ("load", "cpu"),
    ("mem", "memory"),
    ("ram", "memory"),
    ("disk", "storage"),
    ("disks", "storage"),
    ("filesystem", "storage"),
    ("fs", "storage"),
    ("volume", "storage"),
    ("mount", "storage"),
    ("crash", "restart"),
    ("crashes", "restart"),
    ("crashloop", "restart"),
    ("crashing", "restart"),
    ("restarts", "restart"),
    ("restarting", "restart"),
];

/// The subject words of a key (see the module documentation).
pub fn symptom_subjects(key: &FindingKey) -> BTreeSet<&str> {
    key.as_str()
        .split('-')
        .filter(|w| !w.is_empty() && !QUALIFIERS.contains(w))
        .map(|w| {
            SYNONYMS
                .iter()
                .find(|(from, _)| *from == w)
                .map_or(w, |(_, to)| *to)
        })
        .collect()
}

/// Whether a report under (`category`, `key`) and an existing finding under
/// (`other_category`, `other_key`) on the same resource are the same problem.
pub fn equivalent(
    category: Category,
    key: &FindingKey,
    other_category: Category,
    other_key: &FindingKey,
) -> bool {
    if category != other_category {
        return false;
    }
    let a = symptom_subjects(key);
    let b = symptom_subjects(other_key);
    a.is_subset(&b) || b.is_subset(&a)
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

    #[test]
    fn equivalence_table() {
        use Category::*;
        let cases = [
            (Performance, "cpu-high", Performance, "cpu-pressure", true),
            (
                Performance,
                "high-cpu",
                Performance,
                "sustained-cpu-usage",
                true,
            ),
            (Performance, "cpu-high", Performance, "memory-high", false),
            (Performance, "cpu-high", Capacity, "cpu-high", false),
            (
                Capacity,
                "disk-usage-high",
                Capacity,
                "storage-capacity-risk",
                true,
            ),
            (
                Capacity,
                "capacity-risk",
                Capacity,
                "inode-exhaustion",
                true,
            ),
            (Capacity, "disk-high", Capacity, "memory-high", false),
            (
                Reliability,
                "restart-loop",
                Reliability,
                "container-crash-loop",
                true,
            ),
            (
                Reliability,
                "pool-degraded",
                Reliability,
                "device-smart-errors",
                false,
            ),
            (Reliability, "restart-loop", Reliability, "unhealthy", false),
            (Backup, "backup-failed", Backup, "backup-stale", false),
        ];
        for (c1, k1, c2, k2, want) in cases {
            assert_eq!(
                equivalent(c1, &key(k1), c2, &key(k2)),
                want,
                "{c1}/{k1} vs {c2}/{k2}"
            );
        }
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
                equivalent(Category::General, &ka, Category::General, &kb),
                equivalent(Category::General, &kb, Category::General, &ka)
            );
            prop_assert!(!equivalent(Category::General, &ka, Category::Backup, &ka));
        }

        #[test]
        fn overlap_is_a_fraction_and_identical_titles_never_shift(a in "[A-Za-z ]{0,60}", b in "[A-Za-z ]{0,60}") {
            let o = title_overlap(&a, &b);
            prop_assert!((0.0..=1.0).contains(&o));
            prop_assert!(!is_identity_shift(&a, &a));
        }
    }
}
