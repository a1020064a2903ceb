//! Every piece of text a JSON value carries, for tests that check what (never) left the process:
//! a secret escaped once or twice inside a string that is itself JSON is still found.

use serde_json::Value;

/// Every string and object key inside `value`, with strings that are JSON documents decoded as
/// well.
pub fn decoded_strings(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect(value, &mut out);
    out
}

fn collect(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            out.push(s.clone());
            if let Ok(inner) = serde_json::from_str::<Value>(s)
                && (inner.is_object() || inner.is_array())
            {
                collect(&inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                collect(v, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_nested_as_json_documents_are_decoded() {
        let inner = serde_json::json!({"DB_PASSWORD": "s3cret"}).to_string();
        let outer = serde_json::json!({"text": inner}).to_string();
        let found = decoded_strings(&serde_json::json!({"content": outer}));
        assert!(found.iter().any(|s| s == "s3cret"), "{found:?}");
        assert!(found.iter().any(|s| s == "DB_PASSWORD"), "{found:?}");
    }
}
