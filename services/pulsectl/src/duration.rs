//! Human durations on the command line: `30d`, `12h`, `90s`, `1d12h`.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration")]
    Empty,
    #[error("'{0}': expected a number followed by a unit (s, m, h, d, w), e.g. 30d or 12h")]
    Malformed(String),
    #[error("'{input}': unknown unit '{unit}' (use s, m, h, d or w)")]
    UnknownUnit { input: String, unit: String },
    #[error("'{0}': duration must be greater than zero")]
    Zero(String),
    #[error("'{0}': duration is too large")]
    TooLarge(String),
}

/// Parses one or more `<number><unit>` groups; units are s, m, h, d (24 h) and w (7 d).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let text = input.trim();
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let malformed = || DurationError::Malformed(input.to_owned());
    let too_large = || DurationError::TooLarge(input.to_owned());

    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(malformed());
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphabetic())
            .count();
        if unit_len == 0 {
            return Err(malformed());
        }
        let (unit, after) = after.split_at(unit_len);
        let seconds_per_unit: u64 = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            "w" => 604_800,
            other => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_owned(),
                    unit: other.to_owned(),
                });
            }
        };
        let number: u64 = number.parse().map_err(|_| too_large())?;
        let seconds = number.checked_mul(seconds_per_unit).ok_or_else(too_large)?;
        total = total.checked_add(seconds).ok_or_else(too_large)?;
        rest = after;
    }
    if total == 0 {
        return Err(DurationError::Zero(input.to_owned()));
    }
    // chrono's TimeDelta tops out near 292 million years; stay well below it.
    if total > 100 * 365 * 86_400 {
        return Err(too_large());
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3_600)));
    }

    #[test]
    fn combined_units_add_up() {
        assert_eq!(
            parse_duration("1d12h"),
            Ok(Duration::from_secs(86_400 + 12 * 3_600))
        );
        assert_eq!(parse_duration("1h30m15s"), Ok(Duration::from_secs(5_415)));
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("30"),
            Err(DurationError::Malformed(_))
        ));
        assert!(matches!(
            parse_duration("d"),
            Err(DurationError::Malformed(_))
        ));
        assert!(matches!(
            parse_duration("-3d"),
            Err(DurationError::Malformed(_))
        ));
        assert!(matches!(
            parse_duration("1.5h"),
            Err(DurationError::Malformed(_))
        ));
        assert_eq!(
            parse_duration("3y"),
            Err(DurationError::UnknownUnit {
                input: "3y".into(),
                unit: "y".into()
            })
        );
        assert!(matches!(
            parse_duration("10 days"),
            Err(DurationError::Malformed(_))
        ));
        assert!(matches!(parse_duration("0h"), Err(DurationError::Zero(_))));
        assert!(matches!(
            parse_duration("99999999999999999999d"),
            Err(DurationError::TooLarge(_))
        ));
        assert!(matches!(
            parse_duration("200000w"),
            Err(DurationError::TooLarge(_))
        ));
    }
}
