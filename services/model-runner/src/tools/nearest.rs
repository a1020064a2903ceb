//! The in-scope resource ids nearest to an id that names none. A weak model misspells or makes
//! up resource ids (one was seen asking 41 times for findings on an id that does not exist); an
//! error that names the closest real ids lets it correct itself in its next call instead of
//! guessing again.
//!
//! Nearness is the edit distance between the lowercased ids (a typo, a missing host segment or
//! a made-up suffix all stay close), ties broken by the longer shared prefix, then by id. Only
//! the first [`COMPARED_CHARS`] characters of each id take part, so the cost per candidate is
//! bounded whatever the model wrote.

use pulse_domain::resource::Resource;

/// How many ids an error names.
pub const NEAREST_IDS: usize = 3;
/// Characters of each id compared.
const COMPARED_CHARS: usize = 96;

/// Up to `n` ids of `scope` nearest to `wanted`, nearest first.
pub fn nearest_ids<'a>(scope: &'a [Resource], wanted: &str, n: usize) -> Vec<&'a str> {
    let wanted = comparable(wanted);
    let mut ranked: Vec<(usize, std::cmp::Reverse<usize>, &str)> = scope
        .iter()
        .map(|r| {
            let id = r.id.as_str();
            let candidate = comparable(id);
            (
                edit_distance(&wanted, &candidate),
                std::cmp::Reverse(shared_prefix(&wanted, &candidate)),
                id,
            )
        })
        .collect();
    ranked.sort_unstable();
    ranked.dedup_by(|a, b| a.2 == b.2);
    ranked.into_iter().take(n).map(|(_, _, id)| id).collect()
}

fn comparable(id: &str) -> Vec<char> {
    id.chars()
        .take(COMPARED_CHARS)
        .flat_map(char::to_lowercase)
        .collect()
}

fn shared_prefix(a: &[char], b: &[char]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Levenshtein distance (insert, delete, substitute each cost 1), two rows.
fn edit_distance(a: &[char], b: &[char]) -> usize {
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, x) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let substitute = previous[j] + usize::from(x != y);
            current[j + 1] = substitute.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use pulse_domain::resource::Health;

    use super::super::test_support::resource;
    use super::*;

    fn chars(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance(&chars("kitten"), &chars("sitting")), 3);
        assert_eq!(edit_distance(&chars(""), &chars("abc")), 3);
        assert_eq!(edit_distance(&chars("abc"), &chars("abc")), 0);
        assert_eq!(edit_distance(&chars("abc"), &chars("")), 3);
    }

    #[test]
    fn nearest_ids_rank_typos_and_made_up_suffixes_first() {
        let scope = vec![
            resource("h1", "nginx", Health::Healthy),
            resource("h1", "postgres", Health::Healthy),
            resource("h2", "nginx", Health::Healthy),
            resource("h1", "redis", Health::Healthy),
            resource("h1", "api", Health::Healthy),
            resource("h2", "redix", Health::Healthy),
        ];
        assert_eq!(
            nearest_ids(&scope, "service:h1:nginx-proxy", 3),
            ["service:h1:nginx", "service:h2:nginx", "service:h1:api"]
        );
        assert_eq!(
            nearest_ids(&scope, "SERVICE:h1:postgress", 1),
            ["service:h1:postgres"]
        );
        // Equal distance: the longer shared prefix wins over the id's order.
        assert_eq!(
            nearest_ids(&scope, "service:h2:redis", 2),
            ["service:h2:redix", "service:h1:redis"]
        );
        assert_eq!(nearest_ids(&scope, "x", 10).len(), scope.len());
        assert!(nearest_ids(&[], "service:h1:nginx", 3).is_empty());
    }
}
