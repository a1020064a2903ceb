//! The Proxmox APIs are typed loosely: a number may come as `4` or `"4"`, a flag as `1`, `"1"` or
//! `true`, a percentage as `"N/A"`, and any field may be missing or null. These readers take
//! every such form, and read what makes no sense as absent rather than failing the whole answer.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        _ => None,
    }
}

pub fn opt_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Ok(number(&Value::deserialize(d)?))
}

pub fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(match &value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    })
}

pub fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(match &value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        _ => None,
    })
}

pub fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(match &value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => n.as_f64().map(|f| f != 0.0),
        Value::String(s) => match s.trim() {
            "1" | "true" | "yes" | "on" => Some(true),
            "0" | "false" | "no" | "off" | "" => Some(false),
            _ => None,
        },
        _ => None,
    })
}

/// A flag that is false when absent.
pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(opt_bool(d)?.unwrap_or(false))
}

/// Text that may come as a number (a vmid written as a string, a name that is all digits).
pub fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(match value {
        Value::String(s) => Some(s),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    })
}

/// A list that may come as a list of strings, one string joined by `sep`, or not at all.
pub fn list(sep: char) -> impl Fn(&Value) -> Vec<String> {
    move |value| match value {
        Value::Array(items) => items
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.trim().to_owned()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|s| !s.is_empty())
            .collect(),
        Value::String(s) => s
            .split(sep)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Tags (`"a;b"`, `"a,b"` or `"a b"` in PVE's versions) as a list.
pub fn tags<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let value = Value::deserialize(d)?;
    let joined = match &value {
        Value::String(s) => Value::String(s.replace([',', ' '], ";")),
        other => other.clone(),
    };
    Ok(list(';')(&joined))
}

/// Comma-separated content types (`"images,rootdir"`).
pub fn comma_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(list(',')(&Value::deserialize(d)?))
}

/// Load averages, which PVE gives as strings.
pub fn floats<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(match value {
        Value::Array(items) => items.iter().filter_map(number).collect(),
        _ => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Row {
        #[serde(default, deserialize_with = "opt_u64")]
        n: Option<u64>,
        #[serde(default, deserialize_with = "opt_f64")]
        f: Option<f64>,
        #[serde(default, deserialize_with = "flag")]
        b: bool,
        #[serde(default, deserialize_with = "tags")]
        t: Vec<String>,
        #[serde(default, deserialize_with = "floats")]
        l: Vec<f64>,
    }

    fn row(json: &str) -> Row {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn every_form_the_api_writes_is_read() {
        let r = row(r#"{"n":"42","f":"0.5","b":"1","t":"a;b,c d","l":["0.10","1.5","x"]}"#);
        assert_eq!(r.n, Some(42));
        assert_eq!(r.f, Some(0.5));
        assert!(r.b);
        assert_eq!(r.t, ["a", "b", "c", "d"]);
        assert_eq!(r.l, [0.1, 1.5]);
        let r = row(r#"{"n":42.0,"f":1,"b":0,"t":["x"],"l":[0.2]}"#);
        assert_eq!(r.n, Some(42));
        assert_eq!(r.f, Some(1.0));
        assert!(!r.b);
        let r = row(r#"{"n":"N/A","f":null,"b":null,"t":null}"#);
        assert_eq!(r.n, None);
        assert_eq!(r.f, None);
        assert!(!r.b);
        assert!(r.t.is_empty());
        let r = row("{}");
        assert_eq!((r.n, r.f, r.b), (None, None, false));
    }
}
