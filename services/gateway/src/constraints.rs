//! What a parameter or body field accepts, stated once: each type here is both the check a
//! handler runs and the JSON Schema the OpenAPI document shows for it, so the document cannot
//! promise a value the handler refuses (or refuse one it takes).
//!
//! Query and body types keep the raw value (`Option<String>` for a query parameter) and name
//! the constraint in `#[schemars(with = "...")]`; the handler checks the raw value with the same
//! type's `parse`/`check`.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// Characters that carry no content: Unicode white space (`char::is_whitespace`) and control
/// characters (`char::is_control`), as inclusive ranges. The `pattern` of [`Text`] is built from
/// this table, so the check and the document use one definition.
const BLANK: &[(char, char)] = &[
    ('\u{0}', ' '),
    ('\u{7f}', '\u{a0}'),
    ('\u{1680}', '\u{1680}'),
    ('\u{2000}', '\u{200a}'),
    ('\u{2028}', '\u{2029}'),
    ('\u{202f}', '\u{202f}'),
    ('\u{205f}', '\u{205f}'),
    ('\u{3000}', '\u{3000}'),
];

/// Control characters (`char::is_control`, general category Cc) as inclusive ranges.
const CONTROL: &[(char, char)] = &[('\u{0}', '\u{1f}'), ('\u{7f}', '\u{9f}')];

fn in_ranges(c: char, ranges: &[(char, char)]) -> bool {
    ranges.iter().any(|(from, to)| (*from..=*to).contains(&c))
}

/// A regular-expression class of `ranges` (`\uXXXX` escapes, read alike by ECMA-262 and Python).
fn class(ranges: &[(char, char)]) -> String {
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

/// Whether `c` carries no content (white space or a control character).
pub fn is_blank(c: char) -> bool {
    in_ranges(c, BLANK)
}

/// A whole number from `MIN` to `MAX` (a query parameter's raw text, or a body field).
pub struct IntegerIn<const MIN: i64, const MAX: i64>;

impl<const MIN: i64, const MAX: i64> IntegerIn<MIN, MAX> {
    /// The number `raw` spells, when it is in range.
    pub fn parse(raw: &str) -> Option<i64> {
        raw.parse::<i64>().ok().filter(|n| (MIN..=MAX).contains(n))
    }

    pub fn contains(n: i64) -> bool {
        (MIN..=MAX).contains(&n)
    }

    /// `"<name>: must be an integer from MIN to MAX"`, for the refusal.
    pub fn refusal(name: &str) -> String {
        format!("{name}: must be an integer from {MIN} to {MAX}")
    }
}

impl<const MIN: i64, const MAX: i64> JsonSchema for IntegerIn<MIN, MAX> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("IntegerIn{MIN}To{MAX}").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer", "minimum": MIN, "maximum": MAX})
    }
}

/// Why a text was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextError {
    /// Nothing but white space and control characters (or nothing at all).
    Blank,
    TooLong {
        max: usize,
    },
    /// A control character, where none is allowed.
    Control,
}

impl TextError {
    /// The refusal of field `name`.
    pub fn message(self, name: &str) -> String {
        match self {
            TextError::Blank => format!("{name} is empty"),
            TextError::TooLong { max } => format!("{name} is longer than {max} characters"),
            TextError::Control => format!("{name} must not contain control characters"),
        }
    }
}

/// Text with content (at least one character that is neither white space nor a control
/// character) and at most `MAX` characters.
pub struct Text<const MAX: usize>;

impl<const MAX: usize> Text<MAX> {
    pub fn check(text: &str) -> Result<(), TextError> {
        if text.chars().all(is_blank) {
            return Err(TextError::Blank);
        }
        if text.chars().count() > MAX {
            return Err(TextError::TooLong { max: MAX });
        }
        Ok(())
    }

    /// The pattern of text with content: one character outside [`BLANK`].
    pub fn pattern() -> String {
        format!("[^{}]", class(BLANK))
    }
}

impl<const MAX: usize> JsonSchema for Text<MAX> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("Text{MAX}").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX,
            "pattern": Self::pattern(),
        })
    }
}

/// A name: text with content, no control characters, at most `MAX` characters.
pub struct Name<const MAX: usize>;

impl<const MAX: usize> Name<MAX> {
    pub fn check(text: &str) -> Result<(), TextError> {
        if text.chars().any(|c| in_ranges(c, CONTROL)) {
            return Err(TextError::Control);
        }
        Text::<MAX>::check(text)
    }

