//! What a parameter or body field accepts, stated once: each type here is both the check a
//! handler runs and the JSON Schema the OpenAPI document shows for it, so the document cannot
//! promise a value the handler refuses (or refuse one it takes).
//!
//! A query field holds its typed value and reads it with the constraint's `parse`
//! ([`crate::query`]); a body field that keeps its raw value names the constraint in
//! `#[schemars(with = "...")]`, and the handler checks the raw value with the same type's
//! `check`.

use std::borrow::Cow;

use pulse_domain::text::{self, BLANK, CONTROL, WHITE_SPACE};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Unexpected};
use serde::{Deserialize, Serialize};

/// Why a parameter's value is refused, as serde's `invalid_value`: `message` is for people and
/// does not name the parameter (whoever reads the query does).
pub fn refuse<E: de::Error>(message: &str) -> E {
    E::invalid_value(Unexpected::Other(message), &Accepted)
}

/// What a refused value was expected to be, for a reader that shows it.
struct Accepted;

impl de::Expected for Accepted {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a value this parameter accepts")
    }
}

/// Whether `c` carries no content (white space or a control character).
pub fn is_blank(c: char) -> bool {
    text::contains(BLANK, c)
}

fn in_ranges(c: char, ranges: &[(char, char)]) -> bool {
    text::contains(ranges, c)
}

/// A JSON number with no fractional part as an `i64` (`3` and `3.0` alike, as JSON Schema's
/// `integer` reads them), for `#[serde(deserialize_with)]`.
pub fn whole_number<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    whole(&number)
        .ok_or_else(|| serde::de::Error::custom(format!("expected a whole number, not {number}")))
}

/// [`whole_number`] for an optional field.
pub fn optional_whole_number<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    let number = Option::<serde_json::Number>::deserialize(deserializer)?;
    number
        .map(|n| {
            whole(&n).ok_or_else(|| {
                serde::de::Error::custom(format!("expected a whole number, not {n}"))
            })
        })
        .transpose()
}

fn whole(number: &serde_json::Number) -> Option<i64> {
    number.as_i64().or_else(|| {
        let f = number.as_f64()?;
        // Only floats that stand for one integer exactly (below 2^53 in size).
        const EXACT: f64 = 9_007_199_254_740_992.0;
        (f.fract() == 0.0 && f.abs() < EXACT).then_some(f as i64)
    })
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

    /// `"must be an integer from MIN to MAX"`.
    pub fn requirement() -> String {
        format!("must be an integer from {MIN} to {MAX}")
    }

    /// `"<name>: must be an integer from MIN to MAX"`, for the refusal.
    pub fn refusal(name: &str) -> String {
        format!("{name}: {}", Self::requirement())
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
        text::with_content()
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

/// Text that is not only white space (what `!s.trim().is_empty()` accepts), at most `MAX`
/// characters.
pub struct NotBlank<const MAX: usize>;

impl<const MAX: usize> NotBlank<MAX> {
    pub fn check(text: &str) -> Result<(), TextError> {
        if text.chars().all(|c| in_ranges(c, WHITE_SPACE)) {
            return Err(TextError::Blank);
        }
        if text.chars().count() > MAX {
            return Err(TextError::TooLong { max: MAX });
        }
        Ok(())
    }
}

impl<const MAX: usize> JsonSchema for NotBlank<MAX> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("NotBlank{MAX}").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "minLength": 1,
            "maxLength": MAX,
            "pattern": text::not_only_white_space(),
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
        let printable = format!("[^{}]*", text::class(CONTROL));
        format!("^{printable}[^{}]{printable}$", text::class(BLANK))
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
        format!("^[^{}]*$", text::class(CONTROL))
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

/// Free text of at most `MAX` characters, possibly empty, that may span lines: no control
/// character other than tab and line feed.
pub struct Note<const MAX: usize>;

impl<const MAX: usize> Note<MAX> {
    pub fn check(text: &str) -> Result<(), TextError> {
        if text.chars().count() > MAX {
            return Err(TextError::TooLong { max: MAX });
        }
        if text
            .chars()
            .any(|c| in_ranges(c, text::CONTROL_BUT_TAB_AND_NEWLINE))
        {
            return Err(TextError::Control);
        }
        Ok(())
    }
}

impl<const MAX: usize> JsonSchema for Note<MAX> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        format!("Note{MAX}").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "maxLength": MAX,
            "pattern": format!("^[^{}]*$", text::class(text::CONTROL_BUT_TAB_AND_NEWLINE)),
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ResourceRef(String);

/// What a resource reference is written as.
type ReferenceText = Printable<1, MAX_REFERENCE_CHARS>;

impl ResourceRef {
    /// Whether `text` can be a reference.
    pub fn check(text: &str) -> Result<(), TextError> {
        ReferenceText::check(text)
    }

    /// `text` as a reference, when it can be one.
    pub fn parse(text: String) -> Result<Self, TextError> {
        Self::check(&text).map(|()| ResourceRef(text))
    }

    /// What a reference must be, for a refusal.
    pub fn requirement() -> String {
        format!("must be 1 to {MAX_REFERENCE_CHARS} characters, none of them control characters")
    }

    pub fn pattern() -> String {
        ReferenceText::pattern()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ResourceRef {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(text).map_err(|_| refuse(&Self::requirement()))
    }
}

impl JsonSchema for ResourceRef {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        ReferenceText::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        ReferenceText::json_schema(generator)
    }
}

/// Longest resource reference accepted.
pub const MAX_REFERENCE_CHARS: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_numbers_are_read_as_json_schema_reads_integer() {
        #[derive(Deserialize)]
        struct Body {
            #[serde(deserialize_with = "whole_number")]
            n: i64,
        }
        let read = |text: &str| serde_json::from_str::<Body>(text).map(|b| b.n).ok();
        assert_eq!(read(r#"{"n": 3}"#), Some(3));
        assert_eq!(read(r#"{"n": 335.0}"#), Some(335));
        assert_eq!(read(r#"{"n": -4.0e2}"#), Some(-400));
        assert_eq!(read(r#"{"n": 3.5}"#), None);
        assert_eq!(read(r#"{"n": 1e300}"#), None);
        assert_eq!(read(r#"{"n": -9223372036854775809}"#), None);
        assert_eq!(read(r#"{"n": "3"}"#), None);
    }

    #[test]
    fn not_blank_is_trim_is_not_empty() {
        assert_eq!(NotBlank::<3>::check(" \t"), Err(TextError::Blank));
        assert_eq!(NotBlank::<3>::check("\u{1}"), Ok(()));
        assert_eq!(
            NotBlank::<3>::check("four"),
            Err(TextError::TooLong { max: 3 })
        );
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
    fn a_note_spans_lines_but_holds_no_other_control_character() {
        type Short = Note<4>;
        assert_eq!(Short::check(""), Ok(()));
        assert_eq!(Short::check("a\tb\n"), Ok(()));
        assert_eq!(Short::check("a\u{12}"), Err(TextError::Control));
        assert_eq!(Short::check("a\r"), Err(TextError::Control));
        assert_eq!(Short::check("\u{85}"), Err(TextError::Control));
        assert_eq!(Short::check("fives"), Err(TextError::TooLong { max: 4 }));
        let schema = serde_json::to_value(schemars::schema_for!(Short)).expect("schema");
        assert_eq!(
            schema["pattern"],
            "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f]*$"
        );
        assert_eq!(schema["maxLength"], 4);
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
