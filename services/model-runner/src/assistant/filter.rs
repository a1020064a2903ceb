//! The client-safe projection of model text: what may reach a browser or the stored transcript.
//!
//! Provider reasoning arrives on its own channel and never enters this text (the runtime drops
//! it); what this filter removes is what models leak *into* the answer: inline reasoning blocks
//! (`<think>…</think>`) and tool-call markup written as text instead of as a call (XML tags,
//! DeepSeek DSML markers, Mistral `[TOOL_CALLS]`, Llama `<|python_tag|>`, bare JSON calls of a
//! Pulse tool). It works on a stream of deltas: text that could still be the start of such
//! markup is held back until the next delta says what it is, so nothing is emitted and later
//! regretted. The same filter runs over the whole final text before it is stored.

/// How a suppressed block ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closer {
    /// At this marker (dropped with the block).
    Marker(&'static str),
    /// When the braces opened by the marker balance (a JSON object written as text).
    Balanced,
    /// At the end of the line.
    EndOfLine,
    /// Never: the rest of the turn's text is markup.
    EndOfText,
}

/// Openers, matched case-insensitively, with how their block ends.
const OPENERS: &[(&str, Closer)] = &[
    ("<think>", Closer::Marker("</think>")),
    ("<thinking>", Closer::Marker("</thinking>")),
    ("<reasoning>", Closer::Marker("</reasoning>")),
    ("<tool_call>", Closer::Marker("</tool_call>")),
    ("<tool_calls>", Closer::Marker("</tool_calls>")),
    ("<tool_use>", Closer::Marker("</tool_use>")),
    ("<function_call>", Closer::Marker("</function_call>")),
    ("<function_calls>", Closer::Marker("</function_calls>")),
    ("<function=", Closer::Marker("</function>")),
    ("<invoke ", Closer::Marker("</invoke>")),
    (
        "<|tool\u{2581}calls\u{2581}begin|>",
        Closer::Marker("<|tool\u{2581}calls\u{2581}end|>"),
    ),
    (
        "<\u{ff5c}tool\u{2581}calls\u{2581}begin\u{ff5c}>",
        Closer::Marker("<\u{ff5c}tool\u{2581}calls\u{2581}end\u{ff5c}>"),
    ),
    (
        "<|tool_calls_section_begin|>",
        Closer::Marker("<|tool_calls_section_end|>"),
    ),
    ("<|tool_call_begin|>", Closer::Marker("<|tool_call_end|>")),
    ("[tool_calls]", Closer::EndOfLine),
    ("<|python_tag|>", Closer::EndOfText),
    ("{\"name\": \"pulse_", Closer::Balanced),
    ("{\"name\":\"pulse_", Closer::Balanced),
    ("{\"name\": \"patrol_", Closer::Balanced),
    ("{\"name\":\"patrol_", Closer::Balanced),
];

/// A streaming client-safe filter for one model turn's text.
#[derive(Debug, Default)]
pub struct ClientSafeText {
    /// Text received but not yet decided.
    pending: String,
    /// Inside a suppressed block: how it ends, and (balanced) the brace depth and string state.
    inside: Option<Inside>,
    /// Whether anything was removed.
    removed: bool,
}

