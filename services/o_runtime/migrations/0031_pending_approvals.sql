-- Issue 3: tool calls waiting for a person's approval or a client's result (projection "runs").
CREATE TABLE IF NOT EXISTS pending_approvals (
    agent_id     text NOT NULL,
    tool_call_id text NOT NULL,
    run_id       text NOT NULL,
    message_id   text NOT NULL,
    tool_name    text NOT NULL,
    seq          bigint NOT NULL,
    PRIMARY KEY (agent_id, tool_call_id)
);
