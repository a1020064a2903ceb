//! Plain-text output shared by the API commands: times and aligned tables.

use chrono::{DateTime, Utc};

/// An RFC 3339 time from the API, in UTC.
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// `2026-11-29 18:02:03` (UTC); `absent` for none; unparsable text as it came.
pub fn display_time(text: Option<&str>, absent: &str) -> String {
    match text {
        None => absent.to_owned(),
        Some(text) => parse_time(text)
            .map(|t| show_time(Some(t), absent))
            .unwrap_or_else(|| text.to_owned()),
    }
}

/// `2026-11-29 18:02:03` (UTC); `absent` for none.
pub fn show_time(time: Option<DateTime<Utc>>, absent: &str) -> String {
    time.map_or_else(
        || absent.to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

/// A value's name on the wire (a unit enum's serde name), as the API's JSON shows it.
pub fn wire_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(_) => "-".to_owned(),
    }
}

/// Rows (the first is the header) with columns padded to their widest cell, two spaces apart,
/// one line each, without trailing blanks.
pub fn render_table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|col| {
            rows.iter()
                .filter_map(|row| row.get(col))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_on_the_widest_cell() {
        let rows = vec![
            vec!["ID".to_owned(), "NAME".to_owned()],
            vec!["1".to_owned(), "web".to_owned()],
            vec!["1234".to_owned(), "x".to_owned()],
        ];
        assert_eq!(render_table(&rows), "ID    NAME\n1     web\n1234  x\n");
    }

    #[test]
    fn times_are_utc_seconds_or_left_as_they_came() {
        assert_eq!(
            display_time(Some("2026-11-29T19:02:03+01:00"), "-"),
            "2026-11-29 18:02:03"
        );
        assert_eq!(display_time(None, "never"), "never");
        assert_eq!(display_time(Some("soon"), "-"), "soon");
    }
}
