-- Gateway's projection of the agent registry (projection "agents").
CREATE TABLE IF NOT EXISTS agents (
    id               text PRIMARY KEY,
    name             text NOT NULL,
    system           text NOT NULL,
    agent_type       text NOT NULL,
    llm_config       jsonb NOT NULL,
    embedding_config jsonb,
    tools            text[] NOT NULL DEFAULT '{}',
    tool_rules       jsonb NOT NULL DEFAULT '[]',
    tags             text[] NOT NULL DEFAULT '{}',
    metadata         jsonb NOT NULL DEFAULT '{}',
    description      text,
    timezone         text,
    last_stop_reason text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    last_seq         bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS agents_created ON agents (created_at, id);
CREATE INDEX IF NOT EXISTS agents_tags ON agents USING gin (tags);
