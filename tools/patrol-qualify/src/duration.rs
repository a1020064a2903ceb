//! Manifest durations, read as upstream's loader reads them (Go's `time.ParseDuration`): one
//! or more `<number><unit>` terms, where a number is digits with an optional fraction and a
//! unit is `ns`, `us` (or `µs`), `ms`, `s`, `m` or `h`: `500ms`, `30s`, `1m30s`, `1.5h`. No
//! sign and no spaces; `0` alone is zero (validation refuses zero where a span must pass).

use std::time::Duration;

const NANOS_PER_SECOND: u128 = 1_000_000_000;
/// Fraction digits beyond this many cannot change a nanosecond count.
const MAX_FRACTION_DIGITS: usize = 18;

/// Parses a manifest duration; `None` for anything else (validation names the field).
pub fn parse(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    if text.is_empty() {
        return None;
    }
    let digits_end = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let mut total: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let (whole, after) = rest.split_at(digits_end(rest));
        let (fraction, after) = match after.strip_prefix('.') {
            Some(tail) => tail.split_at(digits_end(tail)),
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return None;
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SECOND,
            "m" => 60 * NANOS_PER_SECOND,
            "h" => 3600 * NANOS_PER_SECOND,
            _ => return None,
        };
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut term = whole.checked_mul(scale)?;
        let fraction = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
        if !fraction.is_empty() {
            let numerator: u128 = fraction.parse().ok()?;
            let denominator = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
            term = term.checked_add(numerator.checked_mul(scale)? / denominator)?;
        }
        total = total.checked_add(term)?;
        rest = after;
    }
    Some(Duration::from_nanos(u64::try_from(total).ok()?))
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
        for bad in [
            "", "5", "m", "5 m", "-1s", "+1s", "2d", "1s5", ".s", "1..5s", "s1", "1e3s",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn upstream_go_durations_parse_to_the_same_span() {
        assert_eq!(parse("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse(".5h"), Some(Duration::from_secs(1800)));
        assert_eq!(parse("2.25m"), Some(Duration::from_secs(135)));
        assert_eq!(parse("1s500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("250us"), Some(Duration::from_micros(250)));
        assert_eq!(parse("250µs"), Some(Duration::from_micros(250)));
        assert_eq!(parse("7ns"), Some(Duration::from_nanos(7)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
        assert_eq!(parse("0s"), Some(Duration::ZERO));
        // Beyond what a 64-bit nanosecond count holds, as in Go.
        assert_eq!(parse("9999999h"), None);
    }
}