    pub fn pattern() -> String {
        let printable = format!("[^{}]*", class(CONTROL));
        format!("^{printable}[^{}]{printable}$", class(BLANK))
    }
}

impl<const MAX: usize> JsonSchema for Name<MAX> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("Name{MAX}").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX,
            "pattern": Self::pattern(),
        })
    }
}

/// From `MIN` to `MAX` characters, none of them a control character.
pub struct Printable<const MIN: usize, const MAX: usize>;

impl<const MIN: usize, const MAX: usize> Printable<MIN, MAX> {
    pub fn check(text: &str) -> Result<(), TextError> {
        let count = text.chars().count();
        if count < MIN {
            return Err(TextError::Blank);
        }
        if count > MAX {
            return Err(TextError::TooLong { max: MAX });
        }
        if text.chars().any(|c| in_ranges(c, CONTROL)) {
            return Err(TextError::Control);
        }
        Ok(())
    }

    /// The pattern of text without control characters.
    pub fn pattern() -> String {
        format!("^[^{}]*$", class(CONTROL))
    }
}

impl<const MIN: usize, const MAX: usize> JsonSchema for Printable<MIN, MAX> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("Printable{MIN}To{MAX}").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "minLength": MIN,
            "maxLength": MAX,
            "pattern": Self::pattern(),
        })
    }
}

/// A value of `T`, or the empty string (which a filter reads as "any").
pub struct OrEmpty<T>(std::marker::PhantomData<T>);

impl<T: JsonSchema> JsonSchema for OrEmpty<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("{}OrEmpty", T::schema_name()).into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({"anyOf": [generator.subschema_for::<T>(), {"const": ""}]})
    }
}

/// A value of `T`, or `*` for every value.
pub struct OrEvery<T>(std::marker::PhantomData<T>);

impl<T: JsonSchema> JsonSchema for OrEvery<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("{}OrEvery", T::schema_name()).into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({"anyOf": [generator.subschema_for::<T>(), {"const": "*"}]})
    }
}

/// A resource reference: a canonical id, source id, name or alias (1 to 1,024 characters, no
/// control characters), in a path or a query.
pub type ResourceRef = Printable<1, MAX_REFERENCE_CHARS>;

/// Longest resource reference accepted.
pub const MAX_REFERENCE_CHARS: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blank_table_is_white_space_and_control_characters() {
        for c in (0..=0x10_ffff).filter_map(char::from_u32) {
            assert_eq!(
                is_blank(c),
                c.is_whitespace() || c.is_control(),
                "U+{:04X}",
                u32::from(c)
            );
            assert_eq!(
                in_ranges(c, CONTROL),
                c.is_control(),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn text_and_printable_checks() {
        assert_eq!(Text::<5>::check(" \t\u{85}\u{3000}"), Err(TextError::Blank));
        assert_eq!(Text::<5>::check(""), Err(TextError::Blank));
        assert_eq!(Text::<5>::check(" ok "), Ok(()));
        assert_eq!(Text::<3>::check("four"), Err(TextError::TooLong { max: 3 }));
        assert_eq!(ResourceRef::check(""), Err(TextError::Blank));
        assert_eq!(ResourceRef::check("a\u{1}"), Err(TextError::Control));
        assert_eq!(ResourceRef::check(&"é".repeat(1024)), Ok(()));
        assert_eq!(
            ResourceRef::check(&"é".repeat(1025)),
            Err(TextError::TooLong { max: 1024 })
        );
        assert_eq!(
            Text::<1>::pattern(),
            "[^\\u0000-\\u0020\\u007f-\\u00a0\\u1680\\u2000-\\u200a\\u2028-\\u2029\\u202f\\u205f\\u3000]"
        );
        assert_eq!(
            ResourceRef::pattern(),
            "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"
        );
    }

    #[test]
    fn integer_ranges() {
        type Limit = IntegerIn<1, 500>;
        assert_eq!(Limit::parse("1"), Some(1));
        assert_eq!(Limit::parse("500"), Some(500));
        assert_eq!(Limit::parse("0"), None);
        assert_eq!(Limit::parse("501"), None);
        assert_eq!(Limit::parse(""), None);
        assert_eq!(Limit::parse("1.0"), None);
        let schema = serde_json::to_value(schemars::schema_for!(Limit)).expect("schema");
        assert_eq!(schema["minimum"], 1);
        assert_eq!(schema["maximum"], 500);
    }
}
