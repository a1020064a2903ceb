//! Tool calls a model wrote as text instead of as native tool calls.
//!
//! Small models served without a working tool-call template answer with the call written out:
//! a fenced or bare JSON object (or list of them) with `name` and `arguments`/`parameters`,
//! Hermes-style `<tool_call>{...}</tool_call>`, `<function name="..." arguments='...'/>` or
//! `<function=name>{...}</function>`. [`find`] lists every such site in a text; [`recover`]
//! keeps the calls its caller accepts and returns the text without the sites that held them.
//!
//! Invariants:
//! - Pure: no IO, no clock; the caller decides what is a call (the run's tool policy, the same
//!   check native calls pass), so a name that is not offered or arguments that do not validate
//!   stay text.
//! - Arguments are always a JSON object; a JSON string holding an object is decoded.
//! - A JSON value that parses but is not a call (a report, a list of resources) is skipped
//!   whole: nothing nested inside it becomes a call.
//! - Bounded: texts longer than [`MAX_SCANNED_BYTES`] are not searched.

use std::ops::Range;

use serde_json::{Map, Value};

/// Longest text searched for calls; a longer answer is left as it is.
pub const MAX_SCANNED_BYTES: usize = 64 * 1024;
/// Longest tool name taken from text.
const MAX_NAME_CHARS: usize = 64;

/// One call found in a text.
#[derive(Debug, Clone, PartialEq)]
pub struct TextCall {
    pub name: String,
    /// Always a JSON object.
    pub arguments: Value,
}

/// Where a text holds calls: one site may hold several (a JSON list).
#[derive(Debug, Clone, PartialEq)]
pub struct CallSite {
    pub calls: Vec<TextCall>,
    /// Byte range of the site in the text, its tags included.
    pub span: Range<usize>,
}

/// The calls kept from a text and what is left of the text without them.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    pub calls: Vec<TextCall>,
    /// The text without the sites whose calls were all kept, trimmed.
    pub remaining_text: String,
}

/// Where a streamed answer's text may begin a call: the characters every form opens with
/// (`<`, `{`, `[`) and a code fence's backtick.
const CALL_OPENERS: [char; 4] = ['<', '{', '[', '`'];

/// Streamed text of one answer that may hold calls written as text, shown to a client only
/// where it cannot be a call: everything before the first character that could open one is
/// passed on at once; from there the text is held until the answer is complete. Then
/// [`StreamHold::finish`] gives what is left to show: the held text when no call was recovered,
/// or the prose the recovery left after the part already shown. A client never sees a call
/// site that became a tool call.
#[derive(Debug, Default)]
pub struct StreamHold {
    text: String,
    shown: usize,
    holding: bool,
}

impl StreamHold {
    /// Takes one delta; returns the part to show now (possibly empty).
    pub fn push(&mut self, delta: &str) -> String {
        self.text.push_str(delta);
        if self.holding {
            return String::new();
        }
        let pending = &self.text[self.shown..];
        let cut = pending.find(CALL_OPENERS).unwrap_or(pending.len());
        self.holding = cut < pending.len();
        let show = pending[..cut].to_owned();
        self.shown += cut;
        show
    }

    /// What is left to show once the answer is complete: `final_text` is its text after any
    /// recovery, `recovered` whether calls were taken from it.
    pub fn finish(self, final_text: &str, recovered: bool) -> String {
        if !recovered {
            return self.text[self.shown..].to_owned();
        }
        let shown = self.text[..self.shown].trim();
        final_text
            .trim_start()
            .strip_prefix(shown)
            .map(str::to_owned)
            .unwrap_or_default()
    }
}

