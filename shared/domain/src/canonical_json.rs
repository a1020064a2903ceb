//! RFC 8785 JSON Canonicalization Scheme (JCS).
//!
//! The one place that turns a JSON value into the bytes we hash (audit rows, plan hashes). Hashing
//! `serde_json::to_vec` of a struct would tie every stored hash to field order and float printing.

use serde::Serialize;
use serde_json::Value;

/// Largest integer magnitude that an IEEE 754 double represents exactly (2^53 - 1).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalJsonError {
    #[error("integer {0} is outside the I-JSON safe range (±2^53-1); encode it as a string")]
    UnsafeInteger(String),
    #[error("value is not representable as JSON: {0}")]
    NotJson(String),
}

/// Canonical bytes of any serializable value.
pub fn to_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalJsonError> {
    let value =
        serde_json::to_value(value).map_err(|e| CanonicalJsonError::NotJson(e.to_string()))?;
    canonicalize(&value)
}

/// Canonical bytes of a JSON value.
pub fn canonicalize(value: &Value) -> Result<Vec<u8>, CanonicalJsonError> {
    let mut out = String::new();
    write_value(value, &mut out)?;
    Ok(out.into_bytes())
}

fn write_value(value: &Value, out: &mut String) -> Result<(), CanonicalJsonError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Keys sort by their UTF-16 code units, not by UTF-8 bytes.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_number(n: &serde_json::Number, out: &mut String) -> Result<(), CanonicalJsonError> {
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(CanonicalJsonError::UnsafeInteger(u.to_string()));
        }
        out.push_str(&u.to_string());
        return Ok(());
    }
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(CanonicalJsonError::UnsafeInteger(i.to_string()));
        }
        out.push_str(&i.to_string());
        return Ok(());
    }
    let f = n
        .as_f64()
        .ok_or_else(|| CanonicalJsonError::NotJson(n.to_string()))?;
    if f == 0.0 {
        // ECMAScript prints negative zero as "0".
        out.push('0');
    } else {
        let mut buffer = ryu_js::Buffer::new();
        out.push_str(buffer.format_finite(f));
    }
    Ok(())
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{09}' => out.push_str("\\t"),
            '\u{0a}' => out.push_str("\\n"),
            '\u{0c}' => out.push_str("\\f"),
            '\u{0d}' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(v: Value) -> String {
        String::from_utf8(canonicalize(&v).unwrap()).unwrap()
    }

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        assert_eq!(
            canon(json!({"b": 1, "a": [true, null, "x"], "c": {"z": 0, "y": 1}})),
            r#"{"a":[true,null,"x"],"b":1,"c":{"y":1,"z":0}}"#
        );
    }

    #[test]
    fn sorts_keys_by_utf16_code_units() {
        // U+1F600 (surrogate pair D83D DE00) sorts before U+FB33 in UTF-16, after it in UTF-8.
        let v = json!({"\u{fb33}": 1, "\u{1f600}": 2, "a": 3});
        assert_eq!(canon(v), "{\"a\":3,\"\u{1f600}\":2,\"\u{fb33}\":1}");
    }

    #[test]
    fn numbers_print_as_ecmascript_does() {
        let cases: [(Value, &str); 8] = [
            (json!(0.0), "0"),
            (json!(-0.0), "0"),
            (json!(1.0), "1"),
            (json!(1e21), "1e+21"),
            (json!(1e-7), "1e-7"),
            (json!(123.456), "123.456"),
            (json!(-5), "-5"),
            (json!(9007199254740991_u64), "9007199254740991"),
        ];
        for (value, expected) in cases {
            assert_eq!(canon(value), expected);
        }
    }

    #[test]
    fn unsafe_integers_are_refused() {
        assert!(matches!(
            canonicalize(&json!(9007199254740992_u64)),
            Err(CanonicalJsonError::UnsafeInteger(_))
        ));
        assert!(matches!(
            canonicalize(&json!(-9007199254740992_i64)),
            Err(CanonicalJsonError::UnsafeInteger(_))
        ));
    }

    #[test]
    fn escapes_only_what_the_rfc_requires() {
        let v = json!("q\"b\\\u{08}\u{09}\u{0a}\u{0c}\u{0d}\u{01}\u{1f}\u{7f}é\u{2028}/");
        assert_eq!(
            canon(v),
            "\"q\\\"b\\\\\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}é\u{2028}/\""
        );
    }

    #[test]
    #[allow(clippy::excessive_precision)] // the literal is the RFC's own
    fn rfc_8785_appendix_example() {
        // The structure of RFC 8785 section 3.2.2, with values chosen to exercise each rule.
        let v = json!({
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u{20ac}$\u{000F}\u{000a}A'\u{0042}\u{0022}\u{005c}\\\"/",
            "literals": [null, true, false]
        });
        assert_eq!(
            canon(v),
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
    }
}
