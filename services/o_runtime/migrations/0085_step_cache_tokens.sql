-- How much of a step's prompt its provider read from its prompt cache, and wrote to it
-- (Anthropic), as the step's LLMResponded said (projection "runs"): Letta's step shows
-- them (cached_input_tokens, cache_write_tokens, prompt_tokens_details). NULL: the
-- provider did not say, or the step was projected before this column.
ALTER TABLE steps ADD COLUMN IF NOT EXISTS cached_input_tokens integer;
ALTER TABLE steps ADD COLUMN IF NOT EXISTS cache_write_tokens integer;
