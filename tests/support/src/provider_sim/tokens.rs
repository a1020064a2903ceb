//! Token counting with the o200k_base tokenizer.

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

static BPE: OnceLock<Option<CoreBPE>> = OnceLock::new();

fn bpe() -> Option<&'static CoreBPE> {
    BPE.get_or_init(|| tiktoken_rs::o200k_base().ok()).as_ref()
}

pub(crate) fn ensure_loaded() -> anyhow::Result<()> {
    bpe()
        .map(|_| ())
        .ok_or_else(|| anyhow::anyhow!("the o200k_base tokenizer could not be loaded"))
}

/// Tokens in `text` under o200k_base (0 if the tokenizer could not be loaded).
pub fn count_tokens(text: &str) -> u64 {
    bpe().map_or(0, |b| b.encode_with_special_tokens(text).len() as u64)
}

/// The o200k_base token ids of `text` (empty if the tokenizer could not be loaded).
pub(crate) fn encode(text: &str) -> Vec<u32> {
    bpe().map_or_else(Vec::new, |b| b.encode_with_special_tokens(text))
}
