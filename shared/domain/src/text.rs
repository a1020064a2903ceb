//! Character classes that request rules are written in, each with its regular-expression form
//! for API documents, so a rule and its documented pattern come from one table.
//!
//! The expressions use `\uXXXX` escapes only, which ECMA-262 (JSON Schema) and Python read
//! alike.

/// Unicode white space: exactly the characters `char::is_whitespace` (and so `str::trim`)
/// treats as white space, as inclusive ranges.
pub const WHITE_SPACE: &[(char, char)] = &[
    ('\t', '\r'),
    (' ', ' '),
    ('\u{85}', '\u{85}'),
    ('\u{a0}', '\u{a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202f}', '\u{202f}'),
    ('\u{205f}', '\u{205f}'),
    ('\u{3000}', '\u{3000}'),
];

/// Control characters: exactly `char::is_control` (general category Cc).
pub const CONTROL: &[(char, char)] = &[('\u{0}', '\u{1f}'), ('\u{7f}', '\u{9f}')];

/// Control characters other than tab and line feed.
pub const CONTROL_BUT_TAB_AND_NEWLINE: &[(char, char)] = &[
    ('\u{0}', '\u{8}'),
    ('\u{b}', '\u{1f}'),
    ('\u{7f}', '\u{9f}'),
];

/// Characters that carry no content: white space and control characters.
pub const BLANK: &[(char, char)] = &[
    ('\u{0}', ' '),
    ('\u{7f}', '\u{a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202f}', '\u{202f}'),
    ('\u{205f}', '\u{205f}'),
    ('\u{3000}', '\u{3000}'),
];

pub fn contains(ranges: &[(char, char)], c: char) -> bool {
    ranges.iter().any(|(from, to)| (*from..=*to).contains(&c))
}

/// The inside of a regular-expression class of `ranges` (without the brackets).
pub fn class(ranges: &[(char, char)]) -> String {
    let escape = |c: char| format!("\\u{:04x}", u32::from(c));
    ranges
        .iter()
        .map(|(from, to)| {
            if from == to {
                escape(*from)
            } else {
                format!("{}-{}", escape(*from), escape(*to))
            }
        })
        .collect()
}

/// Text whose trimmed form (`str::trim`) has no character of `forbidden`: any white space
/// around a middle free of `forbidden`.
pub fn trimmed_free_of(forbidden: &[(char, char)]) -> String {
    let ws = class(WHITE_SPACE);
    format!("^[{ws}]*[^{}]*[{ws}]*$", class(forbidden))
}

/// Text whose trimmed form is not empty and has no control character.
pub fn trimmed_printable_with_content() -> String {
    let ws = class(WHITE_SPACE);
    let blank = class(BLANK);
    format!(
        "^[{ws}]*[^{blank}]([^{}]*[^{blank}])?[{ws}]*$",
        class(CONTROL)
    )
}

/// Text with one character that is neither white space nor a control character.
pub fn with_content() -> String {
    format!("[^{}]", class(BLANK))
}

/// Text that is not only white space (what `!s.trim().is_empty()` accepts).
pub fn not_only_white_space() -> String {
    format!("[^{}]", class(WHITE_SPACE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_the_standard_library_classes() {
        for c in (0..=0x10_ffff).filter_map(char::from_u32) {
            let at = format!("U+{:04X}", u32::from(c));
            assert_eq!(contains(WHITE_SPACE, c), c.is_whitespace(), "{at}");
            assert_eq!(contains(CONTROL, c), c.is_control(), "{at}");
            assert_eq!(
                contains(BLANK, c),
                c.is_whitespace() || c.is_control(),
                "{at}"
            );
            assert_eq!(
                contains(CONTROL_BUT_TAB_AND_NEWLINE, c),
                c.is_control() && c != '\t' && c != '\n',
                "{at}"
            );
        }
    }

    #[test]
    fn classes_are_spelled_with_escapes() {
        assert_eq!(class(CONTROL), "\\u0000-\\u001f\\u007f-\\u009f");
        assert_eq!(with_content(), format!("[^{}]", class(BLANK)));
    }
}