/// Every call site in `text`, in order.
pub fn find(text: &str) -> Vec<CallSite> {
    let mut sites = Vec::new();
    if text.len() > MAX_SCANNED_BYTES {
        return sites;
    }
    let mut pos = 0;
    while let Some(offset) = text[pos..].find(['<', '{', '[']) {
        let at = pos + offset;
        let rest = &text[at..];
        let (site, next) = if rest.starts_with("<tool_call>") {
            (hermes_site(text, at), at + 1)
        } else if rest.starts_with("<function=") {
            (function_equals_site(text, at), at + 1)
        } else if rest.starts_with("<function ") {
            (function_attribute_site(text, at), at + 1)
        } else if rest.starts_with('<') {
            (None, at + 1)
        } else {
            match json_at(text, at) {
                Some((value, end)) => (
                    calls_of(&value).map(|calls| CallSite {
                        calls,
                        span: at..end,
                    }),
                    end,
                ),
                None => (None, at + 1),
            }
        };
        match site {
            Some(site) => {
                pos = site.span.end;
                sites.push(site);
            }
            None => pos = next,
        }
        if pos >= text.len() {
            break;
        }
    }
    sites
}

/// The calls of `text` that `accept` takes, or `None` when it takes none. A site leaves the
/// text only when every call it holds was taken.
pub fn recover(text: &str, mut accept: impl FnMut(&TextCall) -> bool) -> Option<Recovered> {
    let mut calls = Vec::new();
    let mut removed = Vec::new();
    for site in find(text) {
        let mut all = true;
        for call in site.calls {
            if accept(&call) {
                calls.push(call);
            } else {
                all = false;
            }
        }
        if all {
            removed.push(site.span);
        }
    }
    if calls.is_empty() {
        return None;
    }
    let mut remaining = String::with_capacity(text.len());
    let mut from = 0;
    for span in removed {
        remaining.push_str(&text[from..span.start]);
        from = span.end;
    }
    remaining.push_str(&text[from..]);
    Some(Recovered {
        calls,
        remaining_text: tidy(&remaining),
    })
}

/// The JSON value starting at byte `at` and the byte where it ends.
fn json_at(text: &str, at: usize) -> Option<(Value, usize)> {
    let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(value)) => Some((value, at + stream.byte_offset())),
        _ => None,
    }
}

/// The calls a JSON value spells: one call object, or a non-empty list of nothing but calls.
fn calls_of(value: &Value) -> Option<Vec<TextCall>> {
    match value {
        Value::Object(object) => call_object(object).map(|call| vec![call]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| item.as_object().and_then(call_object))
            .collect(),
        _ => None,
    }
}

/// `{"name": ..., "arguments"|"parameters": ...}`, optionally with `id` and `type`, or the same
/// inside OpenAI's `{"type": "function", "function": {...}}`, or with the tool's name under
/// `function` instead of `name` (a 1.5B model wrote that). Any other field means the object is
/// something else (a report, a resource), not a call.
fn call_object(object: &Map<String, Value>) -> Option<TextCall> {
    const ENVELOPE: &[&str] = &["id", "type", "function"];
    const CALL: &[&str] = &["id", "type", "name", "arguments", "parameters"];
    const NAMED_BY_FUNCTION: &[&str] = &["id", "type", "function", "arguments", "parameters"];
    let name = match object.get("function") {
        Some(Value::Object(function)) => {
            if object.keys().all(|k| ENVELOPE.contains(&k.as_str())) {
                return call_object(function);
            }
            return None;
        }
        Some(Value::String(name))
            if object
                .keys()
                .all(|k| NAMED_BY_FUNCTION.contains(&k.as_str())) =>
        {
            name.as_str()
        }
        Some(_) => return None,
        None if object.keys().all(|k| CALL.contains(&k.as_str())) => {
            object.get("name")?.as_str()?
        }
        None => return None,
    };
    let arguments = match (object.get("arguments"), object.get("parameters")) {
        (Some(a), None) | (None, Some(a)) => arguments_of(a)?,
        _ => return None,
    };
    Some(TextCall {
        name: tool_name(name)?,
        arguments,
    })
}

/// A tool name as a model would write one: a single token of name characters.
fn tool_name(name: &str) -> Option<String> {
    let name = name.trim();
    let valid = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    valid.then(|| name.to_owned())
}

/// Arguments as an object, or a JSON string holding an object.
fn arguments_of(value: &Value) -> Option<Value> {
    match value {
        Value::Object(_) => Some(value.clone()),
        Value::String(text) => match serde_json::from_str::<Value>(text.trim()) {
            Ok(inner @ Value::Object(_)) => Some(inner),
            _ => None,
        },
        _ => None,
    }
}

