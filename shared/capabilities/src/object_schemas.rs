//! Boolean subschemas and their object forms.
//!
//! JSON Schema allows `true` and `false` wherever a schema goes. The MCP TypeScript SDK (the
//! client most desktop and IDE agents are built on) validates every tool's
//! `inputSchema.properties` values as objects and refuses a whole `tools/list` answer over one
//! `true`, so every schema Pulse offers a client uses the object forms instead: `{}` for "any
//! value", `{"not": {}}` for "no value". Both mean exactly what the booleans mean.
//!
//! One boolean stays: `false` as `additionalProperties` or `unevaluatedProperties`, the
//! closed-object marker. Every client reads it as a keyword, and model providers' strict modes
//! ask for that literal.
//!
//! [`to_object_subschemas`] rewrites a schema in place; [`boolean_subschemas`] is the check (the
//! positions a rewrite would change). Only schema positions are visited: `enum`, `const`,
//! `default` and `examples` hold values, and a `true` there is data.

use serde_json::{Map, Value, json};

/// Keywords whose value is one schema.
const ONE_SCHEMA: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value maps names to schemas.
const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "dependentSchemas",
    "$defs",
    "definitions",
];
/// Keywords whose value is a list of schemas (`items` too, in its pre-2020 tuple form).
const SCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords that may keep `false`: the closed-object marker.
const CLOSING: &[&str] = &["additionalProperties", "unevaluatedProperties"];

/// Rewrites every boolean subschema of `schema` (the root included) to its object form, except a
/// closing `false`; answers the JSON pointers it rewrote.
pub fn to_object_subschemas(schema: &mut Value) -> Vec<String> {
    let mut rewritten = Vec::new();
    rewrite(schema, String::new(), &mut rewritten);
    rewritten
}

/// The JSON pointers of the boolean subschemas of `schema` (a closing `false` is not one).
pub fn boolean_subschemas(schema: &Value) -> Vec<String> {
    to_object_subschemas(&mut schema.clone())
}

fn object_form(value: bool) -> Value {
    if value { json!({}) } else { json!({"not": {}}) }
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn rewrite(schema: &mut Value, pointer: String, rewritten: &mut Vec<String>) {
    match schema {
        Value::Bool(value) => {
            *schema = object_form(*value);
            rewritten.push(pointer);
        }
        Value::Object(object) => rewrite_keywords(object, &pointer, rewritten),
        _ => {}
    }
}

fn rewrite_keywords(object: &mut Map<String, Value>, pointer: &str, rewritten: &mut Vec<String>) {
    for (keyword, value) in object.iter_mut() {
        let here = format!("{pointer}/{}", escape(keyword));
        let keyword = keyword.as_str();
        match value {
            Value::Bool(false) if CLOSING.contains(&keyword) => {}
            Value::Array(list) if SCHEMA_LISTS.contains(&keyword) => {
                for (index, item) in list.iter_mut().enumerate() {
                    rewrite(item, format!("{here}/{index}"), rewritten);
                }
            }
            Value::Object(map) if SCHEMA_MAPS.contains(&keyword) => {
                for (name, item) in map.iter_mut() {
                    rewrite(item, format!("{here}/{}", escape(name)), rewritten);
                }
            }
            _ if ONE_SCHEMA.contains(&keyword) => rewrite(value, here, rewritten),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_in_schema_positions_take_their_object_forms() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "params": true,
                "never": false,
                "list": {"type": "array", "items": true},
                "pair": {"prefixItems": [true, {"type": "string"}]},
                "either": {"anyOf": [{"type": "null"}, true]},
                "a/b": true,
            },
            "$defs": {"Any": true, "Nested": {"not": false}},
            "additionalProperties": true,
        });
        let mut rewritten = to_object_subschemas(&mut schema);
        rewritten.sort();
        assert_eq!(
            rewritten,
            [
                "/$defs/Any",
                "/$defs/Nested/not",
                "/additionalProperties",
                "/properties/a~1b",
                "/properties/either/anyOf/1",
                "/properties/list/items",
                "/properties/never",
                "/properties/pair/prefixItems/0",
                "/properties/params",
            ]
        );
        assert_eq!(schema["properties"]["params"], json!({}));
        assert_eq!(schema["properties"]["never"], json!({"not": {}}));
        assert_eq!(schema["$defs"]["Nested"]["not"], json!({"not": {}}));
        assert_eq!(schema["additionalProperties"], json!({}));
        assert!(boolean_subschemas(&schema).is_empty());
    }

    #[test]
    fn the_closing_marker_and_values_stay() {
        let schema = json!({
            "type": "object",
            "properties": {
                "flag": {"type": "boolean", "default": true, "const": true, "enum": [true, false]},
                "inner": {"type": "object", "unevaluatedProperties": false},
            },
            "required": ["flag"],
            "additionalProperties": false,
            "examples": [true],
        });
        assert!(boolean_subschemas(&schema).is_empty());
        let mut same = schema.clone();
        assert!(to_object_subschemas(&mut same).is_empty());
        assert_eq!(same, schema);
    }

    #[test]
    fn a_boolean_root_is_rewritten() {
        let mut schema = json!(true);
        assert_eq!(to_object_subschemas(&mut schema), [""]);
        assert_eq!(schema, json!({}));
    }
}
