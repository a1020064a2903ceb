-- Prompt caching: the parts of a call's input_tokens the provider read from its prompt cache
-- (billed at the cached price) and wrote to it (Anthropic's cache write). Both are included in
-- input_tokens, so every existing sum of input_tokens keeps meaning the whole prompt; rows from
-- before this migration had no cache activity recorded and read as zero.

ALTER TABLE cost_ledger
    ADD COLUMN cached_input_tokens bigint NOT NULL DEFAULT 0 CHECK (cached_input_tokens >= 0),
    ADD COLUMN cache_write_input_tokens bigint NOT NULL DEFAULT 0
        CHECK (cache_write_input_tokens >= 0),
    ADD CONSTRAINT cost_ledger_cached_within_input
        CHECK (cached_input_tokens + cache_write_input_tokens <= input_tokens);
