//! The simulated prompt cache: which part of a prompt each provider would have served from its
//! cache, reported the way that provider reports it.
//!
//! A prompt is read as the provider lays it out, as blocks of o200k_base tokens: OpenAI and
//! Gemini put the tool declarations first, then the system instruction, then the conversation;
//! Anthropic tools, then system blocks, then message content blocks. `cache_control` markers are
//! not content: they are removed before a block is tokenized, so a breakpoint that moves does not
//! change the prompt it marks.
//!
//! - OpenAI (and compatible): automatic prefix caching. The longest token prefix shared with an
//!   earlier prompt to the same model counts from 1,024 tokens on, in steps of 128
//!   (`prompt_tokens_details.cached_tokens`); every prompt is stored.
//! - Anthropic: only prefixes ending at a `cache_control` breakpoint are stored, and only from
//!   1,024 tokens. A request reads the longest stored prefix ending at one of its breakpoints
//!   or at one of the 20 blocks before it (`cache_read_input_tokens`), and writes the rest up to
//!   its last breakpoint (`cache_creation_input_tokens`); its `input_tokens` is what is left.
//! - Gemini: implicit caching. The longest prefix shared with an earlier prompt to the same
//!   model, from 1,024 tokens on (`cachedContentTokenCount`).
//! - Ollama reports no caching.
//!
//! Entries do not expire (a test's simulator lives shorter than a provider's cache); each model
//! keeps its most recent [`MAX_ENTRIES`] prompts.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash as _, Hasher as _};
use std::sync::Mutex;

use serde_json::Value;

use super::SimProtocol;
use super::tokens::encode;

/// The shortest prefix any of the simulated providers caches.
pub const MIN_CACHED_PREFIX: u64 = 1024;
/// OpenAI reports cache hits in steps of this many tokens beyond the minimum.
pub const OPENAI_CACHE_STEP: u64 = 128;
/// Blocks before a breakpoint that Anthropic checks for an earlier entry.
pub const ANTHROPIC_LOOKBACK_BLOCKS: usize = 20;
/// Prompts (OpenAI, Gemini) or breakpoint prefixes (Anthropic) kept per model.
pub const MAX_ENTRIES: usize = 512;

/// One block of a prompt, in the provider's order.
struct Block {
    tokens: Vec<u32>,
    breakpoint: bool,
}

/// What the cache did for one prompt: both counts are parts of the whole prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUse {
    pub read: u64,
    pub written: u64,
}

#[derive(Debug, Default)]
struct ModelCache {
    /// Whole prompts (OpenAI, Gemini), most recent last.
    prompts: VecDeque<Vec<u32>>,
    /// Hashes of stored breakpoint prefixes (Anthropic), with their insertion order.
    prefixes: HashSet<u64>,
    prefix_order: VecDeque<u64>,
}

/// The cache of one simulator, per protocol and model.
#[derive(Debug, Default)]
pub struct PromptCache {
    models: Mutex<HashMap<(&'static str, String), ModelCache>>,
}

impl PromptCache {
    /// Looks `body` up and stores it, as the provider of `protocol` would.
    pub fn serve(&self, protocol: SimProtocol, model: &str, body: &Value) -> CacheUse {
        if protocol == SimProtocol::Ollama {
            return CacheUse::default();
        }
        let blocks = blocks(protocol, body);
        let mut models = self.models.lock().unwrap_or_else(|p| p.into_inner());
        let cache = models
            .entry((protocol.as_str(), model.to_owned()))
            .or_default();
        match protocol {
            SimProtocol::Anthropic => cache.breakpoints(&blocks),
            SimProtocol::OpenAi => cache.prefix(&blocks, Some(OPENAI_CACHE_STEP)),
            SimProtocol::Gemini | SimProtocol::Ollama => cache.prefix(&blocks, None),
        }
    }
}

impl ModelCache {
    fn prefix(&mut self, blocks: &[Block], step: Option<u64>) -> CacheUse {
        let prompt: Vec<u32> = blocks
            .iter()
            .flat_map(|b| b.tokens.iter().copied())
            .collect();
        let shared = self
            .prompts
            .iter()
            .map(|p| p.iter().zip(&prompt).take_while(|(a, b)| a == b).count() as u64)
            .max()
            .unwrap_or(0);
        let read = match step {
            _ if shared < MIN_CACHED_PREFIX => 0,
            Some(step) => MIN_CACHED_PREFIX + (shared - MIN_CACHED_PREFIX) / step * step,
            None => shared,
        };
        if prompt.len() as u64 >= MIN_CACHED_PREFIX {
            if self.prompts.len() >= MAX_ENTRIES {
                self.prompts.pop_front();
            }
            self.prompts.push_back(prompt);
        }
        CacheUse { read, written: 0 }
    }