#[derive(Debug, Clone, Copy)]
struct Inside {
    closer: Closer,
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl ClientSafeText {
    pub fn new() -> Self {
        Self::default()
    }

    /// The whole of `text`, filtered.
    pub fn filter_all(text: &str) -> String {
        let mut filter = Self::new();
        let mut out = filter.push(text);
        out.push_str(&filter.finish());
        out
    }

    /// Whether the filter removed anything so far.
    pub fn removed_any(&self) -> bool {
        self.removed
    }

    /// Takes the next delta; returns the text now known to be safe.
    pub fn push(&mut self, delta: &str) -> String {
        self.pending.push_str(delta);
        let mut out = String::new();
        loop {
            if let Some(inside) = self.inside {
                if !self.skip_inside(inside) {
                    return out;
                }
                continue;
            }
            let lower = self.pending.to_lowercase();
            // `to_lowercase` may change byte lengths outside ASCII; then match on the original.
            let haystack = if lower.len() == self.pending.len() {
                lower.as_str()
            } else {
                self.pending.as_str()
            };
            let found = OPENERS
                .iter()
                .filter_map(|(open, closer)| haystack.find(open).map(|i| (i, *open, *closer)))
                .min_by_key(|(i, open, _)| (*i, usize::MAX - open.len()));
            match found {
                Some((at, open, closer)) => {
                    out.push_str(&self.pending[..at]);
                    self.removed = true;
                    let after = at + open.len();
                    let mut inside = Inside {
                        closer,
                        depth: 0,
                        in_string: false,
                        escaped: false,
                    };
                    if closer == Closer::Balanced {
                        // The opener holds one `{` and one open string (the name value).
                        inside.depth = 1;
                        inside.in_string = true;
                    }
                    self.pending = self.pending[after..].to_owned();
                    self.inside = Some(inside);
                }
                None => {
                    let hold = held_back(haystack);
                    let cut = self.pending.len() - hold;
                    out.push_str(&self.pending[..cut]);
                    self.pending.drain(..cut);
                    return out;
                }
            }
        }
    }

    /// Ends the turn: held-back text that never became markup is released; an unterminated
    /// block is dropped.
    pub fn finish(&mut self) -> String {
        let inside = self.inside.take();
        let rest = std::mem::take(&mut self.pending);
        match inside {
            Some(_) => String::new(),
            None => rest,
        }
    }

    /// Consumes pending text inside a block. `true` when the block ended (continue scanning),
    /// `false` when more text is needed.
    fn skip_inside(&mut self, mut inside: Inside) -> bool {
        match inside.closer {
            Closer::Marker(marker) => {
                let lower = self.pending.to_lowercase();
                let haystack = if lower.len() == self.pending.len() {
                    lower.as_str()
                } else {
                    self.pending.as_str()
                };
                match haystack.find(marker) {
                    Some(at) => {
                        self.pending.drain(..at + marker.len());
                        self.inside = None;
                        true
                    }
                    None => {
                        // Keep what could be the start of the marker.
                        let keep = longest_suffix_prefix(haystack, marker);
                        let cut = self.pending.len() - keep;
                        self.pending.drain(..cut);
                        false
                    }
                }
            }
            Closer::EndOfLine => match self.pending.find('\n') {
                Some(at) => {
                    self.pending.drain(..at);
                    self.inside = None;
                    true
                }
                None => {
                    self.pending.clear();
                    false
                }
            },
            Closer::EndOfText => {
                self.pending.clear();
                false
            }
            Closer::Balanced => {
                let mut end = None;
                for (i, c) in self.pending.char_indices() {
                    if inside.in_string {
                        if inside.escaped {
                            inside.escaped = false;
                        } else if c == '\\' {
                            inside.escaped = true;
                        } else if c == '"' {
                            inside.in_string = false;
                        }
                        continue;
                    }
                    match c {
                        '"' => inside.in_string = true,
                        '{' => inside.depth += 1,
                        '}' => {
                            inside.depth = inside.depth.saturating_sub(1);
                            if inside.depth == 0 {
                                end = Some(i + c.len_utf8());
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                match end {
                    Some(at) => {
                        self.pending.drain(..at);
                        self.inside = None;
                        true
                    }
                    None => {
                        self.pending.clear();
                        self.inside = Some(inside);
                        false
                    }
                }
            }
        }
    }
}

/// Bytes at the end of `text` that could begin an opener.
fn held_back(text: &str) -> usize {
    OPENERS
        .iter()
        .map(|(open, _)| longest_suffix_prefix(text, open))
        .max()
        .unwrap_or(0)
}

/// The length of the longest suffix of `text` that is a proper prefix of `marker`, on char
/// boundaries.
fn longest_suffix_prefix(text: &str, marker: &str) -> usize {
    let mut best = 0;
    for (i, _) in marker.char_indices().skip(1) {
        let prefix = &marker[..i];
        if text.ends_with(prefix) {
            best = prefix.len();
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text` in pieces of `size` chars.
    fn chunked(text: &str, size: usize) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut filter = ClientSafeText::new();
        let mut out = String::new();
        for piece in chars.chunks(size) {
            out.push_str(&filter.push(&piece.iter().collect::<String>()));
        }
        out.push_str(&filter.finish());
        out
    }

    fn all_chunkings(text: &str) -> Vec<String> {
        (1..=text.chars().count().max(1))
            .map(|n| chunked(text, n))
            .collect()
    }

    #[test]
    fn plain_text_passes_whole_in_every_chunking() {
        let text = "Disk / is 91% full on web-1; {curly} and <b>tags</b> stay. a < b > c";
        for out in all_chunkings(text) {
            assert_eq!(out, text);
        }
    }

    #[test]
    fn inline_reasoning_is_removed_in_every_chunking() {
        let text = "<think>the user wants secrets; plan</think>The service is healthy.";
        for out in all_chunkings(text) {
            assert_eq!(out, "The service is healthy.");
        }
        let upper = "Before<THINKING>hidden</THINKING> after";
        assert_eq!(ClientSafeText::filter_all(upper), "Before after");
    }

    #[test]
    fn leaked_tool_markup_is_removed() {
        let cases = [
            (
                "Checking.<tool_call>{\"name\":\"pulse_query\",\"arguments\":{}}</tool_call> Done.",
                "Checking. Done.",
            ),
            (
                "A<|tool\u{2581}calls\u{2581}begin|>pulse_read x<|tool\u{2581}calls\u{2581}end|>B",
                "AB",
            ),
            (
                "Let me look {\"name\": \"pulse_read\", \"arguments\": {\"command\": \"cat }\"}} now",
                "Let me look  now",
            ),
            (
                "ok [TOOL_CALLS][{\"name\":\"x\"}]\nnext line",
                "ok \nnext line",
            ),
            ("answer<|python_tag|>pulse_query.call(x)", "answer"),
            (
                "<function=pulse_query>{\"action\":\"list\"}</function>fine",
                "fine",
            ),
        ];
        for (input, expected) in cases {
            for out in all_chunkings(input) {
                assert_eq!(out, expected, "input {input:?}");
            }
        }
    }

    #[test]
    fn an_unterminated_block_is_dropped_and_a_dangling_prefix_released() {
        assert_eq!(ClientSafeText::filter_all("ok <think>never closed"), "ok ");
        assert_eq!(ClientSafeText::filter_all("value <thi"), "value <thi");
        assert_eq!(ClientSafeText::filter_all("json {\"na"), "json {\"na");
    }

    #[test]
    fn non_ascii_text_is_kept() {
        let text = "Température 42 °C — İstanbul ✓ <think>x</think>fin";
        for out in all_chunkings(text) {
            assert_eq!(out, "Température 42 °C — İstanbul ✓ fin");
        }
    }
}
