-- Executor's projection of conversations and runs (projection "runs").
CREATE TABLE IF NOT EXISTS messages (
    id          text PRIMARY KEY,
    agent_id    text NOT NULL,
    run_id      text,
    step_id     text,
    role        text NOT NULL,
    body        jsonb NOT NULL,
    seq         bigint NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_agent_seq ON messages (agent_id, seq);
CREATE INDEX IF NOT EXISTS messages_run ON messages (run_id, seq);

CREATE TABLE IF NOT EXISTS runs (
    id           text PRIMARY KEY,
    agent_id     text NOT NULL,
    status       text NOT NULL,
    stop_reason  text,
    usage        jsonb NOT NULL DEFAULT '{}',
    step_count   integer NOT NULL DEFAULT 0,
    error        text,
    created_at   timestamptz NOT NULL,
    completed_at timestamptz,
    last_seq     bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_agent ON runs (agent_id, created_at);
