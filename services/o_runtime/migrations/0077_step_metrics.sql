-- Letta's step metrics (GET /v1/steps/{id}/metrics; projection "runs"): when the step
-- began and its model call (from LLMResponded), and when its last tool returned in its
-- run (the ToolReturned's time), so the time its tools took is known.
ALTER TABLE steps ADD COLUMN IF NOT EXISTS step_start_ns bigint;
ALTER TABLE steps ADD COLUMN IF NOT EXISTS llm_request_start_ns bigint;
ALTER TABLE steps ADD COLUMN IF NOT EXISTS llm_request_ns bigint;
ALTER TABLE steps ADD COLUMN IF NOT EXISTS tools_returned_at timestamptz;
