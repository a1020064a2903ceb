//! Manifest durations: `500ms`, `30s`, `5m`, `1h`.

use std::time::Duration;

/// Parses a manifest duration; `None` for anything else (validation names the field).
pub fn parse(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_durations_parse_and_nonsense_does_not() {
        assert_eq!(parse("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Some(Duration::from_secs(3600)));
        for bad in ["", "5", "m", "5 m", "-1s", "1.5s", "2d"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