/// `<tool_call>{json call or list}</tool_call>`; the closing tag may be missing at the end of
/// the text.
fn hermes_site(text: &str, at: usize) -> Option<CallSite> {
    let body = at + "<tool_call>".len();
    let start = body + leading_whitespace(&text[body..]);
    let (value, end) = json_at(text, start)?;
    let calls = calls_of(&value)?;
    let end = closing_tag(text, end, "</tool_call>")?;
    Some(CallSite {
        calls,
        span: at..end,
    })
}

/// `<function=name>{arguments}</function>`.
fn function_equals_site(text: &str, at: usize) -> Option<CallSite> {
    let name_start = at + "<function=".len();
    let name_len = text[name_start..].find('>')?;
    let name = tool_name(&text[name_start..name_start + name_len])?;
    let body = name_start + name_len + 1;
    let start = body + leading_whitespace(&text[body..]);
    let (arguments, end) = if text[start..].starts_with("</function>") {
        (Value::Object(Map::new()), start)
    } else {
        let (value, end) = json_at(text, start)?;
        (arguments_of(&value)?, end)
    };
    let end = closing_tag(text, end, "</function>")?;
    Some(CallSite {
        calls: vec![TextCall { name, arguments }],
        span: at..end,
    })
}

/// `<function name="..." arguments='...'/>`, or an open tag with the arguments as its body:
/// `<function name="...">{...}</function>`. `parameters` may stand for `arguments`.
fn function_attribute_site(text: &str, at: usize) -> Option<CallSite> {
    let mut pos = at + "<function".len();
    let mut name = None;
    let mut arguments = None;
    let self_closing = loop {
        pos += leading_whitespace(&text[pos..]);
        let rest = &text[pos..];
        if rest.starts_with("/>") {
            pos += 2;
            break true;
        }
        if rest.starts_with('>') {
            pos += 1;
            break false;
        }
        let key_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .filter(|&n| n > 0)?;
        let key = &rest[..key_len];
        pos += key_len;
        pos += leading_whitespace(&text[pos..]);
        pos += text[pos..].starts_with('=').then_some(1)?;
        pos += leading_whitespace(&text[pos..]);
        let quote = text[pos..]
            .chars()
            .next()
            .filter(|c| matches!(c, '"' | '\''))?;
        let value_start = pos + 1;
        let value_len = text[value_start..].find(quote)?;
        let value = unescape_attribute(&text[value_start..value_start + value_len]);
        pos = value_start + value_len + 1;
        match key {
            "name" => name = Some(tool_name(&value)?),
            "arguments" | "parameters" if arguments.is_none() => {
                arguments = Some(arguments_of(&Value::String(value))?);
            }
            _ => return None,
        }
    };
    let name = name?;
    let (arguments, end) = match (self_closing, arguments) {
        (true, arguments) => (arguments.unwrap_or_else(|| Value::Object(Map::new())), pos),
        (false, Some(arguments)) => (arguments, closing_tag(text, pos, "</function>")?),
        (false, None) => {
            let start = pos + leading_whitespace(&text[pos..]);
            let (value, end) = json_at(text, start)?;
            (
                arguments_of(&value)?,
                closing_tag(text, end, "</function>")?,
            )
        }
    };
    Some(CallSite {
        calls: vec![TextCall { name, arguments }],
        span: at..end,
    })
}

/// The end of `tag` after optional whitespace at `from`, or `from` itself at the end of the
/// text (a model cut off before closing); `None` when something else follows.
fn closing_tag(text: &str, from: usize, tag: &str) -> Option<usize> {
    let start = from + leading_whitespace(&text[from..]);
    if text[start..].starts_with(tag) {
        Some(start + tag.len())
    } else if start == text.len() {
        Some(from)
    } else {
        None
    }
}

fn leading_whitespace(text: &str) -> usize {
    text.len() - text.trim_start().len()
}