    fn breakpoints(&mut self, blocks: &[Block]) -> CacheUse {
        // Tokens through each block and a hash of the prefix ending there.
        let mut through = Vec::with_capacity(blocks.len());
        let mut hashes = Vec::with_capacity(blocks.len());
        let mut hasher = DefaultHasher::new();
        let mut total = 0u64;
        for block in blocks {
            block.tokens.hash(&mut hasher);
            total += block.tokens.len() as u64;
            through.push(total);
            hashes.push(hasher.finish());
        }
        let marks: Vec<usize> = (0..blocks.len())
            .filter(|i| blocks[*i].breakpoint)
            .collect();
        let Some(&last) = marks.last() else {
            return CacheUse::default();
        };
        let read = marks
            .iter()
            .flat_map(|&b| b.saturating_sub(ANTHROPIC_LOOKBACK_BLOCKS)..=b)
            .filter(|&j| self.prefixes.contains(&hashes[j]))
            .map(|j| through[j])
            .max()
            .unwrap_or(0);
        let written = if through[last] >= MIN_CACHED_PREFIX {
            through[last].saturating_sub(read)
        } else {
            0
        };
        for &b in &marks {
            if through[b] >= MIN_CACHED_PREFIX && self.prefixes.insert(hashes[b]) {
                if self.prefix_order.len() >= MAX_ENTRIES {
                    if let Some(old) = self.prefix_order.pop_front() {
                        self.prefixes.remove(&old);
                    }
                }
                self.prefix_order.push_back(hashes[b]);
            }
        }
        CacheUse { read, written }
    }
}

fn array(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A block's tokens without its `cache_control` marker, and whether it had one.
fn block(v: &Value) -> Block {
    let mut v = v.clone();
    let breakpoint = v
        .as_object_mut()
        .and_then(|o| o.remove("cache_control"))
        .is_some();
    let text = match &v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Block {
        tokens: encode(&text),
        breakpoint,
    }
}

fn blocks(protocol: SimProtocol, body: &Value) -> Vec<Block> {
    let mut out = Vec::new();
    match protocol {
        SimProtocol::OpenAi => {
            out.extend(array(body.get("tools")).iter().map(block));
            out.extend(array(body.get("messages")).iter().map(block));
        }
        SimProtocol::Anthropic => {
            out.extend(array(body.get("tools")).iter().map(block));
            match body.get("system") {
                Some(Value::Array(blocks)) => out.extend(blocks.iter().map(block)),
                Some(system @ Value::String(_)) => out.push(block(system)),
                _ => {}
            }
            for message in array(body.get("messages")) {
                let role = message.get("role").cloned().unwrap_or(Value::Null);
                out.push(block(&role));
                match message.get("content") {
                    Some(Value::Array(blocks)) => out.extend(blocks.iter().map(block)),
                    Some(content) => out.push(block(content)),
                    None => {}
                }
            }
        }
        SimProtocol::Gemini => {
            for tool in array(body.get("tools")) {
                out.extend(array(tool.get("functionDeclarations")).iter().map(block));
            }
            if let Some(system) = body.get("systemInstruction") {
                out.extend(array(system.get("parts")).iter().map(block));
            }
            for content in array(body.get("contents")) {
                let role = content.get("role").cloned().unwrap_or(Value::Null);
                out.push(block(&role));
                out.extend(array(content.get("parts")).iter().map(block));
            }
        }
        SimProtocol::Ollama => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// About `n` tokens of distinct text.
    fn text(seed: &str, n: usize) -> String {
        (0..n).map(|i| format!(" {seed}{i}")).collect::<String>()
    }

    fn openai(system: &str, user: &str) -> Value {
        json!({"model": "m", "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": user}]})
    }

    #[test]
    fn openai_caches_a_shared_prefix_from_1024_tokens_in_steps_of_128() {
        let _ = super::super::tokens::ensure_loaded();
        let cache = PromptCache::default();
        let long = text("alpha", 900);
        let first = cache.serve(SimProtocol::OpenAi, "m", &openai(&long, "one"));
        assert_eq!(first, CacheUse::default(), "nothing seen before");
        let second = cache.serve(SimProtocol::OpenAi, "m", &openai(&long, "two"));
        assert!(second.read >= MIN_CACHED_PREFIX, "{second:?}");
        assert_eq!((second.read - MIN_CACHED_PREFIX) % OPENAI_CACHE_STEP, 0);
        assert_eq!(second.written, 0);
        // Another model has its own cache; a short prefix is never cached.
        assert_eq!(
            cache.serve(SimProtocol::OpenAi, "other", &openai(&long, "two")),
            CacheUse::default()
        );
        let short = text("beta", 100);
        cache.serve(SimProtocol::OpenAi, "m", &openai(&short, "one"));
        assert_eq!(
            cache
                .serve(SimProtocol::OpenAi, "m", &openai(&short, "two"))
                .read,
            0
        );
    }

    fn anthropic(system: &str, messages: &[&str], mark_last: bool) -> Value {
        let mut content: Vec<Value> = messages
            .iter()
            .map(|m| json!({"type": "text", "text": m}))
            .collect();
        if mark_last {
            if let Some(last) = content.last_mut() {
                last["cache_control"] = json!({"type": "ephemeral"});
            }
        }
        json!({"model": "m",
               "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
               "messages": [{"role": "user", "content": content}]})
    }

    #[test]
    fn anthropic_caches_only_up_to_a_breakpoint_seen_before() {
        let _ = super::super::tokens::ensure_loaded();
        let cache = PromptCache::default();
        let system = text("gamma", 1200);
        let first = cache.serve(
            SimProtocol::Anthropic,
            "m",
            &anthropic(&system, &["a"], true),
        );
        assert_eq!(first.read, 0);
        assert!(first.written > MIN_CACHED_PREFIX, "{first:?}");
        // The conversation grew and its breakpoint moved: the old end is found by lookback.
        let second = cache.serve(
            SimProtocol::Anthropic,
            "m",
            &anthropic(&system, &["a", "b"], true),
        );
        assert_eq!(second.read, first.written, "{second:?}");
        assert!(second.written > 0 && second.written < 10, "{second:?}");
        // Without breakpoints nothing is read or written, however long the shared prefix.
        let unmarked = json!({"model": "m", "system": system, "messages": [
            {"role": "user", "content": "a"}]});
        assert_eq!(
            cache.serve(SimProtocol::Anthropic, "m", &unmarked),
            CacheUse::default()
        );
        // A short marked prefix is not cached.
        let short = anthropic("tiny", &["a"], true);
        cache.serve(SimProtocol::Anthropic, "m", &short);
        assert_eq!(
            cache.serve(SimProtocol::Anthropic, "m", &short),
            CacheUse::default()
        );
    }

    #[test]
    fn gemini_implicit_caching_reports_the_whole_shared_prefix() {
        let _ = super::super::tokens::ensure_loaded();
        let cache = PromptCache::default();
        let body = |user: &str| {
            json!({"systemInstruction": {"parts": [{"text": text("delta", 1100)}]},
                   "contents": [{"role": "user", "parts": [{"text": user}]}]})
        };
        assert_eq!(cache.serve(SimProtocol::Gemini, "g", &body("x")).read, 0);
        let second = cache.serve(SimProtocol::Gemini, "g", &body("y"));
        assert!(second.read > MIN_CACHED_PREFIX, "{second:?}");
        assert_eq!(
            cache.serve(SimProtocol::Ollama, "g", &body("y")),
            CacheUse::default()
        );
    }
}
