-- Issue 3: what Letta's Run and Step resources show (projection "runs").
ALTER TABLE runs ADD COLUMN IF NOT EXISTS background boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS request_config jsonb;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cancel_requested boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS steps (
    id                text PRIMARY KEY,
    run_id            text NOT NULL,
    agent_id          text NOT NULL,
    step_number       integer NOT NULL,
    model             text,
    prompt_tokens     integer NOT NULL DEFAULT 0,
    completion_tokens integer NOT NULL DEFAULT 0,
    total_tokens      integer NOT NULL DEFAULT 0,
    finish_reason     text,
    seq               bigint NOT NULL,
    created_at        timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_run ON steps (run_id, step_number);