/// The five entities a model may use inside a quoted attribute (`&amp;` last, so an escaped
/// entity stays escaped once).
fn unescape_attribute(value: &str) -> String {
    if !value.contains('&') {
        return value.to_owned();
    }
    value
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// What is left once the calls are out: wrappers that held only calls go too (empty code
/// fences, `<tools>` tags), then the ends are trimmed.
fn tidy(text: &str) -> String {
    let mut out = text.replace("<tools>", "").replace("</tools>", "");
    while let Some(fence) = empty_fence(&out) {
        out.replace_range(fence, "");
    }
    out.trim().to_owned()
}

/// The first code block with nothing but whitespace inside (after an optional language tag).
/// Fences pair up in order, so the end of one block and the start of the next never do.
fn empty_fence(text: &str) -> Option<Range<usize>> {
    let fences: Vec<usize> = text.match_indices("```").map(|(at, _)| at).collect();
    fences.chunks_exact(2).find_map(|pair| {
        let (open, close) = (pair[0], pair[1]);
        let after_open = open + 3;
        let tag_len = text[after_open..close]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(close - after_open);
        text[after_open + tag_len..close]
            .trim()
            .is_empty()
            .then_some(open..close + 3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(deltas: &[&str]) -> (StreamHold, String) {
        let mut hold = StreamHold::default();
        let shown = deltas.iter().map(|d| hold.push(d)).collect();
        (hold, shown)
    }

    #[test]
    fn text_that_may_hold_a_call_is_held_until_the_answer_is_complete() {
        let answer = "Let me check.\n<tool_call>\n{\"name\": \"pulse_query\", \"arguments\": {}}\n</tool_call>\nDone.";
        let deltas = [
            "Let me ch",
            "eck.\n<tool",
            "_call>\n{\"name\": \"pulse_query\", ",
            "\"arguments\": {}}\n</tool_call>\nDone.",
        ];
        assert_eq!(deltas.concat(), answer);
        let (hold, shown) = streamed(&deltas);
        assert_eq!(shown, "Let me check.\n");
        // Recovered: the call never reaches the client; the prose after it does.
        let recovered = recover(answer, |_| true).expect("a call");
        let rest = hold.finish(&recovered.remaining_text, true);
        assert_eq!(rest.trim(), "Done.", "{rest:?}");
        assert!(
            rest.starts_with('\n'),
            "the prose stays apart from what was shown: {rest:?}"
        );
    }

    #[test]
    fn held_text_that_was_no_call_is_shown_whole_and_plain_prose_is_never_held() {
        let (hold, shown) = streamed(&["All services are ", "healthy [3 checked]."]);
        assert_eq!(shown, "All services are healthy ");
        assert_eq!(hold.finish("ignored", false), "[3 checked].");

        let (hold, shown) = streamed(&["Nothing ", "to report."]);
        assert_eq!(shown, "Nothing to report.");
        assert_eq!(hold.finish("Nothing to report.", false), "");
    }
    use serde_json::json;

    fn calls(text: &str) -> Vec<(String, Value)> {
        find(text)
            .into_iter()
            .flat_map(|s| s.calls)
            .map(|c| (c.name, c.arguments))
            .collect()
    }

    fn one(name: &str, arguments: Value) -> Vec<(String, Value)> {
        vec![(name.to_owned(), arguments)]
    }

    const QUERY: &str = r#"{"action": "list", "limit": 5}"#;

    #[test]
    fn a_fenced_json_call_is_found_and_leaves_no_text() {
        let text = format!(
            "I will list the resources.\n```json\n{{\"name\": \"pulse_query\", \"arguments\": {QUERY}}}\n```\n"
        );
        assert_eq!(
            calls(&text),
            one("pulse_query", json!({"action": "list", "limit": 5}))
        );
        let recovered = recover(&text, |_| true).expect("recovered");
        assert_eq!(recovered.remaining_text, "I will list the resources.");
    }

    #[test]
    fn a_bare_json_call_with_parameters_is_found() {
        let text = r#"{"name": "pulse_query", "parameters": {"action": "health"}}"#;
        assert_eq!(calls(text), one("pulse_query", json!({"action": "health"})));
        let recovered = recover(text, |_| true).expect("recovered");
        assert_eq!(recovered.remaining_text, "");
    }

    #[test]
    fn a_json_list_of_calls_gives_each_call_in_order() {
        let text = r#"[{"name": "pulse_query", "arguments": {"action": "list"}},
                       {"name": "patrol_get_findings", "arguments": {}}]"#;
        assert_eq!(
            calls(text),
            vec![
                ("pulse_query".to_owned(), json!({"action": "list"})),
                ("patrol_get_findings".to_owned(), json!({})),
            ]
        );
    }

    #[test]
    fn arguments_written_as_a_json_string_are_decoded() {
        let text = r#"{"name": "pulse_query", "arguments": "{\"action\": \"get\", \"resource_id\": \"vm-1\"}"}"#;
        assert_eq!(
            calls(text),
            one(
                "pulse_query",
                json!({"action": "get", "resource_id": "vm-1"})
            )
        );
    }

    #[test]
    fn a_name_written_under_function_is_a_call() {
        let text = "```json\n{\n  \"function\": \"pulse_query\",\n  \"arguments\": {\n    \"action\": \"list\",\n    \"resource_type\": \"service\"\n  }\n}\n```\n\n\n";
        assert_eq!(
            calls(text),
            one(
                "pulse_query",
                json!({"action": "list", "resource_type": "service"})
            )
        );
        // With `name` beside it, or other fields, it is not a call.
        for text in [
            r#"{"function": "pulse_query", "name": "x", "arguments": {}}"#,
            r#"{"function": "pulse_query", "arguments": {}, "status": "ok"}"#,
            r#"{"function": 3, "arguments": {}}"#,
        ] {
            assert!(calls(text).is_empty(), "{text}");
        }
    }

    #[test]
    fn an_openai_shaped_function_envelope_is_a_call() {
        let text = r#"{"type": "function", "function": {"name": "pulse_query", "arguments": "{\"action\": \"list\"}"}}"#;
        assert_eq!(calls(text), one("pulse_query", json!({"action": "list"})));
    }

    #[test]
    fn hermes_tool_call_tags_are_found_with_or_without_the_closing_tag() {
        let text = "<tool_call>\n{\"name\": \"pulse_query\", \"arguments\": {\"action\": \"list\"}}\n</tool_call>\n<tool_call>{\"name\": \"patrol_get_findings\", \"arguments\": {}}";
        assert_eq!(
            calls(text),
            vec![
                ("pulse_query".to_owned(), json!({"action": "list"})),
                ("patrol_get_findings".to_owned(), json!({})),
            ]
        );
        assert_eq!(
            recover(text, |_| true).expect("recovered").remaining_text,
            ""
        );
    }

    #[test]
    fn a_self_closing_function_tag_with_quoted_arguments_is_found() {
        // As a 1.5B model wrote it on llama.cpp's server.
        let text =
            r#"<tools> <function name="pulse_query" arguments='{"action": "list", "limit": 5}'/>"#;
        assert_eq!(
            calls(text),
            one("pulse_query", json!({"action": "list", "limit": 5}))
        );
        assert_eq!(
            recover(text, |_| true).expect("recovered").remaining_text,
            ""
        );
    }

    #[test]
    fn function_tag_attributes_may_be_double_quoted_and_entity_escaped() {
        let text = r#"<function name="pulse_query" parameters="{&quot;action&quot;: &quot;health&quot;}"></function>"#;
        assert_eq!(calls(text), one("pulse_query", json!({"action": "health"})));
    }

    #[test]
    fn an_open_function_tag_may_carry_its_arguments_as_its_body() {
        let text = r#"<function name="pulse_query">{"action": "list"}</function>"#;
        assert_eq!(calls(text), one("pulse_query", json!({"action": "list"})));
    }

    #[test]
    fn a_function_equals_tag_is_found() {
        let text = "Checking.\n<function=pulse_query>{\"action\": \"search\", \"query\": \"web\"}</function>\nDone.";
        assert_eq!(
            calls(text),
            one("pulse_query", json!({"action": "search", "query": "web"}))
        );
        assert_eq!(
            recover(text, |_| true).expect("recovered").remaining_text,
            "Checking.\n\nDone."
        );
    }

    #[test]
    fn a_function_equals_tag_without_arguments_calls_with_none() {
        let text = "<function=patrol_get_findings></function>";
        assert_eq!(calls(text), one("patrol_get_findings", json!({})));
    }

    #[test]
    fn prose_that_mentions_a_tool_is_not_a_call() {
        let text = "I would call pulse_query with action list, or use <function> tags, \
                    but the fleet looks fine [see above] {no problems}.";
        assert!(find(text).is_empty());
    }

    #[test]
    fn malformed_json_is_not_a_call() {
        for text in [
            "```json\n{\"name\": \"pulse_query\", \"arguments\": {\"action\": \"list\"\n```",
            "{'name': 'pulse_query', 'arguments': {}}",
            "<tool_call>{\"name\": \"pulse_query\", \"arguments\": }</tool_call>",
            "<function name=\"pulse_query\" arguments='{\"action\": '/>",
            "<function=pulse_query>{\"action\": \"list\"</function>",
        ] {
            assert!(find(text).is_empty(), "{text}");
        }
    }

    #[test]
    fn a_final_report_object_is_not_a_call_and_nothing_inside_it_is_either() {
        let text = r#"```json
{"summary": "all healthy", "findings": [], "name": "web-01", "arguments": {}}
```
{"resources": [{"name": "pulse_query", "arguments": {"action": "list"}}], "status": "ok"}
{"name": "web-01", "status": "healthy"}"#;
        assert!(find(text).is_empty());
    }

    #[test]
    fn a_list_mixing_calls_and_other_objects_is_not_a_call() {
        let text = r#"[{"name": "pulse_query", "arguments": {}}, {"name": "web-01"}]"#;
        assert!(find(text).is_empty());
    }

    #[test]
    fn arguments_that_are_not_an_object_are_not_a_call() {
        for text in [
            r#"{"name": "pulse_query", "arguments": [1, 2]}"#,
            r#"{"name": "pulse_query", "arguments": "list everything"}"#,
            r#"{"name": "pulse_query", "arguments": null}"#,
            r#"{"name": "pulse_query"}"#,
            r#"{"name": "pulse_query", "arguments": {}, "parameters": {}}"#,
            r#"{"name": "pulse query", "arguments": {}}"#,
        ] {
            assert!(find(text).is_empty(), "{text}");
        }
    }

    #[test]
    fn recover_keeps_only_what_the_caller_accepts_and_leaves_the_rest_as_text() {
        let text = "```json\n{\"name\": \"pulse_query\", \"arguments\": {\"action\": \"list\"}}\n```\n\
                    {\"name\": \"shell_exec\", \"arguments\": {\"cmd\": \"rm -rf /\"}}";
        let recovered = recover(text, |c| c.name == "pulse_query").expect("recovered");
        assert_eq!(recovered.calls.len(), 1);
        assert_eq!(
            recovered.remaining_text,
            r#"{"name": "shell_exec", "arguments": {"cmd": "rm -rf /"}}"#
        );
        assert_eq!(recover(text, |_| false), None);
    }

    #[test]
    fn a_list_site_stays_in_the_text_unless_every_call_in_it_is_accepted() {
        let text =
            r#"[{"name": "pulse_query", "arguments": {}}, {"name": "nope", "arguments": {}}]"#;
        let recovered = recover(text, |c| c.name == "pulse_query").expect("recovered");
        assert_eq!(recovered.calls.len(), 1);
        assert_eq!(recovered.remaining_text, text);
    }

    #[test]
    fn only_a_code_block_left_empty_by_the_calls_is_dropped() {
        let text = "```\nuptime\n```\n```json\n{\"name\": \"a\", \"arguments\": {}}\n```";
        let recovered = recover(text, |_| true).expect("recovered");
        assert_eq!(recovered.remaining_text, "```\nuptime\n```");
    }

    #[test]
    fn a_text_over_the_bound_is_not_searched() {
        let mut text = r#"{"name": "pulse_query", "arguments": {}}"#.to_owned();
        text.push_str(&" ".repeat(MAX_SCANNED_BYTES));
        assert!(find(&text).is_empty());
    }

    #[test]
    fn text_around_and_between_calls_is_kept_in_order() {
        let text = "First.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\nThen.\n\
                    ```\n{\"name\": \"b\", \"arguments\": {}}\n```\nLast.";
        let recovered = recover(text, |_| true).expect("recovered");
        let names: Vec<&str> = recovered.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(recovered.remaining_text, "First.\n\nThen.\n\nLast.");
    }
}
